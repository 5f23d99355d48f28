"""The ``segcat`` PySpark Python Data Source: a table's versions as a stream, its segments as a batch.

Streaming (``spark.readStream.format("segcat").option("table", "ns.t").load()``) emits one
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
below; the ``segcat.*`` service options of ``spark_integration.source_options(config)``.

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

Batch (``spark.read.format("segcat")``): with ``versionAsOf`` or ``timestampAsOf`` (or
``view=segments``) it lists that snapshot's segments with their stats, one row each; without
them it returns the same version rows as the stream (the table's history, optionally between
``startingVersion`` and ``endingVersion``). A data source declares one schema before it knows
whether it is read as a batch or a stream, so the options, not the caller, choose the view.
"""

from __future__ import annotations

import datetime as dt
import difflib
import logging
import os
import signal
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
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
from pyspark.sql.types import StructType
from redis.exceptions import AuthenticationError, NoPermissionError

from segcat import (
    Config,
    HeldLease,
    InvalidArgument,
    ServiceUnavailable,
    TableName,
    VersionNotFound,
    load_catalog,
)
from segcat.catalog.log.follower import Follower
from segcat.catalog.log.reader import LogReader
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol.jsonio import segment_to_json
from segcat.catalog.protocol.replay import Applied
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.protocol.state import TableState
from segcat.catalog.protocol.version_change import VersionChange, change_from_delta
from segcat.catalog.read.as_of import as_of_ms
from segcat.catalog.read.lease import try_hold
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.redis.leases import default_holder
from segcat.catalog.storage.table_files import TableFiles
from segcat.spark_integration.options import (
    SERVICE_OPTIONS,
    config_from_options,
    is_service_option,
    lower_keys,
)
from segcat.spark_integration.stream_sink import stream_writer

VERSIONS_SCHEMA = (
    "table STRING, version BIGINT, prev_version BIGINT, timestamp TIMESTAMP, commit_id STRING, "
    "operation STRING, added ARRAY<STRING>, dropped ARRAY<STRING>, rows_delta BIGINT, "
    "bytes_delta BIGINT, live_segments BIGINT, properties MAP<STRING, STRING>"
)
SEGMENTS_SCHEMA = (
    "table STRING, version BIGINT, segment_id STRING, path STRING, uri STRING, partition STRING, "
    "format STRING, size_bytes BIGINT, row_count BIGINT, added_version BIGINT, "
    "stats MAP<STRING, STRUCT<type: STRING, min: STRING, max: STRING, null_count: BIGINT>>, "
    "bloom_column STRING"
)

ROWS_PER_PARTITION = 10_000
"""Version rows per streaming task (a batch of many versions is split over several tasks)."""

HINT_WAIT_S = 1.0
"""How long the records up to Redis' head may take to arrive before the head is checked against
the log's end (a head left over from an older topic of the same name would be waited for forever)."""
REDIS_RETRY_S = 10.0
"""After Redis failed to answer, the planner asks Kafka only, for this long (a Redis that hangs
would otherwise cost every trigger its socket timeout)."""
DEFAULT_KAFKA_CHECK_MS = 1000

log = logging.getLogger("segcat.spark.stream")

VersionRow = tuple[Any, ...]
"""One row of ``VERSIONS_SCHEMA``."""


def version_row(change: VersionChange, live_segments: int | None, properties: dict[str, str]) -> VersionRow:
    """The row of one accepted version: the change's fields, then the two only an image that judged
    the version knows (its live segments after, its commit's properties)."""
    return (
        change.table,
        change.version,
        change.prev_version,
        dt.datetime.fromtimestamp(change.timestamp_ms / 1000, tz=dt.UTC),
        change.commit_id,
        change.operation,
        list(change.added),
        list(change.dropped),
        change.rows_delta,
        change.bytes_delta,
        live_segments,
        properties,
    )


# ---------------------------------------------------------------------------- judging the log


