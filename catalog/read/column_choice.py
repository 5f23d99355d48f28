"""The ``columns=`` argument of the Arrow readers (``Table.scan``, ``Table.changes``), checked once."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa

from segcat.catalog.errors import InvalidArgument


def chosen_columns(columns: object, schema: pa.Schema, where: str) -> list[str] | None:
    """The column names asked for, each a column of ``schema`` and named once (None: all);
    ``InvalidArgument`` naming the column otherwise. ``where`` says what ``schema`` is of
    ("the table at this version")."""
    if columns is None:
        return None
    if isinstance(columns, str | bytes) or not isinstance(columns, Sequence):
        raise InvalidArgument(f"columns is a list of column names, not {type(columns).__name__}")
    out: list[str] = []
    for name in columns:
        if not isinstance(name, str) or name not in schema.names:
            raise InvalidArgument(
                f"columns: {name!r} is not a column of {where} ({', '.join(schema.names) or 'it has none'})"
            )
        if name in out:
            raise InvalidArgument(f"columns: {name!r} is named twice")
        out.append(name)
    return out
