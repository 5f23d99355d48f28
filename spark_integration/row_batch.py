"""The ``segcat`` source's rows as a batch: ``spark.read.format("segcat").load("ns.t")``.

The rows of one version (the head, ``versionAsOf`` or ``timestampAsOf``): its live files, each
minus the rows the tombstones newer than it delete (``catalog.read.changes.snapshot_reads``),
read by the core's ``read_rows`` as Arrow record batches conformed to the table's schema, the
same functions the rows stream, the change feed and ``Table.changes`` read through. The schema
is the table's (every live file's, merged with the widenings ``si.read`` allows), declared
when Spark asks the source for it; the version is pinned then too, so the plan and the rows
come from one version even while commits land.

**Decision — files packed into partitions.** One task per file would cost a Python task per
small file; files are packed, in the snapshot's order, into partitions of up to
``TARGET_PARTITION_BYTES`` (each file counting at least ``OPEN_COST_BYTES``, as Spark's own
file sources count ``spark.sql.files.openCostInBytes``), and never fewer partitions than files
or ``MIN_PARTITIONS`` allow, so a small table still reads in parallel. A Python task costs far
more to start than a file costs to open inside one (``bench.spark_overhead``'s backfill floors
read the same files in more and fewer tasks), so a file counts for less than Spark's 4 MiB and
the tasks are fewer and larger than the JVM reader's over the same files.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from segcat import Config, InvalidArgument, load_catalog
from segcat.catalog.protocol import spark_types
from segcat.catalog.read.as_of import as_of_ms
from segcat.catalog.read.changes import (
    FileRead,
    arrow_schema,
    merged_schema,
    read_rows,
    reads_schema,
    snapshot_reads,
)
from segcat.catalog.read.lease import try_hold
from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.redis.leases import default_holder
from segcat.spark_integration.read_options import SourceOptions

if TYPE_CHECKING:
    import pyarrow as pa

TARGET_PARTITION_BYTES = 128 * 1024 * 1024
"""Spark's ``spark.sql.files.maxPartitionBytes`` default."""
OPEN_COST_BYTES = 256 * 1024
"""What opening one file is worth inside a task (Spark's ``openCostInBytes`` is 4 MiB, sized
for the JVM's tasks)."""
MIN_PARTITIONS = 8
"""Files are spread over at least this many tasks when there are that many: a small table
still keeps a few executor cores busy."""

EMPTY_SCHEMA = json.dumps({"type": "struct", "fields": []})


@dataclass(frozen=True)
class RowsAt:
    """The version a rows read is pinned to and the schema its rows are declared with (Spark's JSON)."""

    version: int
    schema: str


class FilesPartition(InputPartition):
    """Files one task reads, in order (plain values: pickles to the executor)."""

    def __init__(self, index: int, reads: Sequence[FileRead]) -> None:
        super().__init__(index)
        self.reads = tuple(reads)


def table_schema(reads: Sequence[FileRead], config: Config) -> str:
    """The schema (Spark's JSON) the rows of ``reads`` are read with: their recorded schemas merged,
    or, when a file recorded none (another writer's), every file's footer read and merged.
    ``IncompatibleSchema`` names a file of each side of a conflict."""
    if not reads:
        return EMPTY_SCHEMA
    recorded = merged_schema((r.uri, r.added_version, r.file_schema) for r in reads)
    if recorded is not None:
        return recorded
    return json.dumps(spark_types.schema_from_arrow(reads_schema(reads, config)), separators=(",", ":"))


def spark_schema(schema: str) -> StructType:
    parsed = StructType.fromJson(json.loads(schema))
    assert isinstance(parsed, StructType)
    return parsed


def pack(reads: Sequence[FileRead], partitions_at_least: int = MIN_PARTITIONS) -> list[FilesPartition]:
    """``reads`` in order, packed into partitions (module docstring)."""
    if not reads:
        return []
    total = sum(max(r.size_bytes, OPEN_COST_BYTES) for r in reads)
    target = max(OPEN_COST_BYTES, min(TARGET_PARTITION_BYTES, -(-total // max(partitions_at_least, 1))))
    out: list[FilesPartition] = []
    current: list[FileRead] = []
    size = 0
    for read in reads:
        cost = max(read.size_bytes, OPEN_COST_BYTES)
        if current and size + cost > target:
            out.append(FilesPartition(len(out), current))
            current, size = [], 0
        current.append(read)
        size += cost
    if current:
        out.append(FilesPartition(len(out), current))
    return out


def read_partition(reads: Sequence[FileRead], schema: pa.Schema, config: Config) -> Iterator[pa.RecordBatch]:
    """The rows of ``reads``, conformed to ``schema``: what every rows task yields to Spark."""
    for read in reads:
        yield from read_rows(read, schema, config)


def pin_version(options: SourceOptions) -> RowsAt:
    """The version a rows read reads (``versionAsOf``, ``timestampAsOf`` or the head) and its schema."""
    version = options.version_option("versionAsOf")
    timestamp = options.get("timestampAsOf")
    if version is not None and timestamp is not None:
        raise InvalidArgument("give versionAsOf or timestampAsOf, not both")
    if isinstance(version, int) and version < 0:
        raise InvalidArgument(f"versionAsOf must be ≥ 0, not {version}")
    at = None if timestamp is None else as_of_ms(int(timestamp) if timestamp.isdigit() else timestamp)
    config = options.config()
    with load_catalog(config) as catalog:
        snapshot = catalog.load_table(options.name).snapshot(version, as_of=at)
        return RowsAt(snapshot.version, table_schema(snapshot_reads(snapshot), config))


class RowsReader(DataSourceReader):
    """Batch read of one version's rows: one task per pack of files, Arrow batches out.

    Each task holds a version lease while it reads (vacuum keeps the version's files; without
    Redis it reads unprotected, after one warning, as ``si.read`` does)."""

    def __init__(self, options: SourceOptions, at: RowsAt) -> None:
        for key in ("startingVersion", "endingVersion"):
            if options.get(key) is not None:
                raise InvalidArgument(
                    f"{key} bounds the history (view=versions) or the change feed (readChangeFeed), "
                    "not one version's rows: use versionAsOf or timestampAsOf"
                )
        self._options = options
        self._at = at

    def partitions(self) -> Sequence[InputPartition]:
        with load_catalog(self._options.config()) as catalog:
            reads = snapshot_reads(catalog.load_table(self._options.name).snapshot(self._at.version))
        return pack(reads)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, FilesPartition)
        config = self._options.config()
        schema = arrow_schema(self._at.schema)
        redis = RedisStore.from_config(config) if config.redis_url else None
        lease = try_hold(redis, self._options.name, self._at.version, holder=default_holder("spark-rows"))
        try:
            yield from read_partition(partition.reads, schema, config)
        finally:
            if lease is not None:
                lease.release()
            if redis is not None:
                redis.close()
