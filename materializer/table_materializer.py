"""One table inside the materializer: image → Redis publisher, key-frame and archive writer.

Data flows one way (as in Kafka's own metadata image code): log record → rules (the
image) → publishers. Redis is a cache that may vanish at any moment; object storage is
where recovery starts. Every output is a deterministic function of the log, so a second
instance (or a restart) writing the same thing again is harmless.

Two modes. *Live* (the records a consumer finds on assignment have been applied): every
accepted commit is one Redis script call (head + delta + event) sent per poll batch, and a
key frame is cut after K commits, T seconds, D bytes or S segments, whichever first.
*Catching up* (records applied with ``notify=False``: the backlog found on assignment, or
archives replayed by recovery): no Redis writes and no periodic key frames — a key frame of
the end of the backlog (object storage + Redis, which it rebuilds) replaces them once the
table is caught up (``finish_catch_up``). Key frames and archives are written by a
``FrameWriter`` thread, off the path of the records and their notifications.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import pyarrow as pa
from redis.exceptions import RedisError

from segcat.catalog.config import Config
from segcat.catalog.errors import ArchiveGap, CorruptArchive, ServiceUnavailable
from segcat.catalog.log import ownership
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
from segcat.materializer.frame_writer import FrameWriter

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
DRAIN_S = 60.0
"""How long recovery waits for the table's background writes before rebuilding without them."""
CATCHUP_BYTES_FACTOR = 8
"""Catching up: an intermediate key frame only once the commits held for the next one reach
this many times D (bounding the memory they take and the replay a crash would cost)."""

_REDIS_ERRORS = (ServiceUnavailable, RedisError)
"""Redis trouble (down, wrong password, missing ACL permission): back off, never park the table."""


@dataclass(frozen=True)
class Pending:
    """An accepted commit not yet in a key frame: its delta and its record's value (to archive)."""

    delta: CommitDelta
    value: bytes


class _Image(TableState):
    """The image's fields at one version without its segments: all that sealing a key frame
    reads besides the rows. Taken on the main loop (the containers copied), used by the writer
    thread while the main loop goes on changing the live image."""

    _count = 0

    @property
    def live_count(self) -> int:
        return self._count


def _image_at(state: TableState) -> TableState:
    values: dict[str, Any] = {}
    for f in fields(state):
        if f.name in ("segments", "paths"):
            continue
        value = getattr(state, f.name)
        values[f.name] = type(value)(value) if isinstance(value, dict | list) else value
    image = _Image(**values)
    image._count = len(state.segments)
    return image


@dataclass(frozen=True)
class _FrameJob:
    """What the writer thread needs to seal and write one key frame (all of it immutable)."""

    generation: int
    commits: tuple[Pending, ...]
    """The accepted commits since the last frame the writer built (older ones are skipped)."""
    offset: int
    image: TableState
    version: int
    archive: tuple[int, tuple[Pending, ...], tuple[ArchivedRecord, ...]] | None
    """``(from_version, commits, others)`` to archive first, up to ``version``; None: no archive."""
    to_store: bool
    """Write the frame to object storage (False: a Redis rebuild only)."""
    to_redis: bool
    """Put the frame in Redis (storing it trims the stream entries it covers)."""
    redis_head: Head | None
    """... and move the head there: only when no record of the main loop will (its record
    script moves the head and publishes; a head already at that offset would swallow both)."""
    files: TableFiles
    """The log's objects the image was recovered with (the frame is bound to ``files.log_id``)."""


