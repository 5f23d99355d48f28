"""What one accepted commit changes in a table's image: the only thing an image applies.

The rules judge a record and, when they accept it, hand out its delta; the in-memory image
(``TableState.apply``) and the Arrow frame (``FrameView.apply``) both apply that one delta,
and everyone downstream (the materializer's Redis publisher and key frames, ``watch()``,
the Spark source) reads what changed from it instead of re-deriving it. As in Kafka's own
metadata code: log → delta → image → publishers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from segcat.catalog.protocol import versions
from segcat.catalog.protocol.model import Commit, Operation, Protocol, Segment, Tombstone


@dataclass(frozen=True, slots=True)
class CommitDelta:
    """One accepted version: its commit's adds, drops, tombstones, schema, properties, protocol."""

    version: int
    timestamp_ms: int
    """The broker's time of the version (LogAppendTime)."""
    commit: Commit
    """The accepted commit itself (its id, operation, writer and commit info)."""
    prev_version: int | None = None
    """The accepted version before this one; None when not known (a delta read back from a cache)."""
    rows_delta: int | None = None
    """Live rows after minus before; known when an image that held the dropped segments judged it."""
    bytes_delta: int | None = None
    live_count: int | None = None
    """Live segments after this version, when an image that judged it is at hand."""

    @property
    def commit_id(self) -> str:
        return self.commit.commit_id

    @property
    def operation(self) -> Operation:
        return self.commit.operation

    @property
    def added(self) -> tuple[Segment, ...]:
        return self.commit.adds

    @property
    def dropped(self) -> tuple[str, ...]:
        return self.commit.drops

    @property
    def tombstones(self) -> tuple[Tombstone, ...]:
        """The commit's tombstones, stamped with this version (they delete in data before it)."""
        return tuple(Tombstone(t.predicate, self.version) for t in self.commit.tombstones)

    @property
    def schema(self) -> str | None:
        return self.commit.schema

    @property
    def table_properties(self) -> Mapping[str, str | None]:
        return self.commit.table_properties

    @property
    def protocol(self) -> Protocol | None:
        """The protocol the table moves to (features in canonical order), or None."""
        return None if self.commit.protocol is None else versions.normalized(self.commit.protocol)

    @property
    def changes_data(self) -> bool:
        return bool(self.commit.adds or self.commit.drops or self.commit.tombstones)


def apply_properties(properties: dict[str, str], changes: Mapping[str, str | None]) -> None:
    """Table property changes: a value sets a key, None removes it."""
    for key, value in changes.items():
        if value is None:
            properties.pop(key, None)
        else:
            properties[key] = value
