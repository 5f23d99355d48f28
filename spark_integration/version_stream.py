"""The ``segcat`` source's version stream: one row per accepted version (``view=versions``).

Streaming (``spark.readStream.format("segcat").option("view", "versions").load("ns.t")``) emits one
row per ACCEPTED version: version, commit time (the broker's), operation, added and dropped
segment ids, rows and bytes delta. The source's offset is ``{"version": V}``: every accepted
version ≤ V has been emitted. Offsets are table versions, so a query restarted from its
checkpoint resumes right after the last version it processed, with nothing lost or repeated.

Which records are accepted is decided by replaying the log through the same rules every
other party uses (``VersionFollower``: newest key frame ≤ the start, then the log), in the
long-lived planner process. ``partitions`` hands the rows it judged to the tasks inside the
``InputPartition``, so ``read`` needs no service at all and the offsets Spark journaled and
the rows it reads come from one judgement. The follower is rebuilt whenever Spark asks for a
range it does not hold (after a restart, a rewind), so nothing depends on process state.

Options: ``table`` (required); ``startingVersion`` = ``earliest`` (default: every accepted
version) | ``latest`` (versions after the head at start) | N (versions ≥ N);
``maxVersionsPerTrigger`` = N (a read limit, honoured under ``Trigger.AvailableNow`` too);
``latestFrom`` = ``redis`` (default) | ``kafka`` and ``kafkaCheckIntervalMs`` (default 1000),
below; the ``segcat.*`` service options of ``spark_integration.read_options(config)``.

How far to judge at each trigger (``latestOffset``): the materializer's head in Redis (one
HGETALL) says up to which log offset the log has been judged; the planner then judges the
records up to that offset itself, from the records its consumer has usually fetched already.
The head is only a hint of how far to read: the versions reported are always the planner's
own verdicts, so Redis can never make the stream skip or invent a version. Kafka's end (one
ListOffsets, on an idle consumer of its own: a request on the follower's consumer would queue
behind its long-poll fetch, up to ``fetch.wait.max.ms``) is asked instead when Redis cannot
answer (one warning, Redis tried again after ``REDIS_RETRY_S``), holds no head for the table,
is behind what the planner has judged, or has not moved for ``kafkaCheckIntervalMs`` (so a
stopped materializer delays a version by at most that much). ``latestFrom=kafka`` asks
Kafka at every trigger. ``Trigger.AvailableNow`` and ``startingVersion=latest`` always take
the log's end from Kafka (the head is the log's end, docs/PROTOCOL.md §3).

While a micro-batch is processed the planner holds a version lease (``catalog.read.lease``) on
its end version: taken when ``partitions`` plans the batch (a ``foreachBatch`` sink that reads
the data of the versions it is handed finds their files), released when Spark commits the
batch (``commit``), when the next batch is planned, or when the stream stops. Spark may end a
stopped query's planner process with SIGTERM without calling ``stop``: the planner then
releases its lease on SIGTERM (when nothing else handles that signal there) and dies as it
would have; a planner killed outright leaves its lease to expire after its TTL. If
Redis cannot be reached the stream runs on without the lease (one warning).

Batch (``spark.read.format("segcat")``): with ``view=segments`` (and ``versionAsOf`` or
``timestampAsOf``) it lists that snapshot's segments with their stats, one row each; with
``view=versions`` it returns the same version rows as the stream (the table's history, optionally between
``startingVersion`` and ``endingVersion``). A data source declares one schema before it knows
whether it is read as a batch or a stream, so the options, not the caller, choose the view.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
import weakref
from collections.abc import Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import (
    InputPartition,
    SimpleDataSourceStreamReader,
)
from pyspark.sql.datasource_internal import _SimpleStreamReaderWrapper
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from redis.exceptions import AuthenticationError, NoPermissionError

from segcat import (
    HeldLease,
    InvalidArgument,
    ServiceUnavailable,
)
from segcat.catalog.read.lease import try_hold
from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.redis.leases import default_holder
from segcat.spark_integration.read_options import SourceOptions
from segcat.spark_integration.version_follower import VersionFollower, VersionRow

ROWS_PER_PARTITION = 10_000
"""Version rows per streaming task (a batch of many versions is split over several tasks)."""

REDIS_RETRY_S = 10.0
"""After Redis failed to answer, the planner asks Kafka only, for this long (a Redis that hangs
would otherwise cost every trigger its socket timeout)."""

log = logging.getLogger("segcat.spark.stream")


class VersionRows(InputPartition):
    """Rows judged by the planner, shipped to the task that emits them."""

    def __init__(self, rows: Sequence[VersionRow]) -> None:
        super().__init__(len(rows))
        self.rows = list(rows)


class _AvailableNow(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """Tells pyspark's planner loop that a ``VersionStreamReader`` supports Trigger.AvailableNow
    (it asks the ``simple_reader`` of a ``_SimpleStreamReaderWrapper``) and passes the call on."""

    def __init__(self, reader: VersionStreamReader) -> None:
        self._reader = reader

    def prepareForTriggerAvailableNow(self) -> None:
        self._reader.prepareForTriggerAvailableNow()


class VersionStreamReader(_SimpleStreamReaderWrapper, SupportsTriggerAvailableNow):
    """Offsets ``{"version": V}`` = every accepted version ≤ V emitted (string key, plain int).

    A batch of at most ``ROWS_PER_PARTITION`` versions reaches Spark with its plan: pyspark's
    planner loop sends the rows of ``getCache`` to the JVM next to the partitions of a
    ``_SimpleStreamReaderWrapper`` (the class behind ``SimpleDataSourceStreamReader``), which
    stores them as a block the task reads, so no Python worker is started for the batch (starting
    one would be most of a small batch's ``addBatch``). Every method of the wrapper is overridden here;
    it is the base class only for that hand-over. ``read`` still serves the rows of a partition
    whose block is gone, and larger batches (several partitions).
    """

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._max_versions = options.int_option("maxVersionsPerTrigger")
        if self._max_versions is not None and self._max_versions < 1:
            raise InvalidArgument("maxVersionsPerTrigger must be ≥ 1")
        self._target: int | None = None
        """Trigger.AvailableNow: the last version to read (the head when the query started)."""
        self._latest_from = options.latest_from
        self._kafka_check_s = options.kafka_check_s
        self._follower: VersionFollower | None = None
        self._redis: RedisStore | None = None
        self._redis_down_until = 0.0
        """``time.monotonic()`` before which Redis is not asked again (it failed to answer)."""
        self._head_ignored_until = 0.0
        """``time.monotonic()`` before which Redis' head is not used (it was ahead of the log)."""
        self._kafka_at = 0.0
        """When the log's end was last taken from Kafka (``time.monotonic()``)."""
        self._lease: HeldLease | None = None
        """The lease on the end version of the batch planned last (planner process only)."""
        self._planned: tuple[int, int, list[VersionRow]] | None = None
        """(after, upto, rows) of the batch planned last, for ``getCache``."""
        self.simple_reader = _AvailableNow(self)
        """What pyspark's planner loop asks a ``_SimpleStreamReaderWrapper`` about Trigger.AvailableNow."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_follower"] = None  # Kafka clients stay in the planner process
        state["_redis"] = None  # and so do the Redis client
        state["_lease"] = None  # and the lease with its renewing thread
        state["_planned"] = None  # the partitions carry their rows
        return state

    def _store(self) -> RedisStore:
        if self._redis is None:
            self._redis = RedisStore.from_config(self._options.config())
        return self._redis

    def _redis_head_offset(self, log_id: str | None) -> int | None:
        """How far the materializer has judged the log (Redis head's offset), or None: ask Kafka
        (also when the head is of another log than ``log_id``: a table that had the name before)."""
        now = time.monotonic()
        if now < self._redis_down_until or now < self._head_ignored_until:
            return None
        try:
            head = self._store().head(self._options.table)
        except ServiceUnavailable as exc:
            self._redis_down_until = now + REDIS_RETRY_S
            # the store already warned once about refused credentials or a missing ACL permission
            refused = isinstance(exc.__cause__, AuthenticationError | NoPermissionError)
            _warn_once(
                self._store().where,
                logging.DEBUG if refused else logging.WARNING,
                "the segcat stream of %s reads the log's end from Kafka: Redis does not answer (%s); "
                "it runs without version leases meanwhile and asks Redis again every %.0f s",
                self._options.table,
                exc,
                REDIS_RETRY_S,
            )
            return None
        if head is None or (log_id is not None and head.log_id != log_id):
            return None
        return head.offset

    def _judge_to_end(self, follower: VersionFollower, after: int) -> None:
        """Judge the log as far as it is known to go: Redis' head, or Kafka's end (module docstring)."""
        if self._latest_from == "redis":
            hint = self._redis_head_offset(follower.log_id)
            now = time.monotonic()
            known = max(after, follower.judged)
            fresh = now - self._kafka_at < self._kafka_check_s
            if hint is not None and (hint > known or (hint == known and fresh)):
                reached = follower.reach(after, hint)
                if reached < hint:  # Redis' head is ahead of the log itself: do not trust it for a while
                    self._head_ignored_until = now + REDIS_RETRY_S
                    _warn_once(
                        f"ahead:{self._options.table}",
                        logging.WARNING,
                        "Redis' head of %s (offset %s) is beyond the log's end (%s); "
                        "reading the log's end from Kafka",
                        self._options.table,
                        hint,
                        reached,
                    )
                return
        self._kafka_at = time.monotonic()
        follower.accepted_after(after)

    def _hold(self, version: int) -> None:
        """Lease ``version`` (the batch being planned), then let the previous batch's lease go."""
        if self._lease is not None and self._lease.held and self._lease.version == version:
            return
        if time.monotonic() < self._redis_down_until:
            return  # Redis did not answer just now (the warning said the stream runs without leases)
        self._store()
        previous = self._lease
        self._lease = try_hold(
            self._redis, self._options.name, version, holder=default_holder("spark-stream")
        )
        if previous is not None:
            previous.release()
        if self._lease is not None:
            _release_on_sigterm(self)

    def _release_done(self, upto: int) -> None:
        """Let the lease go once the batches up to ``upto`` (which it covers) are done."""
        if self._lease is not None and self._lease.version <= upto:
            self._lease.release()
            self._lease = None

    def _let_go(self) -> None:
        if self._lease is not None:
            self._lease.release()
            self._lease = None
        if self._redis is not None:
            self._redis.close()
            self._redis = None

    def _follow(self) -> VersionFollower:
        if self._follower is None:
            self._follower = VersionFollower(self._options.config(), self._options.name)
        return self._follower

    def initialOffset(self) -> dict[str, int]:
        return {"version": self._options.starting_after(self._follow())}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self._max_versions) if self._max_versions else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._follow().last_accepted()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, int]:
        after = int(start["version"])
        # Spark asks for the next batch once the one ending at ``after`` is done; for the last batch
        # of an availableNow query this is the only call left (commit comes with the next batch)
        self._release_done(after)
        if self._target is not None and after >= self._target:
            return {"version": after}
        follower = self._follow()
        if self._target is None:
            self._judge_to_end(follower, after)
            rows = follower.accepted_after(after, follower.judged)
        else:
            rows = follower.accepted_after(after, self._target)
        if isinstance(limit, ReadMaxRows):
            rows = rows[: max(1, limit.max_rows)]
        return {"version": int(rows[-1][1]) if rows else after}

    def reportLatestOffset(self) -> dict[str, int] | None:
        """The newest version judged by ``latestOffset`` just before (progress reports only: no I/O)."""
        known = None if self._follower is None else self._follower.known_last_accepted()
        return None if known is None else {"version": known}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        after, upto = int(start["version"]), int(end["version"])
        if upto <= after:
            return []
        rows = self._follow().accepted_after(after, upto)
        self._hold(upto)
        self._planned = (after, upto, rows) if 0 < len(rows) <= ROWS_PER_PARTITION else None
        return [
            VersionRows(rows[i : i + ROWS_PER_PARTITION]) for i in range(0, len(rows), ROWS_PER_PARTITION)
        ]

    def getCache(self, start: dict[str, Any], end: dict[str, Any]) -> Iterator[VersionRow] | None:
        """The rows of the batch ``partitions`` just planned (one partition), handed to the JVM with
        the plan; None for anything else (the task then calls ``read``)."""
        planned = self._planned
        if planned is None or (planned[0], planned[1]) != (int(start["version"]), int(end["version"])):
            return None
        return iter(planned[2])

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, VersionRows)
        yield from partition.rows

    def commit(self, end: dict[str, Any]) -> None:
        """Spark finished the batches up to ``end``: their lease goes (the next plan takes a new one)."""
        self._release_done(int(end["version"]))
        self._planned = None
        if self._follower is not None:
            self._follower.forget(int(end["version"]))

    def stop(self) -> None:
        self._let_go()
        if self._follower is not None:
            self._follower.close()
            self._follower = None


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(key: str, level: int, message: str, *args: object) -> None:
    """Log ``message`` at ``level`` the first time for ``key`` in this process, at DEBUG after."""
    with _warned_lock:
        first = key not in _warned
        _warned.add(key)
    log.log(level if first else logging.DEBUG, message, *args)


_leasing_readers: weakref.WeakSet[VersionStreamReader] = weakref.WeakSet()


def _release_on_sigterm(reader: VersionStreamReader) -> None:
    """Let ``reader``'s lease go when the process gets SIGTERM (how Spark ends a query's planner).

    Installed only from the main thread and only over the default action, which is then
    restored and re-raised: the process ends exactly as it would have, its leases released.
    """
    _leasing_readers.add(reader)
    in_main = threading.current_thread() is threading.main_thread()
    if in_main and signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame: object) -> None:
    for reader in list(_leasing_readers):
        reader._let_go()
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGTERM)
