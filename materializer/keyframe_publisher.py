"""The key-frame publisher: commit archives and key frames on object storage, where recovery starts.

Live, a key frame is cut after K commits, T seconds, D bytes or S segments, whichever comes
first (and at once after a prune or a drop, so the archive of the records they depend on is
written). While a backlog is caught up only when the commits held reach ``CATCHUP_BYTES_FACTOR``
× D, and once at its end (``CaughtUp``). Each frame is preceded by the archive of every record
since the previous one (accepted commits and the others), in that order, so nothing relies on
an object not written. Every output is a deterministic function of the log: a second instance
(or a restart) writing the same thing again is harmless.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from segcat.catalog.config import Config
from segcat.catalog.protocol import lifecycle
from segcat.catalog.protocol.names import TableName
from segcat.catalog.storage.archive import ArchivedCommit, ArchivedRecord
from segcat.catalog.storage.table_files import TableFiles
from segcat.materializer.frames import FrameBuilder, FrameOutput, Pending, SealedFrame
from segcat.materializer.publisher import CaughtUp, Loaded, Publisher, RecordDelta, TableDelta, TableImage

log = logging.getLogger("segcat.materializer")

TEMP_GRACE_S = 60.0
"""Temp files younger than this may belong to a write in flight (another instance during a
rebalance) and are left alone; a whole-object write takes seconds at most."""
TEMP_SWEEP_EVERY_S = 3600.0
"""Besides every recovery, sweep again on a key frame write this long after the last sweep."""
SEGMENTS_FRACTION = 10
"""Live mode: a key frame is also due once the segments added since the last one reach
max(S, live segments / this): a reader applies at most that tail of deltas after the frame,
and a table growing in bulk writes frames of geometrically growing size (≈ this many times
the last frame's cost in all), not one per S segments."""
CATCHUP_BYTES_FACTOR = 8
"""Catching up: an intermediate key frame only once the commits held for the next one reach
this many times D (bounding the memory they take and the replay a crash would cost)."""


@dataclass(frozen=True)
class _Archive(FrameOutput):
    """The records since the previous frame, up to the frame's version, archived before it."""

    stage = "archive"
    files: TableFiles
    first: int
    commits: tuple[Pending, ...]
    others: tuple[ArchivedRecord, ...]

    def write(self, frame: SealedFrame) -> None:
        commits = [
            ArchivedCommit(d.version, d.timestamp_ms, d.commit_id, d.operation.value, p.value)
            for p in self.commits
            for d in (p.delta,)
        ]
        self.files.write_archive(self.first, frame.version, commits, self.others)


@dataclass(frozen=True)
class _Store(FrameOutput):
    """The frame on object storage, and ``_latest`` naming it."""

    stage = "keyframe"
    done = "key frame written"
    files: TableFiles
    archived: int

    def write(self, frame: SealedFrame) -> None:
        self.files.write_keyframe(frame.table, frame.version)

    def log_fields(self) -> dict[str, Any]:
        return {"archived_commits": self.archived}


class KeyframePublisher(Publisher):
    """One table's archives and key frames. ``files`` is replaced by the bound one on ``Loaded``."""

    name = "keyframe"

    def __init__(self, table: TableName, config: Config, files: TableFiles, frames: FrameBuilder) -> None:
        self._label = table.qualified
        self._config = config
        self.files = files
        self._frames = frames
        self._pending: list[Pending] = []
        self._others: list[ArchivedRecord] = []
        """Records since the last key frame that were not accepted (archived with the commits)."""
        self._pending_bytes = 0
        self._pending_segments = 0
        self._pending_since = 0.0
        self._keyframe_version = -1
        """The newest key frame handed to the writer (the next archive starts after it)."""
        self._repair: list[int] = []
        """Versions of unreadable key frames newer than the one loaded: rewritten on the way."""
        self._swept_at = 0.0
        self.catching_up = False

    def publish(self, delta: TableDelta, image: TableImage) -> None:
        if isinstance(delta, RecordDelta):
            self._record(delta, image)
        elif isinstance(delta, Loaded):
            self._loaded(delta, image)
        elif isinstance(delta, CaughtUp):
            # a backlog ending in records that were not accepted gets its frame with the next
            # accepted commit (a frame is always cut right after one)
            self.catching_up = False
            if self._pending and image.at_version:
                self.write_keyframe(image)

    def tick(self, image: TableImage) -> None:
        """Time-based key frames (T) even when no commit arrives."""
        if not self.catching_up and self.keyframe_due(image) and image.at_version:
            self.write_keyframe(image)

    def due(self, image: TableImage) -> float | None:
        """T seconds after the first commit held for the next frame (live, at a version: a frame
        is cut only right after an accepted commit; otherwise the next record decides)."""
        if self.catching_up or not self._pending or not image.at_version:
            return None
        return self._pending_since + self._config.keyframe_every_seconds

    def _loaded(self, delta: Loaded, image: TableImage) -> None:
        self.files = delta.files
        self._sweep_temp_files()
        self._keyframe_version = image.version if delta.from_keyframe else -1
        self._repair = [v for v in delta.unreadable if v > self._keyframe_version]
        if self._repair:
            log.warning(
                "unreadable key frames will be rewritten",
                extra={"table": self._label, "versions": self._repair},
            )
        self._pending = []
        self._others = []
        self._pending_bytes = 0
        self._pending_segments = 0
        self.catching_up = False

    def _record(self, delta: RecordDelta, image: TableImage) -> None:
        if not delta.live:
            self.catching_up = True
        commit, record = delta.commit, delta.record
        if commit is None or record.value is None:
            self._others.append(
                ArchivedRecord(
                    record.offset, record.timestamp_ms, record.key, record.value, delta.verdict.outcome.value
                )
            )
            return
        if not self._pending:
            self._pending_since = time.monotonic()
        self._pending.append(Pending(commit, record.value))
        self._pending_bytes += len(record.value)
        self._pending_segments += len(commit.added)
        if self.keyframe_due(image):
            self.write_keyframe(image)

    def keyframe_due(self, image: TableImage) -> bool:
        if not self._pending:
            return False
        if self._repair and image.version >= self._repair[0]:
            self._repair = [v for v in self._repair if v > image.version]
            return True
        changes = self._pending[-1].delta.table_properties
        if changes and not lifecycle.RESERVED_PROPERTIES.isdisjoint(changes):
            return True  # a prune or drop: archive the records it depends on at once
        config = self._config
        if self.catching_up:
            return self._pending_bytes >= CATCHUP_BYTES_FACTOR * config.keyframe_every_bytes
        return (
            len(self._pending) >= config.keyframe_every_commits
            or self._pending_bytes >= config.keyframe_every_bytes
            or self._pending_segments
            >= max(config.keyframe_every_segments, image.live_count // SEGMENTS_FRACTION)
            or time.monotonic() - self._pending_since >= config.keyframe_every_seconds
        )

    def write_keyframe(self, image: TableImage) -> None:
        """Archive the records since the last key frame, then write the key frame and ``_latest``:
        asked of the frame builder, written in the writer thread at the end of this round."""
        version = image.version
        pending, self._pending = tuple(self._pending), []
        others = tuple(o for o in self._others if o.version <= version)
        self._others = [o for o in self._others if o.version > version]
        outputs: list[FrameOutput] = []
        if pending or others:
            outputs.append(_Archive(self.files, self._keyframe_version + 1, pending, others))
        outputs.append(_Store(self.files, len(pending) if outputs else 0))
        self._keyframe_version = version
        self._pending_bytes = 0
        self._pending_segments = 0
        self._frames.request(*outputs)
        if time.monotonic() - self._swept_at >= TEMP_SWEEP_EVERY_S:
            self._sweep_temp_files()

    def _sweep_temp_files(self) -> None:
        """Remove temp files a killed materializer left under this table's ``_catalog/``."""
        self._swept_at = time.monotonic()
        try:
            removed = self.files.remove_stale_temp_files(TEMP_GRACE_S)
        except OSError as exc:  # housekeeping only: never a reason to fail
            log.warning("temp file cleanup failed", extra={"table": self._label, "error": str(exc)})
            return
        if removed:
            log.info("removed stale temp files", extra={"table": self._label, "paths": removed})
