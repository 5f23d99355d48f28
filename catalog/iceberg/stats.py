"""A segment's column stats as Iceberg's manifest metrics, keyed by field id.

Only what is exact is exported (docs/ICEBERG.md, *Column metrics*): for each top-level column
the file recorded stats of, the value count (the file's row count: a top-level column has one
value per row, nulls included) and the null count when known; lower / upper bounds in Iceberg's
single-value serialization (spec, Appendix D) for ``int``, ``long``, ``date``, ``timestamptz``,
``string`` and ``boolean`` columns. Floats (NaN and signed zeros), decimals, binaries and
zoneless timestamps get no bounds: a reader then reads the file instead of pruning it, which is
slower but never wrong.
"""

from __future__ import annotations

import datetime as dt
import struct
from collections.abc import Mapping

from segcat.catalog.protocol.model import Segment, StatValue

_EPOCH_DAY = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)

Metrics = tuple[
    tuple[tuple[int, int], ...],
    tuple[tuple[int, int], ...],
    tuple[tuple[int, bytes], ...],
    tuple[tuple[int, bytes], ...],
]
"""(value counts, null counts, lower bounds, upper bounds), each sorted by field id."""


def metrics(segment: Segment, columns: Mapping[str, tuple[int, str]]) -> Metrics:
    """``segment``'s metrics; ``columns`` maps a top-level column name (lower case) to its field
    id and Iceberg type."""
    values: list[tuple[int, int]] = []
    nulls: list[tuple[int, int]] = []
    lower: list[tuple[int, bytes]] = []
    upper: list[tuple[int, bytes]] = []
    seen: set[int] = set()
    for stats in segment.stats:
        found = columns.get(stats.column.lower())
        if found is None or "." in stats.column:
            continue
        field_id, kind = found
        if field_id in seen:
            continue  # two spellings of one column (Spark matches names case-insensitively)
        seen.add(field_id)
        values.append((field_id, segment.row_count))
        if stats.null_count is not None:
            nulls.append((field_id, stats.null_count))
        lo, hi = single_value(kind, stats.min), single_value(kind, stats.max)
        if lo is not None and hi is not None:
            lower.append((field_id, lo))
            upper.append((field_id, hi))
    return (tuple(sorted(values)), tuple(sorted(nulls)), tuple(sorted(lower)), tuple(sorted(upper)))


def single_value(kind: str, value: StatValue) -> bytes | None:
    """``value`` in Iceberg's single-value serialization for a column of type ``kind`` (None: not
    exported for that type, or the value does not fit it)."""
    if value is None:
        return None
    if kind == "boolean":
        return b"\x01" if value is True else b"\x00" if value is False else None
    if kind in ("int", "long") and isinstance(value, int) and not isinstance(value, bool):
        try:
            return struct.pack("<i" if kind == "int" else "<q", value)
        except struct.error:
            return None
    if kind == "date" and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return struct.pack("<i", (value - _EPOCH_DAY).days)
    if kind == "timestamptz" and isinstance(value, dt.datetime) and value.tzinfo is not None:
        delta = value - _EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return struct.pack("<q", micros)
    if kind == "string" and isinstance(value, str):
        return value.encode("utf-8")
    return None
