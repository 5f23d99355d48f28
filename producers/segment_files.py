"""Executor-side Parquet writing: one file per partition key per task, described by its footer.

This runs inside ``mapInArrow`` on the executors. It picks its own file names (unique, so a
retried task or a losing writer can never overwrite a file someone else committed), writes
with pyarrow, reads the stats back from the footer it just wrote (``segment_from_parquet``),
adds what only the rows tell (float columns' stats with NaN counts, the Bloom filter:
``RowFacts``) and returns one small JSON row per file. The driver then collects only those
rows, never the data, and publishes them in one commit. A file is complete before its row leaves the
task (temp name + rename locally, one upload on object stores), and until the commit is
accepted nothing references it: a failed or losing job leaves orphans for vacuum, never a
half-visible table.

Every file also names, in its Parquet key-value metadata (``segcat.table``,
``segcat.commit_id``, ``segcat.writer_id``: ``PROVENANCE_KEYS``), the commit that meant to add
it, so a file found on storage can be traced back to its commit (``read_provenance``), whether
that commit was accepted, rejected or never sent.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import json
import secrets
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from segcat.catalog.protocol import bloom
from segcat.catalog.protocol.column_types import column_type
from segcat.catalog.protocol.jsonio import segment_to_json
from segcat.catalog.protocol.model import ColumnStats, ColumnType, Segment
from segcat.catalog.storage.objectstore import TEMP_MARKER, filesystem
from segcat.catalog.storage.parquet_stats import segment_from_parquet
from segcat.catalog.storage.provenance import PROVENANCE_KEYS, read_footer_provenance

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
"""Partition name and directory for a null (or empty) partition value, as Hive and Spark spell it."""

GROUP_COLUMN = "_segcat_group"
"""Hidden column a compaction uses to route the rows of one output file to one task."""

OUTPUT_SCHEMA = "segment string"
"""What ``write_files`` returns to the driver: one JSON-encoded ``Segment`` per file."""

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")

MAX_NAME_BYTES = 255
"""The longest file or directory name most filesystems take (ext4, XFS, APFS; HDFS by default)."""


@dataclass(frozen=True)
class FileSpec:
    """Everything a task needs to write segment files (pickled into the executors)."""

    root: str
    """The table root: a local directory or a URI (``s3://bucket/prefix/ns/t``)."""
    s3_endpoint: str | None = None
    s3_region: str | None = None
    key_columns: tuple[str, ...] = ()
    """Rows are split into files by these columns (the partition columns)."""
    hidden_columns: tuple[str, ...] = ()
    """Columns used for routing only, never written."""
    groups: Mapping[int, tuple[str | None, str]] = field(default_factory=dict)
    """Compaction: group id → (partition name, directory) of its output file."""
    bloom_column: str | None = None
    max_rows_per_file: int | None = None
    schema_json: str | None = None
    """The Spark schema of the written rows, recorded in each segment."""
    table: str | None = None
    """Provenance: the qualified table name the files are written for."""
    commit_id: str | None = None
    """Provenance: the id of the commit that will add the files (minted before they are written)."""
    writer_id: str | None = None
    """Provenance: the id of the writer (``Table.writer_id``) that will publish that commit."""

    def provenance(self) -> dict[str, str]:
        """The Parquet key-value metadata every file of this spec carries (fields that are None omitted)."""
        values = {"table": self.table, "commit_id": self.commit_id, "writer_id": self.writer_id}
        return {PROVENANCE_KEYS[k]: v for k, v in values.items() if v is not None}


# ---------------------------------------------------------------------------- partition names


def value_text(value: Any) -> str:
    """A partition value as text: ISO dates and times, lower-case booleans, nulls as Hive does."""
    if value is None or value == "":
        return NULL_PARTITION
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    return str(value)


def escape(text: str) -> str:
    """Percent-encode all but ``[A-Za-z0-9._-]``, so a value never makes a path trick or a glob."""
    out = []
    for ch in text:
        if ch in _SAFE:
            out.append(ch)
        else:
            out.extend(f"%{b:02X}" for b in ch.encode())
    return "".join(out)


def partition_name(columns: tuple[str, ...], values: tuple[Any, ...]) -> str | None:
    """The segment's partition: the value for one column (``2024-01-01``), ``a=1/b=x`` for several."""
    if not columns:
        return None
    if len(columns) == 1:
        return value_text(values[0])
    return "/".join(f"{c}={value_text(v)}" for c, v in zip(columns, values, strict=True))


def partition_directory(columns: tuple[str, ...], values: tuple[Any, ...]) -> str:
    """Hive-style directories under ``data/`` (``data/day=2024-01-01``), every component escaped."""
    parts = [_component(c, value_text(v)) for c, v in zip(columns, values, strict=True)]
    return "/".join(["data", *parts])


def _component(column: str, text: str) -> str:
    """``column=value`` escaped, or, when that exceeds ``MAX_NAME_BYTES``, its head and a digest.

    A long value (or a short one of many escaped bytes) made a directory name the filesystem
    refused, failing the job in an executor. The directory only places the files: readers take
    each file's partition from its segment and its rows from the file, never from the path
    (Spark's partition discovery stops at a file's own directory). So, as Delta's random
    prefixes do, the name may differ from the value: it keeps a readable head and a digest of
    the whole ``column``/value pair, marked by ``~``, which escaping never produces, so it can
    never equal the name of another value.
    """
    name = f"{escape(column)}={escape(text)}"
    if len(name) <= MAX_NAME_BYTES:  # escaped text is ASCII: characters are bytes
        return name
    digest = hashlib.sha256(f"{column}\0{text}".encode()).hexdigest()[:32]
    head = name[: MAX_NAME_BYTES - len(digest) - 1]
    cut = head.rfind("%", len(head) - 2)
    if cut != -1:  # never end inside a %XX escape
        head = head[:cut]
    return f"{head}~{digest}"


# ---------------------------------------------------------------------------- filesystems


def read_provenance(
    path: str,
    *,
    s3_endpoint: str | None = None,
    s3_region: str | None = None,
    fs: pafs.FileSystem | None = None,
) -> dict[str, str] | None:
    """The provenance a segment file records in its footer: ``{"table", "commit_id", "writer_id"}``.

    ``path`` is a local path or a URI (``s3://bucket/…/part-….parquet``), or a path in ``fs``'s
    own syntax when ``fs`` is given. Only the footer is read. Fields the file lacks are left out;
    None when it records none of them (a file segcat did not write, or wrote before provenance).
    """
    if fs is None:
        fs, path = filesystem(path, s3_endpoint, s3_region)
    return read_footer_provenance(fs, path)


def _single_upload(fs: pafs.FileSystem) -> bool:
    kinds = tuple(k for k in (getattr(pafs, "S3FileSystem", None), getattr(pafs, "GcsFileSystem", None)) if k)
    return isinstance(fs, kinds)


# ---------------------------------------------------------------------------- writing


class RowFacts:
    """What a footer cannot say, gathered from the rows as they are written.

    Floating-point columns are written *without* Parquet statistics, and their stats come
    from the rows instead: a footer's min/max skip NaN, and Spark's Parquet filter pushdown
    trusts them, so ``d > 5`` (true for NaN) would skip a row group holding NaN before
    segcat's own filter ever ran. The rows also give the NaN counts a footer lacks, and the
    canonical Bloom keys of the Bloom column (hashed by the column's type, catalog.bloom).
    """

    def __init__(self, schema: pa.Schema, bloom_column: str | None) -> None:
        self.order = {name: i for i, name in enumerate(schema.names)}
        self.floats: dict[str, _FloatStats] = {
            f.name: _FloatStats() for f in schema if column_type(f.type) is ColumnType.FLOAT
        }
        self.bloom_kind: ColumnType | None = None
        self.bloom_column = bloom_column
        if bloom_column is not None and bloom_column in schema.names:
            kind = column_type(schema.field(bloom_column).type)
            self.bloom_kind = None if kind is ColumnType.OTHER else kind
        self.keys: set[bytes] = set()

    def statistics_columns(self, schema: pa.Schema) -> bool | list[str]:
        """``ParquetWriter(write_statistics=…)``: every leaf column but the top-level floats."""
        if not self.floats:
            return True
        sink = pa.BufferOutputStream()
        pq.write_table(schema.empty_table(), sink)
        metadata = pq.read_metadata(pa.BufferReader(sink.getvalue()))
        paths = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
        return [path for path in paths if path not in self.floats]

    def observe(self, table: pa.Table) -> None:
        for name, stats in self.floats.items():
            stats.observe(table.column(name))
        if self.bloom_kind is not None and self.bloom_column is not None:
            self.keys |= bloom.keys(self.bloom_kind, table.column(self.bloom_column))

    def describe(self, segment: Segment) -> Segment:
        """``segment`` (from the footer) with the float columns' stats and the Bloom filter added."""
        stats = [s for s in segment.stats if s.column not in self.floats]
        stats += [s for name, f in self.floats.items() if (s := f.stats(name)) is not None]
        stats.sort(key=lambda s: self.order.get(s.column, len(self.order)))
        flt = None
        if self.bloom_kind is not None and self.bloom_column is not None and self.keys:
            flt = bloom.from_keys(self.bloom_column, self.keys)
        return replace(segment, stats=tuple(stats), bloom=flt)


class _FloatStats:
    """Min / max (NaN skipped), null and NaN counts of one float column, batch by batch."""

    def __init__(self) -> None:
        self.lo: float | None = None
        self.hi: float | None = None
        self.nulls = 0
        self.nans = 0
        self.known = True

    def observe(self, values: pa.ChunkedArray) -> None:
        try:
            doubles = pc.cast(values, pa.float64())
            nan = pc.is_nan(doubles)
            numbers = pc.min_max(pc.filter(doubles, pc.invert(pc.fill_null(nan, False))))
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid):
            self.known = False
            return
        self.nulls += values.null_count
        self.nans += int(pc.sum(nan).as_py() or 0)
        lo, hi = numbers["min"].as_py(), numbers["max"].as_py()
        if lo is not None and hi is not None:
            self.lo = lo if self.lo is None else min(self.lo, lo)
            self.hi = hi if self.hi is None else max(self.hi, hi)

    def stats(self, column: str) -> ColumnStats | None:
        if not self.known:
            return None
        return ColumnStats(column, ColumnType.FLOAT, self.lo, self.hi, self.nulls, self.nans)


