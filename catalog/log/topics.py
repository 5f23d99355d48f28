"""A table's topic: create it with docs/PROTOCOL.md §1's configuration, refuse misconfigured ones."""

from __future__ import annotations

import base64
import concurrent.futures
import contextlib
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import NoReturn

from confluent_kafka import KafkaError, KafkaException, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, OffsetSpec
from confluent_kafka.cimpl import NewTopic

from segcat.catalog.config import Config
from segcat.catalog.errors import (
    ConfigError,
    InvalidArgument,
    InvalidTableName,
    MisconfiguredTable,
    SegcatError,
    ServiceUnavailable,
    TableAlreadyExists,
    TableNotFound,
)
from segcat.catalog.log import refusals
from segcat.catalog.log.clients import admin_config
from segcat.catalog.protocol.names import TOPIC_PREFIX, TableName

DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
MIN_MAX_MESSAGE_BYTES = 64 * 1024
"""Below this even a modest commit (a few hundred segments with stats) cannot be written."""
MAX_MAX_MESSAGE_BYTES = 2**31 - 1
"""Kafka's own limit (an int32)."""
DEFAULT_MIN_COMPACTION_LAG_MS = 60 * 60 * 1000
CREATE_BATCH = 500
"""Topics per CreateTopics request: well under the 1,111 one request can carry with this
configuration (a KRaft controller takes at most 10,000 records in one batch, and a topic with
six settings is nine; a larger request is refused as a policy violation, docs/OPERATIONS.md),
and a request a controller answers within the request timeout."""
STALE_LEADER_CODES = frozenset(
    {
        KafkaError.FENCED_LEADER_EPOCH,
        KafkaError.UNKNOWN_LEADER_EPOCH,
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError._NOENT,
    }
)
"""ListOffsets errors that mean "the leader (or its epoch) this client has cached is out of date".

The admin client sends the leader epoch of its metadata cache, and nothing refreshes that cache
for it: after a broker restart (or a partition's leader moving) every ListOffsets is refused
with FENCED_LEADER_EPOCH until the cache is refreshed. ``_NOENT`` is librdkafka's "no leaders
found", the same stale cache seen while the partition had no leader."""


@dataclass(frozen=True)
class TopicInfo:
    name: TableName
    partitions: int
    max_message_bytes: int
    config: dict[str, str]
    topic_id: str | None = None
    """The id Kafka gave the topic when it was created (KIP-516), in Kafka's own text form: which
    log this is. None where the broker reports none (a broker older than topic ids)."""


