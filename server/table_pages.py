"""Pages of the table list: name order, an opaque cursor, and what makes a walk exact.

A cursor is the last table of the page it follows, encoded (``t1.`` + URL-safe base64 of the
qualified name) so clients treat it as opaque. The next page is the tables *after* that name in
the directory as it is when the page is asked for, so a walk of pages lists every table that
existed throughout the walk exactly once, in order, whatever is created or dropped between two
pages: a table created behind the cursor is not listed (it did not exist throughout), one
dropped is not listed again, and nothing can be listed twice because names only grow.
"""

from __future__ import annotations

import base64
import binascii
from bisect import bisect_right
from collections.abc import Sequence

from segcat import InvalidArgument, InvalidTableName, TableName

DEFAULT_LIMIT = 100
MAX_LIMIT = 1_000
_PREFIX = "t1."
MAX_CURSOR = 400
"""Longer than any encoded table name (two identifiers of at most 100 characters)."""


def encode_cursor(name: TableName) -> str:
    return _PREFIX + base64.urlsafe_b64encode(name.qualified.encode()).decode().rstrip("=")


def decode_cursor(text: str) -> TableName:
    """The table a cursor names; ``InvalidArgument`` naming ``cursor`` for anything else."""
    if len(text) > MAX_CURSOR or not text.startswith(_PREFIX):
        raise InvalidArgument("cursor: not a cursor of this server (use the 'next' of the page before)")
    body = text[len(_PREFIX) :]
    try:
        raw = base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()
        if encode_cursor(TableName.parse(raw)) != text:
            raise ValueError("not canonical")
        return TableName.parse(raw)
    except (binascii.Error, UnicodeDecodeError, ValueError, InvalidTableName):
        raise InvalidArgument(
            "cursor: not a cursor of this server (use the 'next' of the page before)"
        ) from None


def page_of(
    names: Sequence[TableName], after: TableName | None, limit: int
) -> tuple[list[TableName], TableName | None]:
    """The ``limit`` tables of sorted ``names`` after ``after``, and the cursor's table for the
    next page (None: this is the last page)."""
    start = 0 if after is None else bisect_right(names, after)
    page = list(names[start : start + limit])
    more = start + limit < len(names)
    return page, (page[-1] if more and page else None)
