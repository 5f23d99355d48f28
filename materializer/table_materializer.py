"""One table inside the materializer: image → Redis publisher, key-frame and archive writer.

Data flows one way (as in Kafka's own metadata image code): log record → rules (the
image) → publishers. Redis is a cache that may vanish at any moment; object storage is
where recovery starts. Every output is a deterministic function of the log, so a second
instance (or a restart) writing the same thing again is harmless.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from redis.exceptions import RedisError

from segcat.catalog.config import Config
from segcat.catalog.errors import ArchiveGap, CorruptArchive, ServiceUnavailable
from segcat.catalog.protocol import codec, lifecycle, rules
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.model import LogRecord
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.rules import Outcome, Verdict
from segcat.catalog.protocol.state import TableState
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.archive import ArchivedCommit, ArchivedRecord
from segcat.catalog.storage.frame_view import FrameView
from segcat.catalog.storage.redis import Head, RecordBatch, RedisStore, VersionEvent
from segcat.catalog.storage.table_files import TableFiles
from segcat.materializer import metrics
from segcat.materializer.backoff import RedisGate

log = logging.getLogger("segcat.materializer")

TEMP_GRACE_S = 60.0
"""Temp files younger than this may belong to a write in flight (another instance during a
rebalance) and are left alone; a whole-object write takes seconds at most."""
TEMP_SWEEP_EVERY_S = 3600.0
"""Besides every recovery, sweep again on a key frame write this long after the last sweep."""

_REDIS_ERRORS = (ServiceUnavailable, RedisError)
"""Redis trouble (down, wrong password, missing ACL permission): back off, never park the table."""


@dataclass(frozen=True)
class Pending:
    """An accepted commit not yet in a key frame: its delta and its record's value (to archive)."""

    delta: CommitDelta
    value: bytes


