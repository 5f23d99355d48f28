"""A table at one version: the live segments and everything else a reader needs.

One head, the Arrow frame (a key frame plus deltas, or a replayed image turned into one),
whichever source answered: readers list, prune and diff on its columns. Listing stays in
Arrow (``segments``, ``files_arrow``); Python objects are built only on request (``files``,
``segment_list``), and a lean frame (no ``segment_avro``) reads them from a full view of the
same version, which the table supplies.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from segcat.catalog.errors import UnsafeLocation
from segcat.catalog.protocol import lifecycle, locations
from segcat.catalog.protocol.expressions import Predicate, bloom_mask
from segcat.catalog.protocol.model import Protocol, Segment, Tombstone
from segcat.catalog.protocol.state import ALLOWED_LOCATIONS_PROPERTY, LOCATION_PROPERTY, TableState
from segcat.catalog.protocol.time_semantics import PROTOCOL, Semantics
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.frame_view import FrameView

_URI_MARK = re.compile(b"://")
"""What makes a segment path an absolute URI candidate (searched in a chunk's bytes at once)."""


@dataclass(frozen=True)
class SnapshotDiff:
    """What a coordinator must load and unload to move from one version to another."""

    from_version: int
    to_version: int
    added: tuple[Segment, ...]
    removed: tuple[Segment, ...]


class Snapshot:
    """Immutable view of a table as of ``version`` (the last accepted version ≤ the ask)."""

    def __init__(
        self,
        frame: FrameView | TableState,
        table_root: str,
        *,
        origin: str = "kafka",
        note: str | None = None,
        behind: int | None = 0,
        full_view: Callable[[int], FrameView] | None = None,
    ) -> None:
        self._view = frame if isinstance(frame, FrameView) else FrameView.from_state(frame)
        self._full_view = full_view
        """A full view (with ``segment_avro``) of the table at a given offset: where a lean
        frame's ``Segment`` objects come from."""
        self._fallback_root = table_root.rstrip("/")
        self._root = (self.location or table_root).rstrip("/")
        self.origin = origin
        """Where the answer came from: "redis", "object-store" or "kafka" (replay), or a source
        followed by "+kafka" when the log past the materialized head was judged here."""
        self.note = note
        """Something the caller should know about how the ask was resolved (e.g. an as_of in the future)."""
        self.behind = behind
        """How many log records this snapshot trails the log's end by (0 unless asked for a stale
        read; None: unknown, Kafka did not answer)."""

    # ------------------------------------------------------------------ scalars

    @property
    def table(self) -> str:
        return self._view.table

    @property
    def version(self) -> int:
        return self._view.version

    @property
    def timestamp_ms(self) -> int:
        return self._view.timestamp_ms

    @property
    def schema(self) -> str | None:
        return self._view.schema

    @property
    def properties(self) -> dict[str, str]:
        return dict(self._view.properties)

    @property
    def tombstones(self) -> tuple[Tombstone, ...]:
        return self._view.tombstones

    @property
    def live_count(self) -> int:
        return self._view.live_count

    @property
    def live_rows(self) -> int:
        return self._view.live_rows

    @property
    def live_bytes(self) -> int:
        return self._view.live_bytes

    @property
    def offset(self) -> int:
        """The last log offset this snapshot covers (≥ ``version``; records after ``version`` up to
        here were not accepted)."""
        return self._view.offset

    @property
    def protocol(self) -> Protocol:
        return self._view.protocol

    @property
    def log_start(self) -> int:
        """The first version still in Kafka (feature ``lifecycle``; 0 until the log is pruned)."""
        return lifecycle.log_start(self.protocol, self.properties)

    @property
    def dropped(self) -> bool:
        """Whether the table is dropped (only seen with ``snapshot(include_dropped=True)``)."""
        return lifecycle.is_dropped(self.protocol, self.properties)

    @property
    def location(self) -> str | None:
        """The table's recorded location (protocol 2), None for a table that never recorded one."""
        return self.properties.get(LOCATION_PROPERTY)

    @property
    def root(self) -> str:
        """Where relative segment paths live: the recorded location, else the configured warehouse's."""
        return self._root

    @property
    def allowed_locations(self) -> tuple[str, ...]:
        try:
            return locations.parse_allowed(self.properties.get(ALLOWED_LOCATIONS_PROPERTY))
        except ValueError:
            return ()

    # ------------------------------------------------------------------ segments

    @cached_property
    def segments(self) -> pa.Table:
        """Live segments, one row each: ids, paths, sizes and typed ``min:``/``max:``/``nulls:`` stats."""
        rows = self._view.rows
        return rows.drop_columns(["segment_avro"]) if "segment_avro" in rows.column_names else rows

    def segment_ids(self) -> frozenset[str]:
        return frozenset(self._view.rows.column("segment_id").to_pylist())

    def segment_list(self) -> list[Segment]:
        """Every live segment as a ``Segment`` (decoded on demand), ordered by id."""
        rows = self._avro_rows(self._view.rows)
        if rows.num_rows == 0:
            return []
        rows = rows.sort_by("segment_id")
        return keyframe.decode_segments(rows.column("segment_avro").to_pylist(), self._layout)

    def segment_page(self, after: str | None, limit: int) -> list[Segment]:
        """Up to ``limit`` live segments with ids after ``after``, ordered by id; only those are decoded."""
        rows = self._view.rows
        if after is not None and rows.num_rows:
            rows = rows.filter(pc.greater(rows.column("segment_id"), pa.scalar(after, pa.string())))
        if rows.num_rows == 0 or limit <= 0:
            return []
        indices = pc.select_k_unstable(
            rows, k=min(limit, rows.num_rows), sort_keys=[("segment_id", "ascending")]
        )
        page = self._avro_rows(rows.take(indices)).sort_by("segment_id")
        return keyframe.decode_segments(page.column("segment_avro").to_pylist(), self._layout)

    @cached_property
    def _full(self) -> FrameView:
        """A full view of this snapshot's offset (lean frames only): the same live segments, lossless."""
        if self._full_view is None:
            raise ValueError(f"{self.table} version {self.version}: a lean snapshot without a full view")
        full = self._full_view(self.offset)
        if full.version != self.version or full.live_count < self.live_count:
            raise ValueError(
                f"{self.table}: the full view at offset {self.offset} holds version {full.version}, "
                f"{full.live_count} segments; this snapshot {self.version}, {self.live_count}"
            )
        return full

    @property
    def _layout(self) -> bytes:
        return self._full.layout if self._view.lean else self._view.layout

    def _avro_rows(self, rows: pa.Table) -> pa.Table:
        """``rows`` with their ``segment_avro``: from the frame, or (lean) from the full view."""
        if "segment_avro" in rows.column_names:
            return rows
        if rows.num_rows == 0:
            return rows.append_column("segment_avro", pa.array([], pa.binary()))
        full = self._full.rows
        wanted = rows.column("segment_id")
        picked = full.filter(pc.is_in(full.column("segment_id"), value_set=wanted))
        if picked.num_rows != rows.num_rows:
            raise ValueError(f"{self.table} version {self.version}: the full view lacks live segments")
        return picked

    def files_arrow(self) -> pa.ChunkedArray:
        """Absolute paths / URIs of the live segment files as Arrow strings (in no set order).

        No Python object per file: listing a million files costs what moving their bytes costs.
        ``files()`` is this as a list. Relative paths get the table root put in front in one
        vectorised call; a chunk whose bytes hold no ``://`` at all has no absolute URI to check.
        """
        prefix = f"{self._root}/"
        chunks = [self._absolute(chunk, prefix) for chunk in self.segments.column("path").chunks]
        return pa.chunked_array(chunks, pa.string())

    def _absolute(self, paths: pa.StringArray, prefix: str) -> pa.Array:
        if len(paths) == 0:
            return paths
        data = paths.buffers()[2]
        joined = pc.utf8_replace_slice(paths, start=0, stop=0, replacement=prefix)
        if data is None or _URI_MARK.search(memoryview(data)) is None:
            return joined
        absolute = pc.match_substring(paths, "://")
        if pc.any(absolute).as_py():
            for path in pc.filter(paths, absolute).to_pylist():
                self.resolve(path)  # refuses files outside the table's locations
            joined = pc.if_else(absolute, paths, joined)
        return joined

    def files(self) -> list[str]:
        """Absolute paths / URIs of the live segment files (in no particular order): ``files_arrow()``
        as Python strings (a million of them cost more than the rest of an open + list)."""
        out: list[str] = self.files_arrow().to_pylist()
        return out

    def resolve(self, path: str) -> str:
        """The file a segment path names; ``UnsafeLocation`` when it lies outside the table's root
        and the locations the table allows (a protocol-1 log may hold such paths: they are
        never read)."""
        if not locations.is_absolute_uri(path):
            return f"{self._root}/{path}"
        problem = locations.allowed_problem(path, self._root, self.allowed_locations)
        if problem is not None:
            raise UnsafeLocation(f"{self.table} version {self.version}: {problem}")
        return path

    def prune(self, predicate: Predicate, semantics: Semantics = PROTOCOL) -> Snapshot:
        """The same version with only the segments that might hold rows matching ``predicate``.

        Never drops a segment holding a matching row under Spark SQL's comparison semantics
        (docs/PROTOCOL.md §4a) in the session ``semantics`` describes (default: the protocol's,
        UTC); it may keep segments without one. Min/max/null/NaN-count skipping is one
        vectorised pass over ``segments``; equality and ``isin`` then probe the Bloom filters
        of the surviving candidates, one batch per filtered column. A predicate that cannot be
        answered was refused when it was built (``InvalidPredicate``).
        """
        table = self.segments
        if table.num_rows == 0:
            return self
        mask = pc.fill_null(predicate.might_match(table, semantics), True)
        keep = np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)
        keep = bloom_mask(predicate, table, keep, semantics)
        rows = self._view.rows.filter(pa.array(keep, type=pa.bool_()))  # ``segments`` is these rows
        view = replace(
            self._view,
            rows=rows,
            live_rows=pc.sum(rows.column("row_count")).as_py() or 0,
            live_bytes=pc.sum(rows.column("size_bytes")).as_py() or 0,
        )
        return Snapshot(view, self._fallback_root, origin=self.origin, full_view=self._full_view)

    def diff(self, other: Snapshot) -> SnapshotDiff:
        """Segments to load (in ``other``, not here) and to unload (here, not in ``other``)."""
        mine, theirs = self.segment_ids(), other.segment_ids()
        added = other._select(theirs - mine)
        removed = self._select(mine - theirs)
        return SnapshotDiff(self.version, other.version, added, removed)

    def _select(self, ids: frozenset[str]) -> tuple[Segment, ...]:
        if not ids:
            return ()
        rows = self._view.rows
        wanted = pa.array(sorted(ids), pa.string())
        picked = replace(self._view, rows=rows.filter(pc.is_in(rows.column("segment_id"), value_set=wanted)))
        narrowed = Snapshot(picked, self._fallback_root, full_view=self._full_view)
        if self._view.lean:
            narrowed.__dict__["_full"] = self._full  # one full view per snapshot, however often asked
        return tuple(narrowed.segment_list())
