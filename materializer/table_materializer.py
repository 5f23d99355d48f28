"""One table inside the materializer: the loader that turns its log into deltas and images for
its publishers (as Kafka's ``MetadataLoader`` does for its ``MetadataPublisher`` list).

Data flows one way: log record → rules (the delta) → the image → publishers. Recovery loads
the newest valid key frame from object storage (committed consumer offsets are never trusted),
then the commit archives after it; the records after that come from Kafka. Each record is
judged, folded into the working image (``TableState``) and handed, as a ``RecordDelta`` with
the immutable ``TableImage`` after it, to every publisher in order: key frames on object
storage (``keyframe_publisher``), Redis (``redis_publisher``), then any the service was given.
Both built-in publishers write key frames; ``frames.FrameBuilder`` keeps the image's Arrow rows
and seals frames for them in the writer thread.

Two modes. *Live* (the records a consumer finds on assignment have been applied): every record
is published as it happens. *Catching up* (records applied with ``notify=False``: the backlog
found on assignment, or archives replayed by recovery): publishers that announce (Redis) hold
back, and ``CaughtUp`` tells them when the table is caught up (``finish_catch_up``).

Anything a step raises leaves ``stage`` naming what failed (recover, rules, or the publisher's
name; archive or keyframe for a background write); the service parks the table then and later
calls ``recover``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from types import MappingProxyType
from typing import Any

from segcat.catalog.config import Config
from segcat.catalog.errors import ArchiveGap, CorruptArchive
from segcat.catalog.log import ownership
from segcat.catalog.protocol import codec, rules
from segcat.catalog.protocol.model import LogRecord
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.rules import Outcome, Verdict
from segcat.catalog.protocol.state import TableState
from segcat.catalog.storage.frame_view import FrameView
from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.table_files import TableFiles
from segcat.materializer import metrics
from segcat.materializer.backoff import RedisGate
from segcat.materializer.frame_writer import FrameWriter
from segcat.materializer.frames import FrameBuilder
from segcat.materializer.iceberg_publisher import IcebergPublisher
from segcat.materializer.keyframe_publisher import KeyframePublisher
from segcat.materializer.publisher import (
    CaughtUp,
    Loaded,
    Publisher,
    PublisherFactory,
    RecordDelta,
    TableDelta,
    TableImage,
)
from segcat.materializer.redis_publisher import RedisPublisher

log = logging.getLogger("segcat.materializer")

UNSCHEDULED_TICK_S = 1.0
"""How often a publisher that does not say when it needs time (``due``) is ticked."""
WRITE_RECHECK_S = 1.0
"""While a table's key frame is being written in the background, how often a tick looks whether
the write failed (a failure parks the table)."""


class TableMaterializer:
    """One table's loader and publishers. Methods raise on anything a publisher does not handle
    itself; the service parks the table then (``stage`` names what was being done) and later
    calls ``recover``.

    ``writer`` runs the key-frame and archive writes in the background (the service shares one
    among its tables); without one they run inline. ``redis`` None: no Redis publisher.
    ``publishers`` make the table's further publishers, handed every delta after the built-in ones.
    ``iceberg`` False: no Iceberg metadata (``iceberg_publisher``) for this table; otherwise its
    publisher gets each delta last, after the round's key frame was handed to the writer.

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
        publishers: Sequence[PublisherFactory] = (),
        iceberg: bool = True,
    ) -> None:
        self.name = name
        self.config = config
        self.files = files
        self._identify = identify
        self._label = name.qualified
        self.stage = "recover"
        """What the table was doing last: recover, rules, a publisher's name, archive, keyframe."""
        self.state = TableState(name.qualified)
        """The working image: folded in place, never handed out (publishers get ``TableImage``)."""
        self.catching_up = False
        """Records are being applied without announcing them (see the module's docstring)."""
        self.frames = FrameBuilder(self._label, writer)
        self.keyframes = KeyframePublisher(name, config, files, self.frames)
        self.redis = None if redis is None else RedisPublisher(name, redis, gate or RedisGate(), self.frames)
        # key frames first: Redis puts each frame after object storage has it, and knows when a
        # catch-up ends whether a frame of its end is being cut
        built_in: list[Publisher] = [self.keyframes] if self.redis is None else [self.keyframes, self.redis]
        self.iceberg = IcebergPublisher(name, config, redis, files, lambda: self.state) if iceberg else None
        """Handed each delta last, once the round's key frame went to the writer (``_publish``)."""
        self.publishers: tuple[Publisher, ...] = (*built_in, *(make(name) for make in publishers))
        self._properties = MappingProxyType(dict(self.state.properties))
        # prometheus children, looked up once (``labels()`` per record cost 1.2 s per 100k); the
        # records counter's only for the outcomes seen: an idle table keeps no child per outcome
        self._m_records: dict[Outcome, Any] = {}
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
        self.frames.restart()
        self._bind()
        search = self.files.find_newest_valid_keyframe()
        frame = search.frame
        if frame is None:
            self.state = TableState(self.name.qualified)
            self.frames.load(FrameView.from_state(self.state))
            source = "empty"
        else:
            self.state = frame.state()
            # Segments of an older Avro layout are re-encoded, so every frame written from
            # here on is in the current layout (sealing rows of two layouts would corrupt it).
            self.frames.load(
                FrameView.from_keyframe(frame)
                if frame.layout == codec.current_fingerprint()
                else FrameView.from_state(self.state)
            )
            source = "object-store"
        self.catching_up = False
        self._properties = MappingProxyType(dict(self.state.properties))
        self._publish(Loaded(self.files, frame is not None, search.failed))
        self.stage = "recover"
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
            self._apply(record, live=False)
        self.state.version = max(self.state.version, end)  # the archives cover every offset to it
        log.info(
            "replayed commit archives", extra={"table": self._label, "upto": end, "records": len(records)}
        )
        return True

    # ------------------------------------------------------------------ applying

    def apply(self, record: LogRecord, *, notify: bool = True) -> Verdict:
        """Judge one record and hand it to the publishers.

        ``notify=False``: the record is part of a backlog being caught up (see the module's
        docstring); the first record applied with ``notify=True`` is the backlog's last, and
        the catch-up ends with it. Offsets Kafka skipped before it (pruned or compacted away)
        come from the archives first."""
        self._raise_failure()
        if record.offset > self.state.version + 1:
            self._fill_hole(record.offset)
        if notify and self.catching_up:
            verdict = self._apply(record, live=False)
            self.finish_catch_up()
            return verdict
        return self._apply(record, live=notify)

    def _apply(self, record: LogRecord, *, live: bool) -> Verdict:
        if record.offset <= self.state.version:
            return Verdict(Outcome.DUPLICATE, record.offset, detail="already applied")
        if not live:
            self.catching_up = True
        self.stage = "rules"
        applied = rules.apply_record(self.state, record)
        verdict, delta = applied.verdict, applied.delta
        counter = self._m_records.get(verdict.outcome)
        if counter is None:
            counter = self._m_records[verdict.outcome] = metrics.RECORDS.labels(
                self._label, verdict.outcome.value
            )
        counter.inc()
        commit = None
        if delta is not None and record.value is not None:
            commit = delta
            self.frames.add(delta, record.value)
            if delta.table_properties:
                self._properties = MappingProxyType(dict(self.state.properties))
            self._m_head.set(self.state.last_accepted_version)
            self._m_live.set(self.state.live_count)
        self._publish(RecordDelta(record, verdict, commit, not self.catching_up))
        return verdict

    def finish_catch_up(self) -> None:
        """The backlog is applied: publishers announce from here on (``CaughtUp``)."""
        if not self.catching_up:
            return
        self.catching_up = False
        log.info("caught up", extra={"table": self._label, "version": self.state.version})
        self._publish(CaughtUp())

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

    # ------------------------------------------------------------------ publishing

    def image(self) -> TableImage:
        """The table as it is now (an immutable value)."""
        state = self.state
        accepted = state.last_accepted_version
        return TableImage(
            state.table,
            self.files.log_id,
            state.version,
            accepted,
            state.last_accepted_timestamp_ms if accepted >= 0 else None,
            state.last_commit_id,
            len(state.segments),
            state.live_bytes,
            state.live_rows,
            state.schema,
            self._properties,
            state.protocol,
        )

    def _publish(self, delta: TableDelta) -> None:
        """One round: every publisher gets ``delta`` and the image after it, then the key frame
        asked for in the round (if any) goes to the writer thread."""
        image = self.image()
        for publisher in self.publishers:
            self.stage = publisher.name
            publisher.publish(delta, image)
        self._end_round()
        if self.iceberg is not None:  # after the others' work is out: it never delays them
            stage, self.stage = self.stage, self.iceberg.name
            self.iceberg.publish(delta, image)
            self.stage = stage  # it never raises: a failure after it is about what came before

    def _end_round(self) -> None:
        self.frames.submit(self.state, self.files.log_id)
        if self.frames.inline:  # the frame was just written: a failure stops this step
            self._raise_failure()

    def flush(self) -> None:
        """A poll batch ended: every publisher sends what it queued (one round trip each)."""
        for publisher in self.publishers:
            self.stage = publisher.name
            publisher.flush()

    def tick(self) -> None:
        """Work due by time (key frames after T seconds, Redis rebuilds, retries): called once
        ``due`` has passed."""
        self._raise_failure()
        self.flush()
        image = self.image()
        for publisher in self.publishers:
            self.stage = publisher.name
            publisher.tick(image)
        self._end_round()
        if self.iceberg is not None:
            stage, self.stage = self.stage, self.iceberg.name
            self.iceberg.tick(image)
            self.stage = stage

    def due(self) -> float | None:
        """When ``tick`` next has work (``time.monotonic()``; None: nothing until a record): the
        earliest of the publishers' ``due``; soon while a background write is queued (its failure
        is raised by a tick) or has failed. A publisher without ``due`` is ticked every
        ``UNSCHEDULED_TICK_S``."""
        now = time.monotonic()
        if self.frames.failure() is not None:
            return now
        image = self.image()
        deadlines = [now + WRITE_RECHECK_S] if self.frames.busy else []
        for publisher in self.publishers:
            due = getattr(publisher, "due", None)
            deadline = now + UNSCHEDULED_TICK_S if due is None else due(image)
            if deadline is not None:
                deadlines.append(deadline)
        if self.iceberg is not None and (deadline := self.iceberg.due(image)) is not None:
            deadlines.append(deadline)
        return min(deadlines, default=None)

    def write_keyframe(self) -> None:
        """Cut a key frame of the image now (archiving the records since the last one)."""
        self.stage = self.keyframes.name
        self.keyframes.write_keyframe(self.image())
        self._end_round()

    def close(self) -> None:
        """The table leaves this service (revoked, or the service stops)."""
        for publisher in self.publishers:
            publisher.close()

    def _raise_failure(self) -> None:
        """A background write failed: fail here, so the service parks the table (stage named)."""
        failed = self.frames.failure()
        if failed is not None:
            self.stage, exc = failed
            raise exc
