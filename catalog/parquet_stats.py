"""A ``Segment`` from a Parquet file's footer: size, rows and typed per-column stats.

Reading only the footer keeps this cheap enough to run wherever the file was written
(a Spark executor, a demo, the CLI), never re-reading the data on a driver.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from catalog.model import ColumnStats, ColumnType, Segment, StatValue


def column_type(arrow_type: pa.DataType) -> ColumnType:
    if pa.types.is_integer(arrow_type):
        return ColumnType.INT
    if pa.types.is_floating(arrow_type):
        return ColumnType.FLOAT
    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return ColumnType.STRING
    if pa.types.is_date(arrow_type):
        return ColumnType.DATE
    if pa.types.is_timestamp(arrow_type):
        return ColumnType.TIMESTAMP
    if pa.types.is_boolean(arrow_type):
        return ColumnType.BOOLEAN
    if pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type):
        return ColumnType.BINARY
    return ColumnType.OTHER


def _normalise(kind: ColumnType, value: Any) -> StatValue:
    if value is None:
        return None
    if kind is ColumnType.TIMESTAMP and isinstance(value, dt.datetime) and value.tzinfo is None:
        return value.replace(tzinfo=dt.UTC)
    if kind is ColumnType.INT:
        return int(value)
    if kind is ColumnType.FLOAT:
        return float(value)
    return value  # type: ignore[no-any-return]


def _merge(a: StatValue, b: StatValue, pick: Any) -> StatValue:
    if a is None:
        return b
    if b is None:
        return a
    return pick(a, b)  # type: ignore[no-any-return]


def stats_from_metadata(metadata: pq.FileMetaData, schema: pa.Schema) -> tuple[ColumnStats, ...]:
    """Per top-level column stats merged over row groups; a column missing stats gets none."""
    out: list[ColumnStats] = []
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    for index, path in enumerate(names):
        if "." in path or path not in schema.names:
            continue
        kind = column_type(schema.field(path).type)
        if kind is ColumnType.OTHER:
            continue
        lo: StatValue = None
        hi: StatValue = None
        nulls = 0
        complete = True
        for rg in range(metadata.num_row_groups):
            stats = metadata.row_group(rg).column(index).statistics
            if stats is None or not stats.has_null_count:
                complete = False
                break
            nulls += stats.null_count
            if stats.has_min_max:
                lo = _merge(lo, _normalise(kind, stats.min), min)
                hi = _merge(hi, _normalise(kind, stats.max), max)
            elif stats.null_count != metadata.row_group(rg).num_rows:
                complete = False  # values exist but their bounds are unknown: claim nothing
                break
        if complete:
            out.append(ColumnStats(path, kind, lo, hi, nulls))
    return tuple(out)


def segment_from_parquet(
    path: str,
    *,
    segment_id: str,
    relative_path: str,
    partition: str | None = None,
    filesystem: pafs.FileSystem | None = None,
) -> Segment:
    """Describe the Parquet file at ``path`` (a local path or URI) as a segment."""
    fs, fs_path = (filesystem, path) if filesystem is not None else pafs.FileSystem.from_uri(path)
    size = fs.get_file_info(fs_path).size or 0
    with fs.open_input_file(fs_path) as handle:
        parquet = pq.ParquetFile(handle)
        metadata = parquet.metadata
        schema = parquet.schema_arrow
    return Segment(
        segment_id=segment_id,
        path=relative_path,
        size_bytes=int(size),
        row_count=int(metadata.num_rows),
        partition=partition,
        stats=stats_from_metadata(metadata, schema),
    )
