"""The Redis publisher: each table's head, stream of deltas, version changes and key frame in Redis.

Live, every record is one record-script call (an accepted commit: head + stream entry + its
``VersionChange`` published on the table's and the global channel; any other record: the head's
offset), queued and sent once per poll batch (``flush``). Every durable key frame is also put
in Redis (``FrameBuilder.subscribe``), which trims the stream entries it covers. While a backlog
is caught up nothing is written; at its end its last commit is announced and the frame of the
end of the backlog rebuilds Redis (or, when that frame comes later, a frame for Redis alone).

Redis is a cache that may vanish at any moment: trouble there (down, wrong password, an ACL
without a permission) backs every table off through the service's ``RedisGate`` and marks the
table's keys for a rebuild from the image; it never stops the table. ``tick`` notices a flushed
or restarted Redis that the service's sentinel check (``redis_sentinel``) reported, and rebuilds
it; an idle table asks Redis nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any

from redis.exceptions import RedisError

from segcat.catalog.errors import ServiceUnavailable
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.version_change import VersionChange, change_from_delta
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.redis import Head, RecordBatch, RedisStore
from segcat.materializer import metrics
from segcat.materializer.backoff import RedisGate
from segcat.materializer.frames import FrameBuilder, FrameOutput, SealedFrame
from segcat.materializer.publisher import CaughtUp, Loaded, Publisher, RecordDelta, TableDelta, TableImage

log = logging.getLogger("segcat.materializer")

_REDIS_ERRORS = (ServiceUnavailable, RedisError)
"""Redis trouble (down, wrong password, missing ACL permission): back off, never park the table."""


class _RedisFrame(FrameOutput):
    """A sealed frame put in Redis (trimming the stream entries it covers), and with ``head`` the
    head moved to it: only when no record of the main loop will (its record script moves the head
    and publishes; a head already at that offset would swallow both)."""

    durable = False
    stage = "redis"
    done = "redis rebuilt"

    def __init__(self, publisher: RedisPublisher, head: Head | None) -> None:
        self._publisher = publisher
        self._head = head

    def write(self, frame: SealedFrame) -> None:
        self._publisher.put_frame(frame, self._head)

    def log_fields(self) -> dict[str, Any]:
        return {"redis": True}


class RedisPublisher(Publisher):
    """One table's Redis keys. Without a writer thread its frames are put inline."""

    name = "redis"

    def __init__(self, table: TableName, redis: RedisStore, gate: RedisGate, frames: FrameBuilder) -> None:
        self._table = table
        self._label = table.qualified
        self.redis = redis
        self.gate = gate
        self._frames = frames
        self._batch: RecordBatch | None = None
        self._dirty = True
        """The keys must be rebuilt from the image before the next record is published."""
        self._keyframe_version = -1
        """The newest key frame Redis confirmed (the head's ``keyframe_version``)."""
        self._last: tuple[CommitDelta, bytes] | None = None
        """The newest accepted commit (announced when a catch-up ends on it)."""
        self.catching_up = False
        self._suspect = False
        """Redis may have lost this table's keys (it failed meanwhile): the next tick checks them."""
        frames.subscribe(self._offer)

    # ------------------------------------------------------------------ publishing

    def publish(self, delta: TableDelta, image: TableImage) -> None:
        if isinstance(delta, RecordDelta):
            if delta.commit is not None and delta.record.value is not None:
                self._last = (delta.commit, delta.record.value)
            if not delta.live:
                self.catching_up = True
            elif delta.commit is not None and delta.record.value is not None:
                self._announce(delta.commit, delta.record.value, image)
            else:
                self._queue(None, None, image)
        elif isinstance(delta, Loaded):
            self._batch = None
            self._dirty = True
            self._last = None
            self.catching_up = False
        elif isinstance(delta, CaughtUp):
            self._caught_up(image)

    def _caught_up(self, image: TableImage) -> None:
        """Announce the backlog's last version (watchers fill the gap before it from the stream or
        the log) and let the frame of its end rebuild Redis; readers meanwhile got what Redis held
        before (a consistent older state) or judged the log themselves."""
        self.catching_up = False
        if self._frames.cutting and self._last is not None and image.at_version:
            if self.gate.open():
                self._dirty = False
                self._announce(*self._last, image)  # sent by the offer, before the frame
        else:
            self._dirty = True
            self.resync(image, move_head=True)

    def _announce(self, delta: CommitDelta, value: bytes, image: TableImage) -> None:
        """Queue an accepted commit's writes: head, stream entry and its change."""
        prev_version = -1 if delta.prev_version is None else delta.prev_version
        # the loader's image judged the commit, so its rows and bytes delta are known
        change = change_from_delta(self._label, prev_version, delta, "pubsub", log_id=image.log_id)
        self._queue((prev_version, value), change, image)

    def _queue(
        self, accepted: tuple[int, bytes] | None, change: VersionChange | None, image: TableImage
    ) -> None:
        """Queue this record's writes; ``flush`` sends the queue in one round trip.

        An accepted commit (``(prev_version, value)``) appends its stream entry and publishes
        ``change``; any other record only moves the head's offset.
        """
        if not self.gate.open():
            self._batch = None
            self._dirty = True  # rebuilt from the image once Redis answers again
            return
        if self._dirty and not self.resync(image):
            return
        if self._batch is None:
            self._batch = self.redis.batch()
        if accepted is not None:
            prev_version, value = accepted
            self._batch.publish_commit(
                self._table, self._head(image), prev_version=prev_version, value=value, event=change
            )
        else:
            self._batch.advance_head(self._table, self._head(image))

    def _head(self, image: TableImage) -> Head:
        return Head(
            version=image.version,
            commit_id=image.commit_id,
            timestamp_ms=image.timestamp_ms,
            live_count=image.live_count,
            live_bytes=image.live_bytes,
            live_rows=image.live_rows,
            keyframe_version=self._keyframe_version,
            offset=image.offset,
            log_id=image.log_id,
        )

    @property
    def queued(self) -> int:
        """Record writes waiting for ``flush``."""
        return 0 if self._batch is None else len(self._batch)

    def flush(self) -> None:
        """Send the queued writes (after every poll batch, and before a frame goes to Redis)."""
        if self._batch is None or not len(self._batch):
            return
        batch, self._batch = self._batch, None
        if not self.gate.open():
            self._dirty = True
            return
        started = time.perf_counter()
        count = len(batch)
        try:
            batch.flush()
        except _REDIS_ERRORS as exc:
            self._failed(exc)
            return
        self.gate.succeeded()
        metrics.REDIS_PUBLISH_SECONDS.labels(self._label).observe((time.perf_counter() - started) / count)

    def _failed(self, exc: Exception) -> None:
        """Redis is a cache: note the failure (the gate backs off and logs) and rebuild later."""
        metrics.REDIS_ERRORS.labels(self._label).inc()
        self._dirty = True
        self.gate.failed(exc, self._label)

    # ------------------------------------------------------------------ upkeep

    def resync(self, image: TableImage, *, move_head: bool = False) -> bool:
        """(Re)build this table's keys from the image: a key frame (+ head with ``move_head``;
        otherwise the record being published creates it), put by the writer thread (records
        published meanwhile chain onto it: the store keeps the deltas after the frame's version).
        Whether it was asked for."""
        self._batch = None  # its writes are subsumed by the key frame and head written now
        if not self.gate.open():
            self._dirty = True
            return False
        if self.catching_up:
            self._dirty = True
            return False  # the frame at the end of the backlog rebuilds it
        was_dirty = self._dirty
        self._dirty = False
        if not self._frames.cutting or move_head:  # a durable frame cut now is offered anyway
            self._frames.request(_RedisFrame(self, self._head(image) if move_head else None))
        if was_dirty:
            log.info("redis rebuild started", extra={"table": self._label, "version": image.version})
        return True

    def suspect(self, *, lost: bool) -> None:
        """The service found Redis lost what it held (``lost``: flushed, restarted, restored) or
        may have (it failed for a while): rebuild, or check, this table's keys at its next tick.
        Per table nothing is asked of Redis otherwise: an idle table costs no round trip."""
        if lost:
            self._dirty = True
        else:
            self._suspect = True

    def tick(self, image: TableImage) -> None:
        if self._dirty or self._suspect:
            self.check_redis(image)

    def due(self, image: TableImage) -> float | None:
        """Now when the keys are to be rebuilt or checked (once the gate opens); else nothing:
        the service's sentinel check (``redis_sentinel``) notices a Redis that lost them."""
        if self.catching_up or not (self._dirty or self._suspect):
            return None  # a catch-up's end rebuilds the keys anyway
        return max(time.monotonic(), self.gate.retry_at)

    def check_redis(self, image: TableImage) -> None:
        """Notice a flushed or restarted Redis (the head vanished or went back) and rebuild it."""
        if not self.gate.open() or self.catching_up or self._frames.busy:
            return  # (busy: a frame on its way may be what is missing)
        if self._dirty:  # known to need the rebuild: nothing to ask first
            self._suspect = False
            self.resync(image, move_head=True)
            return
        try:
            head = self.redis.head(self._table)
            # the version, not the frame: fetching a big table's frame every second cost a
            # materializer tick milliseconds per table (readers verify the frame's checksum)
            keyframe_there = self.redis.keyframe_version(self._table, image.log_id) is not None
        except _REDIS_ERRORS as exc:
            self._failed(exc)
            return
        self._suspect = False
        # reads answering proves little (an ACL may allow reads only): writes reopen the gate
        if (
            self._dirty
            or head is None
            or head.offset < image.offset
            or head.log_id != image.log_id
            or not keyframe_there
        ):
            self._dirty = True
            self.resync(image, move_head=True)

    def _offer(self, outputs: Sequence[FrameOutput]) -> FrameOutput | None:
        """A durable frame is about to be written: send the queued writes first (its trim must
        come after their entries), and take a copy unless one is asked for already or Redis is to
        be rebuilt otherwise."""
        self.flush()
        if any(isinstance(o, _RedisFrame) for o in outputs) or not self.gate.open() or self._dirty:
            return None
        return _RedisFrame(self, None)

    def put_frame(self, frame: SealedFrame, head: Head | None) -> None:
        """The writer thread's part: the frame (and ``head``) in Redis."""
        ipc = keyframe.to_ipc(frame.table)
        metrics.KEYFRAME_BYTES.labels(self._label).set(len(ipc))
        try:
            self.redis.register_table(self._table)
            self.redis.put_keyframe(self._table, frame.version, ipc, trim=True, log_id=frame.log_id)
            if head is not None:
                self.redis.advance_head(self._table, head)
        except _REDIS_ERRORS as exc:
            self._failed(exc)
            return
        self.gate.succeeded()
        self._keyframe_version = max(self._keyframe_version, frame.version)