class VersionFollower:
    """Judges a table's log forward from some version and remembers the accepted versions.

    Holds Kafka clients: it lives in one process and is never pickled (the readers drop it).
    Besides the follower's consumer it keeps an idle one for the log's end: a ListOffsets on a
    consumer that is fetching waits behind its pending long-poll fetch (the broker answers one
    request per connection at a time), which cost every trigger up to ``fetch.wait.max.ms``.
    """

    def __init__(self, config: Config, name: TableName) -> None:
        self._config = config
        self._name = name
        self._follower: Follower | None = None
        self._ends: LogReader | None = None
        self._after = -1
        """Every accepted version in (``_after``, the image's offset] is in ``_rows``."""
        self._rows: dict[int, VersionRow] = {}
        self._log_id: str | None = None
        self._identified = False

    @property
    def log_id(self) -> str | None:
        """Which log is followed: the topic id, asked once (key frames, archives and Redis heads of
        any other log, a table that had the name before, are never taken)."""
        if not self._identified:
            self._log_id = TopicAdmin(self._config).describe(self._name).topic_id
            self._identified = True
        return self._log_id

    def close(self) -> None:
        if self._follower is not None:
            self._follower.close()
            self._follower = None
        if self._ends is not None:
            self._ends.close()
            self._ends = None
        self._rows = {}

    def log_end(self) -> int:
        """The offset of the newest record in the log (-1: empty): one request, never queued."""
        if self._ends is None:
            self._ends = LogReader(self._config, self._name)
        return self._ends.watermarks()[1] - 1

    @property
    def judged(self) -> int:
        """The last log offset judged (-1: none yet)."""
        return -1 if self._follower is None else self._follower.state.version

    def _start(self, after: int) -> None:
        """Rebuild the image at ``after``: newest key frame ≤ ``after``, then the log up to it."""
        if self._follower is not None:
            self._follower.close()
            self._follower = None
        files = TableFiles(ObjectStore.from_config(self._config), self._name, self.log_id)
        follower = Follower.from_keyframe(self._config, self._name, files, at_most=after)
        if follower.state.version < after:
            follower.catch_up(after, exact=True)
        # no version after the last accepted one is accepted yet, so the (empty) cache is
        # complete from there on
        self._follower, self._after, self._rows = follower, follower.state.last_accepted_version, {}

    def _collect(self, applied: Applied, _: TableState) -> None:
        delta = applied.delta
        if applied.verdict.outcome is not Outcome.ACCEPTED or delta is None:
            return
        prev = -1 if delta.prev_version is None else delta.prev_version
        change = change_from_delta(self._name.qualified, prev, delta, "kafka")
        self._rows[delta.version] = version_row(change, delta.live_count, dict(delta.commit.properties))

    def _advance(self, upto: int) -> None:
        """Judge the records after the image, up to offset ``upto``."""
        assert self._follower is not None
        if upto <= self._follower.state.version:
            return
        self._follower.catch_up(upto, listener=self._collect, exact=True)

    def _ensure(self, after: int) -> None:
        if self._follower is None or after < self._after:
            self._start(after)

    def accepted_after(self, after: int, upto: int | None = None) -> list[VersionRow]:
        """The accepted versions in (``after``, ``upto``], reading the log to ``upto`` or its end."""
        self._ensure(after)
        self._advance(self.log_end() if upto is None else upto)
        return [row for v, row in self._rows.items() if v > after and (upto is None or v <= upto)]

    def reach(self, after: int, hint: int) -> int:
        """Judge the log up to offset ``hint`` (how far the materializer judged it, from Redis);
        returns the offset judged to, which is ``hint`` unless the log ends before it.

        The records are normally in the consumer's buffer already (it keeps fetching), so this
        costs no round trip. If they do not arrive within ``HINT_WAIT_S`` the hint is checked
        against the log's end and cut to it (a head left from an older topic of the same name).
        """
        self._ensure(after)
        follower = self._follower
        assert follower is not None
        deadline = time.monotonic() + HINT_WAIT_S
        while follower.state.version < hint:
            if time.monotonic() > deadline:
                hint = min(hint, self.log_end())
                self._advance(hint)
                break
            follower.poll(0.05, self._collect)
        return hint

    def last_accepted(self) -> int:
        """The newest accepted version in the log now (reads to the log's end)."""
        end = self.log_end()
        if self._follower is None:
            self._start(end)  # from the newest key frame, not from offset 0
        self._advance(end)
        assert self._follower is not None
        return self._follower.state.last_accepted_version

    def known_last_accepted(self) -> int | None:
        """The newest accepted version judged so far, without reading anything (None: nothing yet)."""
        return None if self._follower is None else self._follower.state.last_accepted_version

    def forget(self, upto: int) -> None:
        """Spark will never ask for versions ≤ ``upto`` again: free their rows."""
        if self._follower is None or upto < self._after:
            return
        self._rows = {v: row for v, row in self._rows.items() if v > upto}
        self._after = upto


