"""``segcat materializer``: a consumer group over every table topic.

Kafka spreads the tables over the running instances (cooperative-sticky: a rebalance moves
only the tables that change owner, see ``assignment``). On assignment each new table is
recovered from its newest valid key frame and the partition is positioned right after
it; the group's committed offsets are only progress markers for lag dashboards.

One table never stops the service. An error while materializing table T (applying a
record, flushing Redis, writing a key frame or an archive, recovering) *parks* T: its
partition is paused, so no later record of T is applied after the failed one; one log
line, a metric and the health answer say why; and T is retried with exponential back-off
(1 s doubling to 5 min) by recovering it from its newest key frame and seeking there.

Membership is static (``group.instance.id``, stable per instance) with a short session
timeout: a killed instance that comes back under the same id gets its tables back at once
instead of after the broker's session timeout, and a dead one is replaced within ~10 s.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from redis.exceptions import RedisClusterException, RedisError

from segcat.catalog.config import Config
from segcat.catalog.errors import (
    ConfigError,
    InvalidTableName,
    SegcatError,
    TableNotFound,
    UnsupportedProtocol,
)
from segcat.catalog.log.clients import consumer_config
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol.model import LogRecord
from segcat.catalog.protocol.names import TableName
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.table_files import TableFiles
from segcat.materializer import assignment, endpoints, maintenance, metrics
from segcat.materializer.backoff import RedisGate, Throttle, ThrottleFilter, backoff_delay
from segcat.materializer.frame_writer import FrameWriter
from segcat.materializer.publisher import PublisherFactory
from segcat.materializer.redis_sentinel import RedisSentinel
from segcat.materializer.schedule import Schedule
from segcat.materializer.table_materializer import TableMaterializer

log = logging.getLogger("segcat.materializer")

_librdkafka_log = logging.getLogger("segcat.librdkafka.materializer")
_librdkafka_log.addFilter(ThrottleFilter())
"""The consumer's own log lines, throttled: on a SASL failure librdkafka logs many a second."""

TOPIC_PATTERN = r"^segcat\..*"
DEFAULT_GROUP = "segcat-materializer"
TICK_SECONDS = 1.0
"""How often the service-wide periodic work runs (the Redis sentinel, tables created anew, the
back-off resets); a table's own periodic work runs when its deadline is due (``Schedule``), at
most once per this long."""
DUE_BUDGET_TABLES = 100
DUE_BUDGET_S = 0.005
"""One loop iteration ticks at most this many due tables, or for about this long, before it
polls again: a burst of due tables (every table after Redis was flushed) is spread over
iterations and never holds back the next records' notifications for long."""
POLL_TIMEOUT_S = 0.2
"""The longest a poll waits for records; shorter when a table's periodic work is due sooner."""
DEFAULT_SESSION_TIMEOUT_MS = 10_000
"""Kafka's default is 45 s; the broker's floor (``group.min.session.timeout.ms``) is 6 s."""
INSTANCE_ID_ENV = "SEGCAT_MATERIALIZER_INSTANCE_ID"
POLL_STALE_S = 30.0
"""The health answer calls the consumer dead when the loop has not polled for this long."""
STRIKES_RESET_S = 60.0
"""A table that ran this long without failing starts its back-off from 1 s again."""
SWITCH_INTERVAL_S = 0.001
"""The interpreter's GIL switch interval while serving (default 5 ms): the key-frame writer
thread's Python work then holds back the main loop's next record at most ~1 ms at a time."""
GC_THRESHOLDS = (50_000, 50, 100)
"""The collector's thresholds while serving (Python's default: 700, 10, 10). A table's image is
millions of long-lived, acyclic objects (segments, stats, tuples) that refcounting frees; with
the defaults the collector ran every 700 allocations and rescanned the growing image again and
again: 2.45 s of an 11.1 s catch-up over 100,000 commits (0.37 s with these)."""
WRITER_CLOSE_S = 120.0
KAFKA_ERROR_SHOWN_S = 60.0
"""How long ``/healthz`` shows the last Kafka client error."""
"""On stop, how long the key frames and archives still queued may take to be written."""

_INSTANCE_ID = re.compile(r"[A-Za-z0-9._-]{1,249}")
_AUTH_ERRORS = {
    "_AUTHENTICATION",
    "SASL_AUTHENTICATION_FAILED",
    "TOPIC_AUTHORIZATION_FAILED",
    "GROUP_AUTHORIZATION_FAILED",
    "CLUSTER_AUTHORIZATION_FAILED",
}


class FatalConsumerError(SegcatError):
    """Kafka declared the consumer unusable (e.g. another instance with the same instance id
    fenced this one); the materializer stops instead of spinning."""


