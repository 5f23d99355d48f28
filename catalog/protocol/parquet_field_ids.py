"""Parquet field ids (``PARQUET:field_id``) on a file's schema, taken from given ids.

Iceberg readers match a data file's columns to the table's by field id when the file has any
(the name mapping serves only files without). A file must therefore carry either the very ids
the table's Iceberg metadata gives every one of its fields, or none at all: ``stamped`` puts ids
on every field only when ``ids`` names each field's path, and otherwise leaves the schema as it
is. Paths are the field names from the top (exact case), a list's ``element``, a map's ``key``
and ``value``, as ``catalog.iceberg.schema`` walks an Iceberg schema.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pyarrow as pa

FIELD_ID = b"PARQUET:field_id"
"""The Arrow field metadata key pyarrow writes as a Parquet field id."""

Path = tuple[str, ...]


def paths(schema: pa.Schema) -> Iterator[Path]:
    """Every field's path, nested ones included."""
    for field in schema:
        yield from _paths(field.type, (field.name,))


def _paths(kind: pa.DataType, path: Path) -> Iterator[Path]:
    yield path
    for name, child in _children(kind):
        yield from _paths(child, (*path, name))


def _children(kind: pa.DataType) -> list[tuple[str, pa.DataType]]:
    if pa.types.is_struct(kind):
        return [(kind.field(i).name, kind.field(i).type) for i in range(kind.num_fields)]
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return [("element", kind.value_type)]
    if pa.types.is_map(kind):
        return [("key", kind.key_type), ("value", kind.item_type)]
    return []


def stamped(target: pa.Schema, ids: Mapping[Path, int]) -> pa.Schema:
    """``target`` with ``PARQUET:field_id`` on every field when ``ids`` names every path; else
    ``target`` unchanged (a file with some ids and not others would be read wrongly)."""
    if not all(path in ids for path in paths(target)):
        return target

    def stamp(field: pa.Field, path: Path) -> pa.Field:
        kind = field.type
        if pa.types.is_struct(kind):
            members = [kind.field(i) for i in range(kind.num_fields)]
            kind = pa.struct([stamp(member, (*path, member.name)) for member in members])
        elif pa.types.is_list(kind):
            kind = pa.list_(stamp(kind.value_field, (*path, "element")))
        elif pa.types.is_large_list(kind):
            kind = pa.large_list(stamp(kind.value_field, (*path, "element")))
        elif pa.types.is_map(kind):
            kind = pa.map_(stamp(kind.key_field, (*path, "key")), stamp(kind.item_field, (*path, "value")))
        metadata = {**(field.metadata or {}), FIELD_ID: str(ids[path]).encode()}
        return field.with_type(kind).with_metadata(metadata)

    return pa.schema([stamp(f, (f.name,)) for f in target], metadata=target.metadata)
