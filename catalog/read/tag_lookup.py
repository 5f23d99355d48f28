"""``version="name"``: a tag's version, as every reader resolves it (``Table.scan``, ``snapshot``).

A tag is the table property ``segcat.tag.<name>`` (``catalog.protocol.tags``). Readers resolve
it at the head, as of the log's end: a tag moved or dropped a moment ago is seen moved or gone,
as Iceberg's ``refs`` read from the current metadata. A tag name never starts with a digit, so
text can never be both a version number and a tag.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from segcat.catalog.errors import InvalidArgument, VersionNotFound
from segcat.catalog.protocol.tags import MAX_TAG_NAME, check_tag_name, tags_of


def tag_version(name: str, properties: Mapping[str, str], table: object) -> int:
    """The version tag ``name`` names in ``properties`` (the head's); ``VersionNotFound`` naming
    the tag (and the tags there are) when the table has none of that name."""
    tags = tags_of(properties)
    found = tags.get(name)
    if found is None:
        known = ", ".join(sorted(tags)[:10]) or "none"
        raise VersionNotFound(f"version {name!r}: {table} has no tag {name!r} (its tags: {known})")
    return found


def version_or_tag(
    version: object, head_properties: Callable[[], Mapping[str, str]], table: object
) -> object:
    """``version`` with a tag name replaced by its version; anything else is handed on unchanged
    (the snapshot checks numbers). ``head_properties`` is called only for a tag name."""
    if not isinstance(version, str):
        return version
    try:
        name = check_tag_name(version)
    except InvalidArgument:
        raise InvalidArgument(
            f"version {version[: MAX_TAG_NAME + 8]!r} is neither a version (an integer) nor a tag name"
        ) from None
    return tag_version(name, head_properties(), table)
