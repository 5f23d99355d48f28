"""The ``segcat`` source's rows as a stream: ``spark.readStream.format("segcat").load("ns.t")``.

Each micro-batch holds the rows of the files whole versions added, in version order: no
directory listing, no polling of metadata files, the log says which files each version added.
By default the stream starts with the whole table at the head as one initial snapshot (split
across batches by the limits, in a fixed order of its files, as Delta does with the index in
its starting version), then the versions after it; ``startingVersion`` (N or ``latest``) or
``startingTimestamp`` start at a version instead, only when the checkpoint holds no offset.

**Offsets** are JSON of plain values, stable across restarts (Delta's model)::

    {"sourceVersion": 1, "version": V, "index": I, "isStartingVersion": B}

``B`` true: the initial snapshot of version V, its files up to index I emitted (-1: none);
``B`` false: every accepted version ≤ V emitted (I is then -1). The snapshot's files are in
the order ``snapshot_reads`` gives (added version, then segment id), so a restart that plans
the same batch again reads the same files.

**Admission.** ``maxFilesPerTrigger`` (default 1,000), ``maxBytesPerTrigger`` and
``maxRowsPerTrigger`` bound a batch softly: whole versions (snapshot files one by one) are
admitted while the batch stays within every limit, and at least one always is.
``Trigger.AvailableNow`` honours them up to the head the query saw when it started.

**Versions that are not appends.** ``COMPACT`` (its rows are already in the stream) and
metadata versions are skipped silently. A version that removes rows (``DELETE``, ``REPLACE``,
a tombstone, a drop of partitions) fails the stream with ``StreamChangeCommit`` naming it,
unless ``skipChangeCommits=true`` (every such version is skipped, its added rows too, as Delta
does) or ``ignoreDeletes=true`` (versions that only delete are skipped). A version whose files
hold a column or a type the stream's schema (the table's when the query started) cannot carry
fails with ``StreamSchemaChanged``: restarting the query picks up the new schema, and files
written before a nullable column was added read it as null.

**Nothing lost under the stream.** The planner holds version leases (``catalog.read.lease``)
covering every file of a planned batch until Spark commits it: the batch's end version, the
snapshot's version, and each version of the batch whose added files a later version of the
same batch dropped (a compaction inside the batch: the end version no longer lists them). A
restart whose position the log no longer holds (pruned history), or whose files were vacuumed
while the query was down, fails with ``StreamDataLoss``; with ``failOnDataLoss=false`` it
resumes at the earliest position that exists and logs a warning naming what it skipped.

**Small batches skip the task's Python worker.** A batch that fits one task and holds at most
``PLANNER_READ_ROWS`` rows is read by the planner itself, with the tasks' own code
(``read_partition``), and its Arrow batches reach the JVM with the plan (``getCache``, as the
version stream hands over its rows): starting a Python worker for the task would be most of a
small batch's time. A larger batch, or one Spark plans again later, is read by its tasks.

How far the log goes at each trigger, the Redis head as a hint, the leases' release on SIGTERM
and ``Trigger.AvailableNow`` come from the version stream (``version_stream``), whose planner
this one extends; the versions and their files come from ``stream_planning`` (its
``TrackingFollower``, the change feed's too), so the offsets and the files come from one
judgement, and so does admission (``Budget``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxFiles

from segcat import (
    ArchiveGap,
    HeldLease,
    InvalidArgument,
    LogPruned,
    StreamChangeCommit,
    StreamDataLoss,
    StreamSchemaChanged,
    VersionNotFound,
    load_catalog,
)
from segcat.catalog.protocol import spark_types
from segcat.catalog.read.as_of import as_of_ms
from segcat.catalog.read.changes import FileRead, VersionFiles, VersionKind, arrow_schema
from segcat.catalog.read.lease import try_hold
from segcat.catalog.storage.objectstore import filesystem
from segcat.catalog.storage.redis.leases import default_holder
from segcat.spark_integration.read_options import SourceOptions
from segcat.spark_integration.row_batch import FilesPartition, RowsAt, pack, read_partition
from segcat.spark_integration.stream_planning import Budget, TrackingFollower
from segcat.spark_integration.version_stream import VersionStreamReader, _release_on_sigterm

log = logging.getLogger("segcat.spark.stream")

DEFAULT_MAX_FILES = 1000
"""Delta's ``maxFilesPerTrigger`` default."""
OFFSET_FORMAT = 1
"""``sourceVersion`` of the offsets this planner writes; a checkpoint of another is refused."""


