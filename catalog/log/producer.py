"""``SharedProducer``: the one Kafka producer through which a client writes every record.

Data commits (``pipeline.CommitPipeline``), a table's administration records (its creation,
drop, undrop, upgrade, prune's marker, purge's fence, the broker-clock record: ``write_commit``)
and prune's null records (``SharedProducer.write_all``) all go through the producer of their
config, and every failure becomes a typed error by the one mapping, ``write_errors.write_error``.

**One client per config and process.** confluent-kafka's ``Producer`` is thread-safe, so every
table's pipeline and every administration record share one: its start (a producer id for
idempotence, the cluster's metadata) is paid by the first record, not by every table or every
administration command. Ordering and idempotence are per partition and a table is one
partition: the idempotent producer (``acks=all``) keeps a sequence per topic partition and
retries in order, so sharing changes neither. Its ``message.max.bytes`` is the most librdkafka
allows: each topic's own ``max.message.bytes`` is what limits a record (the writer checks it
before sending; the broker refuses a larger record with ``CommitTooLarge``).

**Lifetime.** Holders (a catalog, a table's ``Writer``, one administration write) ``acquire`` the
producer of their config and ``release`` it; the client opens on the first record (or on
``start``, which a table's creation calls ahead of its topic) and is flushed and closed when
the last holder releases it. A record's delivery report may be served
by any thread polling the client: callbacks only hand the report to the record's owner.

**A fatal error** (librdkafka's, e.g. a principal that may not get a producer id) retires the
client: what was in flight on it fails with the cause's typed error, and the next record opens
a new client, so one refusal does not leave every later write of the process failing.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, KafkaException, Message, Producer

from segcat.catalog.config import Config
from segcat.catalog.errors import SegcatError, ServiceUnavailable
from segcat.catalog.log import refusals
from segcat.catalog.log.clients import producer_config
from segcat.catalog.log.write_errors import write_error
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.model import Commit
from segcat.catalog.protocol.names import TableName

LINGER_MS = 5
"""How long a record may wait for others to share its produce request (Kafka 4's Java default).
Nobody who waits for a record waits this out: they flush (``FLUSH_S``), which sends at once."""
FLUSH_S = 0.001
"""A waiting caller's flush: returns when the producer's queue is empty, at the latest after this."""
POLL_S = 0.01
"""The longest wait for a delivery report before a waiting caller looks at its own records again."""
MESSAGE_MAX_BYTES = 1_000_000_000 - 1024
"""With ``producer_config``'s headroom, librdkafka's largest ``message.max.bytes``: the topics'
own limits are what bound a record."""
_FAILED_UNSENT = frozenset({KafkaError._FATAL, KafkaError._PURGE_QUEUE, KafkaError._PURGE_INFLIGHT})
"""Delivery errors that only say "the client stopped": the fatal error recorded explains them."""

OnDelivery = Callable[[KafkaError | None, Message], None]


Client = Producer
ClientFactory = Callable[[dict[str, Any]], Client]
"""Makes the Kafka client from its settings (confluent-kafka's ``Producer``; tests wrap it)."""


class Delivery(NamedTuple):
    """Where a record landed: its offset, and its broker time (``LogAppendTime``, ms; None when
    the delivery report does not carry it)."""

    offset: int
    broker_ms: int | None


class SharedProducer:
    """One idempotent producer (opened lazily) for every record written with one config."""

    def __init__(self, config: Config, *, client_factory: ClientFactory = Producer) -> None:
        self.config = config
        self._factory = client_factory
        self._lock = threading.Lock()
        self._client: Client | None = None
        self._pid = os.getpid()
        """The process that opened ``_client``: a forked child opens its own."""
        self._retired: list[Client] = []
        """Clients stopped by a fatal error, polled until their last delivery report is served."""
        self._fatal: tuple[Client, KafkaException] | None = None
        """The newest fatal error's client and cause (librdkafka reports it once, to one poll)."""
        self._surfacing = threading.Lock()
        self._holders = 0
        self._key: _Key | None = None
        """Its key in the process's registry (None: made by hand, not shared through it)."""

    # ------------------------------------------------------------------ sharing

    @classmethod
    def acquire(cls, config: Config) -> SharedProducer:
        """The producer of ``config`` in this process (made on first use), held until ``release``."""
        key = _key(config)
        with _registry_lock:
            shared = _registry.get(key)
            if shared is None:
                shared = _registry[key] = cls(config)
                shared._key = key
            shared._holders += 1
        return shared

    def hold(self) -> SharedProducer:
        """Hold this producer (another holder of one handed over); ``release`` when done."""
        with _registry_lock:
            self._holders += 1
        return self

    def release(self) -> None:
        """Let go of it; the last holder's release flushes and closes the client."""
        with _registry_lock:
            self._holders -= 1
            last = self._holders <= 0
            if last and self._key is not None and _registry.get(self._key) is self:
                del _registry[self._key]
        if last:
            self.close()

    def close(self) -> None:
        """Flush what is queued (up to the request timeout) and close the client; a later record
        opens a new one."""
        with self._lock:
            clients = [c for c in (self._client, *self._retired) if c is not None]
            self._client, self._retired = None, []
            if self._pid != os.getpid():  # a forked child's copy: its threads were the parent's
                _inherited.extend(clients)
                return
        for client in clients:
            with contextlib.suppress(KafkaException):  # fatal: its records already failed with the cause
                client.flush(self.config.request_timeout_s)

    # ------------------------------------------------------------------ the client's calls

    def start(self) -> None:
        """Open the client now, ahead of its first record.

        An idempotent producer needs a producer id before it sends anything, and librdkafka
        asks for it when a metadata answer arrives or, failing that, on a fixed 500 ms retry
        timer. A client whose first record is produced as it opens has that record's topic
        queried over the bootstrap connection; the answer retires that connection before the
        id is asked for, and the refresh the broker's own connection would make is skipped as
        "already being requested": the id waits for the timer. Opened a few tens of
        milliseconds ahead (while a topic is being created, say), the client's own metadata
        answer arrives on the broker's connection and the id is asked for at once."""
        self._current()

    def _current(self) -> Client:
        with self._lock:
            if self._client is not None and self._pid != os.getpid():
                _inherited.append(self._client)  # never served nor destroyed in a forked child
                self._client, self._retired = None, []
            if self._client is None:
                self._pid = os.getpid()
                settings = producer_config(self.config, MESSAGE_MAX_BYTES, linger_ms=LINGER_MS)
                self._client = self._factory(settings)
            return self._client

    def produce(self, topic: str, *, key: bytes, value: bytes | None, on_delivery: OnDelivery) -> None:
        """Queue one record. ``BufferError`` when the queue is full (serve it, then try again);
        ``KafkaException`` carrying the cause when the client stopped (map it: ``write_error``)."""
        client = self._current()
        try:
            client.produce(topic, value=value, key=key, on_delivery=on_delivery)
        except KafkaException as exc:
            raise KafkaException(self._cause(client, exc)) from exc

    def poll(self, timeout: float) -> None:
        """Serve delivery reports (any record's: callbacks hand them to their owners)."""
        self._serve(lambda client, wait: client.poll(wait), timeout)

    def flush(self, timeout: float) -> None:
        """Send what lingers now and serve delivery reports, up to ``timeout``."""
        self._serve(lambda client, wait: client.flush(wait), timeout)

    def _serve(self, call: Callable[[Client, float], object], timeout: float) -> None:
        with self._lock:
            client, retired = self._client, list(self._retired)
        for old in retired:
            with contextlib.suppress(KafkaException):  # its fatal error is recorded already
                old.poll(0)
            if len(old) == 0:
                with self._lock:
                    if old in self._retired:
                        self._retired.remove(old)
        if client is None:
            time.sleep(timeout)
            return
        try:
            call(client, timeout)
        except KafkaException as exc:  # a fatal error, raised once by whichever call served it
            self._retire(client, exc)
            raise

    def _retire(self, client: Client, exc: KafkaException) -> None:
        with self._lock:
            self._fatal = (client, exc)
            if self._client is client:
                self._client = None
                self._retired.append(client)

    def _cause(self, client: Client, exc: KafkaException) -> KafkaError | KafkaException:
        """The error behind a ``produce`` refused as ``_FATAL``: serving the client's queue raises
        it once, here or in whichever thread served it first."""
        err = refusals.kafka_error(exc)
        if err is None or err.code() != KafkaError._FATAL:
            return err or exc
        with self._surfacing:
            try:
                client.poll(0)
            except KafkaException as raised:
                self._retire(client, raised)
        with self._lock:
            if self._fatal is not None and self._fatal[0] is client:
                fatal = self._fatal[1]
            else:  # stopped without telling why: a new client all the same
                fatal = exc
                if self._client is client:
                    self._client = None
                    self._retired.append(client)
        return refusals.kafka_error(fatal) or fatal

    def cause(self, err: KafkaError | None) -> KafkaError | KafkaException | None:
        """What a delivery error means: a record failed only because its client stopped carries
        the error that stopped it (e.g. the principal's refusal), else ``err`` itself."""
        if err is not None and err.code() in _FAILED_UNSENT:
            with self._lock:
                if self._fatal is not None:
                    return refusals.kafka_error(self._fatal[1]) or self._fatal[1]
        return err

    # ------------------------------------------------------------------ records waited for

    def write(self, topic: str, key: bytes, value: bytes | None, doing: str) -> Delivery:
        """Produce one record and wait for its delivery report; where it landed, or the typed error."""
        return self.write_all(topic, [(key, value)], doing)[0]

    def write_all(
        self, topic: str, records: Sequence[tuple[bytes, bytes | None]], doing: str
    ) -> list[Delivery]:
        """Produce ``records`` (key, value; None is a null record) in order and wait for every
        delivery report; where each landed, or the typed error of the first that failed."""
        landed: list[Delivery] = []
        for outcome in self.write_each([(topic, key, value) for key, value in records], doing):
            if isinstance(outcome, SegcatError):
                raise outcome
            landed.append(outcome)
        return landed

    def write_each(
        self, records: Sequence[tuple[str, bytes, bytes | None]], doing: str
    ) -> list[Delivery | SegcatError]:
        """Produce ``records`` (topic, key, value) in order, pipelined, and wait for every delivery
        report together; where each landed, or its own typed error (one topic's refusal does not
        fail the others). Raises only when the client itself fails (stopped, queue stuck)."""
        config = self.config
        reports: list[tuple[KafkaError | None, Delivery | None] | None] = [None] * len(records)
        left = [len(records)]
        all_in = threading.Event()
        counting = threading.Lock()

        def report(index: int) -> OnDelivery:
            def delivered(err: KafkaError | None, msg: Message) -> None:
                offset = msg.offset() if err is None else None
                if offset is not None and offset >= 0:
                    kind, stamp = msg.timestamp()
                    at = Delivery(offset, stamp if kind == TIMESTAMP_LOG_APPEND_TIME else None)
                    reports[index] = (None, at)
                else:
                    reports[index] = (err, None)
                with counting:
                    left[0] -= 1
                    if left[0] == 0:
                        all_in.set()

            return delivered

        if not records:
            return []
        deadline = time.monotonic() + config.request_timeout_s + 5
        try:
            for index, (topic, key, value) in enumerate(records):
                while True:
                    try:
                        self.produce(topic, key=key, value=value, on_delivery=report(index))
                        break
                    except BufferError:  # the queue is full: serve it, then queue the rest
                        if time.monotonic() > deadline:
                            raise ServiceUnavailable(f"{doing}: the producer queue stayed full") from None
                        self.poll(POLL_S)
            self.flush(FLUSH_S)
            while not all_in.is_set():
                if time.monotonic() > deadline:
                    raise write_error(None, config, doing)
                self.poll(POLL_S)
        except KafkaException as exc:
            raise write_error(exc, config, doing) from exc
        landed: list[Delivery | SegcatError] = []
        for entry in reports:
            assert entry is not None
            err, at = entry
            if at is None and err is None:
                landed.append(ServiceUnavailable(f"{doing}: the delivery report carries no offset"))
            elif at is None:
                landed.append(write_error(self.cause(err), config, doing))
            else:
                landed.append(at)
        return landed


_Key = tuple[int, str, float, tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]
_registry: dict[_Key, SharedProducer] = {}
_registry_lock = threading.Lock()
_inherited: list[Client] = []
"""Clients a forked child inherited: kept, never flushed or destroyed (their threads are gone)."""


def _key(config: Config) -> _Key:
    """What makes two configs share a producer: the process (a forked child never uses its
    parent's client), what the client's settings are made of (``clients.producer_config``), and
    where they came from (named in errors). Nothing is checked here: the first record does it."""
    kafka = tuple(sorted((k, str(v)) for k, v in config.kafka.items()))
    origins = tuple(sorted(config.kafka_origins.items()))
    return os.getpid(), config.bootstrap_servers, config.request_timeout_s, kafka, origins


def write_commit(
    config: Config, name: TableName, commit: Commit, *, producer: SharedProducer | None = None
) -> Delivery:
    """Produce one commit (a table's administration record) through the producer of ``config``
    and wait for its delivery report. The caller judges it by reading the table back."""
    shared = producer.hold() if producer is not None else SharedProducer.acquire(config)
    try:
        return shared.write(
            name.topic,
            commit.commit_id.encode(),
            codec.encode_commit(commit),
            f"writing commit {commit.commit_id} to {name.topic}",
        )
    finally:
        shared.release()


def write_nulls(
    config: Config, name: TableName, keys: Sequence[bytes], *, producer: SharedProducer | None = None
) -> None:
    """Produce a null record for each key (compaction then removes the key's records)."""
    if not keys:
        return
    shared = producer.hold() if producer is not None else SharedProducer.acquire(config)
    try:
        shared.write_all(
            name.topic, [(key, None) for key in keys], f"writing pruning records to {name.topic}"
        )
    finally:
        shared.release()