class TableMaterializer:
    """One table's image and outputs. Methods raise on anything but Redis trouble; the service
    parks the table then (``stage`` names what was being done) and later calls ``recover``."""

    def __init__(
        self,
        name: TableName,
        config: Config,
        redis: RedisStore | None,
        files: TableFiles,
        gate: RedisGate | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.redis = redis
        self.files = files
        self.gate = gate or RedisGate()
        self.stage = "recover"
        """What the table was doing last: recover, rules, redis, archive, keyframe."""
        self.state = TableState(name.qualified)
        self._frame = FrameView.from_state(self.state)
        self._pending: list[Pending] = []
        self._others: list[ArchivedRecord] = []
        """Records since the last key frame that were not accepted (archived with the commits)."""
        self._pending_bytes = 0
        self._pending_since = 0.0
        self._keyframe_version = -1
        self._redis_dirty = True
        self._batch: RecordBatch | None = None
        self._repair: list[int] = []
        self._label = name.qualified
        self._swept_at = 0.0

    # ------------------------------------------------------------------ recovery

    def recover(self) -> int:
        """Load the newest valid key frame from object storage; return the next offset to read.

        Committed consumer offsets are never trusted: the key frame says where replay starts.
        Also the way back from a failure: everything in memory is rebuilt from the frame.
        """
        self.stage = "recover"
        started = time.perf_counter()
        self._batch = None
        self._sweep_temp_files()
        search = self.files.find_newest_valid_keyframe()
        frame = search.frame
        if frame is None:
            self.state = TableState(self.name.qualified)
            self._frame = FrameView.from_state(self.state)
            source = "empty"
        else:
            self.state = frame.state()
            # Segments of an older Avro layout are re-encoded, so every frame written from
            # here on is in the current layout (sealing rows of two layouts would corrupt it).
            self._frame = (
                FrameView.from_keyframe(frame)
                if frame.layout == codec.current_fingerprint()
                else FrameView.from_state(self.state)
            )
            source = "object-store"
        self._keyframe_version = self.state.last_accepted_version if frame is not None else -1
        # frames newer than the one loaded that failed to load: rewrite them on the way
        self._repair = [v for v in search.failed if v > self._keyframe_version]
        if self._repair:
            log.warning(
                "unreadable key frames will be rewritten",
                extra={"table": self._label, "versions": self._repair},
            )
        self._pending.clear()
        self._others.clear()
        self._pending_bytes = 0
        self._redis_dirty = True
        metrics.RECOVERIES.labels(self._label, source).inc()
        log.info(
            "recovered table",
            extra={
                "table": self._label,
                "source": source,
                "version": self.state.version,
                "live_segments": self.state.live_count,
                "seconds": round(time.perf_counter() - started, 3),
            },
        )
        self._replay_archives(None)
        return self.state.version + 1

    def _replay_archives(self, upto: int | None) -> bool:
        """Apply the archived records after the image (up to ``upto``): a key frame older than the
        newest archive (the newer one was damaged) on a pruned log, or a hole in what Kafka hands
        out. Kafka is read only after them. Whether the archives covered anything."""
        try:
            end = self.files.archived_upto()
            if upto is not None:
                end = min(end, upto)
            if end <= self.state.version:
                return False
            records = list(self.files.records_between(self.state.version, end))
        except (ArchiveGap, CorruptArchive, OSError) as exc:
            log.warning("commit archives unreadable", extra={"table": self._label, "error": str(exc)})
            return False
        for record in records:
            self._apply(record, notify=False)
        self.state.version = max(self.state.version, end)  # the archives cover every offset to it
        log.info(
            "replayed commit archives", extra={"table": self._label, "upto": end, "records": len(records)}
        )
        return True

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

    # ------------------------------------------------------------------ applying

    def apply(self, record: LogRecord, *, notify: bool = True) -> Verdict:
        """Judge one record, publish what it changed, write a key frame when one is due.

        Offsets Kafka skipped before it (pruned or compacted away) come from the archives first."""
        if record.offset > self.state.version + 1:
            self._fill_hole(record.offset)
        return self._apply(record, notify=notify)

    def _apply(self, record: LogRecord, *, notify: bool) -> Verdict:
        if record.offset <= self.state.version:
            return Verdict(Outcome.DUPLICATE, record.offset, detail="already applied")
        self.stage = "rules"
        applied = rules.apply_record(self.state, record)
        verdict, delta = applied.verdict, applied.delta
        self.stage = "redis"
        metrics.RECORDS.labels(self._label, verdict.outcome.value).inc()
        if delta is not None and record.value is not None:
            if not self._pending:
                self._pending_since = time.monotonic()
            self._pending.append(Pending(delta, record.value))
            self._pending_bytes += len(record.value)
            prev_version = -1 if delta.prev_version is None else delta.prev_version
            event = VersionEvent(
                table=self._label,
                version=delta.version,
                prev_version=prev_version,
                timestamp_ms=delta.timestamp_ms,
                commit_id=delta.commit_id,
                operation=delta.operation.value,
                added=[s.segment_id for s in delta.added],
                dropped=list(delta.dropped),
                rows_delta=delta.rows_delta or 0,
                bytes_delta=delta.bytes_delta or 0,
            )
            self._publish((prev_version, record.value), event if notify else None)
            metrics.HEAD.labels(self._label).set(self.state.last_accepted_version)
            metrics.LIVE_SEGMENTS.labels(self._label).set(self.state.live_count)
            if self.keyframe_due():
                self.write_keyframe()
        else:
            self._others.append(
                ArchivedRecord(
                    record.offset, record.timestamp_ms, record.key, record.value, verdict.outcome.value
                )
            )
            self._publish(None, None)
        return verdict

    def _fill_hole(self, offset: int) -> None:
        """Kafka skipped offsets before ``offset`` (pruned or compacted away): the archives hold
        them if they were pruned; otherwise only superseded records are missing (a later record
        of the same key exists), which is all Kafka can tell, and it is logged."""
        missing_from = self.state.version + 1
        if not self._replay_archives(offset - 1):
            metrics.LOG_HOLES.labels(self._label).inc()
            log.warning(
                "offsets missing from the log and not in the archives",
                extra={"table": self._label, "from": missing_from, "to": offset - 1},
            )

    def _head(self) -> Head:
        state = self.state
        return Head(
            version=state.last_accepted_version,
            commit_id=state.last_commit_id,
            timestamp_ms=state.last_accepted_timestamp_ms if state.last_accepted_version >= 0 else None,
            live_count=state.live_count,
            live_bytes=state.live_bytes,
            live_rows=state.live_rows,
            keyframe_version=self._keyframe_version,
            offset=state.version,
        )

    def _publish(self, accepted: tuple[int, bytes] | None, event: VersionEvent | None) -> None:
        """Queue this record's Redis writes; ``flush`` sends the queue in one round trip.

        An accepted commit (``(prev_version, value)``) appends its stream entry and publishes
        ``event``; any other record only moves the head's offset.
        """
        if self.redis is None:
            return
        if not self.gate.open():
            self._batch = None
            self._redis_dirty = True  # rebuilt from the image once Redis answers again
            return
        if self._redis_dirty and not self.resync_redis():
            return
        if self._batch is None:
            self._batch = self.redis.batch()
        if accepted is not None:
            prev_version, value = accepted
            self._batch.publish_commit(
                self.name.qualified, self._head(), prev_version=prev_version, value=value, event=event
            )
        else:
            self._batch.advance_head(self.name.qualified, self._head())

    def flush(self) -> None:
        """Send the queued Redis writes (called after every poll batch and before key frames)."""
        if self._batch is None or not len(self._batch):
            return
        self.stage = "redis"
        batch, self._batch = self._batch, None
        if not self.gate.open():
            self._redis_dirty = True
            return
        started = time.perf_counter()
        count = len(batch)
        try:
            batch.flush()
        except _REDIS_ERRORS as exc:
            self._redis_failed(exc)
            return
        self.gate.succeeded()
        metrics.REDIS_PUBLISH_SECONDS.labels(self._label).observe((time.perf_counter() - started) / count)

    def _redis_failed(self, exc: Exception) -> None:
        """Redis is a cache: note the failure (the gate backs off and logs) and rebuild later."""
        metrics.REDIS_ERRORS.labels(self._label).inc()
        self._redis_dirty = True
        self.gate.failed(exc, self._label)

    # ------------------------------------------------------------------ Redis upkeep

    def resync_redis(self) -> bool:
        """(Re)build this table's Redis keys from the image: key frame + head. Whether it worked."""
        if self.redis is None:
            return False
        self._batch = None  # its writes are subsumed by the key frame and head written now
        if not self.gate.open():
            self._redis_dirty = True
            return False
        self.stage = "redis"
        self._frame = self._frame.apply(self._accepted_pending(), offset=self.state.version)
        sealed = keyframe.seal(self._frame.rows, self.state, self._frame.layout)
        try:
            self.redis.register_table(self.name.qualified)
            self.redis.put_keyframe(
                self.name.qualified, self.state.last_accepted_version, keyframe.to_ipc(sealed), trim=True
            )
            self.redis.advance_head(self.name.qualified, self._head())
        except _REDIS_ERRORS as exc:
            self._redis_failed(exc)
            return False
        self.gate.succeeded()
        if self._redis_dirty:
            log.info(
                "redis rebuilt", extra={"table": self._label, "version": self.state.last_accepted_version}
            )
        self._redis_dirty = False
        return True

    def check_redis(self) -> None:
        """Notice a flushed or restarted Redis (the head vanished or went back) and rebuild it."""
        if self.redis is None or not self.gate.open():
            return
        self.stage = "redis"
        try:
            head = self.redis.head(self.name.qualified)
            # the version, not the frame: fetching a big table's frame every second cost a
            # materializer tick milliseconds per table (readers verify the frame's checksum)
            keyframe_there = self.redis.keyframe_version(self.name.qualified) is not None
        except _REDIS_ERRORS as exc:
            self._redis_failed(exc)
            return
        # reads answering proves little (an ACL may allow reads only): writes reopen the gate
        if self._redis_dirty or head is None or head.offset < self.state.version or not keyframe_there:
            self._redis_dirty = True
            self.resync_redis()

    # ------------------------------------------------------------------ key frames

    def keyframe_due(self) -> bool:
        if not self._pending:
            return False
        if self._repair and self.state.last_accepted_version >= self._repair[0]:
            self._repair = [v for v in self._repair if v > self.state.last_accepted_version]
            return True
        if lifecycle.RESERVED_PROPERTIES & set(self._pending[-1].delta.table_properties):
            return True  # a prune or drop: archive the records it depends on at once
        return (
            len(self._pending) >= self.config.keyframe_every_commits
            or self._pending_bytes >= self.config.keyframe_every_bytes
            or time.monotonic() - self._pending_since >= self.config.keyframe_every_seconds
        )

    def tick(self) -> None:
        """Called periodically: time-based key frames (T) even when no commit arrives."""
        self.flush()
        if self.keyframe_due() and self.state.version == self.state.last_accepted_version:
            self.write_keyframe()

    def _accepted_pending(self) -> list[CommitDelta]:
        return [p.delta for p in self._pending]

    def write_keyframe(self) -> None:
        """Archive the commits since the last key frame, then write the key frame and ``_latest``."""
        self.flush()
        started = time.perf_counter()
        version = self.state.last_accepted_version
        self.stage = "keyframe"
        self._frame = self._frame.apply(self._accepted_pending(), offset=self.state.version)
        sealed = keyframe.seal(self._frame.rows, self.state, self._frame.layout)
        archived = [
            ArchivedCommit(d.version, d.timestamp_ms, d.commit_id, d.operation.value, p.value)
            for p in self._pending
            for d in (p.delta,)
        ]
        others = [o for o in self._others if o.version <= version]
        if archived or others:
            self.stage = "archive"
            self.files.write_archive(self._keyframe_version + 1, version, archived, others)
        self.stage = "keyframe"
        self.files.write_keyframe(sealed, version)
        self._keyframe_version = version
        self._pending.clear()
        self._others = [o for o in self._others if o.version > version]
        self._pending_bytes = 0
        if self.redis is not None and not self._redis_dirty and self.gate.open():
            self.stage = "redis"
            ipc = keyframe.to_ipc(sealed)
            metrics.KEYFRAME_BYTES.labels(self._label).set(len(ipc))
            try:
                self.redis.put_keyframe(self.name.qualified, version, ipc, trim=True)
                self.redis.advance_head(self.name.qualified, self._head())
            except _REDIS_ERRORS as exc:
                self._redis_failed(exc)
            else:
                self.gate.succeeded()
        if time.monotonic() - self._swept_at >= TEMP_SWEEP_EVERY_S:
            self._sweep_temp_files()
        seconds = time.perf_counter() - started
        metrics.KEYFRAME_SECONDS.labels(self._label).observe(seconds)
        log.info(
            "key frame written",
            extra={
                "table": self._label,
                "version": version,
                "live_segments": self.state.live_count,
                "archived_commits": len(archived),
                "seconds": round(seconds, 3),
            },
        )
