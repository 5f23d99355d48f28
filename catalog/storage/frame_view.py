"""The Arrow form of a table's image: a key frame's rows plus the deltas after it.

Applying a batch of deltas is one ``is_in`` filter and one concat, so catching a key frame
up over thousands of deltas stays vectorised. The same ``CommitDelta`` the in-memory image
applies is applied here (the Redis stream and the commit archives hold accepted commits
only); judging raw records is the rules' job, never this module's. The materializer keeps
its key frames' rows in this form, with ``segment_avro`` (what it seals key frames with).

Readers keep *lean* views: the wide columns only. ``segment_avro`` is lossless but no
reader lists or prunes on it, and building it for the segments of the deltas meant
re-encoding each one to Avro; a lean view applies record bytes straight into Arrow
(``apply_encoded``, ``delta_arrow``) and whoever needs ``Segment`` objects reads them from
a full view of the same version (``Snapshot.segment_list``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace

import pyarrow as pa
import pyarrow.compute as pc

from segcat.catalog.protocol import codec
from segcat.catalog.protocol.delta import CommitDelta, apply_properties
from segcat.catalog.protocol.model import ColumnType, Protocol, Tombstone
from segcat.catalog.protocol.state import LiveSegment, TableState
from segcat.catalog.storage import delta_arrow, keyframe
from segcat.catalog.storage.delta_arrow import EncodedCommit
from segcat.catalog.storage.keyframe import KeyFrame
from segcat.catalog.storage.segments_arrow import AVRO_COLUMN, segments_table


@functools.cache
def _empty_rows(*, lean: bool) -> pa.Table:
    """The rows of an image without segments or stats columns, built once: Arrow tables are
    immutable, and a materializer following thousands of empty tables would otherwise keep a
    schema's worth of Arrow objects for each."""
    if lean:
        return segments_table((), {})
    return keyframe.segment_rows((), {})


SLICE_FROM = 8
"""A full view cuts the segments' Avro out of a commit's record from this many added segments on:
parsing the record again costs more than encoding one segment and much less than encoding
many, so small commits keep encoding."""