class TableMaterializer:
    """One table's image and outputs. Methods raise on anything but Redis trouble; the service
    parks the table then (``stage`` names what was being done) and later calls ``recover``.

    ``writer`` runs the key-frame and archive writes in the background (the service shares one
    among its tables); without one they run inline, as they did before it existed.

    ``identify`` tells which log the topic is now (its topic id, asked of Kafka on every
    recovery): every key frame, archive and Redis value is written bound to it, and only that
    log's are read back (docs/PROTOCOL.md §6, *Which log*). Without it ``files`` stays as given."""

    def __init__(
        self,
        name: TableName,
        config: Config,
        redis: RedisStore | None,
        files: TableFiles,
        gate: RedisGate | None = None,
        writer: FrameWriter | None = None,
        identify: Callable[[], str | None] | None = None,
    ) -> None:
        self.name = name
        self.config = config
        self.redis = redis
        self.files = files
        self._identify = identify
        self.gate = gate or RedisGate()
        self.writer = writer
        self.stage = "recover"
        """What the table was doing last: recover, rules, redis, archive, keyframe."""
        self.state = TableState(name.qualified)
        self._frame = FrameView.from_state(self.state)
        """The rows of the last frame built; owned by the writer thread while jobs are queued."""
        self._pending: list[Pending] = []
        self._others: list[ArchivedRecord] = []
        """Records since the last key frame that were not accepted (archived with the commits)."""
        self._pending_bytes = 0
        self._pending_segments = 0
        self._pending_since = 0.0
        self._keyframe_version = -1
        """The newest key frame handed to the writer (the next archive starts after it)."""
        self._redis_keyframe_version = -1
        """The newest key frame Redis confirmed (the head's ``keyframe_version``)."""
        self._redis_dirty = True
        self._batch: RecordBatch | None = None
        self._repair: list[int] = []
        self._label = name.qualified
        self._swept_at = 0.0
        self.catching_up = False
        """Records are being applied without notifications: no Redis writes, no periodic frames."""
        self._generation = 0
        """Bumped by ``recover``: jobs of an earlier image are dropped."""
        self._failed: tuple[str, Exception] | None = None
        """A background write that failed (stage, error): raised at the table's next step."""
        # prometheus children, looked up once (``labels()`` per record cost 1.2 s per 100k)
        self._m_records = {o: metrics.RECORDS.labels(self._label, o.value) for o in Outcome}
        self._m_head = metrics.HEAD.labels(self._label)
        self._m_live = metrics.LIVE_SEGMENTS.labels(self._label)

    # ------------------------------------------------------------------ recovery

    def recover(self) -> int:
        """Load the newest valid key frame from object storage; return the next offset to read.

        Committed consumer offsets are never trusted: the key frame says where replay starts.
        Also the way back from a failure: everything in memory is rebuilt from the frame
        (after the table's background writes still queued have finished).
        """
        self.stage = "recover"
        started = time.perf_counter()
        self._batch = None
        if self.writer is not None and not self.writer.drain(self._label, DRAIN_S):
            log.warning("key-frame writes still running; recovering anyway", extra={"table": self._label})
        self._generation += 1
        self._failed = None
        self._bind()
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
        self._pending = []
        self._others = []
        self._pending_bytes = 0
        self._pending_segments = 0
        self._redis_dirty = True
        self.catching_up = False
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

    @property
    def log_id(self) -> str | None:
        """The log this image is of (the topic id when it was last recovered)."""
        return self.files.log_id

    def _bind(self) -> None:
        """Ask which log the topic is now; bind the objects to it, settling once whose the flat
        layout written before the binding is (``ownership``)."""
        if self._identify is None:
            return
        log_id = self._identify()
        if log_id != self.files.log_id:
            if self.files.log_id is not None:
                log.warning(
                    "the table's topic was created anew: following the new log",
                    extra={"table": self._label, "old_log_id": self.files.log_id, "log_id": log_id},
                )
            self.files = TableFiles(self.files.store, self.name, log_id)
        ownership.settle_flat_layout(self.config, self.files)
        if log_id is not None:
            self.files.resolve()

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

        ``notify=False``: the record is part of a backlog being caught up (see the module's
        docstring); the first record applied with ``notify=True`` is the backlog's last, and
        the catch-up ends with it. Offsets Kafka skipped before it (pruned or compacted away)
        come from the archives first."""
        self._raise_failure()
        if record.offset > self.state.version + 1:
            self._fill_hole(record.offset)
        if notify and self.catching_up:
            verdict = self._apply(record, notify=False)
            self.finish_catch_up()
            return verdict
        return self._apply(record, notify=notify)

    def _apply(self, record: LogRecord, *, notify: bool) -> Verdict:
        if record.offset <= self.state.version:
            return Verdict(Outcome.DUPLICATE, record.offset, detail="already applied")
        if not notify:
            self.catching_up = True
        self.stage = "rules"
        applied = rules.apply_record(self.state, record)
        verdict, delta = applied.verdict, applied.delta
        self.stage = "redis"
        self._m_records[verdict.outcome].inc()
        if delta is not None and record.value is not None:
            if not self._pending:
                self._pending_since = time.monotonic()
            self._pending.append(Pending(delta, record.value))
            self._pending_bytes += len(record.value)
            self._pending_segments += len(delta.added)
            if not self.catching_up:
                self._announce(delta, record.value)
            self._m_head.set(self.state.last_accepted_version)
            self._m_live.set(self.state.live_count)
            if self.keyframe_due():
                self.write_keyframe()
        else:
            self._others.append(
                ArchivedRecord(
                    record.offset, record.timestamp_ms, record.key, record.value, verdict.outcome.value
                )
            )
            if not self.catching_up:
                self._publish(None, None)
        return verdict

    def _announce(self, delta: CommitDelta, value: bytes) -> None:
        """Queue an accepted commit's Redis writes: head, stream entry and event."""
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
            log_id=self.log_id,
        )
        self._publish((prev_version, value), event)

    def finish_catch_up(self) -> None:
        """The backlog is applied: write its key frame (object storage + Redis, rebuilt from it)
        in the background, announce its last version (watchers fill the gap before it from the
        stream or the log), and publish every record from here on. Readers meanwhile got what
        Redis held before (a consistent older state) or judged the log themselves.

        A backlog ending in records that were not accepted gets Redis rebuilt at once and its
        object-storage frame with the next accepted commit (a frame is always cut right after one).
        """
        if not self.catching_up:
            return
        self.catching_up = False
        log.info(
            "caught up",
            extra={"table": self._label, "version": self.state.version, "pending": len(self._pending)},
        )
        last = self._pending[-1] if self._pending else None
        if last is not None and self.state.version == self.state.last_accepted_version:
            if self.redis is not None and self.gate.open():
                self._redis_dirty = False
                self._announce(last.delta, last.value)  # sent by write_keyframe, before the frame
            self.write_keyframe(rebuild_redis=True)
        else:
            self._redis_dirty = True
            self.resync_redis(move_head=True)

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
            keyframe_version=self._redis_keyframe_version,
            offset=state.version,
            log_id=self.log_id,
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
                self.name, self._head(), prev_version=prev_version, value=value, event=event
            )
        else:
            self._batch.advance_head(self.name, self._head())

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

    def resync_redis(self, *, move_head: bool = False) -> bool:
        """(Re)build this table's Redis keys from the image: key frame (+ head with
        ``move_head``; otherwise the record being published creates it), written by the writer
        thread (records published meanwhile chain onto it: the store keeps the deltas after the
        frame's version). Whether it was started (inline: whether it worked)."""
        if self.redis is None:
            return False
        self._batch = None  # its writes are subsumed by the key frame and head written now
        if not self.gate.open():
            self._redis_dirty = True
            return False
        if self.catching_up:
            self._redis_dirty = True
            return False  # the frame at the end of the backlog rebuilds it
        was_dirty = self._redis_dirty
        self._redis_dirty = False
        self._submit(to_store=False, to_redis=True, move_head=move_head, archive=None)
        if self._redis_dirty:  # an inline write failed
            return False
        if was_dirty:
            log.info(
                "redis rebuild started",
                extra={"table": self._label, "version": self.state.last_accepted_version},
            )
        return True

    def check_redis(self) -> None:
        """Notice a flushed or restarted Redis (the head vanished or went back) and rebuild it."""
        if self.redis is None or not self.gate.open() or self.catching_up:
            return
        if self.writer is not None and self.writer.pending(self._label):
            return  # a frame on its way may be what is missing
        self.stage = "redis"
        try:
            head = self.redis.head(self.name)
            # the version, not the frame: fetching a big table's frame every second cost a
            # materializer tick milliseconds per table (readers verify the frame's checksum)
            keyframe_there = self.redis.keyframe_version(self.name, self.log_id) is not None
        except _REDIS_ERRORS as exc:
            self._redis_failed(exc)
            return
        # reads answering proves little (an ACL may allow reads only): writes reopen the gate
        if (
            self._redis_dirty
            or head is None
            or head.offset < self.state.version
            or head.log_id != self.log_id
            or not keyframe_there
        ):
            self._redis_dirty = True
            self.resync_redis(move_head=True)

    # ------------------------------------------------------------------ key frames

    def keyframe_due(self) -> bool:
        if not self._pending:
            return False
        if self._repair and self.state.last_accepted_version >= self._repair[0]:
            self._repair = [v for v in self._repair if v > self.state.last_accepted_version]
            return True
        changes = self._pending[-1].delta.table_properties
        if changes and not lifecycle.RESERVED_PROPERTIES.isdisjoint(changes):
            return True  # a prune or drop: archive the records it depends on at once
        config = self.config
        if self.catching_up:
            return self._pending_bytes >= CATCHUP_BYTES_FACTOR * config.keyframe_every_bytes
        return (
            len(self._pending) >= config.keyframe_every_commits
            or self._pending_bytes >= config.keyframe_every_bytes
            or self._pending_segments
            >= max(config.keyframe_every_segments, self.state.live_count // SEGMENTS_FRACTION)
            or time.monotonic() - self._pending_since >= config.keyframe_every_seconds
        )

    def tick(self) -> None:
        """Called periodically: time-based key frames (T) even when no commit arrives."""
        self._raise_failure()
        self.flush()
        if self.catching_up:
            return
        if self.keyframe_due() and self.state.version == self.state.last_accepted_version:
            self.write_keyframe()

    def write_keyframe(self, *, rebuild_redis: bool = False) -> None:
        """Archive the commits since the last key frame, then write the key frame and ``_latest``
        (and put it in Redis), in the writer thread. ``rebuild_redis``: Redis missed the records
        before (a catch-up), the frame rebuilds it."""
        self.flush()
        version = self.state.last_accepted_version
        pending, self._pending = tuple(self._pending), []
        others = tuple(o for o in self._others if o.version <= version)
        self._others = [o for o in self._others if o.version > version]
        archive = (self._keyframe_version + 1, pending, others) if pending or others else None
        self._keyframe_version = version
        self._pending_bytes = 0
        self._pending_segments = 0
        to_redis = False
        if self.redis is not None and self.gate.open() and (rebuild_redis or not self._redis_dirty):
            to_redis = True
            self._redis_dirty = False
        self._submit(to_store=True, to_redis=to_redis, archive=archive, commits=pending)
        if time.monotonic() - self._swept_at >= TEMP_SWEEP_EVERY_S:
            self._sweep_temp_files()

    def _submit(
        self,
        *,
        to_store: bool,
        to_redis: bool,
        archive: tuple[int, tuple[Pending, ...], tuple[ArchivedRecord, ...]] | None,
        move_head: bool = False,
        commits: tuple[Pending, ...] | None = None,
    ) -> None:
        """Hand one frame to the writer thread (or write it now, without one)."""
        job = _FrameJob(
            generation=self._generation,
            commits=tuple(self._pending) if commits is None else commits,
            offset=self.state.version,
            image=_image_at(self.state),
            version=self.state.last_accepted_version,
            archive=archive,
            to_store=to_store,
            to_redis=to_redis,
            redis_head=self._head() if to_redis and move_head else None,
            files=self.files,
        )
        if self.writer is None:
            self._write_frame(job)
            self._raise_failure()
        else:
            self.writer.submit(self._label, lambda: self._write_frame(job))

    def _raise_failure(self) -> None:
        """A background write failed: fail here, so the service parks the table (stage named)."""
        if self._failed is not None:
            self.stage, exc = self._failed
            raise exc

    def _write_frame(self, job: _FrameJob) -> None:
        """The writer thread's part: fold the commits into the frame's rows (a big commit's segments
        cut from its record's bytes, not encoded again), seal, archive, write the frame, put it in
        Redis; in that order, so nothing relies on an object not written."""
        if job.generation != self._generation or self._failed is not None:
            return  # an earlier image's, or after a failure: recovery rebuilds from storage
        started = time.perf_counter()
        stage = "keyframe"
        try:
            frame = self._frame.apply(
                [p.delta for p in job.commits],
                offset=job.offset,
                values={p.delta.version: p.value for p in job.commits},
            )
            if job.generation != self._generation:
                return  # recovered meanwhile: the new image owns the frame now
            self._frame = frame
            sealed = keyframe.seal(frame.rows, job.image, frame.layout, log_id=job.files.log_id)
            if job.archive is not None:
                stage = "archive"
                first, pending, others = job.archive
                commits = [
                    ArchivedCommit(d.version, d.timestamp_ms, d.commit_id, d.operation.value, p.value)
                    for p in pending
                    for d in (p.delta,)
                ]
                job.files.write_archive(first, job.version, commits, others)
            if job.to_store:
                stage = "keyframe"
                job.files.write_keyframe(sealed, job.version)
        except Exception as exc:
            self._failed = (stage, exc)
            return
        if job.to_redis:
            self._put_in_redis(sealed, job)
        seconds = time.perf_counter() - started
        if job.to_store:
            metrics.KEYFRAME_SECONDS.labels(self._label).observe(seconds)
        log.info(
            "key frame written" if job.to_store else "redis rebuilt",
            extra={
                "table": self._label,
                "version": job.version,
                "live_segments": job.image.live_count,
                "archived_commits": 0 if job.archive is None else len(job.archive[1]),
                "redis": job.to_redis,
                "seconds": round(seconds, 3),
            },
        )

    def _put_in_redis(self, sealed: pa.Table, job: _FrameJob) -> None:
        redis = self.redis
        assert redis is not None
        ipc = keyframe.to_ipc(sealed)
        metrics.KEYFRAME_BYTES.labels(self._label).set(len(ipc))
        try:
            redis.register_table(self.name)
            redis.put_keyframe(self.name, job.version, ipc, trim=True, log_id=job.files.log_id)
            if job.redis_head is not None:
                redis.advance_head(self.name, job.redis_head)
        except _REDIS_ERRORS as exc:
            self._redis_failed(exc)
            return
        self.gate.succeeded()
        self._redis_keyframe_version = max(self._redis_keyframe_version, job.version)
