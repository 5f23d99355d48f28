"""Executor-side Parquet writing: one file per partition key per task, described by its footer.

This runs inside ``mapInArrow`` on the executors. It picks its own file names (unique, so a
retried task or a losing writer can never overwrite a file someone else committed), writes
with pyarrow, reads the stats back from the footer it just wrote (``segment_from_parquet``)
and returns one small JSON row per file. The driver then collects only those rows, never
the data, and publishes them in one commit. A file is complete before its row leaves the
task (temp name + rename locally, one upload on object stores), and until the commit is
accepted nothing references it: a failed or losing job leaves orphans for vacuum, never a
half-visible table.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import secrets
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from catalog import bloom
from catalog.jsonio import segment_to_json
from catalog.model import Segment
from catalog.objectstore import TEMP_MARKER, s3_filesystem
from catalog.parquet_stats import segment_from_parquet

NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"
"""Partition name and directory for a null (or empty) partition value, as Hive and Spark spell it."""

GROUP_COLUMN = "_segcat_group"
"""Hidden column a compaction uses to route the rows of one output file to one task."""

OUTPUT_SCHEMA = "segment string"
"""What ``write_files`` returns to the driver: one JSON-encoded ``Segment`` per file."""

_SAFE = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_.")


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
    parts = [f"{escape(c)}={escape(value_text(v))}" for c, v in zip(columns, values, strict=True)]
    return "/".join(["data", *parts])


# ---------------------------------------------------------------------------- filesystems


def filesystem(root: str, s3_endpoint: str | None, s3_region: str | None) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding ``root`` and the root in that filesystem's own path syntax."""
    if root.startswith("s3://"):
        parsed = urlsplit(root)
        base = f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")
        return s3_filesystem(parsed.netloc, s3_endpoint, s3_region), base
    if "://" in root:
        fs, base = pafs.FileSystem.from_uri(root)
        return fs, base.rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(root)


def _single_upload(fs: pafs.FileSystem) -> bool:
    kinds = tuple(k for k in (getattr(pafs, "S3FileSystem", None), getattr(pafs, "GcsFileSystem", None)) if k)
    return isinstance(fs, kinds)


# ---------------------------------------------------------------------------- writing


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
        self.writer = pq.ParquetWriter(self.stream, schema, compression="zstd")
        self.rows = 0
        self.keys: set[Any] = set()

    def write(self, table: pa.Table) -> None:
        self.writer.write_table(table)
        self.rows += table.num_rows
        if self.spec.bloom_column is not None:
            self.keys.update(table.column(self.spec.bloom_column).to_pylist())

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
        keys = {k for k in self.keys if k is not None}
        flt = bloom.build(self.spec.bloom_column, keys) if self.spec.bloom_column and keys else None
        return replace(segment, bloom=flt, schema=self.spec.schema_json)

    def abort(self) -> None:
        with contextlib.suppress(Exception):
            self.writer.close()
        with contextlib.suppress(Exception):
            self.stream.close()
        with contextlib.suppress(Exception):
            self.fs.delete_file(self.target)


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
