"""A segcat table schema as an Iceberg schema: field ids by name, never reused, and the name mapping.

The table schema of a version is its live files' schemas merged (``read.changes``), as Arrow
types. Iceberg needs an id per field, list element and map key / value; segcat assigns them by
*name path* in order of first appearance (``FieldIds``): a column that comes back after being
dropped gets its old id, a new name a new one, and no id is ever reused for another name. Every
field is optional in Iceberg (a file written before a column existed reads it as null, as
segcat does). ``schema.name-mapping.default`` (``name_mapping``) lets readers match columns of
files written without Parquet field ids by name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pyarrow as pa

Path = tuple[str, ...]
"""A field's name path: (column,), (column, child), (column, "element"), (column, "key"), ..."""


class UnrepresentableType(ValueError):
    """A column type Iceberg has no equivalent of; ``str(exc)`` names the column and type."""


class FieldIds:
    """Name path → field id, in order of first appearance (``last`` is the highest id given)."""

    def __init__(self, ids: Mapping[Path, int] | None = None) -> None:
        self.ids: dict[Path, int] = dict(ids or {})
        self.last = max(self.ids.values(), default=0)

    def id_of(self, path: Path) -> int:
        found = self.ids.get(path)
        if found is None:
            self.last += 1
            found = self.ids[path] = self.last
        return found

    def learn(self, schema: Mapping[str, Any]) -> None:
        """Take the ids of an Iceberg schema (JSON) written earlier (recovery)."""
        for path, field_id in _walk_json(schema, ()):
            self.ids[path] = field_id
            self.last = max(self.last, field_id)


def _walk_json(node: Mapping[str, Any], prefix: Path) -> Iterator[tuple[Path, int]]:
    kind = node.get("type")
    if kind == "struct":
        for field in node["fields"]:
            path = (*prefix, field["name"])
            yield path, int(field["id"])
            if isinstance(field["type"], dict):
                yield from _walk_json(field["type"], path)
    elif kind == "list":
        path = (*prefix, "element")
        yield path, int(node["element-id"])
        if isinstance(node["element"], dict):
            yield from _walk_json(node["element"], path)
    elif kind == "map":
        for part in ("key", "value"):
            path = (*prefix, part)
            yield path, int(node[f"{part}-id"])
            if isinstance(node[part], dict):
                yield from _walk_json(node[part], path)


def iceberg_schema(schema: pa.Schema, ids: FieldIds, schema_id: int) -> dict[str, Any]:
    """The Iceberg schema (JSON) of ``schema``, ids taken from (and added to) ``ids``;
    ``UnrepresentableType`` for a type Iceberg lacks."""
    fields = [_field(field, (field.name,), ids) for field in schema]
    return {"type": "struct", "schema-id": schema_id, "fields": fields}


def _field(field: pa.Field, path: Path, ids: FieldIds) -> dict[str, Any]:
    return {
        "id": ids.id_of(path),
        "name": field.name,
        "required": False,
        "type": _type(field.type, path, ids),
    }


def _type(kind: pa.DataType, path: Path, ids: FieldIds) -> str | dict[str, Any]:
    if pa.types.is_struct(kind):
        return {
            "type": "struct",
            "fields": [
                _field(kind.field(i), (*path, kind.field(i).name), ids) for i in range(kind.num_fields)
            ],
        }
    if pa.types.is_map(kind):
        key_path, value_path = (*path, "key"), (*path, "value")
        return {
            "type": "map",
            "key-id": ids.id_of(key_path),
            "key": _type(kind.key_type, key_path, ids),
            "value-id": ids.id_of(value_path),
            "value": _type(kind.item_type, value_path, ids),
            "value-required": False,
        }
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        element = (*path, "element")
        return {
            "type": "list",
            "element-id": ids.id_of(element),
            "element": _type(kind.value_type, element, ids),
            "element-required": False,
        }
    return primitive(kind, ".".join(path))


def primitive(kind: pa.DataType, column: str) -> str:
    """The Iceberg primitive type of an Arrow type as segcat's table schema spells it."""
    if pa.types.is_int8(kind) or pa.types.is_int16(kind) or pa.types.is_int32(kind):
        return "int"
    if pa.types.is_int64(kind):
        return "long"
    if pa.types.is_float32(kind):
        return "float"
    if pa.types.is_float64(kind):
        return "double"
    if pa.types.is_boolean(kind):
        return "boolean"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "string"
    if pa.types.is_binary(kind) or pa.types.is_large_binary(kind):
        return "binary"
    if pa.types.is_date32(kind):
        return "date"
    if pa.types.is_timestamp(kind) and kind.unit == "us":
        return "timestamp" if kind.tz is None else "timestamptz"
    if pa.types.is_decimal128(kind):
        return f"decimal({kind.precision}, {kind.scale})"
    raise UnrepresentableType(f"column {column!r} is {kind}, which has no Iceberg type")


def name_mapping(schema: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Iceberg's name mapping of an Iceberg schema (JSON): each field id and the name it has in
    files written without field ids."""
    return _mapping(schema)


def _mapping(node: Mapping[str, Any]) -> list[dict[str, Any]]:
    kind = node.get("type")
    out: list[dict[str, Any]] = []
    if kind == "struct":
        for field in node["fields"]:
            out.append(_entry(int(field["id"]), field["name"], field["type"]))
    elif kind == "list":
        out.append(_entry(int(node["element-id"]), "element", node["element"]))
    elif kind == "map":
        out.append(_entry(int(node["key-id"]), "key", node["key"]))
        out.append(_entry(int(node["value-id"]), "value", node["value"]))
    return out


def _entry(field_id: int, name: str, kind: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {"field-id": field_id, "names": [name]}
    if isinstance(kind, dict):
        entry["fields"] = _mapping(kind)
    return entry