def default_instance_id(env: Mapping[str, str] | None = None) -> str:
    """``SEGCAT_MATERIALIZER_INSTANCE_ID``, else ``segcat-materializer-<hostname>``.

    Stable across restarts of the same instance (that is what makes a restart fast); two
    instances in one group must differ, or the newer one fences the older.
    """
    env = os.environ if env is None else env
    configured = env.get(INSTANCE_ID_ENV)
    if configured is not None:
        return configured
    host = re.sub(r"[^A-Za-z0-9._-]", "-", socket.gethostname()) or "localhost"
    return f"segcat-materializer-{host}"[:249]


def check_instance_id(instance_id: str) -> str:
    """The id if Kafka accepts it ('' = dynamic membership), else ``ConfigError``."""
    if instance_id and (not _INSTANCE_ID.fullmatch(instance_id) or instance_id in (".", "..")):
        raise ConfigError(
            f"materializer instance id {instance_id[:80]!r} must match [A-Za-z0-9._-]{{1,249}}; "
            f"set --instance-id or {INSTANCE_ID_ENV}"
        )
    return instance_id


@dataclass
class Parked:
    """A table paused after a failure, waiting for its retry."""

    table: str
    stage: str
    offset: int | None
    """The record being applied (or the table's position); None when recovery failed."""
    error_type: str
    error: str
    since_ms: int
    failures: int
    """Consecutive failures (the back-off doubles with each)."""
    retry_at: float
    """``time.monotonic()`` of the next attempt."""

    def to_json(self, now: float) -> dict[str, Any]:
        return {
            "table": self.table,
            "stage": self.stage,
            "offset": self.offset,
            "error_type": self.error_type,
            "error": self.error,
            "since_ms": self.since_ms,
            "failures": self.failures,
            "retry_in_s": round(max(self.retry_at - now, 0.0), 1),
        }


_FLUSH_BEFORE_PARKING = {"rules", "archive", "keyframe"}
"""Stages after which the queued Redis writes (of records before the failed one) still go out."""


LAG_TIMEOUT_S = 2.0
"""How long a tick waits for the tables' log ends (the lag gauges) before leaving them as they are."""
ID_CHECK_S = 5.0
"""How often the lag thread asks for the followed topics' ids (a topic created anew under a
table's name is followed within about this long per ``KAFKA_SLICE`` tables owned; readers never
take its values meanwhile)."""
KAFKA_SLICE = 1_000
"""Tables per lag or topic-id request. Both requests cost in proportion to the tables asked
about, in the broker and in this process (one future per partition), and ten thousand at once
outlast ``LAG_TIMEOUT_S``. Each request asks about the next slice, round robin: a table's lag
gauge is refreshed every ⌈tables / this⌉ ticks, its topic id checked every ⌈tables / this⌉ ×
``ID_CHECK_S`` (docs/OPERATIONS.md, "Materializer periodic work")."""


def check_pattern(pattern: str) -> str:
    """A topic pattern is a regex starting with ``^``: librdkafka takes anything else for one
    literal topic name, so ``segcat\\.ns\\..*`` would silently follow nothing."""
    if not pattern.startswith("^"):
        raise ConfigError(
            f"--pattern {pattern!r} must be a regular expression starting with '^' (Kafka clients "
            f"treat anything else as one literal topic name), e.g. '^{pattern}'"
        )
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"--pattern {pattern!r} is not a valid regular expression: {exc}") from None
    return pattern