# ---------------------------------------------------------------------------- options


_COMMON_OPTIONS = ("table", "path", "startingVersion", "view")
_STREAM_OPTIONS = ("maxVersionsPerTrigger", "latestFrom", "kafkaCheckIntervalMs")
_BATCH_OPTIONS = ("endingVersion", "versionAsOf", "timestampAsOf")


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options of one ``segcat`` read (plain values: pickles everywhere)."""

    table: str
    raw: Mapping[str, str]

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = lower_keys(options)
        table = opts.get("table") or opts.get("path")
        if not table:
            raise InvalidArgument('the segcat source needs .option("table", "<namespace>.<table>")')
        TableName.parse(table)
        return cls(table, opts)

    def get(self, key: str) -> str | None:
        return self.raw.get(key.lower())

    def check(self, *, streaming: bool) -> None:
        """``InvalidArgument`` for an option this read does not take: a misspelt option was
        silently ignored (``startingVersoin`` read the whole history), and an option of the other
        kind of read (``endingVersion`` on a stream) would be too. Spark hands the keys over
        lower-cased, so they are compared so."""
        own, other = (_STREAM_OPTIONS, _BATCH_OPTIONS) if streaming else (_BATCH_OPTIONS, _STREAM_OPTIONS)
        known = {key.lower(): key for key in (*_COMMON_OPTIONS, *own)}
        misplaced = {key.lower(): key for key in other}
        for key in self.raw:
            if key in known or is_service_option(key):
                continue
            if key in misplaced:
                applies = (
                    "a batch read (spark.read), not to a stream"
                    if streaming
                    else ("a stream (spark.readStream), not to a batch read")
                )
                raise InvalidArgument(f"option {misplaced[key]} of the segcat source applies to {applies}")
            names = {**known, **SERVICE_OPTIONS}
            close = difflib.get_close_matches(key, list(names), n=1)
            hint = f"; did you mean {names[close[0]]}?" if close else ""
            raise InvalidArgument(
                f"unknown option {key[:80]!r} of the segcat source{hint} "
                f"(it takes {', '.join(known.values())} and the segcat.* service options)"
            )

    def config(self) -> Config:
        return config_from_options(self.raw)

    @property
    def name(self) -> TableName:
        return TableName.parse(self.table)

    @property
    def view(self) -> str:
        view = (self.get("view") or "").lower()
        if view and view not in ("versions", "segments"):
            raise InvalidArgument(f"view must be 'versions' or 'segments', not {view[:40]!r}")
        if view:
            return view
        return "segments" if self.get("versionAsOf") or self.get("timestampAsOf") else "versions"

    def int_option(self, key: str) -> int | None:
        raw = self.get(key)
        if raw is None or raw == "":
            return None
        try:
            return int(raw)
        except ValueError:
            raise InvalidArgument(f"option {key} must be an integer, got {raw[:40]!r}") from None

    def starting_after(self, follower: VersionFollower) -> int:
        """The offset before the first version to emit (``startingVersion`` - 1)."""
        raw = (self.get("startingVersion") or "earliest").strip().lower()
        if raw == "earliest":
            return -1
        if raw == "latest":
            return follower.last_accepted()
        start = self.int_option("startingVersion")
        assert start is not None
        if start < 0:
            raise InvalidArgument(f"startingVersion must be ≥ 0, 'earliest' or 'latest', not {start}")
        end = follower.log_end()
        if start > end + 1:
            # Delta's answer too: a start past the latest version is refused, never waited for
            raise VersionNotFound(
                f"startingVersion {start} is past the head of {self.table} (its log ends at version "
                f"{end}; the next commit becomes version {end + 1} at the earliest): use "
                "startingVersion=latest to follow the commits after the head"
            )
        return start - 1

    @property
    def latest_from(self) -> str:
        """Where each trigger learns how far the log goes: ``redis`` (the materialized head) or ``kafka``."""
        raw = (self.get("latestFrom") or "redis").strip().lower()
        if raw not in ("redis", "kafka"):
            raise InvalidArgument(f"latestFrom must be 'redis' or 'kafka', not {raw[:40]!r}")
        return raw

    @property
    def kafka_check_s(self) -> float:
        """With ``latestFrom=redis``: ask Kafka's end too when Redis' head has not moved this long."""
        raw = self.int_option("kafkaCheckIntervalMs")
        value = DEFAULT_KAFKA_CHECK_MS if raw is None else raw
        if value < 0:
            raise InvalidArgument(f"kafkaCheckIntervalMs must be ≥ 0, not {value}")
        return value / 1000


# ---------------------------------------------------------------------------- the data source


class SegcatDataSource(DataSource):
    """``format("segcat")``: versions as a stream (or history), or one snapshot's segments."""

    @classmethod
    def name(cls) -> str:
        return "segcat"

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self._parsed = SourceOptions.parse(options)

    def schema(self) -> StructType | str:
        return SEGMENTS_SCHEMA if self._parsed.view == "segments" else VERSIONS_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        self._parsed.check(streaming=False)
        if self._parsed.view == "segments":
            return SegmentsReader(self._parsed)
        return HistoryReader(self._parsed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._parsed.check(streaming=True)
        if self._parsed.view != "versions":
            raise InvalidArgument(
                "a stream of the segcat source emits versions; drop versionAsOf/timestampAsOf"
            )
        return VersionStreamReader(self._parsed)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        """``writeStream.format("segcat")``: one commit per micro-batch, exactly once (``stream_sink``)."""
        return stream_writer(self.options, schema, overwrite)


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


class HistoryReader(DataSourceReader):
    """Batch read of the version rows: the accepted versions between two bounds (default: all)."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._upto = options.int_option("endingVersion")
        if self._upto is not None and self._upto < 0:
            raise InvalidArgument(f"endingVersion must be ≥ 0, not {self._upto}")
        if options.get("versionAsOf") is not None or options.get("timestampAsOf") is not None:
            raise InvalidArgument(
                "view=versions lists the history; versionAsOf/timestampAsOf ask for segments"
            )

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        follower = VersionFollower(self._options.config(), self._options.name)
        try:
            after = self._options.starting_after(follower)
            if self._upto is not None and self._upto <= after:
                raise InvalidArgument(
                    f"endingVersion {self._upto} is before startingVersion {after + 1}: the range is empty"
                )
            yield from follower.accepted_after(after, self._upto)
        finally:
            follower.close()


class SegmentsReader(DataSourceReader):
    """Batch read of one snapshot's live segments, stats included, one row per segment."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        for key in ("startingVersion", "endingVersion"):
            if options.get(key) is not None:
                raise InvalidArgument(
                    f"{key} bounds the history (view=versions), not one snapshot's segments"
                )
        self._version = options.int_option("versionAsOf")
        timestamp = options.get("timestampAsOf")
        self._as_of = (
            None if timestamp is None else as_of_ms(int(timestamp) if timestamp.isdigit() else timestamp)
        )

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        table = load_catalog(self._options.config()).load_table(self._options.name)
        snapshot = table.snapshot(self._version, as_of=self._as_of)
        wide = snapshot.segments
        added = dict(
            zip(wide.column("segment_id").to_pylist(), wide.column("added_version").to_pylist(), strict=True)
        )
        for segment in snapshot.segment_list():
            raw = segment_to_json(segment)
            stats = {
                s["column"]: (s["type"], _text(s.get("min")), _text(s.get("max")), s.get("null_count"))
                for s in raw["stats"]
            }
            yield (
                self._options.table,
                snapshot.version,
                segment.segment_id,
                segment.path,
                snapshot.resolve(segment.path),
                segment.partition,
                segment.format,
                segment.size_bytes,
                segment.row_count,
                added.get(segment.segment_id),
                stats,
                segment.bloom.column if segment.bloom is not None else None,
            )


def _text(value: Any) -> str | None:
    """Stats as text: ISO dates/times, base64 bytes (as jsonio writes them), numbers as written."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
