"""Live segments as one Arrow table, with typed ``min:<col>`` / ``max:<col>`` / ``nulls:<col>``
(and ``nans:<col>`` for FLOAT columns).

Wide, typed stats columns make data skipping a vectorised compute over whole columns
instead of a Python loop over segments. A column's type is the table's (fixed by the first
accepted segment with stats for it, ``TableState.column_types``); stats of another type,
which only protocol-v1 logs can hold, are left out (null = unknown = "might match"), so one
odd segment can never make two views of the table disagree on a column's type.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import pyarrow as pa

from segcat.catalog.protocol.column_types import arrow_type
from segcat.catalog.protocol.model import ColumnType, StatValue
from segcat.catalog.protocol.state import LiveSegment

BASE_SCHEMA = pa.schema(
    [
        ("segment_id", pa.string()),
        ("path", pa.string()),
        ("partition", pa.string()),
        ("format", pa.string()),
        ("size_bytes", pa.int64()),
        ("row_count", pa.int64()),
        ("added_version", pa.int64()),
        ("bloom_column", pa.string()),
        ("bloom_hashes", pa.int32()),
        ("bloom_bits", pa.binary()),
    ]
)
AVRO_COLUMN = "segment_avro"
"""The lossless column of a full view and a key frame: each segment as a segment record of the
frame's commit layout (``keyframe``). Readers' lean views go without it."""


def segments_table(live: Iterable[LiveSegment], column_types: Mapping[str, ColumnType]) -> pa.Table:
    """The live segments, ordered by ``segment_id``, with per-column stats spread wide.

    ``column_types`` are the table's stats column types; a column not named there takes the
    type of the first segment (by id) that has stats for it.
    """
    rows = sorted(live, key=lambda item: item.segment.segment_id)
    columns: dict[str, list[object]] = {field.name: [] for field in BASE_SCHEMA}
    stat_types: dict[str, ColumnType] = {}
    for item in rows:
        for stats in item.segment.stats:
            stat_types.setdefault(stats.column, column_types.get(stats.column, stats.type))
    mins: dict[str, list[StatValue]] = {c: [] for c in stat_types}
    maxs: dict[str, list[StatValue]] = {c: [] for c in stat_types}
    nulls: dict[str, list[int | None]] = {c: [] for c in stat_types}
    nans: dict[str, list[int | None]] = {c: [] for c in stat_types}
    for item in rows:
        seg = item.segment
        columns["segment_id"].append(seg.segment_id)
        columns["path"].append(seg.path)
        columns["partition"].append(seg.partition)
        columns["format"].append(seg.format)
        columns["size_bytes"].append(seg.size_bytes)
        columns["row_count"].append(seg.row_count)
        columns["added_version"].append(item.added_version)
        columns["bloom_column"].append(None if seg.bloom is None else seg.bloom.column)
        columns["bloom_hashes"].append(None if seg.bloom is None else seg.bloom.num_hashes)
        columns["bloom_bits"].append(None if seg.bloom is None else seg.bloom.bits)
        by_column = {s.column: s for s in seg.stats if s.type is stat_types[s.column]}
        for column in stat_types:
            stat = by_column.get(column)
            mins[column].append(None if stat is None else stat.min)
            maxs[column].append(None if stat is None else stat.max)
            nulls[column].append(None if stat is None else stat.null_count)
            nans[column].append(None if stat is None else stat.nan_count)
    arrays = [pa.array(columns[f.name], type=f.type) for f in BASE_SCHEMA]
    fields = list(BASE_SCHEMA)
    for column, kind in sorted(stat_types.items()):
        typed = arrow_type(kind)
        if typed is None:
            continue
        for prefix, values in (("min", mins[column]), ("max", maxs[column])):
            arrays.append(pa.array(values, type=typed))
            fields.append(pa.field(f"{prefix}:{column}", typed))
        arrays.append(pa.array(nulls[column], type=pa.int64()))
        fields.append(pa.field(f"nulls:{column}", pa.int64()))
        if kind is ColumnType.FLOAT:
            arrays.append(pa.array(nans[column], type=pa.int64()))
            fields.append(pa.field(f"nans:{column}", pa.int64()))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields))
