"""Parquet field ids (``PARQUET:field_id``) numbered by column name: one numbering for every writer.

Iceberg readers match a data file's columns to the table's by field id when the file has them
(the name mapping serves only files without). **Decision — ids by name, in order of first
appearance:** the caller passes the columns in that order (``order``: for ``segcat.write`` the
table's live files' merged schema, oldest first, then the new columns) and they are numbered
as Iceberg numbers a fresh schema (``TypeUtil.assignFreshIds``): a struct's fields first, then
each field's children in turn (a list's ``element``, a map's ``key`` and ``value``). Paths are
lower-cased, as readers match names case-insensitively. Whatever publishes Iceberg metadata
for files written this way must give each column the id its files carry.
"""

from __future__ import annotations

import pyarrow as pa

FIELD_ID = b"PARQUET:field_id"
"""The Arrow field metadata key pyarrow writes as a Parquet field id."""


def field_ids(order: pa.Schema) -> dict[str, int]:
    """Field ids by lower-cased path (``a``, ``a.b``, ``a.element``, ``m.key``, ``m.value``),
    numbered as Iceberg numbers a fresh schema: a struct's fields first, then each one's children."""
    ids: dict[str, int] = {}

    def children(kind: pa.DataType) -> list[tuple[str, pa.DataType]]:
        if pa.types.is_struct(kind):
            return [(kind.field(i).name, kind.field(i).type) for i in range(kind.num_fields)]
        if pa.types.is_list(kind) or pa.types.is_large_list(kind):
            return [("element", kind.value_type)]
        if pa.types.is_map(kind):
            return [("key", kind.key_type), ("value", kind.item_type)]
        return []

    def number(prefix: str, fields: list[tuple[str, pa.DataType]]) -> None:
        for name, _ in fields:
            path = f"{prefix}{name.lower()}"
            if path not in ids:
                ids[path] = len(ids) + 1
        for name, kind in fields:
            number(f"{prefix}{name.lower()}.", children(kind))

    number("", [(f.name, f.type) for f in order])
    return ids


def with_field_ids(target: pa.Schema, order: pa.Schema) -> pa.Schema:
    """``target`` with ``PARQUET:field_id`` on every field, nested ones included (``field_ids``)."""
    ids = field_ids(order)
    missing = field_ids(target)  # a path ``order`` lacks (never, unless merging failed) follows it
    for path in missing:
        if path not in ids:
            ids[path] = len(ids) + 1

    def stamp(field: pa.Field, path: str) -> pa.Field:
        kind = field.type
        prefix = f"{path}."
        if pa.types.is_struct(kind):
            kind = pa.struct(
                [stamp(kind.field(i), prefix + kind.field(i).name.lower()) for i in range(kind.num_fields)]
            )
        elif pa.types.is_list(kind):
            kind = pa.list_(stamp(kind.value_field, prefix + "element"))
        elif pa.types.is_large_list(kind):
            kind = pa.large_list(stamp(kind.value_field, prefix + "element"))
        elif pa.types.is_map(kind):
            kind = pa.map_(stamp(kind.key_field, prefix + "key"), stamp(kind.item_field, prefix + "value"))
        metadata = {**(field.metadata or {}), FIELD_ID: str(ids[path]).encode()}
        return field.with_type(kind).with_metadata(metadata)

    return pa.schema([stamp(f, f.name.lower()) for f in target], metadata=target.metadata)