# ---------------------------------------------------------------------------- offsets


@dataclass(frozen=True, order=True)
class Position:
    """Where the stream is: ``(version, snapshot, index)`` orders positions (module docstring)."""

    version: int
    done: bool
    """True: every accepted version ≤ ``version`` emitted; False: inside its initial snapshot."""
    index: int = -1
    """Inside the snapshot: the last of its files emitted (-1: none)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "sourceVersion": OFFSET_FORMAT,
            "version": self.version,
            "index": -1 if self.done else self.index,
            "isStartingVersion": not self.done,
        }

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Position:
        """An offset Spark journaled; ``InvalidArgument`` for one this planner did not write."""
        fmt = raw.get("sourceVersion")
        version, index, starting = raw.get("version"), raw.get("index"), raw.get("isStartingVersion")
        if fmt is None and set(raw) == {"version"}:
            raise InvalidArgument(
                "this checkpoint was written by a stream of the table's versions (view=versions); "
                "read it with .option('view', 'versions') or start the rows stream with a new checkpoint"
            )
        if fmt != OFFSET_FORMAT:
            raise InvalidArgument(
                f"offset format {fmt!r} of the segcat rows stream is not one this version reads "
                f"({OFFSET_FORMAT}); use the segcat release that wrote the checkpoint, or a new checkpoint"
            )
        if not (
            isinstance(version, int)
            and isinstance(index, int)
            and isinstance(starting, bool)
            and version >= -1
            and index >= -1
        ):
            raise InvalidArgument(f"not an offset of the segcat rows stream: {str(raw)[:200]}")
        return cls(version, not starting, index if starting else -1)


PLANNER_READ_ROWS = 10_000
"""A batch of one task and at most this many rows is read by the planner (module docstring)."""


# ---------------------------------------------------------------------------- the planner


class RowStreamReader(VersionStreamReader):
    """The rows stream's planner (offset methods) and its tasks' reader (``read``).

    Extends the version stream's planner for how far to judge the log and for SIGTERM; Spark
    sees it as that reader's kind (``_SimpleStreamReaderWrapper``: admission control and
    ``Trigger.AvailableNow`` through ``simple_reader``), but ``getCache`` hands no rows over
    with the plan, so every batch is read by its tasks, as Arrow batches."""

    def __init__(self, options: SourceOptions, at: RowsAt) -> None:
        if options.get("maxVersionsPerTrigger") is not None:
            raise InvalidArgument(
                "maxVersionsPerTrigger bounds the stream of versions (view=versions); the rows "
                "stream takes maxFilesPerTrigger, maxBytesPerTrigger and maxRowsPerTrigger"
            )
        super().__init__(options)
        self._at = at
        self._small: tuple[Position, Position, tuple[FileRead, ...]] | None = None
        """(start, end, files) of the small batch planned last, for ``getCache``."""
        self._schema = spark_types.parse_schema(at.schema) or {"type": "struct", "fields": []}
        if not self._schema["fields"]:
            raise StreamSchemaChanged(
                f"{options.table} has no files at version {at.version}, so no schema to stream its rows "
                "with: give the stream one (spark.readStream.schema(...)) or start it after the first write"
            )
        self._max_files = _positive(options, "maxFilesPerTrigger", DEFAULT_MAX_FILES)
        self._max_bytes = _positive(options, "maxBytesPerTrigger", None)
        self._max_rows = _positive(options, "maxRowsPerTrigger", None)
        self._skip_changes = options.bool_option("skipChangeCommits", False)
        self._ignore_deletes = options.bool_option("ignoreDeletes", False)
        self._fail_on_loss = options.bool_option("failOnDataLoss", True)
        if options.get("startingVersion") is not None and options.get("startingTimestamp") is not None:
            raise InvalidArgument("give startingVersion or startingTimestamp, not both")
        self._goal: Position | None = None
        """Trigger.AvailableNow: the last position to read (the head when the query started)."""
        self._lost_snapshot: int | None = None
        """failOnDataLoss=false: the initial snapshot found no longer readable (read as empty)."""
        self._leases: list[tuple[Position, HeldLease]] = []
        """Leases of the batches planned and not yet committed, by each batch's end."""
        self._skipped_to: dict[int, int] = {}
        """failOnDataLoss=false: a position no longer in the log → the earliest one that exists."""

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state["_leases"] = []
        state["_small"] = None  # the partitions carry their files
        return state

    def _follow(self) -> TrackingFollower:
        if self._follower is None:
            self._follower = TrackingFollower(self._options.config(), self._options.name, schemas=False)
        assert isinstance(self._follower, TrackingFollower)
        return self._follower

    # ------------------------------------------------------------------ where to start

    def initialOffset(self) -> dict[str, Any]:
        follower = self._follow()
        if self._options.get("startingVersion") is not None:
            return Position(self._options.starting_after(follower), True).to_json()
        timestamp = self._options.get("startingTimestamp")
        if timestamp is not None:
            at = as_of_ms(int(timestamp) if timestamp.strip().isdigit() else timestamp)
            assert at is not None
            with load_catalog(self._options.config()) as catalog:
                try:  # the versions committed at or after the timestamp, as Delta reads them
                    before = catalog.load_table(self._options.name).resolve_version(as_of=at - 1)
                except VersionNotFound:
                    before = -1
            return Position(before, True).to_json()
        return Position(self._at.version, False).to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxFiles(self._max_files) if self._max_files else ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._goal = Position(self._follow().last_accepted(), True)

    # ------------------------------------------------------------------ planning

    def _snapshot_reads(self, version: int) -> tuple[FileRead, ...]:
        """The initial snapshot's files, in their fixed order (cached by the follower); a snapshot
        no longer readable is ``StreamDataLoss``, or (``failOnDataLoss=false``) empty."""
        if self._lost_snapshot == version:
            return ()
        try:
            return self._follow().snapshot(version).reads
        except VersionNotFound as exc:
            if self._fail_on_loss:
                raise StreamDataLoss(
                    f"the stream of {self._options.table} was reading the rows of version {version} "
                    f"and that version is no longer readable ({exc}); set failOnDataLoss=false to "
                    "resume at the earliest version that exists"
                ) from None
            log.warning(
                "the stream of %s skips the rest of the rows of version %s: %s",
                self._options.table,
                version,
                exc,
            )
            self._lost_snapshot = version
            return ()

    def _versions(self, after: int, upto: int) -> list[VersionFiles]:
        """The accepted versions in (``after``, ``upto``]; a position the log no longer holds is
        ``StreamDataLoss``, or (``failOnDataLoss=false``) skipped to the earliest that exists."""
        follower = self._follow()
        start = self._skipped_to.get(after, after)
        try:
            return follower.files_after(start, upto)
        except (LogPruned, ArchiveGap, VersionNotFound) as exc:
            oldest = follower.oldest_readable()
            if self._fail_on_loss or oldest is None or oldest <= start:
                raise StreamDataLoss(
                    f"the stream of {self._options.table} stopped after version {after} and the log no "
                    f"longer holds the versions after it ({exc}); set failOnDataLoss=false to resume at "
                    "the earliest version that exists"
                ) from None
        log.warning(
            "the stream of %s stopped after version %s, which the log no longer holds: versions %s to %s "
            "are skipped (failOnDataLoss=false)",
            self._options.table,
            after,
            after + 1,
            oldest,
        )
        self._skipped_to[after] = oldest
        return follower.files_after(oldest, upto)

    def _admit(self, vf: VersionFiles) -> bool:
        """Whether ``vf``'s added rows go into the stream; the typed error when they must not."""
        kind = vf.kind
        if kind in (VersionKind.COMPACT, VersionKind.METADATA):
            return False
        if kind is not VersionKind.APPEND:
            if self._skip_changes or (self._ignore_deletes and kind is VersionKind.DELETE_ONLY):
                return False
            skip = "skipChangeCommits=true" + (
                " or ignoreDeletes=true" if kind is VersionKind.DELETE_ONLY else ""
            )
            raise StreamChangeCommit(
                f"version {vf.version} of {self._options.table} ({vf.operation}) removes rows, which a "
                f"stream of the table's rows cannot carry; set {skip} to skip such versions, or read the "
                "change feed (readChangeFeed=true) to receive its deletes "
                f"(options: skipChangeCommits={str(self._skip_changes).lower()}, "
                f"ignoreDeletes={str(self._ignore_deletes).lower()})"
            )
        for read in vf.inserted:
            problem = self._misfit(read)
            if problem is not None:
                raise StreamSchemaChanged(
                    f"version {vf.version} of {self._options.table} ({vf.operation}) wrote {read.uri} with "
                    f"{problem}, which the stream's schema (the table's when the query started) cannot "
                    "carry; restart the query to pick up the new schema"
                )
        return True

    def _misfit(self, read: FileRead) -> str | None:
        """What of ``read``'s recorded schema the stream's schema lacks (None: it fits, or the file
        recorded none, and ``read_rows`` judges its columns as it reads them)."""
        parsed = spark_types.parse_schema(read.file_schema)
        if parsed is None:
            return None
        try:
            merged = spark_types.merge_structs(self._schema, parsed)
        except spark_types.Conflict as conflict:
            return (
                f"column {conflict.path!r} as {spark_types.simple_string(conflict.right)} "
                f"(the stream reads {spark_types.simple_string(conflict.left)})"
            )
        ours = {f["name"].lower(): f["type"] for f in self._schema.get("fields", [])}
        for field in merged.get("fields", []):
            name = field["name"]
            if name.lower() not in ours:
                return f"a new column {name!r}"
            if field["type"] != ours[name.lower()]:
                return f"column {name!r} as {spark_types.simple_string(field['type'])}"
        return None

    def _judged_upto(self, after: int) -> int:
        """How far to look for versions after ``after``: the AvailableNow goal, else as far as
        the log is known to go (the version stream's judgement: Redis' head as a hint, Kafka's end)."""
        if self._goal is not None:
            return self._goal.version
        self._versions(after, after)  # rebuilds the image at ``after``, or says it is lost
        follower = self._follow()
        self._judge_to_end(follower, follower.start)
        return follower.judged

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        position = Position.parse(start)
        self._release_upto(position)
        if self._goal is not None and position >= self._goal:
            return position.to_json()
        budget = Budget.of(limit, self._max_files, self._max_bytes, self._max_rows)
        end = position
        if not position.done:
            reads = self._snapshot_reads(position.version)
            index = position.index + budget.take((read,) for read in reads[position.index + 1 :])
            if index + 1 < len(reads):
                return Position(position.version, False, index).to_json()
            end = Position(position.version, True)
            if budget.spent:
                return end.to_json()
        upto = self._judged_upto(end.version)
        for vf in self._versions(end.version, upto):
            try:
                emits = self._admit(vf)
            except (StreamChangeCommit, StreamSchemaChanged):
                if end > position:
                    break  # deliver what comes before it; the next trigger fails on it
                raise
            if emits and not budget.admit(vf.inserted):
                break
            end = Position(vf.version, True)
        return end.to_json()

    def reportLatestOffset(self) -> dict[str, Any] | None:
        known = None if self._follower is None else self._follower.known_last_accepted()
        return None if known is None else Position(known, True).to_json()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        first, last = Position.parse(start), Position.parse(end)
        if last <= first:
            return []
        reads: list[FileRead] = []
        leased: set[int] = set()
        after = first.version
        if not first.done:
            snapshot = self._snapshot_reads(first.version)
            stop = last.index if not last.done and last.version == first.version else len(snapshot) - 1
            reads.extend(snapshot[first.index + 1 : stop + 1])
            leased.add(first.version)
        emitted: list[tuple[int, tuple[FileRead, ...]]] = []
        if last.done and last.version > after:
            for vf in self._versions(after, last.version):
                if self._admit(vf):
                    emitted.append((vf.version, vf.inserted))
                    reads.extend(vf.inserted)
            leased.add(last.version)
        dropped = self._follow().dropped
        for version, inserted in emitted:
            if any(dropped.get(r.uri, last.version + 1) <= last.version for r in inserted):
                leased.add(version)  # its files are gone from the end version: lease it too
        self._hold_all(last, sorted(leased))
        reads = self._present(reads, first, last)
        packed = pack(reads)
        small = len(packed) == 1 and sum(r.row_count for r in reads) <= PLANNER_READ_ROWS
        self._small = (first, last, packed[0].reads) if small else None
        return packed

    def _present(self, reads: list[FileRead], first: Position, last: Position) -> list[FileRead]:
        """``reads`` whose files exist; a file a later version dropped may have been vacuumed while
        the stream was down (files live at the end are never vacuumed): ``StreamDataLoss``, or with
        ``failOnDataLoss=false`` the file is left out with a warning naming it."""
        dropped = self._follow().dropped
        config = self._options.config()
        missing = []
        for read in reads:
            if read.uri not in dropped:
                continue
            fs, path = filesystem(read.uri, config.s3_endpoint, config.s3_region)
            if fs.get_file_info(path).type == pa.fs.FileType.NotFound:
                missing.append(read)
        if not missing:
            return reads
        names = ", ".join(f"{r.uri} (version {r.added_version})" for r in missing[:5])
        more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        if self._fail_on_loss:
            raise StreamDataLoss(
                f"files the stream of {self._options.table} must read between {first.to_json()} and "
                f"{last.to_json()} were vacuumed while it was stopped: {names}{more}; set "
                "failOnDataLoss=false to skip them"
            )
        log.warning(
            "the stream of %s skips the rows of vacuumed files (failOnDataLoss=false): %s%s",
            self._options.table,
            names,
            more,
        )
        gone = {r.uri for r in missing}
        return [r for r in reads if r.uri not in gone]

    def getCache(self, start: dict[str, Any], end: dict[str, Any]) -> Iterator[Any] | None:
        """The rows of the small batch ``partitions`` just planned, read here and handed to the JVM
        with the plan; None for anything else (its tasks read it)."""
        small = self._small
        self._small = None
        if small is None or (small[0], small[1]) != (Position.parse(start), Position.parse(end)):
            return None
        batches = list(read_partition(small[2], arrow_schema(self._at.schema), self._options.config()))
        return iter(batches) if batches else None

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FilesPartition)
        yield from read_partition(partition.reads, arrow_schema(self._at.schema), self._options.config())

    # ------------------------------------------------------------------ leases

    def _hold_all(self, end: Position, versions: Sequence[int]) -> None:
        """Lease ``versions`` until the batch ending at ``end`` is committed."""
        held = {lease.version for pos, lease in self._leases if pos == end and lease.held}
        wanted = [v for v in versions if v >= 0 and v not in held]
        if not wanted:
            return
        store = self._store()
        for version in wanted:
            lease = try_hold(store, self._options.name, version, holder=default_holder("spark-rows"))
            if lease is None:
                return  # Redis does not answer: one warning said the stream runs without leases
            self._leases.append((end, lease))
        _release_on_sigterm(self)

    def _release_upto(self, position: Position) -> None:
        """Let go the leases of the batches that end at or before ``position`` (Spark is past them)."""
        keep = []
        for end, lease in self._leases:
            if end <= position:
                lease.release()
            else:
                keep.append((end, lease))
        self._leases = keep

    def _let_go(self) -> None:
        for _, lease in self._leases:
            lease.release()
        self._leases = []
        super()._let_go()

    def commit(self, end: dict[str, Any]) -> None:
        position = Position.parse(end)
        self._release_upto(position)
        if position.done and self._follower is not None:
            self._follow().forget(position.version)  # the initial snapshot too, once done


def _positive(options: SourceOptions, key: str, default: int | None) -> int | None:
    value = options.int_option(key)
    if value is None:
        return default
    if value < 1:
        raise InvalidArgument(f"{key} must be ≥ 1, not {value}")
    return value