class _OpenFile:
    """One segment file being written; ``close`` makes it whole and describes it."""

    def __init__(
        self,
        fs: pafs.FileSystem,
        base: str,
        directory: str,
        partition: str | None,
        schema: pa.Schema,
        spec: FileSpec,
    ) -> None:
        self.fs = fs
        self.spec = spec
        self.partition = partition
        self.segment_id = f"part-{uuid.uuid4().hex}"
        self.relative = f"{directory}/{self.segment_id}.parquet"
        self.final = f"{base}/{self.relative}"
        parent = self.final.rsplit("/", 1)[0]
        fs.create_dir(parent, recursive=True)
        direct = _single_upload(fs)
        self.target = (
            self.final
            if direct
            else f"{parent}/.{self.segment_id}.parquet{TEMP_MARKER}{secrets.token_hex(6)}"
        )
        self.stream = fs.open_output_stream(self.target)
        self.facts = RowFacts(schema, spec.bloom_column)
        stamped = schema.with_metadata({**(schema.metadata or {}), **_encoded(spec.provenance())})
        self.writer = pq.ParquetWriter(
            self.stream, stamped, compression="zstd", write_statistics=self.facts.statistics_columns(schema)
        )
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        self.writer.write_table(table)
        self.rows += table.num_rows
        self.facts.observe(table)

    def close(self) -> Segment:
        self.writer.close()
        self.stream.close()
        if self.target != self.final:
            self.fs.move(self.target, self.final)
        segment = segment_from_parquet(
            self.final,
            segment_id=self.segment_id,
            relative_path=self.relative,
            partition=self.partition,
            filesystem=self.fs,
        )
        return replace(self.facts.describe(segment), schema=self.spec.schema_json)

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()
        with contextlib.suppress(Exception):
            self.stream.close()
        with contextlib.suppress(Exception):
            self.fs.delete_file(self.target)


