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
the ``segcat.*`` service options of ``spark_integration.source_options(config)``.

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
import os
import signal
import threading
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from segcat.catalog.config import Config
from segcat.catalog.log.follower import Follower
from segcat.catalog.log.reader import LogReader
from segcat.catalog.protocol.jsonio import segment_to_json
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.replay import Applied
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read.lease import HeldLease, try_hold
from segcat.catalog.read.table import Catalog
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.redis.leases import default_holder
from segcat.catalog.storage.table_files import TableFiles
from segcat.spark_integration.options import config_from_options, lower_keys
from segcat.spark_integration.reader import as_of_ms

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

VersionRow = tuple[Any, ...]
"""One row of ``VERSIONS_SCHEMA``."""


# ---------------------------------------------------------------------------- judging the log


class VersionFollower:
    """Judges a table's log forward from some version and remembers the accepted versions.

    Holds Kafka clients: it lives in one process and is never pickled (the readers drop it).
    """

    def __init__(self, config: Config, name: TableName) -> None:
        self._config = config
        self._name = name
        self._follower: Follower | None = None
        self._after = -1
        """Every accepted version in (``_after``, the image's offset] is in ``_rows``."""
        self._rows: dict[int, VersionRow] = {}

    def close(self) -> None:
        if self._follower is not None:
            self._follower.close()
            self._follower = None
        self._rows = {}

    def _start(self, after: int) -> None:
        """Rebuild the image at ``after``: newest key frame ≤ ``after``, then the log up to it."""
        self.close()
        files = TableFiles(ObjectStore.from_config(self._config), self._name)
        follower = Follower.from_keyframe(self._config, self._name, files, at_most=after)
        if follower.state.version < after:
            follower.catch_up(after, exact=True)
        # no version after the last accepted one is accepted yet, so the (empty) cache is
        # complete from there on
        self._follower, self._after, self._rows = follower, follower.state.last_accepted_version, {}

    def _advance(self, upto: int | None) -> None:
        """Judge the records after the image, up to ``upto`` (default: the end of the log)."""
        assert self._follower is not None
        if upto is not None and upto <= self._follower.state.version:
            return
        name = self._name.qualified

        def collect(applied: Applied, _: TableState) -> None:
            delta = applied.delta
            if applied.verdict.outcome is not Outcome.ACCEPTED or delta is None:
                return
            self._rows[delta.version] = (
                name,
                delta.version,
                delta.prev_version,
                dt.datetime.fromtimestamp(delta.timestamp_ms / 1000, tz=dt.UTC),
                delta.commit_id,
                delta.operation.value,
                [s.segment_id for s in delta.added],
                list(delta.dropped),
                delta.rows_delta,
                delta.bytes_delta,
                delta.live_count,
                dict(delta.commit.properties),
            )

        self._follower.catch_up(upto, listener=collect, exact=True)

    def _ensure(self, after: int) -> None:
        if self._follower is None or after < self._after:
            self._start(after)

    def accepted_after(self, after: int, upto: int | None = None) -> list[VersionRow]:
        """The accepted versions in (``after``, ``upto``], reading the log to ``upto`` or its end."""
        self._ensure(after)
        self._advance(upto)
        return [row for v, row in self._rows.items() if v > after and (upto is None or v <= upto)]

    def last_accepted(self) -> int:
        """The newest accepted version in the log now (reads to the log's end)."""
        if self._follower is None:
            with LogReader(self._config, self._name) as reader:
                head = reader.watermarks()[1] - 1
            self._start(head)  # from the newest key frame, not from offset 0
        self._advance(None)
        assert self._follower is not None
        return self._follower.state.last_accepted_version

    def forget(self, upto: int) -> None:
        """Spark will never ask for versions ≤ ``upto`` again: free their rows."""
        if self._follower is None or upto < self._after:
            return
        self._rows = {v: row for v, row in self._rows.items() if v > upto}
        self._after = upto


