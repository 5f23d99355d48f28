"""``version="name"``: the one reading of a tag name as a version, for every reader.

A tag is the table property ``segcat.tag.<name>`` (``protocol.tags``); what it names is
read from the table's properties at the head, so a tag created, moved or dropped a moment ago
is what a reader gets. ``Table.snapshot``, ``Table.resolve_version``, ``si.read``, the data
source's ``versionAsOf`` and ``table.scan(version=)`` all come through here.
"""

from __future__ import annotations

from collections.abc import Mapping

from segcat.catalog.errors import InvalidArgument, VersionNotFound
from segcat.catalog.protocol.tags import check_tag_name, tags_of

MAX_LISTED = 10
"""Tags named in a ``VersionNotFound`` message, so a typo shows what exists."""


def resolve_tag(properties: Mapping[str, str], name: str, *, table: str | None = None) -> int:
    """The version tag ``name`` names in ``properties`` (a table's, at its head).

    ``InvalidArgument`` when ``name`` cannot be a tag name (``"12"`` is a number written as
    text, never a tag); ``VersionNotFound`` naming the tag when the table has no such tag.
    """
    if isinstance(name, str) and name.strip().lstrip("+-").isdigit():
        raise InvalidArgument(f"version {name!r} is text: give a version as an integer, or a tag name")
    check_tag_name(name)
    tags = tags_of(properties)
    version = tags.get(name)
    if version is None:
        where = f" of {table}" if table else ""
        known = ", ".join(list(tags)[:MAX_LISTED]) + (", ..." if len(tags) > MAX_LISTED else "")
        raise VersionNotFound(f"no tag {name!r}{where} (tags: {known or 'none'})")
    return version


def oldest_tagged(properties: Mapping[str, str]) -> int | None:
    """The lowest version any tag names (what vacuum and history retention keep); None: no tag."""
    return min(tags_of(properties).values(), default=None)
