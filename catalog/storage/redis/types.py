"""The values the Redis cache holds: the head, stream entries, a whole table (the events are
``catalog.protocol.version_change.VersionChange``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Head:
    """The newest materialized position of a table.

    ``version`` is the last ACCEPTED version; ``offset`` the last log offset applied
    (rejected commits and tombstones move it past ``version``). The CAS is on ``offset``.
    """

    version: int
    commit_id: str | None
    timestamp_ms: int | None
    live_count: int
    live_bytes: int
    live_rows: int
    keyframe_version: int
    offset: int
    log_id: str | None = None
    """The log (Kafka topic id) the head was materialized from; None: unbound (a log without a
    topic id, or a value written before the binding)."""

    def __post_init__(self) -> None:
        if self.offset < self.version:
            raise ValueError(f"head offset {self.offset} is below its version {self.version}")


@dataclass(frozen=True, slots=True)
class StreamEntry:
    """One accepted commit since the key frame; ``value`` is the raw Kafka record value."""

    version: int
    prev_version: int
    """The previous ACCEPTED version: readers chain these to detect gaps."""
    timestamp_ms: int
    value: bytes


@dataclass(frozen=True, slots=True)
class CachedTable:
    """Head, key frame and stream entries read in one MULTI block, so they are mutually consistent."""

    head: Head | None
    keyframe_version: int
    """-1 when Redis holds no key frame (the entries then chain from the empty table)."""
    keyframe: bytes | None
    deltas: list[StreamEntry]
    keyframe_log_id: str | None = None
    """The log the key frame was built from (None: unbound, or no key frame)."""

    def belongs_to(self, log_id: str | None) -> bool:
        """Whether head and key frame are this log's (any value does for an unbound ``log_id``)."""
        if log_id is None:
            return True
        return (
            self.head is not None
            and self.head.log_id == log_id
            and (self.keyframe is None or self.keyframe_log_id == log_id)
        )

    @property
    def complete(self) -> bool:
        """Whether key frame + entries rebuild the head's version without touching Kafka."""
        if self.head is None:
            return False
        return chain_is_complete(self.keyframe_version, self.deltas, end_version=self.head.version)


def chain_is_complete(
    start_version: int, deltas: Sequence[StreamEntry], end_version: int | None = None
) -> bool:
    """Whether ``deltas`` continue the state at ``start_version`` with no accepted commit missing.

    The first entry's ``prev_version`` may be *below* ``start_version`` (a state at a
    non-accepted offset S continues with the first commit after S, whose predecessor is the
    last accepted version ≤ S); every later entry must name its neighbour exactly. With
    ``end_version`` (normally the head's version) the chain must also reach it.
    """
    previous = start_version
    for i, delta in enumerate(deltas):
        if delta.version <= previous:
            return False
        if (delta.prev_version > previous) if i == 0 else (delta.prev_version != previous):
            return False
        previous = delta.version
    return end_version is None or previous >= end_version