# ---------------------------------------------------------------------------- options


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
            raise ValueError('the segcat source needs .option("table", "<namespace>.<table>")')
        TableName.parse(table)
        return cls(table, opts)

    def get(self, key: str) -> str | None:
        return self.raw.get(key.lower())

    def config(self) -> Config:
        return config_from_options(self.raw)

    @property
    def name(self) -> TableName:
        return TableName.parse(self.table)

    @property
    def view(self) -> str:
        view = (self.get("view") or "").lower()
        if view and view not in ("versions", "segments"):
            raise ValueError(f"view must be 'versions' or 'segments', not {view!r}")
        if view:
            return view
        return "segments" if self.get("versionAsOf") or self.get("timestampAsOf") else "versions"

    def int_option(self, key: str) -> int | None:
        raw = self.get(key)
        if raw is None or raw == "":
            return None
        try:
            return int(raw)
        except ValueError as exc:
            raise ValueError(f"option {key} must be an integer, got {raw!r}") from exc

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
            raise ValueError(f"startingVersion must be ≥ 0, 'earliest' or 'latest', not {start}")
        return start - 1


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
        if self._parsed.view == "segments":
            return SegmentsReader(self._parsed)
        return HistoryReader(self._parsed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        if self._parsed.view != "versions":
            raise ValueError("a stream of the segcat source emits versions; drop versionAsOf/timestampAsOf")
        return VersionStreamReader(self._parsed)


class VersionRows(InputPartition):
    """Rows judged by the planner, shipped to the task that emits them."""

    def __init__(self, rows: Sequence[VersionRow]) -> None:
        super().__init__(len(rows))
        self.rows = list(rows)


class VersionStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Offsets ``{"version": V}`` = every accepted version ≤ V emitted (string key, plain int)."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._max_versions = options.int_option("maxVersionsPerTrigger")
        if self._max_versions is not None and self._max_versions < 1:
            raise ValueError("maxVersionsPerTrigger must be ≥ 1")
        self._target: int | None = None
        """Trigger.AvailableNow: the last version to read (the head when the query started)."""
        self._follower: VersionFollower | None = None
        self._redis: RedisStore | None = None
        self._lease: HeldLease | None = None
        """The lease on the end version of the batch planned last (planner process only)."""

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_follower"] = None  # Kafka clients stay in the planner process
        state["_redis"] = None  # and so do the Redis client
        state["_lease"] = None  # and the lease with its renewing thread
        return state

    def _hold(self, version: int) -> None:
        """Lease ``version`` (the batch being planned), then let the previous batch's lease go."""
        if self._lease is not None and self._lease.held and self._lease.version == version:
            return
        if self._redis is None:
            self._redis = RedisStore.from_config(self._options.config())
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
        rows = self._follow().accepted_after(after, self._target)
        if isinstance(limit, ReadMaxRows):
            rows = rows[: max(1, limit.max_rows)]
        return {"version": int(rows[-1][1]) if rows else after}

    def reportLatestOffset(self) -> dict[str, int] | None:
        if self._follower is None:
            return None
        return {"version": self._follower.last_accepted()}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        after, upto = int(start["version"]), int(end["version"])
        if upto <= after:
            return []
        rows = self._follow().accepted_after(after, upto)
        self._hold(upto)
        return [
            VersionRows(rows[i : i + ROWS_PER_PARTITION]) for i in range(0, len(rows), ROWS_PER_PARTITION)
        ]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, VersionRows)
        yield from partition.rows

    def commit(self, end: dict[str, Any]) -> None:
        """Spark finished the batches up to ``end``: their lease goes (the next plan takes a new one)."""
        self._release_done(int(end["version"]))
        if self._follower is not None:
            self._follower.forget(int(end["version"]))

    def stop(self) -> None:
        self._let_go()
        if self._follower is not None:
            self._follower.close()
            self._follower = None


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

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        follower = VersionFollower(self._options.config(), self._options.name)
        try:
            after = self._options.starting_after(follower)
            upto = self._options.int_option("endingVersion")
            yield from follower.accepted_after(after, upto)
        finally:
            follower.close()


class SegmentsReader(DataSourceReader):
    """Batch read of one snapshot's live segments, stats included, one row per segment."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._version = options.int_option("versionAsOf")
        timestamp = options.get("timestampAsOf")
        self._as_of = (
            None if timestamp is None else as_of_ms(int(timestamp) if timestamp.isdigit() else timestamp)
        )

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        table = Catalog(self._options.config()).table(self._options.name)
        snapshot = table.snapshot(version=self._version, as_of_ms=self._as_of)
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