def topic_id_text(uuid: object) -> str | None:
    """Kafka's text form of a topic id (URL-safe base64 of its 16 bytes, no padding, as
    ``kafka-topics --describe`` prints it; librdkafka's own ``str`` uses the other alphabet),
    or None for the zero id a broker without topic ids reports."""
    if uuid is None:
        return None
    most = int(uuid.get_most_significant_bits())  # type: ignore[attr-defined]
    least = int(uuid.get_least_significant_bits())  # type: ignore[attr-defined]
    if most == 0 and least == 0:
        return None
    raw = most.to_bytes(8, "big", signed=True) + least.to_bytes(8, "big", signed=True)
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def topic_settings(config: Config, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> dict[str, str]:
    return {
        "cleanup.policy": "compact",
        "message.timestamp.type": "LogAppendTime",
        "min.compaction.lag.ms": str(DEFAULT_MIN_COMPACTION_LAG_MS),
        "max.message.bytes": str(max_message_bytes),
        "compression.type": "zstd",
        "min.insync.replicas": str(config.min_insync_replicas),
    }


class TopicAdmin:
    """Creates, checks and lists table topics; the only place that talks to the admin API."""

    def __init__(self, config: Config) -> None:
        self._config = config
        try:
            self._admin = AdminClient(admin_config(config))
        except KafkaException as exc:  # settings librdkafka refuses only when it builds the client
            raise ConfigError(f"cannot build a Kafka client from the configuration: {exc}") from exc
        self._timeout = config.request_timeout_s

    def create(self, name: TableName, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES) -> TopicInfo:
        check_max_message_bytes(max_message_bytes)
        topic = NewTopic(
            name.topic,
            num_partitions=1,
            replication_factor=self._config.replication_factor,
            config=topic_settings(self._config, max_message_bytes),
        )
        future = self._admin.create_topics([topic], request_timeout=self._timeout)[name.topic]
        try:
            future.result(timeout=self._timeout)
        except KafkaException as exc:
            raise self._creation_error(name, exc) from exc
        # creation is acknowledged before every broker's metadata shows the topic: wait for it
        deadline = time.monotonic() + self._timeout
        try:
            while True:
                try:
                    return self.describe(name)
                except TableNotFound:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
        except SegcatError:
            with contextlib.suppress(SegcatError):
                self.delete(name)  # created but never seen whole: no half-created table
            raise

    def _creation_error(self, name: TableName, exc: KafkaException) -> SegcatError:
        """The typed error of a topic creation Kafka refused."""
        err = exc.args[0] if exc.args else None
        if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
            return TableAlreadyExists(f"table {name} already exists")
        if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_EXCEPTION:
            return InvalidTableName(
                f"Kafka refused topic {name.topic}: {err.str()} (Kafka treats '.' and '_' alike, so "
                "a table whose name differs only in those collides with an existing one)"
            )
        try:
            refusals.raise_refusal(exc, self._config, f"creating topic {name.topic}")
        except SegcatError as refused:
            return refused
        return ServiceUnavailable(
            f"could not create topic {name.topic}: {exc}; {unreachable_hint(self._config)}"
        )

    def create_many(
        self, names: Sequence[TableName], *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    ) -> dict[TableName, TopicInfo | SegcatError]:
        """Create the topics of ``names`` in one CreateTopics request (``CREATE_BATCH`` at most)
        and describe them in one DescribeTopics and one DescribeConfigs request once the
        cluster's metadata shows them all; each name's ``TopicInfo``, or the typed error of its
        refusal. A topic created but not seen whole within the request timeout is deleted again
        (its error is ``TableNotFound``), as ``create`` does for one."""
        check_max_message_bytes(max_message_bytes)
        if not 0 < len(names) <= CREATE_BATCH:
            raise InvalidArgument(f"create_many takes 1 to {CREATE_BATCH} names, not {len(names)}")
        settings = topic_settings(self._config, max_message_bytes)
        topics = [
            NewTopic(
                n.topic, num_partitions=1, replication_factor=self._config.replication_factor, config=settings
            )
            for n in names
        ]
        try:
            futures = self._admin.create_topics(topics, request_timeout=self._timeout)
        except KafkaException as exc:
            self._unanswered(exc, f"creating {len(names)} topics")
        results: dict[TableName, TopicInfo | SegcatError] = {}
        created: list[TableName] = []
        try:
            for name in names:
                try:
                    futures[name.topic].result(timeout=self._timeout)
                except KafkaException as exc:
                    results[name] = self._creation_error(name, exc)
                    continue
                except concurrent.futures.TimeoutError:
                    results[name] = ServiceUnavailable(
                        f"Kafka at {self._config.bootstrap_servers} did not answer the creation of "
                        f"{name.topic} within {self._timeout:g} s; {unreachable_hint(self._config)}"
                    )
                    continue
                created.append(name)
            results.update(self._describe_created(created, settings, max_message_bytes))
        except BaseException:  # interrupted too: the topics known to be ours are deleted again
            self.delete_many(created)
            raise
        unseen = [name for name in created if isinstance(results[name], SegcatError)]
        for name, failed in self.delete_many(unseen).items():
            if failed is not None:
                results[name] = failed
        return {name: results[name] for name in names}

    def _describe_created(
        self, names: list[TableName], config: dict[str, str], max_message_bytes: int
    ) -> dict[TableName, TopicInfo | SegcatError]:
        """Just created topics once they can take records: their ids once the metadata shows
        them (one DescribeTopics request per look), then until their leader answers for them
        (one ListOffsets request per look). A broker lists a new partition's leader before that
        leader has taken the partition on, and a record sent in between is refused as "not
        leader" and retried only after the producer's backoff: waiting here lets a whole batch
        of creation records go out at once. ``config`` is what the topics were created with."""
        if not names:
            return {}
        deadline = time.monotonic() + self._timeout
        seen: dict[TableName, tuple[int, str | None]] = {}
        while True:
            found = self._describe_topics(
                [n for n in names if n not in seen], f"describing {len(names)} new topics"
            )
            seen.update({name: described for name, described in found.items() if described is not None})
            if len(seen) == len(names) or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        ready: set[TableName] = set()
        while len(ready) < len(seen) and time.monotonic() <= deadline:
            ready |= self._led([name for name in seen if name not in ready])
            if len(ready) < len(seen):
                time.sleep(0.02)
        results: dict[TableName, TopicInfo | SegcatError] = {}
        for name in names:
            if name not in seen:
                results[name] = TableNotFound(
                    f"topic {name.topic} was created but the cluster's metadata did not show it within "
                    f"{self._timeout:g} s"
                )
            elif name not in ready:
                results[name] = ServiceUnavailable(
                    f"topic {name.topic} was created but its leader did not take it on within "
                    f"{self._timeout:g} s"
                )
            else:
                partitions, topic_id = seen[name]
                results[name] = TopicInfo(name, partitions, max_message_bytes, dict(config), topic_id)
        return results

    def _led(self, names: list[TableName]) -> set[TableName]:
        """Those of ``names`` whose partition's leader answers ListOffsets for it (one request)."""
        wanted = {TopicPartition(name.topic, 0): OffsetSpec.latest() for name in names}  # type: ignore[no-untyped-call]
        try:
            futures = self._admin.list_offsets(wanted, request_timeout=self._timeout)
        except KafkaException as exc:
            self._unanswered(exc, f"asking the leaders of {len(names)} new topics")
        answered: set[str] = set()
        for tp, future in futures.items():
            with contextlib.suppress(KafkaException, concurrent.futures.TimeoutError):
                future.result(timeout=self._timeout)
                answered.add(tp.topic)
        return {name for name in names if name.topic in answered}

    def existing(self, names: Sequence[TableName]) -> list[TableName]:
        """Those of ``names`` whose topics exist, in DescribeTopics requests of ``CREATE_BATCH``."""
        found: list[TableName] = []
        unique = list(dict.fromkeys(names))
        for start in range(0, len(unique), CREATE_BATCH):
            chunk = unique[start : start + CREATE_BATCH]
            described = self._describe_topics(chunk, f"looking up {len(chunk)} table topics")
            found.extend(name for name in chunk if described.get(name) is not None)
        return found

    def describe(self, name: TableName) -> TopicInfo:
        """The topic's layout and id; raises if it breaks docs/PROTOCOL.md §1 (partitions,
        compaction, time type)."""
        found = self._describe_topics([name], f"describing topic {name.topic}")[name]
        if found is None:
            raise TableNotFound(
                f"table {name} does not exist (no topic {name.topic}): it was never created, or it was "
                "dropped and purged; create it first"
            )
        partitions, topic_id = found
        resource = ConfigResource("topic", name.topic)
        try:
            futures = self._admin.describe_configs([resource], request_timeout=self._timeout)
            entries = futures[resource].result(timeout=self._timeout)
        except KafkaException as exc:
            err = refusals.kafka_error(exc)
            if err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                # the broker asked for the config has not heard of the topic (yet: a cluster's
                # metadata spreads after the creation is acknowledged; or no longer)
                raise TableNotFound(
                    f"table {name} does not exist (the broker asked has no topic {name.topic})"
                ) from exc
            refusals.raise_refusal(exc, self._config, f"reading the config of topic {name.topic}")
            raise ServiceUnavailable(
                f"cannot read the config of {name.topic}: {exc}; {unreachable_hint(self._config)}"
            ) from exc
        settings = {key: entry.value for key, entry in entries.items() if entry.value is not None}
        if partitions != 1:
            raise MisconfiguredTable(
                f"topic {name.topic} has {partitions} partitions; a segcat table needs exactly 1 "
                "(the partition order is the table's timeline)"
            )
        if settings.get("cleanup.policy") != "compact":
            raise MisconfiguredTable(
                f"topic {name.topic} has cleanup.policy={settings.get('cleanup.policy')!r}; segcat needs "
                "'compact' (time-based deletion would lose history)"
            )
        if settings.get("message.timestamp.type") != "LogAppendTime":
            raise MisconfiguredTable(
                f"topic {name.topic} has message.timestamp.type={settings.get('message.timestamp.type')!r}; "
                "segcat needs 'LogAppendTime' (broker time = commit time)"
            )
        return TopicInfo(
            name, partitions, int(settings.get("max.message.bytes", 1_048_588)), settings, topic_id
        )

    def topic_ids(self, names: list[TableName]) -> dict[TableName, str | None]:
        """Each table's topic id, in one request; a table whose topic is missing is left out
        (None for a topic the broker gives no id)."""
        found = self._describe_topics(names, f"describing {len(names)} table topics")
        return {name: described[1] for name, described in found.items() if described is not None}

    def _describe_topics(
        self, names: list[TableName], doing: str
    ) -> dict[TableName, tuple[int, str | None] | None]:
        """(partitions, topic id) of each topic in one DescribeTopics request; None: no such topic."""
        if not names:
            return {}
        try:
            futures = self._admin.describe_topics(
                TopicCollection([name.topic for name in names]), request_timeout=self._timeout
            )
        except KafkaException as exc:
            self._unanswered(exc, doing)
        found: dict[TableName, tuple[int, str | None] | None] = {}
        for name in names:
            try:
                described = futures[name.topic].result(timeout=self._timeout)
            except concurrent.futures.TimeoutError as exc:
                self._raise_if_handshake_refused(exc)
                raise ServiceUnavailable(
                    f"Kafka at {self._config.bootstrap_servers} did not answer {doing} within "
                    f"{self._timeout:g} s; {unreachable_hint(self._config)}"
                ) from exc
            except KafkaException as exc:
                err = refusals.kafka_error(exc)
                if err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    found[name] = None
                    continue
                self._unanswered(exc, doing)
            found[name] = (len(described.partitions), topic_id_text(described.topic_id))
        return found

    def _raise_if_handshake_refused(self, cause: BaseException) -> None:
        """``ConfigError`` naming the setting when the brokers refused our credentials: librdkafka
        tells that only to ``error_cb``, which runs when the client's queue is served."""
        self._admin.poll(0)
        refusals.raise_if_credentials_refused(self._config, cause)

    def _not_answered_in_time(self, exc: KafkaException) -> NoReturn:
        """Refused credentials name the setting; anything else is ``ServiceUnavailable``."""
        self._raise_if_handshake_refused(exc)
        raise ServiceUnavailable(
            f"Kafka at {self._config.bootstrap_servers} did not answer within "
            f"{self._timeout:g} s: {exc}; {unreachable_hint(self._config)}"
        ) from exc

    def _unanswered(self, exc: KafkaException, doing: str) -> NoReturn:
        """A refusal (ACL, credentials) names what to fix; anything else is an outage."""
        self._admin.poll(0)  # serve error_cb first: raise_refusal may need what it recorded
        refusals.raise_refusal(exc, self._config, doing)
        refusals.raise_if_credentials_refused(self._config, exc)
        raise ServiceUnavailable(
            f"Kafka at {self._config.bootstrap_servers} did not answer {doing}: {exc}; "
            f"{unreachable_hint(self._config)}"
        ) from exc

    def list_tables(self) -> list[TableName]:
        metadata = self._list(None)
        names = []
        for topic in metadata.topics:
            if topic.startswith(TOPIC_PREFIX):
                try:
                    names.append(TableName.from_topic(topic))
                except ValueError:
                    continue
        return sorted(names)

    def ping(self) -> None:
        """One small request the brokers must answer (the cluster's description): whether Kafka
        is reachable, at a cost that does not grow with the number of topics (``list_tables``
        describes every topic). ``ServiceUnavailable`` when it is not answered in time."""
        try:
            self._admin.describe_cluster(request_timeout=self._timeout).result(timeout=self._timeout)
        except KafkaException as exc:
            self._not_answered_in_time(exc)

    def log_ends(self, names: list[TableName]) -> dict[TableName, int]:
        """Each table's newest record offset (-1: empty topic), in one ListOffsets request."""
        ends = self._list_offsets(names, OffsetSpec.latest(), "read the log ends of")  # type: ignore[no-untyped-call]
        return {name: ends[name] - 1 for name in names}

    def first_offsets_after(self, names: list[TableName], timestamp_ms: int) -> dict[TableName, int | None]:
        """Each table's first record with a broker time after ``timestamp_ms`` (None: no such record),
        in one ListOffsets request."""
        found = self._list_offsets(names, OffsetSpec.for_timestamp(timestamp_ms + 1), "look up times in")
        return {name: (None if found[name] < 0 else found[name]) for name in names}

    def _list_offsets(self, names: list[TableName], spec: OffsetSpec, what: str) -> dict[TableName, int]:
        """The offset ``spec`` names in each table's partition, in one request (-1 where Kafka has none)."""
        if not names:
            return {}
        try:
            try:
                found = self._ask_offsets(names, spec)
            except KafkaException as exc:
                err = refusals.kafka_error(exc)
                if err is None or err.code() not in STALE_LEADER_CODES:
                    raise
                self._refresh_metadata()  # learn the current leaders and epochs, then ask once more
                found = self._ask_offsets(names, spec)
        except concurrent.futures.TimeoutError as exc:  # not a KafkaException: say it like the others
            raise ServiceUnavailable(
                f"cannot {what} {len(names)} tables: no answer within {self._timeout:g} s; "
                f"{unreachable_hint(self._config)}"
            ) from exc
        except KafkaException as exc:
            refusals.raise_refusal(exc, self._config, f"asking for offsets ({what})")
            raise ServiceUnavailable(
                f"cannot {what} {len(names)} tables: {exc}; {unreachable_hint(self._config)}"
            ) from exc
        return {name: found[name.topic] for name in names}

    def _ask_offsets(self, names: list[TableName], spec: OffsetSpec) -> dict[str, int]:
        wanted = {TopicPartition(name.topic, 0): spec for name in names}
        futures = self._admin.list_offsets(wanted, request_timeout=self._timeout)
        return {tp.topic: int(f.result(timeout=self._timeout).offset) for tp, f in futures.items()}

    def _refresh_metadata(self) -> None:
        """One metadata request for every topic: librdkafka updates its cache from the answer
        (leaders and leader epochs), which the admin client otherwise never refreshes."""
        self._list(None)

    def delete(self, name: TableName) -> None:
        future = self._admin.delete_topics([name.topic], request_timeout=self._timeout)[name.topic]
        try:
            future.result(timeout=self._timeout)
        except KafkaException as exc:
            refusals.raise_refusal(exc, self._config, f"deleting topic {name.topic}")
            raise ServiceUnavailable(f"could not delete topic {name.topic}: {exc}") from exc
        self._wait_gone([name])

    def _wait_gone(self, names: list[TableName]) -> None:
        """Until the metadata no longer shows the deleted topics (bounded by the request timeout):
        deletion, like creation, is acknowledged before the brokers' metadata says so, and a
        creation of the same name in between would be refused as "already exists"."""
        deadline = time.monotonic() + self._timeout
        left = list(names)
        while left and time.monotonic() <= deadline:
            with contextlib.suppress(SegcatError):  # acknowledged: what lingers is only metadata
                found = self._describe_topics(left, f"looking for {len(left)} deleted topics")
                left = [name for name in left if found.get(name) is not None]
            if left:
                time.sleep(0.02)

    def delete_many(self, names: Sequence[TableName]) -> dict[TableName, SegcatError | None]:
        """Delete the topics of ``names`` in one DeleteTopics request; each name's typed error
        (None: deleted, or already gone)."""
        if not names:
            return {}
        try:
            futures = self._admin.delete_topics([n.topic for n in names], request_timeout=self._timeout)
        except KafkaException as exc:
            return {name: ServiceUnavailable(f"could not delete topic {name.topic}: {exc}") for name in names}
        results: dict[TableName, SegcatError | None] = {}
        for name in names:
            try:
                futures[name.topic].result(timeout=self._timeout)
                results[name] = None
            except KafkaException as exc:
                err = refusals.kafka_error(exc)
                gone = err is not None and err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
                results[name] = (
                    None if gone else ServiceUnavailable(f"could not delete topic {name.topic}: {exc}")
                )
            except concurrent.futures.TimeoutError as exc:
                results[name] = ServiceUnavailable(f"could not delete topic {name.topic}: no answer ({exc})")
        self._wait_gone([name for name, failed in results.items() if failed is None])
        return results

    def _list(self, topic: str | None):  # type: ignore[no-untyped-def]
        try:
            return self._admin.list_topics(topic=topic, timeout=self._timeout)
        except KafkaException as exc:
            self._not_answered_in_time(exc)


def check_max_message_bytes(value: int) -> int:
    """A topic's ``max.message.bytes`` must hold real commits and fit Kafka's int32."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"max_message_bytes must be an integer, not {type(value).__name__}")
    if not MIN_MAX_MESSAGE_BYTES <= value <= MAX_MAX_MESSAGE_BYTES:
        raise InvalidArgument(
            f"max_message_bytes {value} is outside [{MIN_MAX_MESSAGE_BYTES}, {MAX_MAX_MESSAGE_BYTES}]: below "
            f"64 KiB most commits would not fit (the default is {DEFAULT_MAX_MESSAGE_BYTES})"
        )
    return value


def unreachable_hint(config: Config) -> str:
    """What to check when Kafka does not answer, without guessing wrong.

    Only when the address is on this machine and nothing listens there does starting the
    local stack help; a broker that accepts connections but not our handshake (SASL against a
    plaintext listener, TLS mismatch) needs its security settings checked instead, and a
    handshake the broker refused names the setting to fix.
    """
    refused = refusals.credentials_hint(config)
    if refused is not None:
        return refused
    host = config.bootstrap_servers.rpartition(":")[0]
    if host in ("127.0.0.1", "localhost") and _refused(config.bootstrap_servers):
        return (
            "nothing listens there: start a broker there (`segcat stack up` starts the local one; "
            "SEGCAT_STACK_KAFKA_PORT moves it) or point SEGCAT_BOOTSTRAP_SERVERS at your cluster"
        )
    protocol = config.kafka.get("security.protocol", "PLAINTEXT (the default)")
    return (
        f"check that the broker runs and that SEGCAT_BOOTSTRAP_SERVERS is right, and that security.protocol "
        f"({protocol}) and the sasl.* / ssl.* settings (SEGCAT_KAFKA_*) match the broker's listener"
    )


def _refused(address: str) -> bool:
    """Whether connecting to ``host:port`` is actively refused (nothing listens)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return False
    except ConnectionRefusedError:
        return True
    except (OSError, ValueError):
        return False