@dataclass(frozen=True)
class FrameView:
    table: str
    rows: pa.Table
    """Wide reader columns (+ ``segment_avro`` unless lean); one row per live segment, in no set order."""
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
    def from_keyframe(cls, frame: KeyFrame, *, lean: bool = False) -> FrameView:
        """The view of ``frame``; ``lean`` drops ``segment_avro`` (readers: a lean Redis copy has none)."""
        rows = frame.table.replace_schema_metadata(None)
        if lean and AVRO_COLUMN in rows.column_names:
            rows = rows.drop_columns([AVRO_COLUMN])
        elif not lean and AVRO_COLUMN not in rows.column_names:
            raise ValueError("a lean key frame (the Redis copy) cannot make a full view")
        return cls.of(keyframe.header(frame), rows, frame.layout)

    @classmethod
    def from_state(cls, state: TableState, *, lean: bool = False) -> FrameView:
        """The view of an in-memory image; ``lean``: without ``segment_avro`` (nothing re-encoded)."""
        if not state.segments and not state.column_types:
            rows = _empty_rows(lean=lean)
        elif lean:
            rows = segments_table(state.segments.values(), state.stats_types())
        else:
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

    @property
    def lean(self) -> bool:
        """Whether the rows lack ``segment_avro`` (a reader's view)."""
        return AVRO_COLUMN not in self.rows.column_names

    def before_appends(
        self,
        bound: int,
        version: int,
        timestamp_ms: int,
        column_versions: Mapping[str, tuple[ColumnType, int]],
    ) -> FrameView:
        """This view as it was at offset ``bound``, when every accepted commit after ``bound`` that
        it covers was an APPEND of protocol ≥ 2 (adds only: no drops, tombstones, properties,
        schema or protocol). The rows added after ``bound`` leave, and so do the stats columns
        first typed after it (``column_versions``: each column's type and the version that fixed
        it); ``version`` / ``timestamp_ms`` are those of the last accepted commit ≤ ``bound``.
        """
        if not version <= bound < self.offset:
            raise ValueError(f"version {version} and bound {bound} do not lie before offset {self.offset}")
        late = {c for c, (_, fixed) in column_versions.items() if fixed > bound}
        rows = self.rows.filter(pc.less_equal(self.rows.column("added_version"), bound))
        stale = [n for n in rows.column_names if n.split(":", 1)[-1] in late and ":" in n]
        if stale:
            rows = rows.drop_columns(stale)
        return replace(
            self,
            rows=rows,
            offset=bound,
            version=version,
            timestamp_ms=timestamp_ms,
            live_rows=_total(rows.column("row_count")),
            live_bytes=_total(rows.column("size_bytes")),
            column_types={c: t for c, (t, fixed) in column_versions.items() if fixed <= bound},
        )

    def apply_encoded(self, commits: Iterable[EncodedCommit], *, offset: int | None = None) -> FrameView:
        """``apply`` for accepted commits as the log holds them (Redis stream, commit archives).

        A lean view decodes them straight into Arrow rows (``delta_arrow``): no ``Segment``
        objects, no Avro re-encoding. ``DecodeError`` when a record does not decode.
        """
        batch = [c for c in commits if c.version > self.offset]
        if not self.lean:  # a full view keeps the exact path (it needs the segments' Avro)
            return self.apply(
                [CommitDelta(c.version, c.timestamp_ms, codec.decode_commit(c.value)) for c in batch],
                offset=offset,
                values={c.version: c.value for c in batch},
            )
        return self.apply_decoded([delta_arrow.decode(c) for c in batch], offset=offset)

    def apply_decoded(
        self, commits: Iterable[delta_arrow.ArrowCommit], *, offset: int | None = None
    ) -> FrameView:
        """``apply_encoded`` on commits already decoded by ``delta_arrow.decode`` (lean views only)."""
        if not self.lean:
            raise ValueError("a full view applies CommitDelta objects (apply)")
        batch = [c for c in commits if c.version > self.offset]
        column_types = dict(self.column_types)
        pending: dict[str, tuple[int, int]] = {}
        dropped: set[str] = set()
        total = 0
        for ci, commit in enumerate(batch):
            for drop in commit.delta.dropped:
                if pending.pop(drop, None) is None:
                    dropped.add(drop)
            delta_arrow.note_column_types(commit.adds, column_types)
            for row, segment_id in enumerate(commit.adds.ids):
                pending[segment_id] = (ci, row)
            total += len(commit.adds)
        added = None
        if pending:
            every = len(pending) == total  # no segment dropped or added twice within the batch
            added = delta_arrow.rows(
                [(c.adds, c.version) for c in batch],
                None if every else sorted(pending.values()),
                column_types,
            )
        return self._fold([c.delta for c in batch], dropped, added, column_types, offset)

    def apply(
        self,
        deltas: Iterable[CommitDelta],
        *,
        offset: int | None = None,
        values: Mapping[int, bytes] | None = None,
    ) -> FrameView:
        """This view after ``deltas`` (accepted, in version order, all after ``self.offset``),
        covering the log up to ``offset`` when given (records after the last delta that were
        not accepted).

        ``values`` (version → the record's value): a full view takes the ``segment_avro`` of a
        commit adding at least ``SLICE_FROM`` segments from its record's bytes as they are
        instead of encoding each segment again (finding them means parsing the record once more,
        which costs more than encoding one or two segments).
        """
        batch = [d for d in deltas if d.version > self.offset]
        pending: dict[str, LiveSegment] = {}
        known: dict[str, bytes] = {}
        dropped: set[str] = set()
        column_types = dict(self.column_types)
        slicing = values is not None and not self.lean and self.layout == codec.current_fingerprint()
        for delta in batch:
            for drop in delta.dropped:
                if pending.pop(drop, None) is None:
                    dropped.add(drop)
            cut = _cut(delta, values) if slicing and len(delta.added) >= SLICE_FROM else None
            for index, segment in enumerate(delta.added):
                pending[segment.segment_id] = LiveSegment(segment, delta.version)
                if cut is not None:
                    known[segment.segment_id] = cut[index]
                elif known:
                    known.pop(segment.segment_id, None)  # added again, by a commit not cut
                for stats in segment.stats:
                    column_types.setdefault(stats.column, stats.type)
        added: pa.Table | None = None
        if pending:
            added = (
                segments_table(pending.values(), column_types)
                if self.lean
                else keyframe.segment_rows(pending.values(), column_types, self.layout, known=known)
            )
        return self._fold(batch, dropped, added, column_types, offset)

    def _fold(
        self,
        batch: list[CommitDelta],
        dropped: set[str],
        added: pa.Table | None,
        column_types: dict[str, ColumnType],
        offset: int | None,
    ) -> FrameView:
        """The view after ``batch``: the ``dropped`` segments leave the rows, ``added`` (the rows of
        the segments the batch added and kept) joins them; the rest of each delta is applied."""
        if not batch:
            return self if offset is None or offset <= self.offset else replace(self, offset=offset)
        tombstones = list(self.tombstones)
        properties = dict(self.properties)
        schema = self.schema
        protocol = self.protocol
        for delta in batch:
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
            live_rows -= _total(gone.column("row_count"))
            live_bytes -= _total(gone.column("size_bytes"))
            rows = rows.filter(pc.invert(hit))
        if added is not None and added.num_rows:
            live_rows += _total(added.column("row_count"))
            live_bytes += _total(added.column("size_bytes"))
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


def _cut(delta: CommitDelta, values: Mapping[int, bytes] | None) -> list[bytes] | None:
    """The Avro bytes of ``delta``'s added segments, in order, cut from its record's value; None
    when there is no value or it does not parse to exactly those segments."""
    value = None if values is None else values.get(delta.version)
    adds = None if value is None else delta_arrow.segment_bytes(value)
    if adds is None or adds.ids != [s.segment_id for s in delta.added]:
        return None
    return adds.avro


def _total(column: pa.ChunkedArray) -> int:
    """The exact sum of an int64 column: Arrow's (wrapping) sum when no overflow is possible."""
    if len(column) == 0:
        return 0
    bounds = pc.min_max(column)
    low, high = bounds["min"].as_py() or 0, bounds["max"].as_py() or 0
    if max(abs(low), abs(high)) * len(column) < 2**63:
        return int(pc.sum(column).as_py() or 0)
    return sum(v for v in column.to_pylist() if v is not None)