class Materializer:
    """The long-running service; ``run`` until ``stop`` is set (SIGTERM / SIGINT set it)."""

    def __init__(
        self,
        config: Config,
        *,
        group_id: str = DEFAULT_GROUP,
        use_redis: bool = True,
        pattern: str = TOPIC_PATTERN,
        instance_id: str | None = None,
        session_timeout_ms: int | None = None,
        maintenance_interval_s: float = maintenance.INTERVAL_S,
        publishers: Sequence[PublisherFactory] = (),
        group_protocol: str = assignment.CLASSIC,
    ) -> None:
        """``publishers`` make each table's further publishers (after key frames and Redis)."""
        self.config = config
        self.publishers = tuple(publishers)
        self.maintenance = maintenance.Maintenance(
            config, self._table_facts, interval_s=maintenance_interval_s
        )
        self.group_id = group_id
        self.pattern = check_pattern(pattern)
        self.instance_id = check_instance_id(default_instance_id() if instance_id is None else instance_id)
        if session_timeout_ms is not None and session_timeout_ms < 1:
            raise ConfigError(f"session timeout must be ≥ 1 ms, got {session_timeout_ms}")
        self.session_timeout_ms = session_timeout_ms
        self.group_protocol = assignment.check_group_protocol(group_protocol, session_timeout_ms)
        self.store = ObjectStore.from_config(config)
        self.redis = RedisStore.from_config(config) if use_redis else None
        self.gate = RedisGate()
        self.tables: dict[str, TableMaterializer] = {}
        self.parked: dict[str, Parked] = {}
        self.stop = threading.Event()
        self.metrics_port: int | None = None
        """The port the endpoints listen on once ``run`` started them (None: not served)."""
        self._consumer: Consumer | None = None
        self._catching_up: dict[str, int] = {}
        """Tables with a backlog still to apply: the offset that ends it (dropped once it ended)."""
        self.schedule: Schedule[str] = Schedule()
        """When each table next needs its periodic work (``TableMaterializer.due``)."""
        self._sentinel = None if self.redis is None else RedisSentinel(self.redis)
        self._gate_seen = 0
        """The ``RedisGate.generation`` the last sentinel check accounted for."""
        self._strikes: dict[str, int] = {}
        self._resumed_at: dict[str, float] = {}
        self._lock = threading.Lock()
        """Guards ``tables`` and ``parked`` against the health endpoint's thread."""
        self._last_poll = 0.0
        self._fatal: KafkaError | None = None
        self._brokers_down = False
        self._admin: TopicAdmin | None = None
        """For the lag gauges: one ListOffsets per tick for every table (``_lag_loop``)."""
        self._ids_admin: TopicAdmin | None = None
        """For the main loop: which log each table's topic is (``_identify``)."""
        self._known_ids: dict[str, str | None] = {}
        """Topic ids asked for a whole assignment at once, each taken by its table's recovery."""
        self._ids_checked_at = 0.0
        self._lag_cursor = 0
        self._ids_cursor = 0
        """Where the next lag / topic-id request's slice of the owned tables starts."""
        self._recreated: dict[str, str] = {}
        """Topics the lag thread found with another topic id than their table's image: the main
        loop recovers them (the topic was deleted and created again under the same name)."""
        self._kafka_error: tuple[str, str, float] | None = None
        self._kafka_throttle = Throttle()
        self.writer: FrameWriter | None = None
        """Writes every table's key frames and archives off the main loop (while ``run`` runs)."""

    # ------------------------------------------------------------------ assignment

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The tables this rebalance adds (cooperative: only those; the ones kept go on as they
        are), positioned in bulk (``assignment``) and then assigned; a table whose recovery
        failed is assigned and parked at once, like a table that fails later."""
        started = time.monotonic()
        new = [tp for tp in partitions if tp.topic not in self.tables]
        self._prefetch_ids(new)
        positioned, recovered, ends = assignment.position(new, self._new_table, self._ids_topic_admin())
        for tp, done in zip(positioned, recovered, strict=True):
            head = ends.get(tp.topic, -1)
            self._table_added(tp.topic, done.table)
            self._catching_up[tp.topic] = head
            log.info(
                "table assigned",
                extra={"table": done.table.name.qualified, "from_offset": tp.offset, "head": head},
            )
        consumer.incremental_assign(positioned)
        for tp, done in zip(positioned, recovered, strict=True):
            if done.error is not None:
                self._park(consumer, tp.topic, done.table, done.error, offset=None, stage="recover")
        if positioned:
            log.info(
                "tables assigned",
                extra={
                    "assigned": len(positioned),
                    "failed": sum(done.error is not None for done in recovered),
                    "owned": len(self.tables),
                    "seconds": round(time.monotonic() - started, 3),
                },
            )

    def _new_table(self, name: TableName) -> TableMaterializer:
        return TableMaterializer(
            name,
            self.config,
            self.redis,
            TableFiles(self.store, name),
            self.gate,
            self.writer,
            identify=functools.partial(self._identify, name),
            publishers=self.publishers,
        )

    def _prefetch_ids(self, partitions: list[TopicPartition]) -> None:
        """The topic ids of a whole assignment in one request (each recovery takes its own);
        on trouble each recovery asks for itself (and parks the table if Kafka does not answer)."""
        names = []
        for tp in partitions:
            with contextlib.suppress(InvalidTableName):
                names.append(TableName.from_topic(tp.topic))
        try:
            found = self._ids_topic_admin().topic_ids(names)
        except SegcatError as exc:
            log.info("topic ids unavailable; each recovery asks again", extra={"error": str(exc)})
            return
        self._known_ids.update({name.topic: topic_id for name, topic_id in found.items()})

    def _identify(self, name: TableName) -> str | None:
        """Which log the table's topic is now (its topic id; None: the broker gives none)."""
        if name.topic in self._known_ids:
            return self._known_ids.pop(name.topic)
        found = self._ids_topic_admin().topic_ids([name])
        if name not in found:
            raise TableNotFound(f"table {name} has no topic {name.topic} any more")
        return found[name]

    def _ids_topic_admin(self) -> TopicAdmin:
        if self._ids_admin is None:
            self._ids_admin = TopicAdmin(self.config)
        return self._ids_admin

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The tables this rebalance takes away (cooperative: only those) are closed and forgotten."""
        self._release(consumer, partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """The group went on without this instance (it was silent longer than the session
        timeout, e.g. cut off from the brokers): its tables may have a new owner already, so they
        are closed at once, like revoked ones, and come back by a fresh recovery if the group
        hands them back on rejoining. Said once, at WARNING: readers' heads stood still meanwhile."""
        if partitions:
            log.warning("tables lost to the group", extra={"tables": len(partitions), "group": self.group_id})
        self._release(consumer, partitions)

    def _release(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Only the partitions ``_on_assign`` assigned are unassigned (librdkafka refuses others:
        a topic that is no table was never assigned)."""
        released = []
        for tp in partitions:
            if tp.topic in self.tables:
                released.append(TopicPartition(tp.topic, tp.partition))
            table, parked = self._table_removed(tp.topic)
            if parked is not None:
                metrics.TABLE_PARKED.labels(parked.table).set(0)
            if table is not None:
                table.close()
                log.info(
                    "table revoked", extra={"table": table.name.qualified, "version": table.state.version}
                )
        consumer.incremental_unassign(released)

    def _table_added(self, topic: str, table: TableMaterializer) -> None:
        """A table joined this instance (assigned): from now on its records are applied and its
        periodic work is followed."""
        with self._lock:
            self.tables[topic] = table
        self.schedule.set(topic, time.monotonic())  # its first tick rebuilds its Redis keys

    def _table_removed(self, topic: str) -> tuple[TableMaterializer | None, Parked | None]:
        """A table left this instance (revoked or lost): forget everything kept for it; the
        table (to close) and its parking, if any."""
        with self._lock:
            table = self.tables.pop(topic, None)
            parked = self.parked.pop(topic, None)
        self._catching_up.pop(topic, None)
        self.schedule.cancel(topic)
        self._strikes.pop(topic, None)
        self._resumed_at.pop(topic, None)
        return table, parked

    # ------------------------------------------------------------------ parking

    def _park(
        self,
        consumer: Consumer,
        topic: str,
        table: TableMaterializer,
        exc: Exception,
        *,
        offset: int | None,
        stage: str | None = None,
    ) -> None:
        """Pause the table's partition, say why once, and schedule its retry."""
        stage = stage or table.stage
        if stage in _FLUSH_BEFORE_PARKING:
            try:
                table.flush()
            except Exception:
                log.debug("flush before parking failed", exc_info=True)
        try:
            consumer.pause([TopicPartition(topic, 0)])
        except KafkaException as err:  # not assigned any more: nothing to pause
            log.debug("pause failed", extra={"table": table.name.qualified, "error": str(err)})
        failures = self._strikes.get(topic, 0) + 1
        self._strikes[topic] = failures
        delay = backoff_delay(failures)
        parked = Parked(
            table=table.name.qualified,
            stage=stage,
            offset=offset,
            error_type=type(exc).__name__,
            error=str(exc),
            since_ms=int(time.time() * 1000),
            failures=failures,
            retry_at=time.monotonic() + delay,
        )
        with self._lock:
            self.parked[topic] = parked
        metrics.TABLE_PARKED.labels(parked.table).set(1)
        metrics.TABLE_FAILURES.labels(parked.table, stage).inc()
        extra: dict[str, Any] = {
            "table": parked.table,
            "offset": offset,
            "stage": stage,
            "error_type": parked.error_type,
            "error": parked.error,
            "failures": failures,
            "retry_in_s": delay,
        }
        if isinstance(exc, UnsupportedProtocol):
            extra["hint"] = (
                "the table's log uses a protocol this segcat does not know: upgrade segcat; "
                "the table stays parked (other tables go on) until then"
            )
        # A bug deserves its traceback; an error segcat raised on purpose says it all.
        log.error("table parked", extra=extra, exc_info=None if isinstance(exc, SegcatError) else exc)

    def _retry_due(self, consumer: Consumer) -> None:
        now = time.monotonic()
        for topic, parked in list(self.parked.items()):
            if now < parked.retry_at:
                continue
            table = self.tables.get(topic)
            if table is None:
                with self._lock:
                    self.parked.pop(topic, None)
                continue
            tp = TopicPartition(topic, 0)
            try:
                offset = table.recover()
                consumer.seek(TopicPartition(topic, 0, offset))
                consumer.resume([tp])
            except Exception as exc:
                self._park(consumer, topic, table, exc, offset=parked.offset, stage="recover")
                continue
            with self._lock:
                self.parked.pop(topic, None)
            self._resumed_at[topic] = time.monotonic()
            self.schedule.set(topic, self._resumed_at[topic])
            metrics.TABLE_PARKED.labels(parked.table).set(0)
            log.info(
                "table resumed",
                extra={"table": parked.table, "from_offset": offset, "failures": parked.failures},
            )

    # ------------------------------------------------------------------ Kafka errors

    def _on_kafka_error(self, err: KafkaError) -> None:
        """librdkafka's client-level errors (``error_cb``): fatal ones stop the loop."""
        name = err.name()
        metrics.KAFKA_ERRORS.labels(name).inc()
        if not self._explains_brokers_down(err):
            self._kafka_error = (name, err.str(), time.time())
        if err.fatal() or err.code() == KafkaError._FATAL:
            self._fatal = err
            return
        if err.code() == KafkaError._ALL_BROKERS_DOWN:
            self._brokers_down = True
        self._log_kafka_error("kafka client error", err)

    def _explains_brokers_down(self, err: KafkaError) -> bool:
        """True when ``err`` is "all brokers down" right after a refusal (credentials, ACLs): the
        refusal is why no broker is up, and ``/healthz`` must keep naming it, not the symptom."""
        recent = self._kafka_error
        return (
            err.code() == KafkaError._ALL_BROKERS_DOWN
            and recent is not None
            and recent[0] in _AUTH_ERRORS
            and time.time() - recent[2] < KAFKA_ERROR_SHOWN_S
        )

    def _log_kafka_error(self, message: str, err: KafkaError) -> None:
        held = self._kafka_throttle.admit(err.name())
        if held is None:
            return
        extra: dict[str, Any] = {"error": err.name(), "reason": err.str(), "suppressed": held}
        if err.name() in _AUTH_ERRORS:
            extra["hint"] = "check the SEGCAT_KAFKA_SECURITY_PROTOCOL / SEGCAT_KAFKA_SASL_* settings and ACLs"
        elif err.code() == KafkaError.INCONSISTENT_GROUP_PROTOCOL:
            extra["hint"] = (
                f"another member of group {self.group_id!r} uses another assignor (a segcat before the "
                f"{assignment.ASSIGNMENT_STRATEGY} materializer group, or another program): stop the "
                "old instances; this one joins once they are gone"
            )
        log.warning(message, extra=extra)

    def _fatal_exit(self, err: KafkaError) -> None:
        reason = err.str()
        if "fenced" in reason.lower():
            message = (
                f"another materializer joined group {self.group_id!r} with instance id "
                f"{self.instance_id!r}, so Kafka fenced this one; give every instance its own "
                f"--instance-id ({INSTANCE_ID_ENV})"
            )
        else:
            message = f"fatal Kafka consumer error: {reason}"
        log.error(
            "materializer stopping: kafka consumer unusable",
            extra={"group": self.group_id, "instance_id": self.instance_id, "error": reason},
        )
        raise FatalConsumerError(message)

    # ------------------------------------------------------------------ health

    def health(self) -> tuple[bool, dict[str, Any]]:
        """(healthy, the ``/healthz`` document). Degraded: a table is parked, the consumer is
        not polling (or Kafka declared it dead, or every broker is down), or Redis is backed off."""
        now = time.monotonic()
        with self._lock:
            assigned = sorted(t.name.qualified for t in self.tables.values())
            parked = sorted((p.to_json(now) for p in self.parked.values()), key=lambda p: str(p["table"]))
        poll_age = now - self._last_poll if self._last_poll else None
        alive = (
            self._consumer is not None
            and self._fatal is None
            and poll_age is not None
            and poll_age < POLL_STALE_S
        )
        kafka: dict[str, Any] = {
            "consumer_alive": alive,
            "last_poll_age_s": None if poll_age is None else round(poll_age, 1),
            "brokers_down": self._brokers_down,
            "group": self.group_id,
            "instance_id": self.instance_id or None,
        }
        recent = self._kafka_error
        if recent is not None and time.time() - recent[2] < KAFKA_ERROR_SHOWN_S:
            kafka["last_error"] = {"error": recent[0], "reason": recent[1]}
        redis = self.gate.status() if self.redis is not None else {"ok": True, "disabled": True}
        healthy = alive and not parked and not self._brokers_down and bool(redis["ok"])
        return healthy, {
            "status": "ok" if healthy else "degraded",
            "tables_assigned": assigned,
            "parked": parked,
            "kafka": kafka,
            "redis": redis,
        }

    # ------------------------------------------------------------------ loop

    def _consumer_config(self) -> dict[str, Any]:
        conf = consumer_config(self.config, group_id=self.group_id)
        conf.update(
            {
                "enable.partition.eof": False,
                "topic.metadata.refresh.interval.ms": 2_000,
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 5_000,
                "logger": _librdkafka_log,
                "error_cb": self._on_kafka_error,
            }
        )
        if self.instance_id:
            conf["group.instance.id"] = self.instance_id
        if self.group_protocol == assignment.CONSUMER:  # the broker assigns; its session timeout
            conf["group.protocol"] = assignment.CONSUMER
            for key in assignment.CLASSIC_ONLY:
                conf.pop(key, None)
            return conf
        # after the user's settings: the callbacks assign incrementally, which only this assignor allows
        conf["partition.assignment.strategy"] = assignment.ASSIGNMENT_STRATEGY
        if self.session_timeout_ms is not None:
            conf["session.timeout.ms"] = self.session_timeout_ms
        elif "session.timeout.ms" not in self.config.kafka:  # SEGCAT_KAFKA_SESSION_TIMEOUT_MS wins
            conf["session.timeout.ms"] = DEFAULT_SESSION_TIMEOUT_MS
        return conf

    def run(self, *, ready: Callable[[], None] | None = None) -> None:
        """Serve until ``stop``; ``ConfigError`` (busy metrics port, bad settings) before
        anything starts, ``FatalConsumerError`` if Kafka declares the consumer dead."""
        served = endpoints.serve(
            self.config.metrics_port, self.config.metrics_addr, metrics.REGISTRY, self.health
        )
        self.metrics_port = served.port if served is not None else None
        try:
            conf = self._consumer_config()
            try:
                consumer = Consumer(conf)
            except KafkaException as exc:
                raise ConfigError(f"Kafka consumer settings refused: {exc}") from None
            self._consumer = consumer
            self.writer = FrameWriter()
            switch_interval, thresholds = sys.getswitchinterval(), gc.get_threshold()
            sys.setswitchinterval(min(switch_interval, SWITCH_INTERVAL_S))
            gc.set_threshold(*GC_THRESHOLDS)
            self.maintenance.start()
            lag = threading.Thread(target=self._lag_loop, name="segcat-lag", daemon=True)
            lag.start()
            # the sentinel is set before any table writes a key: a Redis that loses what is
            # written from here on, even before the first tick, is noticed by the next check
            self._check_redis()
            try:
                self._serve(consumer, conf, ready)
            finally:
                sys.setswitchinterval(switch_interval)
                gc.set_threshold(*thresholds)
        finally:
            self.stop.set()  # ends the lag thread too
            if self.writer is not None:  # key frames already handed over are written before exit
                self.writer.close(WRITER_CLOSE_S)
            with self._lock:
                left = list(self.tables.values())
            for table in left:  # the ones no revocation took away
                table.close()
            self.maintenance.close()
            self._consumer = None
            if served is not None:
                served.close()

    def _serve(self, consumer: Consumer, conf: dict[str, Any], ready: Callable[[], None] | None) -> None:
        subscription = self.pattern
        if self.group_protocol == assignment.CONSUMER:
            subscription = assignment.broker_pattern(self.pattern)
        consumer.subscribe(
            [subscription], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
        )
        log.info(
            "materializer started",
            extra={
                "group": self.group_id,
                "pattern": self.pattern,
                "instance_id": self.instance_id or None,
                "session_timeout_ms": conf.get("session.timeout.ms"),
            },
        )
        if ready is not None:
            ready()
        last_tick = time.monotonic()
        try:
            while not self.stop.is_set():
                self._poll(consumer)
                if self._fatal is not None:
                    self._fatal_exit(self._fatal)
                if self.parked:
                    self._retry_due(consumer)
                now = time.monotonic()
                if now - last_tick >= TICK_SECONDS:
                    last_tick = now
                    self._tick(consumer)
        finally:
            log.info("materializer stopping", extra={"tables": len(self.tables)})
            try:
                consumer.close()
            except (KafkaException, RuntimeError) as exc:
                log.warning("consumer close failed", extra={"error": str(exc)})

    def _table_facts(self) -> list[maintenance.TableFacts]:
        """What the upkeep thread needs of each table owned now (copies; never the live image)."""
        now_ms = int(time.time() * 1000)
        with self._lock:
            owned = [(topic, table) for topic, table in self.tables.items() if topic not in self.parked]
        facts = []
        for _, table in owned:
            if self.writer is not None and self.writer.pending(table.name.qualified):
                continue  # its key frame is being written: never purge or prune under it
            state = table.state
            facts.append(
                maintenance.TableFacts(
                    table.name.qualified,
                    dict(state.properties),
                    state.dropped,
                    state.log_start,
                    len(state.live_intents(now_ms)),
                    state.dropped_timestamp_ms if state.dropped_timestamp_ms >= 0 else None,
                    state.protocol,
                )
            )
        return facts

    def _poll(self, consumer: Consumer) -> None:
        """Apply one batch of records, then tick the tables whose periodic work is due (within
        the budget). Nothing here is O(tables followed): only the tables touched, still catching
        up or due are looked at."""
        now = time.monotonic()
        next_due = self.schedule.next_deadline()
        timeout = POLL_TIMEOUT_S if next_due is None else min(max(next_due - now, 0.0), POLL_TIMEOUT_S)
        first = consumer.poll(timeout)
        self._last_poll = time.monotonic()
        if first is None:
            self._finish_catch_ups(consumer, idle=True)  # a backlog whose last offsets never came
        else:
            self._apply_batch(consumer, first)
        if self._fatal is None:
            self._run_due(consumer)

    def _apply_batch(self, consumer: Consumer, first: Message) -> None:
        touched: dict[str, TableMaterializer] = {}
        done: dict[str, Message] = {}  # each table's last record applied: its offset is stored once
        for msg in [first, *consumer.consume(num_messages=1_000, timeout=0)]:
            err = msg.error()
            if err is not None:
                if err.fatal() or err.code() == KafkaError._FATAL:
                    self._fatal = err
                    return
                if err.code() != KafkaError._PARTITION_EOF:
                    self._log_kafka_error("consumer error", err)
                continue
            topic, offset = msg.topic() or "", msg.offset()
            table = self.tables.get(topic)
            if table is None or offset is None or topic in self.parked:
                continue  # a parked table's records wait for its recovery
            _, ts = msg.timestamp()
            caught_up = offset >= self._catching_up.get(topic, -1)
            try:
                table.apply(LogRecord(offset, int(ts), msg.key(), msg.value()), notify=caught_up)
            except Exception as exc:
                touched.pop(topic, None)
                self._park(consumer, topic, table, exc, offset=offset)
                continue
            touched[topic] = table
            done[topic] = msg
        for msg in done.values():
            consumer.store_offsets(msg)
        for topic, table in touched.items():  # one Redis round trip per table per batch
            try:
                table.flush()
            except Exception as exc:
                self._park(consumer, topic, table, exc, offset=table.state.version)
                continue
            self._reschedule(topic, table)
        self._finish_catch_ups(consumer, idle=False)

    def _reschedule(self, topic: str, table: TableMaterializer, *, not_before: float = 0.0) -> None:
        """Keep the table's next tick at what it needs (never before ``not_before``); the
        back-off reset of a table resumed after parking is ``_tick``'s."""
        try:
            due = table.due()
        except Exception:  # asking must never stop the loop: look again in a while
            log.debug("due time unavailable", extra={"table": table.name.qualified}, exc_info=True)
            due = time.monotonic() + TICK_SECONDS
        self.schedule.set(topic, None if due is None else max(due, not_before))

    def _finish_catch_ups(self, consumer: Consumer, *, idle: bool) -> None:
        """Tables done with the backlog found on assignment (or idle: nothing more to read)
        write the key frame that ends their catch-up and publish from then on. Only the tables
        whose backlog has not ended yet are looked at; each leaves ``_catching_up`` when it ends."""
        for topic, end in list(self._catching_up.items()):
            table = self.tables.get(topic)
            if table is None:
                del self._catching_up[topic]
                continue
            if topic in self.parked:
                continue
            reached = table.state.version >= end
            if table.catching_up and (idle or reached):
                try:
                    table.finish_catch_up()
                except Exception as exc:
                    self._park(consumer, topic, table, exc, offset=table.state.version)
                    continue
                self._reschedule(topic, table)
                reached = True  # (idle: the offsets before the end never came)
            if reached:
                del self._catching_up[topic]

    def _run_due(self, consumer: Consumer) -> None:
        """Tick the tables whose periodic work is due, earliest first, within the budget
        (``DUE_BUDGET_TABLES`` / ``DUE_BUDGET_S``); the rest stay due for the next iteration.
        A ticked table is next ticked when it says (``TableMaterializer.due``), and not again
        within ``TICK_SECONDS``."""
        started = time.monotonic()
        for _ in range(DUE_BUDGET_TABLES):
            now = time.monotonic()
            if now - started >= DUE_BUDGET_S:
                return
            due = self.schedule.pop_due(now, 1)
            if not due:
                return
            topic = due[0]
            table = self.tables.get(topic)
            if table is None or topic in self.parked:
                continue  # its resumption schedules it again
            try:
                table.tick()
            except Exception as exc:  # one table's trouble must not stop the others
                self._park(consumer, topic, table, exc, offset=table.state.version)
                continue
            self._reschedule(topic, table, not_before=now + TICK_SECONDS)

    def _tick(self, consumer: Consumer) -> None:
        """Once a second, the work of the whole service (each table's own runs in ``_run_due``):
        tables created anew, one Redis round trip that tells whether Redis lost what it held,
        and the back-off reset of the tables resumed a while ago."""
        now = time.monotonic()
        self._follow_recreated(consumer)
        self._check_redis()
        for topic, resumed in list(self._resumed_at.items()):
            if now - resumed < STRIKES_RESET_S:
                continue
            if topic not in self.parked:
                self._strikes.pop(topic, None)  # healthy for a while: next failure waits 1 s again
            self._resumed_at.pop(topic, None)

    def _check_redis(self) -> None:
        """The sentinel (``redis_sentinel``): when Redis lost what it held, or failed meanwhile
        (the gate counted a failure: a write may be missing), every owned table rebuilds or
        checks its keys, spread over the next iterations by ``_run_due``'s budget."""
        if self._sentinel is None or not self.gate.open():
            return
        try:
            intact = self._sentinel.check()
        except (SegcatError, RedisError, RedisClusterException) as exc:  # Redis is a cache: back off
            self.gate.failed(exc, "(redis sentinel)")
            return
        self.gate.succeeded()
        generation = self.gate.generation
        if intact and generation == self._gate_seen:
            return
        self._gate_seen = generation
        now = time.monotonic()
        with self._lock:
            owned = list(self.tables.items())
        for topic, table in owned:
            if table.redis is not None:
                table.redis.suspect(lost=not intact)
                self.schedule.earliest(topic, now)

    def _follow_recreated(self, consumer: Consumer) -> None:
        """Tables whose topic was created anew (another topic id) while assigned here: recover
        each from its new log's objects and read that log from there (``_retry_due``'s steps)."""
        with self._lock:
            recreated, self._recreated = self._recreated, {}
        for topic, topic_id in recreated.items():
            table = self.tables.get(topic)
            if table is None or topic in self.parked or table.log_id == topic_id:
                continue
            log.warning(
                "table topic created anew",
                extra={"table": table.name.qualified, "old_log_id": table.log_id, "log_id": topic_id},
            )
            try:
                offset = table.recover()
                consumer.seek(TopicPartition(topic, 0, offset))
            except Exception as exc:
                self._park(consumer, topic, table, exc, offset=None, stage="recover")
                continue
            self.schedule.set(topic, time.monotonic())

    def _lag_loop(self) -> None:
        """The lag gauges, once a tick, in a thread of their own: a slow or unanswered request
        never holds back the main loop (and with it the notifications)."""
        while not self.stop.wait(TICK_SECONDS):
            try:
                self._measure_lag()
            except Exception as exc:  # a gauge must never take the service down
                log.warning("lag measurement failed", extra={"error": repr(exc)})

    def _measure_lag(self) -> None:
        """The log ends of the next ``KAFKA_SLICE`` followed tables in one ListOffsets request (the
        lag gauges); with more tables than that, the gauges are refreshed slice by slice.

        A request that succeeds is also what clears ``brokers_down`` in the health answer: with no
        table assigned a metadata request stands in for it, or the flag would stay set forever.

        Not asked per table through the consumer in the main loop: each such query waits behind
        the consumer's own fetch (``fetch.wait.max.ms``), so the loop, and the notifications of
        the commits arriving meanwhile, would wait that long for every table followed.
        """
        with self._lock:
            owned = list(self.tables.values())
        if owned:
            self._check_topic_ids(owned)
        tables, self._lag_cursor = _next_slice(owned, self._lag_cursor)
        try:
            if tables:
                ends = self._topic_admin().log_ends([table.name for table in tables])
            else:  # nothing to measure, but the health answer needs to know the brokers answer
                self._topic_admin().ping()  # (not a listing: it grows with every topic)
                ends = {}
        except SegcatError as exc:
            cause = exc.__cause__
            if isinstance(cause, KafkaException) and cause.args and isinstance(cause.args[0], KafkaError):
                self._log_kafka_error("log ends unavailable", cause.args[0])
            else:
                log.warning("log ends unavailable", extra={"error": str(exc)})
            return
        self._brokers_down = False
        for table in tables:
            high = ends.get(table.name, -1)
            if high >= 0:
                metrics.LAG.labels(table.name.qualified).set(max(high - 1 - table.state.version, 0))

    def _check_topic_ids(self, owned: list[TableMaterializer]) -> None:
        """Every ``ID_CHECK_S``, the topic ids of the next ``KAFKA_SLICE`` followed tables in one
        request: a table whose topic was deleted and created again while assigned here is handed
        to the main loop to recover (``_follow_recreated``). A check that fails waits for the next
        one (said at INFO: the lag gauges already report an unreachable Kafka)."""
        now = time.monotonic()
        if now - self._ids_checked_at < ID_CHECK_S:
            return
        self._ids_checked_at = now
        tables, next_cursor = _next_slice(owned, self._ids_cursor)
        try:
            ids = self._topic_admin().topic_ids([table.name for table in tables])
        except SegcatError as exc:
            log.info("topic ids unavailable", extra={"error": str(exc)})
            return
        self._ids_cursor = next_cursor
        recreated = {
            t.name.topic: found
            for t in tables
            if t.log_id is not None and (found := ids.get(t.name)) is not None and found != t.log_id
        }
        if recreated:
            with self._lock:
                self._recreated.update(recreated)

    def _topic_admin(self) -> TopicAdmin:
        if self._admin is None:  # a short timeout: the tick must not hang while brokers are away
            self._admin = TopicAdmin(dataclasses.replace(self.config, request_timeout_s=LAG_TIMEOUT_S))
        return self._admin


def _next_slice(owned: list[TableMaterializer], cursor: int) -> tuple[list[TableMaterializer], int]:
    """The ``KAFKA_SLICE`` tables from ``cursor`` on (wrapping around), and the next cursor."""
    if len(owned) <= KAFKA_SLICE:
        return owned, 0
    start = cursor % len(owned)
    chosen = owned[start : start + KAFKA_SLICE]
    if len(chosen) < KAFKA_SLICE:
        chosen += owned[: KAFKA_SLICE - len(chosen)]
    return chosen, (start + KAFKA_SLICE) % len(owned)


def install_signal_handlers(service: Materializer) -> None:
    """SIGTERM / SIGINT stop the loop; the consumer then closes cleanly."""

    def handle(signum: int, _: FrameType | None) -> None:
        log.info("signal received", extra={"signal": signal.Signals(signum).name})
        service.stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
