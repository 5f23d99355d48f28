"""Tags: named versions, kept as table properties ``segcat.tag.<name>`` (docs/PROTOCOL.md, *Tags*).

A tag is an ordinary ``SET_PROPERTIES`` of a reserved key, so the log stays the one record of
every catalog change and no rule or verdict changes: setting the key creates or moves the tag,
a null removes it. This module is the one reading of those keys, shared by readers (``version=
"name"``), vacuum and history retention (a tagged version is kept), the HTTP API and the
Iceberg publisher (tag refs).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from segcat.catalog.errors import InvalidArgument

TAG_PREFIX = "segcat.tag."
"""Table property prefix of a tag; the rest of the key is the tag's name."""

MAX_TAG_NAME = 128

_TAG_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]*")
"""A name never starts with a digit or a sign, so ``version="12"`` can never mean a tag."""

_DECIMAL = re.compile(r"(0|[1-9][0-9]{0,18})")


def check_tag_name(name: object) -> str:
    """``name`` if it can name a tag; ``InvalidArgument`` naming the field otherwise."""
    if not isinstance(name, str):
        raise InvalidArgument(f"tag name must be text, got {type(name).__name__}")
    if not name or len(name) > MAX_TAG_NAME or not _TAG_NAME.fullmatch(name):
        raise InvalidArgument(
            f"tag name {name[:MAX_TAG_NAME + 8]!r} is not a tag name: 1 to {MAX_TAG_NAME} of "
            "letters, digits, '_', '.', '-', starting with a letter or '_'"
        )
    return name


def tag_key(name: str) -> str:
    """The table property that holds tag ``name``."""
    return TAG_PREFIX + check_tag_name(name)


def tags_of(properties: Mapping[str, str]) -> dict[str, int]:
    """Every tag of a table's properties: name → version, sorted by name.

    A key under the prefix whose name is no tag name, or whose value is not a decimal version,
    is not a tag (segcat's writers never write one; another writer's stray text names nothing).
    """
    tags: dict[str, int] = {}
    for key, value in properties.items():
        if not key.startswith(TAG_PREFIX):
            continue
        name = key[len(TAG_PREFIX):]
        if not name or len(name) > MAX_TAG_NAME or not _TAG_NAME.fullmatch(name):
            continue
        if value is None or not _DECIMAL.fullmatch(value):
            continue
        tags[name] = int(value)
    return dict(sorted(tags.items()))


def oldest_tag(properties: Mapping[str, str]) -> int | None:
    """The lowest version any tag names (what vacuum, history retention and log pruning keep
    from); None when the table has no tag."""
    return min(tags_of(properties).values(), default=None)
