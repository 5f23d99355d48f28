"""The Arrow form of a table's image: a key frame's rows plus the deltas after it.

Applying a batch of deltas is one ``is_in`` filter and one concat, so catching a key frame
up over thousands of deltas stays vectorised. The same ``CommitDelta`` the in-memory image
applies is applied here (the Redis stream and the commit archives hold accepted commits
only); judging raw records is the rules' job, never this module's. The materializer keeps
its key frames' rows in this form; readers list and prune on it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc

from segcat.catalog.protocol import codec
from segcat.catalog.protocol.delta import CommitDelta, apply_properties
from segcat.catalog.protocol.model import ColumnType, Protocol, Tombstone
from segcat.catalog.protocol.state import LiveSegment, TableState
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.keyframe import KeyFrame


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
        return cls.of(keyframe.header(frame), frame.table.replace_schema_metadata(None), frame.layout)

    @classmethod
    def from_state(cls, state: TableState) -> FrameView:
        rows = keyframe.segment_rows(state.segments.values(), state.stats_types())
        return cls.of(state, rows, codec.current_fingerprint())

    @classmethod
    def of(cls, image: TableState, rows: pa.Table, layout: bytes) -> FrameView:
        """``rows`` (the image's segments) beside everything else of ``image``."""
        return cls(
            table=image.table,
            rows=rows,
            offset=image.version,
            version=image.last_accepted_version,
            timestamp_ms=image.last_accepted_timestamp_ms,
            tombstones=tuple(image.tombstones),
            schema=image.schema,
            properties=dict(image.properties),
            live_rows=image.live_rows,
            live_bytes=image.live_bytes,
            protocol=image.protocol,
            column_types=image.stats_types(),
            layout=layout,
        )

    @property
    def live_count(self) -> int:
        return int(self.rows.num_rows)

    def apply(self, deltas: Iterable[CommitDelta], *, offset: int | None = None) -> FrameView:
        """This view after ``deltas`` (accepted, in version order, all after ``self.offset``),
        covering the log up to ``offset`` when given (records after the last delta that were
        not accepted)."""
        batch = [d for d in deltas if d.version > self.offset]
        if not batch:
            return self if offset is None or offset <= self.offset else replace(self, offset=offset)
        pending: dict[str, LiveSegment] = {}
        dropped: set[str] = set()
        tombstones = list(self.tombstones)
        properties = dict(self.properties)
        schema = self.schema
        protocol = self.protocol
        column_types = dict(self.column_types)
        for delta in batch:
            for drop in delta.dropped:
                if pending.pop(drop, None) is None:
                    dropped.add(drop)
            for segment in delta.added:
                pending[segment.segment_id] = LiveSegment(segment, delta.version)
                for stats in segment.stats:
                    column_types.setdefault(stats.column, stats.type)
            tombstones.extend(delta.tombstones)
            if delta.schema is not None:
                schema = delta.schema
            apply_properties(properties, delta.table_properties)
            if delta.protocol is not None:
                protocol = delta.protocol
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
        last = batch[-1]
        return FrameView(
            table=self.table,
            rows=rows,
            offset=max(last.version, offset if offset is not None else last.version),
            version=last.version,
            timestamp_ms=last.timestamp_ms,
            tombstones=tuple(tombstones),
            schema=schema,
            properties=properties,
            live_rows=live_rows,
            live_bytes=live_bytes,
            protocol=protocol,
            column_types=column_types,
            layout=self.layout,
        )
