"""Spark's data types in their JSON form, without Spark: merge, widen, and map to Arrow.

A segment records the schema its file was written with as Spark's ``StructType.json()``
(docs/PROTOCOL.md §2). Readers read a table with *the table's* schema: every live file's,
merged with the safe widenings of docs/PROTOCOL.md §4a "Schemas" (byte → short → int → long;
byte, short, int, float → double; integral → decimal; decimal → wider decimal; date →
timestamp_ntz; structs by field, arrays and maps by element, key and value). This module is
that rule on the JSON values (``StructType.jsonValue()``: a name such as ``"long"`` or
``"decimal(10,2)"``, or a dict for struct / array / map), so Spark (``spark_integration.schemas``)
and the Arrow readers of the core (``catalog.read.changes``) merge alike; ``to_arrow`` is
Spark's own Arrow mapping (``pyspark.sql.pandas.types.to_arrow_type``), ``from_arrow`` the
type Spark reads a Parquet column of that Arrow type as.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

MAX_DECIMAL_PRECISION = 38
SparkType = Any
"""A Spark type's JSON value: a name (``"long"``) or a dict (struct, array, map)."""

_INTEGRAL_RANK = {"byte": 1, "short": 2, "integer": 3, "long": 4}
_INTEGRAL_DIGITS = {"byte": 3, "short": 5, "integer": 10, "long": 20}
_TO_DOUBLE = {"byte", "short", "integer", "float"}
"""What Spark 4's Parquet reader reads as a double without losing a digit (not long)."""
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(-?\d+)\s*\)")
_TEXT = re.compile(r"(?:var)?char\(\s*\d+\s*\)")
_ARROW = {
    "byte": pa.int8(),
    "short": pa.int16(),
    "integer": pa.int32(),
    "long": pa.int64(),
    "float": pa.float32(),
    "double": pa.float64(),
    "string": pa.string(),
    "binary": pa.binary(),
    "boolean": pa.bool_(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "timestamp_ntz": pa.timestamp("us"),
    "null": pa.null(),
    "void": pa.null(),
}


class Conflict(Exception):
    """Two types no reader widens to one: ``path`` names the column (``a.b``, ``a[]``, ``m.key``)."""

    def __init__(self, path: str, left: SparkType, right: SparkType) -> None:
        super().__init__(f"{path}: {simple_string(left)} vs {simple_string(right)}")
        self.path = path
        self.left = left
        self.right = right


class UnknownType(ValueError):
    """A Spark type this module has no Arrow type for (intervals, variants, user types, ...)."""


def _kind(value: SparkType) -> str:
    if isinstance(value, str):
        return "decimal" if _DECIMAL.fullmatch(value) else value
    if isinstance(value, dict):
        return str(value.get("type"))
    return repr(value)


def decimal_of(value: SparkType) -> tuple[int, int] | None:
    """(precision, scale) of a decimal type, None for any other type."""
    if isinstance(value, str):
        if value == "decimal":
            return (10, 0)
        found = _DECIMAL.fullmatch(value)
        if found is not None:
            return int(found.group(1)), int(found.group(2))
    return None


def _as_decimal(value: SparkType) -> tuple[int, int] | None:
    found = decimal_of(value)
    if found is not None:
        return found
    digits = _INTEGRAL_DIGITS.get(value) if isinstance(value, str) else None
    return None if digits is None else (digits, 0)


def _widen_decimal(left: SparkType, right: SparkType) -> str | None:
    if decimal_of(left) is None and decimal_of(right) is None:
        return None
    a, b = _as_decimal(left), _as_decimal(right)
    if a is None or b is None:
        return None
    scale = max(a[1], b[1])
    whole = max(a[0] - a[1], b[0] - b[1])
    if whole + scale > MAX_DECIMAL_PRECISION:
        return None
    return f"decimal({whole + scale},{scale})"


def widen(left: SparkType, right: SparkType, path: str = "", case_sensitive: bool = False) -> SparkType:
    """The narrowest type both ``left`` and ``right`` read as; ``Conflict`` at ``path`` if none."""
    if left == right:
        return left
    kinds = (_kind(left), _kind(right))
    if kinds[0] in ("null", "void"):
        return right
    if kinds[1] in ("null", "void"):
        return left
    if all(kind in _INTEGRAL_RANK for kind in kinds):
        return left if _INTEGRAL_RANK[kinds[0]] >= _INTEGRAL_RANK[kinds[1]] else right
    if "double" in kinds and all(kind in (*_TO_DOUBLE, "double") for kind in kinds):
        return "double"
    if "float" in kinds and all(kind in ("float", "byte", "short", "integer") for kind in kinds):
        return "double"
    if set(kinds) == {"date", "timestamp_ntz"}:
        return "timestamp_ntz"
    decimal = _widen_decimal(left, right)
    if decimal is not None:
        return decimal
    if kinds == ("struct", "struct"):
        return merge_structs(left, right, path, case_sensitive)
    if kinds == ("array", "array"):
        element = widen(left["elementType"], right["elementType"], f"{path}[]", case_sensitive)
        contains = bool(left.get("containsNull", True) or right.get("containsNull", True))
        return {"type": "array", "elementType": element, "containsNull": contains}
    if kinds == ("map", "map"):
        key = widen(left["keyType"], right["keyType"], f"{path}.key", case_sensitive)
        value = widen(left["valueType"], right["valueType"], f"{path}.value", case_sensitive)
        contains = bool(left.get("valueContainsNull", True) or right.get("valueContainsNull", True))
        return {"type": "map", "keyType": key, "valueType": value, "valueContainsNull": contains}
    raise Conflict(path, left, right)


def merge_structs(
    left: dict[str, Any], right: dict[str, Any], path: str = "", case_sensitive: bool = False
) -> dict[str, Any]:
    """``left``'s fields widened by ``right``'s, then ``right``'s new fields; a field one side
    lacks is nullable (files without it read NULL). Names match as Spark resolves them."""

    def key(name: str) -> str:
        return name if case_sensitive else name.lower()

    theirs = {key(f["name"]): f for f in right.get("fields", [])}
    mine = {key(f["name"]) for f in left.get("fields", [])}
    fields = []
    for field in left.get("fields", []):
        other = theirs.get(key(field["name"]))
        if other is None:
            fields.append({**field, "nullable": True})
            continue
        kind = widen(field["type"], other["type"], _join(path, field["name"]), case_sensitive)
        nullable = bool(field.get("nullable", True) or other.get("nullable", True))
        fields.append({**field, "type": kind, "nullable": nullable})
    for field in right.get("fields", []):
        if key(field["name"]) not in mine:
            fields.append({**field, "nullable": True})
    return {"type": "struct", "fields": fields}


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def parse_schema(raw: str | None) -> dict[str, Any] | None:
    """A recorded schema (``StructType.json()``) as its JSON value; None: none, or not a struct."""
    if raw is None:
        return None
    try:
        value = json.loads(raw)
    except ValueError:
        return None
    if (
        not isinstance(value, dict)
        or value.get("type") != "struct"
        or not isinstance(value.get("fields"), list)
    ):
        return None
    if not all(
        isinstance(f, dict) and isinstance(f.get("name"), str) and "type" in f for f in value["fields"]
    ):
        return None
    return value


@dataclass(frozen=True)
class Source:
    """Files that share one schema, for naming them in an error."""

    schema: dict[str, Any]
    first: str
    """One of the files, as ``path (version N)``."""


def merged(sources: Sequence[Source], case_sensitive: bool = False) -> dict[str, Any]:
    """The table schema of ``sources`` (oldest first: their column order is kept, new columns
    follow); ``Conflict`` (with ``.source`` and ``.seen`` set) where two cannot be read as one."""
    if not sources:
        return {"type": "struct", "fields": []}
    result = sources[0].schema
    for k, source in enumerate(sources[1:], start=1):
        try:
            result = merge_structs(result, source.schema, "", case_sensitive)
        except Conflict as conflict:
            conflict.source = source  # type: ignore[attr-defined]
            conflict.other = next(  # type: ignore[attr-defined]
                (s for s in sources[:k] if conflicts(s.schema, source.schema, case_sensitive)), sources[0]
            )
            raise
    return result


def conflicts(left: dict[str, Any], right: dict[str, Any], case_sensitive: bool = False) -> bool:
    try:
        merge_structs(left, right, "", case_sensitive)
    except Conflict:
        return True
    return False


def simple_string(value: SparkType) -> str:
    """Spark's ``simpleString`` of a type (``bigint``, ``struct<a:int>``, ``array<string>``)."""
    kind = _kind(value)
    short = {"long": "bigint", "integer": "int", "short": "smallint", "byte": "tinyint"}
    if isinstance(value, str):
        return short.get(value, value)
    if kind == "struct":
        inner = ",".join(f"{f['name']}:{simple_string(f['type'])}" for f in value.get("fields", []))
        return f"struct<{inner}>"
    if kind == "array":
        return f"array<{simple_string(value['elementType'])}>"
    if kind == "map":
        return f"map<{simple_string(value['keyType'])},{simple_string(value['valueType'])}>"
    return str(value)


def to_arrow(value: SparkType) -> pa.DataType:
    """The Arrow type Spark gives a column of this type (``UnknownType`` for one it has none for)."""
    if isinstance(value, str):
        found = _ARROW.get(value)
        if found is not None:
            return found
        decimal = decimal_of(value)
        if decimal is not None:
            return pa.decimal128(*decimal)
        if _TEXT.fullmatch(value):  # CHAR(n) / VARCHAR(n) columns hold strings
            return pa.string()
        raise UnknownType(f"no Arrow type for Spark type {value!r}")
    kind = _kind(value)
    if kind == "struct":
        return pa.struct([to_arrow_field(f) for f in value.get("fields", [])])
    if kind == "array":
        element = pa.field("element", to_arrow(value["elementType"]), bool(value.get("containsNull", True)))
        return pa.list_(element)
    if kind == "map":
        item = pa.field("value", to_arrow(value["valueType"]), bool(value.get("valueContainsNull", True)))
        return pa.map_(pa.field("key", to_arrow(value["keyType"]), False), item)
    raise UnknownType(f"no Arrow type for Spark type {value!r}")


def to_arrow_field(field: dict[str, Any]) -> pa.Field:
    return pa.field(field["name"], to_arrow(field["type"]), bool(field.get("nullable", True)))


def schema_to_arrow(schema: dict[str, Any]) -> pa.Schema:
    """A struct type's JSON value as an Arrow schema, field by field."""
    return pa.schema([to_arrow_field(f) for f in schema.get("fields", [])])


def from_arrow(kind: pa.DataType) -> SparkType:
    """The Spark type a Parquet column read as ``kind`` by pyarrow is read as by Spark
    (``UnknownType`` where Spark reads it otherwise or not at all: unsigned 64-bit, ...)."""
    simple = {
        pa.int8(): "byte",
        pa.int16(): "short",
        pa.int32(): "integer",
        pa.int64(): "long",
        pa.uint8(): "short",
        pa.uint16(): "integer",
        pa.uint32(): "long",
        pa.float32(): "float",
        pa.float64(): "double",
        pa.string(): "string",
        pa.large_string(): "string",
        pa.binary(): "binary",
        pa.large_binary(): "binary",
        pa.bool_(): "boolean",
        pa.date32(): "date",
        pa.null(): "null",
    }
    for arrow, spark in simple.items():
        if kind.equals(arrow):
            return spark
    if pa.types.is_timestamp(kind):
        return "timestamp" if kind.tz is not None else "timestamp_ntz"
    if pa.types.is_decimal(kind):
        return f"decimal({kind.precision},{kind.scale})"
    if pa.types.is_struct(kind):
        return {
            "type": "struct",
            "fields": [_from_arrow_field(kind.field(i)) for i in range(kind.num_fields)],
        }
    if pa.types.is_map(kind):
        return {
            "type": "map",
            "keyType": from_arrow(kind.key_type),
            "valueType": from_arrow(kind.item_type),
            "valueContainsNull": kind.item_field.nullable,
        }
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return {
            "type": "array",
            "elementType": from_arrow(kind.value_type),
            "containsNull": kind.value_field.nullable,
        }
    raise UnknownType(f"Spark does not read an Arrow {kind} column as one of its types")


def _from_arrow_field(field: pa.Field) -> dict[str, Any]:
    return {"name": field.name, "type": from_arrow(field.type), "nullable": field.nullable, "metadata": {}}


def schema_from_arrow(schema: pa.Schema) -> dict[str, Any]:
    """An Arrow schema (a Parquet footer's) as the struct type Spark reads it as."""
    return {"type": "struct", "fields": [_from_arrow_field(f) for f in schema]}
