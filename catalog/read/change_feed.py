"""``Table.changes(start, end)``: the change feed of versions start..end as Arrow record batches.

Planned eagerly, read lazily. The call checks its arguments, takes a version lease on the
version before ``start`` (vacuum keeps every file of every version at or after a leased one,
docs/LIFECYCLE.md), rebuilds the image at ``start - 1`` (newest key frame + the records after
it) and follows the log to ``end`` with a ``ChangeTracker``, so every version's
``VersionFiles`` and the schema to read them all with are known before the first row is
read; a tombstone no Arrow reader can apply fails here (``UnsupportedPredicate``), not midway.
Iterating then reads the files (``change_batches``) while the lease is held; closing the feed
(or exhausting it, or leaving ``with``) releases it.
"""

from __future__ import annotations

import weakref
from collections.abc import Generator, Iterator, Sequence
from typing import TYPE_CHECKING

import pyarrow as pa

from segcat.catalog.errors import InvalidArgument, LogPruned, VersionExpired, VersionNotFound
from segcat.catalog.log.follower import Follower, collect_accepted
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read.changes import (
    CHANGE_COLUMNS,
    ChangeTracker,
    VersionFiles,
    change_batches,
    check_predicates,
    reads_schema,
)
from segcat.catalog.read.column_choice import chosen_columns
from segcat.catalog.read.lease import HeldLease, hold_or_warn
from segcat.catalog.storage.redis.leases import MAX_VERSION, default_holder

if TYPE_CHECKING:
    from segcat.catalog.read.table import TableReader


class ChangeFeed(Iterator[pa.RecordBatch]):
    """The change feed's record batches, in version order (within a version: deletes, then inserts).

    ``versions``: each version's ``VersionFiles``; ``schema``: every batch's schema (the table's
    columns, then ``_change_type``, ``_commit_version``, ``_commit_timestamp``). ``lease``: the
    version lease held while reading (None without Redis). Close it (or use ``with``) to release
    the lease early; it is released when exhausted, or when the object is collected.
    """

    def __init__(
        self,
        reader: TableReader,
        versions: Sequence[VersionFiles],
        schema: pa.Schema,
        columns: Sequence[str] | None,
        lease: HeldLease | None,
    ) -> None:
        self.versions = tuple(versions)
        self.table_schema = schema
        self.lease = lease
        names = schema.names if columns is None else list(columns)
        self.schema = pa.schema([*(schema.field(n) for n in names), *CHANGE_COLUMNS])
        self._rows = self._batches(reader, names)
        self._release = weakref.finalize(self, lease.release) if lease is not None else None

    def _batches(self, reader: TableReader, names: Sequence[str]) -> Generator[pa.RecordBatch, None, None]:
        keep = [*names, *CHANGE_COLUMNS.names]
        for vf in self.versions:
            for batch in change_batches(vf, self.table_schema, reader.config):
                yield batch.select(keep)

    def __iter__(self) -> ChangeFeed:
        return self

    def __next__(self) -> pa.RecordBatch:
        try:
            return next(self._rows)
        except StopIteration:
            self.close()
            raise
        except BaseException:
            self.close()
            raise

    def read_all(self) -> pa.Table:
        """Every remaining batch as one table (all of it in memory)."""
        return pa.Table.from_batches(list(self), schema=self.schema)

    def close(self) -> None:
        self._rows.close()
        if self._release is not None:
            self._release()

    def __enter__(self) -> ChangeFeed:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


def _version_argument(value: object, field: str, *, optional: bool = False) -> int | None:
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_VERSION:
        raise InvalidArgument(f"{field} is a version: an integer from 0 to {MAX_VERSION}, not {value!r}")
    return value


def _columns_argument(columns: object, schema: pa.Schema) -> list[str] | None:
    return chosen_columns(columns, schema, "the table in these versions")


def open_changes(
    reader: TableReader, start: object, end: object = None, columns: object = None, holder: str | None = None
) -> ChangeFeed:
    """The change feed of versions ``start``..``end`` (inclusive; default: the head). See module doc."""
    first = _version_argument(start, "start")
    last = _version_argument(end, "end", optional=True)
    assert first is not None
    head = reader.log_end()
    if last is None:
        last = head
    if last > head:
        raise VersionNotFound(
            f"end {last}: version {last} of {reader.name} does not exist yet (the log ends at {head})"
        )
    if first > last:
        where = f"the head ({head})" if end is None else f"end ({last})"
        raise InvalidArgument(
            f"start {first} is after {where}: the change feed of start..end is empty by mistake"
        )
    base = first - 1
    held = reader.lease(max(base, 0), holder=holder or default_holder("changes"))
    lease = hold_or_warn(held)
    try:
        versions, tracker = _plan(reader, base, last)
        reads = [r for vf in versions if vf.changes_rows for r in (*vf.inserted, *vf.deleted)]
        # the columns of every file read, and of the table at ``end`` (a range of compactions too)
        schema = reads_schema([*reads, *tracker.live_reads()], reader.config)
        check_predicates(reads, schema)
        names = _columns_argument(columns, schema)
        return ChangeFeed(reader, versions, schema, names, lease)
    except BaseException:
        if lease is not None:
            lease.release()
        raise


def _plan(reader: TableReader, base: int, last: int) -> tuple[list[VersionFiles], ChangeTracker]:
    """Every accepted version in (base, last] as ``VersionFiles``, from the image at ``base``."""
    with Follower.from_keyframe(
        reader.config, reader.name, reader.files, at_most=base, full=True
    ) as follower:
        try:
            image = follower.catch_up(base, exact=True) if base >= 0 else TableState(reader.name.qualified)
            if follower.state.version > base >= 0:
                raise LogPruned(f"no image of {reader.name} at version {base} (the key frames start later)")
            tracker = ChangeTracker(image, root=reader.root)
            found: list[CommitDelta] = []
            follower.catch_up(last, listener=collect_accepted(found, after=base), exact=True)
        except LogPruned as exc:
            raise _expired(reader, base, exc) from exc
    return [tracker.observe(delta) for delta in found], tracker


def _expired(reader: TableReader, base: int, exc: LogPruned) -> VersionExpired:
    oldest = None
    if reader.files is not None:
        try:
            oldest = reader.files.oldest_readable()
        except OSError:
            oldest = None
    start = base + 1
    return VersionExpired(
        f"start {start}: the versions of {reader.name} from {start} on are no longer all kept "
        + (
            f"(the oldest readable version is {oldest}; start at {oldest + 1} or later)"
            if oldest is not None
            else ""
        )
        + f": {exc}",
        oldest=oldest,
    )
