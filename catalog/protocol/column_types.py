"""A stats column's type and Arrow's types, both ways (docs/PROTOCOL.md §2 "Segment fields").

Writers describe a file's columns by their Arrow type; readers hold each stats column in
the Arrow type of its ``ColumnType`` (INT as int64, TIMESTAMP as µs UTC, ...).
"""

from __future__ import annotations

import pyarrow as pa

from segcat.catalog.protocol.model import ColumnType

_ARROW_TYPES: dict[ColumnType, pa.DataType] = {
    ColumnType.INT: pa.int64(),
    ColumnType.FLOAT: pa.float64(),
    ColumnType.STRING: pa.string(),
    ColumnType.DATE: pa.date32(),
    ColumnType.TIMESTAMP: pa.timestamp("us", tz="UTC"),
    ColumnType.BOOLEAN: pa.bool_(),
    ColumnType.BINARY: pa.binary(),
}


def column_type(arrow_type: pa.DataType) -> ColumnType:
    """The stats type of a column of ``arrow_type`` (OTHER: no min/max is kept for it)."""
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


def arrow_type(kind: ColumnType) -> pa.DataType | None:
    """The Arrow type of a stats column of ``kind`` (None: OTHER, no min/max columns)."""
    return _ARROW_TYPES.get(kind)