def _encoded(values: Mapping[str, str]) -> dict[bytes, bytes]:
    return {k.encode(): v.encode() for k, v in values.items()}


def _split(batch: pa.RecordBatch, keys: tuple[str, ...]) -> Iterator[tuple[tuple[Any, ...], pa.Table]]:
    """The rows of ``batch`` grouped by the values of ``keys`` (vectorised, nulls form a group)."""
    table = pa.Table.from_batches([batch])
    if not keys:
        yield (), table
        return
    index = pa.array(np.arange(table.num_rows, dtype=np.int64))
    grouped = (
        table.select(list(keys))
        .append_column("__segcat_row", index)
        .group_by(list(keys), use_threads=False)
        .aggregate([("__segcat_row", "list")])
    )
    rows = grouped.column("__segcat_row_list")
    for i in range(grouped.num_rows):
        key = tuple(grouped.column(k)[i].as_py() for k in keys)
        yield key, table.take(rows[i].values)


def write_files(batches: Iterator[pa.RecordBatch], spec: FileSpec) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: write this task's rows as segment files; yield one JSON row per file."""
    fs, base = filesystem(spec.root, spec.s3_endpoint, spec.s3_region)
    open_files: dict[tuple[Any, ...], _OpenFile] = {}
    done: list[Segment] = []
    try:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            for key, rows in _split(batch, spec.key_columns):
                data = rows.drop_columns([c for c in spec.hidden_columns if c in rows.column_names])
                while data.num_rows:
                    handle = open_files.get(key)
                    if handle is None:
                        directory, partition = _placement(spec, key)
                        handle = open_files[key] = _OpenFile(
                            fs, base, directory, partition, data.schema, spec
                        )
                    room = data.num_rows
                    if spec.max_rows_per_file:
                        room = min(room, spec.max_rows_per_file - handle.rows)
                    handle.write(data.slice(0, room))
                    data = data.slice(room)
                    if spec.max_rows_per_file and handle.rows >= spec.max_rows_per_file:
                        done.append(open_files.pop(key).close())
        while open_files:
            _, handle = open_files.popitem()
            done.append(handle.close())
    except BaseException:
        for handle in open_files.values():
            handle.abort()
        raise
    if done:
        yield pa.RecordBatch.from_pydict(
            {"segment": [json.dumps(segment_to_json(s), separators=(",", ":")) for s in done]},
            schema=pa.schema([("segment", pa.string())]),
        )


def _placement(spec: FileSpec, key: tuple[Any, ...]) -> tuple[str, str | None]:
    """(directory, partition name) of the file for ``key``."""
    if spec.groups:
        if not key or key[0] is None or int(key[0]) not in spec.groups:
            raise RuntimeError(f"row routed to unknown compaction group {key!r}")
        partition, directory = spec.groups[int(key[0])]
        return directory, partition
    if not spec.key_columns:
        return "data", None
    return partition_directory(spec.key_columns, key), partition_name(spec.key_columns, key)
