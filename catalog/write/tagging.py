"""Creating, moving and dropping tags (``Table.tag`` / ``drop_tag``, ``segcat tag``).

A tag is one ``SET_PROPERTIES`` of ``segcat.tag.<name>`` = the version (``protocol.tags``).
Creating one must never name a version whose files may already be gone, so the creator:

1. takes a version lease on V (vacuum keeps V's files from then on, ``read.lease``);
2. waits for every vacuum that was running when the lease was taken (``read.vacuum_fence``:
   such a vacuum may have read the leases before this one existed);
3. checks that V is readable: at or after the log start, at or before the head, its snapshot
   resolvable, and every file it lists that the head no longer lists still on storage;
4. commits the property, then releases the lease: from then on the tag keeps V's files.

Vacuum and history retention keep what a tagged version lists until the tag is dropped
(docs/LIFECYCLE.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

import pyarrow.fs as pafs

from segcat.catalog.config import Config
from segcat.catalog.errors import (
    DataFileMissing,
    InvalidArgument,
    ServiceUnavailable,
    TableDropped,
    VersionExpired,
    VersionNotFound,
)
from segcat.catalog.protocol import lifecycle
from segcat.catalog.protocol.model import Operation
from segcat.catalog.protocol.tags import check_tag_name, tag_key, tags_of
from segcat.catalog.read.lease import acquire_lease
from segcat.catalog.read.table import TableReader
from segcat.catalog.read.vacuum_fence import DEFAULT_WAIT_S, wait_for_older_fences
from segcat.catalog.storage.objectstore import filesystem
from segcat.catalog.storage.redis.leases import default_holder
from segcat.catalog.write.writer import Writer

TAG_HOLDER_KIND = "segcat-tag"
MAX_WAIT_S = 24 * 3600.0
CHECK_THREADS = 8
"""Files whose existence is checked at once (one metadata request each on object storage)."""


def create_tag(
    reader: TableReader,
    writer: Writer,
    name: str,
    version: int | str | None = None,
    *,
    replace: bool = False,
    wait_s: float = DEFAULT_WAIT_S,
) -> int:
    """Tag ``version`` (default: the head; a tag name: the version it names) as ``name``; the
    version of the commit that set it (the head's, when the tag already named that version).
    An offset whose record was not accepted is tagged as the version it reads as (the last
    accepted one before it), as ``snapshot(offset).version`` reports.

    ``InvalidArgument`` for a bad name, or a tag that exists when ``replace`` is false (moving
    a tag is ``replace=True``, as Iceberg's ``replaceTag``); ``VersionNotFound`` beyond the
    head; ``VersionExpired`` before the log start or the history kept; ``DataFileMissing``
    when a file of the version is gone; ``ServiceUnavailable`` without Redis (the lease that
    protects the version lives there) or when a vacuum outlasts ``wait_s``; ``TableDropped``.
    """
    check_tag_name(name)
    if not isinstance(replace, bool):
        raise InvalidArgument(f"replace must be true or false, not {replace!r}")
    if isinstance(wait_s, bool) or not isinstance(wait_s, int | float) or not 0 <= wait_s <= MAX_WAIT_S:
        raise InvalidArgument(f"wait_s must be a number of seconds from 0 to {MAX_WAIT_S:g}, not {wait_s!r}")
    if isinstance(version, bool) or not (version is None or isinstance(version, int | str)):
        raise InvalidArgument(f"a version is an integer offset or a tag name, not {version!r}")
    if reader.redis is None:
        raise ServiceUnavailable(
            f"tagging {reader.name} needs Redis: the version is leased while the tag is made "
            "(set SEGCAT_REDIS_URL)"
        )
    target = reader.resolve_version(version).bound
    if target < 0:
        raise VersionNotFound(f"{reader.name} has no version to tag yet (its log is empty)")
    _check_existing(reader, tags_of(writer.refresh().properties), name, target, replace)
    holder = default_holder(TAG_HOLDER_KIND)
    with acquire_lease(reader.redis, reader.name, target, holder=holder) as held:
        wait_for_older_fences(reader.redis, reader.name, timeout_s=wait_s)
        tagged = check_readable(reader, target)
        image = writer.refresh()
        if lifecycle.is_dropped(image.protocol, image.properties):
            raise TableDropped(f"table {reader.name} is dropped: undrop it before tagging")
        if _check_existing(reader, tags_of(image.properties), name, tagged, replace):
            return image.version
        if not held.held:
            raise ServiceUnavailable(
                f"the lease on version {target} of {reader.name} was lost while tagging it; nothing "
                "was committed (retry)"
            )
        commit = writer.new_commit(Operation.SET_PROPERTIES, table_properties={tag_key(name): str(tagged)})
        return writer.commit(commit)


def drop_tag(reader: TableReader, writer: Writer, name: str) -> int:
    """Remove tag ``name`` (its version is no longer kept for it); the commit's version.
    ``VersionNotFound`` naming the tag when the table has none of that name."""
    check_tag_name(name)
    tags = tags_of(writer.refresh().properties)
    if name not in tags:
        raise VersionNotFound(f"no tag {name!r} of {reader.name} (tags: {', '.join(tags) or 'none'})")
    return writer.commit(writer.new_commit(Operation.SET_PROPERTIES, table_properties={tag_key(name): None}))


def _check_existing(reader: TableReader, tags: dict[str, int], name: str, target: int, replace: bool) -> bool:
    """Whether the tag already names ``target`` (nothing to commit); ``InvalidArgument`` when
    it names another version and ``replace`` is false."""
    current = tags.get(name)
    if current is None:
        return False
    if not replace:
        raise InvalidArgument(
            f"tag {name!r} of {reader.name} already names version {current}: "
            "drop it first, or replace it (replace=True, `segcat tag create --replace`)"
        )
    return current == target


def check_readable(reader: TableReader, version: int) -> int:
    """That ``version`` can be read whole now: at or after the log start, its snapshot
    resolvable, and every file it lists that the head does not still on storage (the head's
    files are never vacuumed). Call it holding a lease on ``version``. Returns the accepted
    version that offset reads as (an offset whose record was not accepted reads as the last
    accepted version before it: that is the version a tag names)."""
    head = reader.snapshot(include_dropped=True)
    if version < head.log_start:
        raise VersionExpired(
            f"version {version} of {reader.name} is before the log start ({head.log_start}): a tag "
            "names a version the log still holds",
            oldest=head.log_start,
        )
    snapshot = reader.snapshot(version, include_dropped=True)
    older = set(snapshot.files()) - set(head.files())
    missing = missing_files(sorted(older), reader.config)
    if missing:
        more = f" and {len(missing) - 1} more" if len(missing) > 1 else ""
        raise DataFileMissing(
            f"version {version} of {reader.name} cannot be tagged: {missing[0]}{more} is gone from "
            "storage (vacuumed)"
        )
    if snapshot.version < 0:
        raise VersionNotFound(f"{reader.name} has no accepted version at or before offset {version}")
    return snapshot.version


def missing_files(uris: Iterable[str], config: Config) -> list[str]:
    """The files of ``uris`` (absolute paths or URIs) that storage does not hold, in order."""
    listed = list(uris)
    if not listed:
        return []
    systems: dict[str, pafs.FileSystem] = {}

    def where(uri: str) -> tuple[pafs.FileSystem, str]:
        if "://" not in uri or uri.startswith("file://"):
            return pafs.LocalFileSystem(), os.path.abspath(uri.removeprefix("file://"))
        parts = urlsplit(uri)
        root = f"{parts.scheme}://{parts.netloc}"
        if root not in systems:
            systems[root] = filesystem(root, config.s3_endpoint, config.s3_region)[0]
        return systems[root], f"{parts.netloc}{parts.path}"

    located = [where(uri) for uri in listed]

    def gone(item: tuple[pafs.FileSystem, str]) -> bool:
        try:
            return bool(item[0].get_file_info(item[1]).type == pafs.FileType.NotFound)
        except OSError as exc:
            raise ServiceUnavailable(f"could not look at {item[1]} on storage: {exc}") from exc

    with ThreadPoolExecutor(max_workers=CHECK_THREADS) as pool:
        flags = list(pool.map(gone, located))
    return [uri for uri, flag in zip(listed, flags, strict=True) if flag]
