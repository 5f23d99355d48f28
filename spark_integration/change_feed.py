"""``.option("readChangeFeed", "true")``: the table's change feed as a Spark batch or stream.

Rows are the table's columns, then ``_change_type`` (``insert`` / ``delete``), ``_commit_version``
(BIGINT) and ``_commit_timestamp`` (TIMESTAMP, the broker's time of the version), as Delta's
Change Data Feed. A version inserts the rows of the files it adds and deletes the rows of the
files it drops and the rows its tombstones remove; a ``COMPACT`` moves no row and emits none.
Applying the feed of (a, b] to the rows of version a gives exactly the rows of version b.

What each version did is the core's (``catalog.read.changes``): the planner derives every
version's ``VersionFiles`` from the log, Spark's partitions carry their ``FileRead``\\ s (plain
values), and each task reads them with the core's ``change_batches`` as Arrow record batches,
the same code ``Table.changes`` reads with.

Batch (``spark.read``): ``startingVersion`` or ``startingTimestamp`` (required), ``endingVersion``
or ``endingTimestamp`` (default: the head). The range is planned when Spark plans the query
(``Table.changes``: its checks and errors, a lease while planning); its columns are the table's
at the end of the range, fixed when the DataFrame is made, as Delta's feed takes the end's
schema. The stream is ``change_stream``.

**Decision — leases of a batch read.** The planning process takes a version lease on the
version before the range with a TTL and no renewal (a renewing thread would outlive the read in
Spark's reused Python workers); each task holds its own renewed lease while it reads. Vacuum
keeps every file of every version at or after a leased one, so the files of the whole range are
kept from planning until the last task ends, unless a task starts more than the TTL
(``DEFAULT_TTL_S``) after planning.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from segcat import DataFileMissing, InvalidArgument, ServiceUnavailable, Table, VersionNotFound, load_catalog
from segcat.catalog.protocol import spark_types
from segcat.catalog.read.changes import (
    CHANGE_COLUMNS,
    FileRead,
    VersionFiles,
    VersionKind,
    arrow_schema,
    change_batches,
    reads_schema,
    snapshot_reads,
)
from segcat.catalog.read.lease import DEFAULT_TTL_S, HeldLease, lease_store, try_hold
from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.redis.leases import default_holder
from segcat.spark_integration.change_options import FeedOptions
from segcat.spark_integration.read_options import SourceOptions
from segcat.spark_integration.stream_planning import InitialSnapshot

PARTITION_BYTES = 128 * 2**20
"""A task reads files up to this many bytes (Spark's ``maxPartitionBytes``), at least one file."""
PARTITION_FILES = 64
"""…and at most this many files (small files would otherwise make one slow task)."""

SNAPSHOT_OPERATION = "SNAPSHOT"
"""The operation of the initial snapshot's pseudo-version (its rows are inserts at the head)."""

log = logging.getLogger("segcat.spark.changes")


def reads_of(vf: VersionFiles) -> tuple[FileRead, ...]:
    """The files a version's rows are read from (none for a compaction or a metadata version)."""
    return (*vf.deleted, *vf.inserted) if vf.changes_rows else ()


def snapshot_version(snapshot: InitialSnapshot, first: int, last: int) -> VersionFiles:
    """Files ``first`` to ``last`` (excluded) of the initial snapshot, as a version of inserts."""
    return VersionFiles(
        snapshot.version,
        snapshot.timestamp_ms,
        SNAPSHOT_OPERATION,
        VersionKind.APPEND,
        snapshot.reads[first:last],
        (),
        snapshot.schema,
    )


class ChangePartition(InputPartition):
    """The reads of one task: slices of consecutive versions' ``VersionFiles``, and the version the
    task leases while it reads (the one before the first version of its batch)."""

    def __init__(self, index: int, versions: Sequence[VersionFiles], horizon: int) -> None:
        super().__init__(index)
        self.versions = tuple(versions)
        self.horizon = horizon


def plan_partitions(versions: Sequence[VersionFiles], horizon: int) -> list[ChangePartition]:
    """The tasks of a batch: each version's reads (deletes, then inserts) in order, cut into
    partitions by ``PARTITION_BYTES`` / ``PARTITION_FILES``; versions that move no row are left out."""
    parts: list[ChangePartition] = []
    current: list[VersionFiles] = []
    files = size = 0

    def close() -> None:
        nonlocal current, files, size
        if current:
            parts.append(ChangePartition(len(parts), current, horizon))
        current, files, size = [], 0, 0

    for vf in versions:
        for read in reads_of(vf):
            if files and (files >= PARTITION_FILES or size + read.size_bytes > PARTITION_BYTES):
                close()
            deleted = read in vf.deleted
            current.append(
                dataclasses.replace(
                    vf, inserted=() if deleted else (read,), deleted=(read,) if deleted else ()
                )
            )
            files += 1
            size += read.size_bytes
    close()
    return parts


def read_partition(
    partition: InputPartition, schema: pa.Schema, options: SourceOptions, fail_on_data_loss: bool
) -> Iterator[pa.RecordBatch]:
    """A task: its reads as the feed's Arrow batches, under a version lease of its own.

    ``DataFileMissing`` (a file vacuumed away) fails the task unless ``failOnDataLoss=false``,
    which skips that file after a warning (its rows are lost to this reader)."""
    assert isinstance(partition, ChangePartition)
    config = options.config()
    store: RedisStore | None = None
    lease: HeldLease | None = None
    if partition.horizon >= 0:
        store = RedisStore.from_config(config)
        lease = try_hold(store, options.name, partition.horizon, holder=default_holder("spark-changes"))
    try:
        for vf in partition.versions:
            try:
                yield from change_batches(vf, schema, config)
            except DataFileMissing as exc:
                if fail_on_data_loss:
                    raise DataFileMissing(
                        f"version {vf.version} of {options.table}: {exc}. Set failOnDataLoss=false to skip "
                        "files that are gone (their rows are then missing from the feed)"
                    ) from None
                log.warning(
                    "change feed of %s: skipping a file (failOnDataLoss=false): %s", options.table, exc
                )
    finally:
        if lease is not None:
            lease.release()
        if store is not None:
            store.close()


def spark_schema(table: pa.Schema) -> StructType:
    """The feed's Spark schema: ``table``'s columns, then the three change columns."""
    full = pa.schema([*table, *CHANGE_COLUMNS])
    return StructType.fromJson(spark_types.schema_from_arrow(full))


def table_columns(schema: StructType) -> pa.Schema:
    """The table's part of a feed schema Spark hands back (a user-given one included), as Arrow."""
    names = set(CHANGE_COLUMNS.names)
    missing = names - set(schema.fieldNames())
    if missing:
        raise InvalidArgument(f"the change feed's schema needs the columns {', '.join(sorted(missing))}")
    table = StructType([f for f in schema.fields if f.name not in names])
    return arrow_schema(json.dumps(table.jsonValue()))


def read_schema(reads: Sequence[FileRead], recorded: str | None, options: SourceOptions) -> pa.Schema:
    """The schema the feed's files are read with: theirs merged, else the table's recorded one."""
    schema = reads_schema(reads, options.config())
    if len(schema) == 0 and recorded is not None:
        schema = arrow_schema(recorded)
    if len(schema) == 0:
        raise InvalidArgument(
            f"table {options.table} has no columns yet (no data file and no recorded schema): "
            "write data or record its schema before reading its change feed"
        )
    return schema


class ChangeFeedSource:
    """The change feed side of ``SegcatDataSource``: plans, then hands Spark the readers.

    Lives on the data source object, which pyspark pickles after ``schema`` and before ``reader``,
    so a batch range ``schema`` had to plan is the one ``reader`` reads (pinned); otherwise the
    range is planned when Spark plans the read (``reader``)."""

    def __init__(self, options: SourceOptions) -> None:
        self._options = options
        self._schema: pa.Schema | None = None
        """The table's columns the feed reads with (``schema``)."""
        self._versions: tuple[VersionFiles, ...] | None = None
        self._first = 0
        self._schema_version = -1
        """The version whose table schema the feed's schema is (a stream fails on a later change)."""

    def _table(self) -> Table:
        return load_catalog(self._options.config()).load_table(self._options.name)

    def schema(self) -> StructType:
        """The feed's columns: the table's at the end of the range (the head for a stream, or
        without ``endingVersion`` / ``endingTimestamp``), as Delta's feed takes the end's schema,
        then the change columns. A version without files and without a recorded schema takes the
        range's files' (the range is then planned here, and pinned for the batch read).

        pyspark asks before it knows whether a batch or a stream reads: only a range with an end
        (a batch) is checked here; a start past the head is left to the reader (a stream may start
        at the next version; a batch read then fails there)."""
        feed = FeedOptions.parse(self._options, streaming=True)
        table = self._table()
        last = None
        has_start = feed.starting_version is not None or feed.starting_ms is not None
        if has_start and (feed.ending_version is not None or feed.ending_ms is not None):
            last = self._bounds(table, FeedOptions.parse(self._options, streaming=False))[1]
        snapshot = table.snapshot(last)
        reads = list(snapshot_reads(snapshot))
        if not reads and snapshot.schema is None and has_start:
            self._plan_batch()
            assert self._versions is not None
            reads = [r for vf in self._versions for r in reads_of(vf)]
        self._schema = read_schema(reads, snapshot.schema, self._options)
        self._schema_version = snapshot.version
        return spark_schema(self._schema)

    def _bounds(self, table: Table, feed: FeedOptions) -> tuple[int, int]:
        """The batch's first and last version (``startingTimestamp``: the first version at or after
        it; ``endingTimestamp``: the last at or before it, as Delta resolves them)."""
        head = table.head_offset()
        first = feed.starting_version
        if feed.starting_ms is not None:
            first = table.resolve_version(as_of=feed.starting_ms - 1) + 1
            if first > head:
                raise VersionNotFound(
                    f"startingTimestamp is after the last version of {self._options.table} "
                    f"(version {head}): no change is that recent"
                )
        last = feed.ending_version
        if feed.ending_ms is not None:
            last = table.resolve_version(as_of=feed.ending_ms)
            assert first is not None
            if last < first:
                raise InvalidArgument(
                    f"endingTimestamp is before the first version at or after startingTimestamp "
                    f"({first}): the range is empty"
                )
        assert first is not None
        if last is not None and first > last:
            raise InvalidArgument(
                f"startingVersion {first} is after endingVersion {last}: the range is empty"
            )
        for option, version in (("startingVersion", first), ("endingVersion", last)):
            if version is not None and version > head:
                raise VersionNotFound(
                    f"{option} {version} is past the head of {self._options.table} (its log ends at "
                    f"version {head})"
                )
        return first, head if last is None else last

    def _plan_batch(self) -> None:
        feed = FeedOptions.parse(self._options, streaming=False)
        table = self._table()
        first, last = self._bounds(table, feed)
        with table.changes(first, last) as planned:
            self._versions = planned.versions
        self._first = first

    def reader(self, schema: StructType) -> DataSourceReader:
        self._options.check(streaming=False)
        feed = FeedOptions.parse(self._options, streaming=False)
        if self._versions is None:
            self._plan_batch()
        assert self._versions is not None
        return ChangeBatchReader(
            self._options, self._versions, table_columns(schema), self._first - 1, feed.fail_on_data_loss
        )

    def stream_reader(self, schema: StructType) -> DataSourceStreamReader:
        from segcat.spark_integration.change_stream import ChangeStreamReader

        self._options.check(streaming=True)
        feed = FeedOptions.parse(self._options, streaming=True)
        return ChangeStreamReader(self._options, feed, table_columns(schema), self._schema_version)


class ChangeBatchReader(DataSourceReader):
    """A batch read of the pinned range: one partition per group of files."""

    def __init__(
        self,
        options: SourceOptions,
        versions: Sequence[VersionFiles],
        schema: pa.Schema,
        before: int,
        fail_on_data_loss: bool,
    ) -> None:
        self._options = options
        self._versions = tuple(versions)
        self._schema = schema
        self._horizon = max(before, 0)
        self._fail = fail_on_data_loss

    def partitions(self) -> Sequence[InputPartition]:
        """Planned in a Python worker of the driver: a lease with a TTL covers the tasks' start."""
        try:
            store = RedisStore.from_config(self._options.config())
            try:
                lease_store(store).acquire(
                    self._options.table, self._horizon, DEFAULT_TTL_S, default_holder("spark-changes-plan")
                )
            finally:
                store.close()
        except ServiceUnavailable as exc:  # leases never fail a read (catalog.read.lease): warn, go on
            log.warning("change feed of %s read without a planning lease: %s", self._options.table, exc)
        return plan_partitions(self._versions, self._horizon) or [ChangePartition(0, (), -1)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self._schema, self._options, self._fail)
