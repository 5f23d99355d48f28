"""A table at one version: the live segments and everything else a reader needs."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import pyarrow as pa

from catalog.model import Segment, Tombstone
from catalog.segments_arrow import segments_table
from catalog.state import TableState


@dataclass(frozen=True)
class SnapshotDiff:
    """What a coordinator must load and unload to move from one version to another."""

    from_version: int
    to_version: int
    added: tuple[Segment, ...]
    removed: tuple[Segment, ...]


class Snapshot:
    """Immutable view of ``state`` as of ``version`` (the last accepted version ≤ the ask)."""

    def __init__(self, state: TableState, table_root: str) -> None:
        self._state = state
        self._root = table_root.rstrip("/")

    @property
    def table(self) -> str:
        return self._state.table

    @property
    def version(self) -> int:
        return self._state.last_accepted_version

    @property
    def timestamp_ms(self) -> int:
        return self._state.last_accepted_timestamp_ms

    @property
    def state(self) -> TableState:
        return self._state

    @property
    def schema(self) -> str | None:
        return self._state.schema

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._state.properties)

    @property
    def tombstones(self) -> tuple[Tombstone, ...]:
        return tuple(self._state.tombstones)

    @property
    def live_count(self) -> int:
        return self._state.live_count

    @cached_property
    def segments(self) -> pa.Table:
        return segments_table(self._state.segments.values())

    def segment_list(self) -> list[Segment]:
        return [self._state.segments[k].segment for k in sorted(self._state.segments)]

    def files(self) -> list[str]:
        """Absolute paths / URIs of the live segment files."""
        return [self.resolve(s.path) for s in self.segment_list()]

    def resolve(self, path: str) -> str:
        return path if "://" in path else f"{self._root}/{path}"

    def diff(self, other: Snapshot) -> SnapshotDiff:
        """Segments to load (in ``other``, not here) and to unload (here, not in ``other``)."""
        mine, theirs = self._state.segments, other._state.segments
        added = tuple(theirs[k].segment for k in sorted(theirs.keys() - mine.keys()))
        removed = tuple(mine[k].segment for k in sorted(mine.keys() - theirs.keys()))
        return SnapshotDiff(self.version, other.version, added, removed)
