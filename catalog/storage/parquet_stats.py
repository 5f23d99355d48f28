"""A ``Segment`` from a Parquet file's footer: size, rows and typed per-column stats.

Reading only the footer keeps this cheap enough to run wherever the file was written
(a Spark executor, a demo, the CLI), never re-reading the data on a driver.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from segcat.catalog.protocol.column_types import column_type
from segcat.catalog.protocol.model import ColumnStats, ColumnType, Segment, StatValue

_INT64 = (-(2**63), 2**63 - 1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


class _Unknown(Exception):
    """A footer bound segcat cannot state exactly as a bound: the column gets no stats."""


def _bound(kind: ColumnType, value: Any, *, upper: bool) -> StatValue:
    """A footer min (``upper`` False) or max as a lossless segcat value that still bounds the data.

    Sub-microsecond times round outwards (min down, max up) so the bound stays a bound; a
    NaN bound (old writers), an INT outside int64 (uint64) or an undecodable value is unknown.
    """
    if value is None:
        return None
    if kind is ColumnType.TIMESTAMP and isinstance(value, dt.datetime):
        if getattr(value, "nanosecond", 0):  # a pandas Timestamp: floor / ceil to the microsecond
            whole = int(value.value) // 1000 + (1 if upper else 0)  # type: ignore[attr-defined]
            return _EPOCH + dt.timedelta(microseconds=whole)
        moment: dt.datetime = value.to_pydatetime() if hasattr(value, "to_pydatetime") else value
        return moment if moment.tzinfo else moment.replace(tzinfo=dt.UTC)
    if kind is ColumnType.INT:
        whole = int(value)
        if not _INT64[0] <= whole <= _INT64[1]:
            raise _Unknown
        return whole
    if kind is ColumnType.FLOAT:
        if isinstance(value, bytes):  # float16: the raw little-endian half
            if len(value) != 2:
                raise _Unknown
            value = np.frombuffer(value, dtype="<f2")[0]
        number = float(value)
        if math.isnan(number):
            raise _Unknown
        return number
    return value  # type: ignore[no-any-return]


def _merge(a: StatValue, b: StatValue, pick: Any) -> StatValue:
    if a is None:
        return b
    if b is None:
        return a
    return pick(a, b)  # type: ignore[no-any-return]


def stats_from_metadata(metadata: pq.FileMetaData, schema: pa.Schema) -> tuple[ColumnStats, ...]:
    """Per top-level column stats merged over row groups; a column missing stats gets none.

    ``nan_count`` stays None (unknown): a footer does not count NaN, and its min / max skip
    them. Writers that see the rows (``segcat.producers.segment_files``) fill it in.
    """
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
        try:
            for rg in range(metadata.num_row_groups):
                stats = metadata.row_group(rg).column(index).statistics
                if stats is None or not stats.has_null_count:
                    complete = False
                    break
                nulls += stats.null_count
                if stats.has_min_max:
                    lo = _merge(lo, _bound(kind, stats.min, upper=False), min)
                    hi = _merge(hi, _bound(kind, stats.max, upper=True), max)
                elif stats.null_count != metadata.row_group(rg).num_rows:
                    complete = False  # values exist but their bounds are unknown: claim nothing
                    break
        except (_Unknown, ValueError, TypeError, OverflowError, ArithmeticError, pa.ArrowException):
            complete = False
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
