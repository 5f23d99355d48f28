"""A reader's view of a table built from a key frame plus accepted commits, all in Arrow.

Applying a batch of accepted commits is one ``is_in`` filter and one concat, so catching
a key frame up over thousands of deltas stays vectorised. Only ACCEPTED commits are
applied here (the Redis stream and the commit archives hold nothing else); judging raw
records is the rules' job, never this module's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc

from segcat.catalog.protocol import codec
from segcat.catalog.protocol.model import ColumnType, Commit, Protocol, Tombstone
from segcat.catalog.protocol.state import LiveSegment, TableState
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.keyframe import KeyFrame

AcceptedCommit = tuple[int, int, Commit]
"""(version, broker timestamp ms, commit)."""


@dataclass(frozen=True)
class FrameView:
    table: str
    rows: pa.Table
    """Wide reader columns + ``segment_avro``; one row per live segment, in no set order."""
    offset: int
    """The last log offset this view covers (≥ ``version``)."""
    version: int
    """The last accepted version (-1: the empty table)."""
    timestamp_ms: int
    tombstones: tuple[Tombstone, ...] = ()
    schema: str | None = None
    properties: Mapping[str, str] = field(default_factory=dict)
    live_rows: int = 0
    live_bytes: int = 0
    protocol: Protocol = field(default_factory=Protocol)
    column_types: Mapping[str, ColumnType] = field(default_factory=dict)
    """The table's stats column types: the wide columns of rows added later are cast to them."""
    layout: bytes = field(default_factory=codec.current_fingerprint)
    """The commit layout ``segment_avro`` is written in (older key frames: an older one)."""

    @classmethod
    def from_keyframe(cls, frame: KeyFrame) -> FrameView:
        meta = frame.meta
        state_bits = keyframe.meta_extras(frame)
        return cls(
            table=meta["table"],
            rows=frame.table.replace_schema_metadata(None),
            offset=meta["version"],
            version=meta["last_accepted_version"],
            timestamp_ms=meta["last_accepted_timestamp_ms"],
            tombstones=tuple(Tombstone(p, v) for p, v in meta["tombstones"]),
            schema=meta["schema"],
            properties=dict(meta["properties"]),
            live_rows=meta["live_rows"],
            live_bytes=meta["live_bytes"],
            protocol=state_bits.protocol,
            column_types=state_bits.column_types,
            layout=frame.layout,
        )

    @classmethod
    def from_state(cls, state: TableState) -> FrameView:
        return cls(
            table=state.table,
            rows=keyframe.segment_rows(state.segments.values(), state.stats_types()),
            offset=state.version,
            version=state.last_accepted_version,
            timestamp_ms=state.last_accepted_timestamp_ms,
            tombstones=tuple(state.tombstones),
            schema=state.schema,
            properties=dict(state.properties),
            live_rows=state.live_rows,
            live_bytes=state.live_bytes,
            protocol=state.protocol,
            column_types=state.stats_types(),
        )

    @property
    def live_count(self) -> int:
        return int(self.rows.num_rows)

    def apply(self, commits: Iterable[AcceptedCommit], *, offset: int | None = None) -> FrameView:
        """This view after ``commits`` (accepted, in version order, all after ``self.offset``)."""
        batch = [c for c in commits if c[0] > self.offset]
        if not batch:
            return self if offset is None or offset <= self.offset else replace(self, offset=offset)
        pending: dict[str, LiveSegment] = {}
        dropped: set[str] = set()
        tombstones = list(self.tombstones)
        properties = dict(self.properties)
        schema = self.schema
        protocol = self.protocol
        column_types = dict(self.column_types)
        for version, _, commit in batch:
            for drop in commit.drops:
                if pending.pop(drop, None) is None:
                    dropped.add(drop)
            for segment in commit.adds:
                pending[segment.segment_id] = LiveSegment(segment, version)
                for stats in segment.stats:
                    column_types.setdefault(stats.column, stats.type)
            if commit.protocol is not None:
                protocol = commit.protocol
            tombstones.extend(Tombstone(t.predicate, version) for t in commit.tombstones)
            if commit.schema is not None:
                schema = commit.schema
            for key, value in commit.table_properties.items():
                if value is None:
                    properties.pop(key, None)
                else:
                    properties[key] = value
        rows = self.rows
        live_rows, live_bytes = self.live_rows, self.live_bytes
        if dropped:
            hit = pc.is_in(rows.column("segment_id"), value_set=pa.array(sorted(dropped), pa.string()))
            gone = rows.filter(hit)
            live_rows -= pc.sum(gone.column("row_count")).as_py() or 0
            live_bytes -= pc.sum(gone.column("size_bytes")).as_py() or 0
            rows = rows.filter(pc.invert(hit))
        if pending:
            added = keyframe.segment_rows(pending.values(), column_types, self.layout)
            live_rows += sum(item.segment.row_count for item in pending.values())
            live_bytes += sum(item.segment.size_bytes for item in pending.values())
            rows = pa.concat_tables([rows, added], promote_options="permissive") if rows.num_rows else added
        last_version, last_ts, _ = batch[-1]
        return FrameView(
            table=self.table,
            rows=rows,
            offset=max(last_version, offset if offset is not None else last_version),
            version=last_version,
            timestamp_ms=last_ts,
            tombstones=tuple(tombstones),
            schema=schema,
            properties=properties,
            live_rows=live_rows,
            live_bytes=live_bytes,
            protocol=protocol,
            column_types=column_types,
            layout=self.layout,
        )
