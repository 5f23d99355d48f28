"""Every table's accepted versions for the all-tables streams, from one subscription to Redis'
global channel: no thread, subscription or feed per table, whatever the catalog's size.

While at least one all-tables stream is open, a follower runs two threads: one listens to the
global channel (the materializer publishes each accepted version there), one probes every
``PROBE_S`` for what the channel did not say. Each version goes to every attached client queue
(``version_feed.ClientQueue``: bounded, a slow client is cut and resumes with its cursor).

What the follower publishes is gap-free per table from the moment it first knew the table: for
each table it keeps the newest version it published (``last``) and the log offset up to which
it knows every accepted version was published (``covered``; at start, the log's end). A channel
event whose ``prev_version`` lies past both is preceded by the versions in between, read from
the log. The probe asks for the log ends of up to ``PROBE_BATCH`` tables (one ListOffsets
request) and, only for the tables whose end lies past what the follower covers, their topic ids
(one DescribeTopics) and materialized heads (one pipelined Redis read): a head that reached the
end with a version already published moves ``covered`` (the records since were not versions, or
the channel told); otherwise, after ``STALL_S`` (the materializer is down or behind, Redis is
down, or Pub/Sub lost a message while reconnecting) the follower judges those records itself.

**Decision — the probe's cost is bounded, not its reach.** ListOffsets over every table of a
large catalog takes seconds, so a probe covers at most ``PROBE_BATCH`` tables and larger
catalogs are swept in turns: with the materializer up the channel carries every version at once
and the probe only confirms; with it down, a stalled table is found within
``PROBE_S`` × tables / ``PROBE_BATCH`` plus ``STALL_S``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from segcat import SegcatError, ServiceUnavailable, TableName, VersionChange
from segcat.catalog.storage.redis import Head
from segcat.server.table_directory import TableDirectory
from segcat.server.version_feed import PAGE, ClientQueue

log = logging.getLogger("segcat.serve")

PROBE_S = 2.0
"""How often the follower compares the log ends with what it published."""
PROBE_BATCH = 2_000
"""Tables per probe: above it, slices of the catalog take turns (a full round takes longer)."""
STALL_S = 2.0
"""How long the log may run past the published versions before the follower judges it itself."""
RETRY_S = 1.0
SUBSCRIBED_WAIT_S = 3.0
"""How long the first stream waits for the channel's subscription before the baseline is read."""


class VersionBus:
    """The all-tables streams' source of versions (``attach`` / ``detach`` on the event loop)."""

    def __init__(
        self,
        directory: TableDirectory,
        on_version: Callable[[], None] = lambda: None,
        size_of: Callable[[VersionChange], int] = lambda change: 256,
    ) -> None:
        self._directory = directory
        self._on_version = on_version
        self._size_of = size_of
        self._queues: set[ClientQueue[VersionChange]] = set()
        self._follower: Follower | None = None
        self._starting = asyncio.Lock()

    @property
    def clients(self) -> int:
        """All-tables streams attached now."""
        return len(self._queues)

    @property
    def following(self) -> bool:
        """Whether the follower runs (only while a stream is attached)."""
        return self._follower is not None

    async def attach(self) -> ClientQueue[VersionChange]:
        """A queue of every version published from now on; the follower starts with the first.
        A stream attaches *before* it reads the log ends it catches up to, so nothing falls between."""
        loop = asyncio.get_running_loop()

        def emit(change: VersionChange) -> None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: the server is stopping
                loop.call_soon_threadsafe(self._fan_out, change)

        async with self._starting:
            if self._follower is None:
                starting = asyncio.ensure_future(asyncio.to_thread(Follower.started, self._directory, emit))
                try:
                    self._follower = await asyncio.shield(starting)
                except asyncio.CancelledError:  # the client left: the follower must not outlive it
                    starting.add_done_callback(VersionBus._adopt)
                    raise
            queue: ClientQueue[VersionChange] = ClientQueue()
            self._queues.add(queue)
            return queue

    @staticmethod
    def _adopt(starting: asyncio.Future[Follower]) -> None:
        """Stop a follower started for a client that left meanwhile (the next client starts one)."""
        if starting.cancelled() or starting.exception() is not None:
            return
        follower = starting.result()
        threading.Thread(target=follower.stop, name="segcat-bus-stop", daemon=True).start()

    def detach(self, queue: ClientQueue[VersionChange]) -> None:
        """A stream ended; the last one's leaving stops the follower."""
        self._queues.discard(queue)
        if not self._queues and self._follower is not None and not self._starting.locked():
            follower, self._follower = self._follower, None
            threading.Thread(target=follower.stop, name="segcat-bus-stop", daemon=True).start()

    def stop(self) -> None:
        for queue in list(self._queues):
            queue.stop()
        self._queues.clear()
        if self._follower is not None:
            self._follower.stop()
            self._follower = None

    def _fan_out(self, change: VersionChange) -> None:
        self._on_version()
        if not self._queues:
            return
        size = self._size_of(change)
        for queue in list(self._queues):
            if not queue.put(change, size):
                self._queues.discard(queue)


class Follower:
    """The two threads and what they know per table (a few integers per table that moved)."""

    def __init__(self, directory: TableDirectory, emit: Callable[[VersionChange], None]) -> None:
        self._directory = directory
        self._catalog = directory.catalog
        self._emit = emit
        self._lock = threading.Lock()
        """Held while a table's state changes and its versions are emitted: one order per table."""
        self._last: dict[str, int] = {}
        self._covered: dict[str, int] = {}
        self._stalled: dict[str, float] = {}
        self._log_ids: dict[str, str | None] = {}
        """Topic ids of the tables that moved or spoke (a recreated table starts over)."""
        self._unknown_ids: set[str] = set()
        self._probe_at = 0
        """Where the next probe's slice of the names begins."""
        self._stopped = threading.Event()
        self._subscribed = threading.Event()
        self._listener = threading.Thread(target=self._listen, name="segcat-bus-channel", daemon=True)
        self._prober = threading.Thread(target=self._probe, name="segcat-bus-probe", daemon=True)

    @classmethod
    def started(cls, directory: TableDirectory, emit: Callable[[VersionChange], None]) -> Follower:
        """A follower subscribed to the channel, with its baseline read and its probe running."""
        follower = cls(directory, emit)
        follower._listener.start()
        follower._subscribed.wait(SUBSCRIBED_WAIT_S)  # the baseline after the subscription: no gap
        try:
            follower.baseline()
        except SegcatError as exc:  # the first probe sets it
            log.info("the all-tables baseline was not read", extra={"reason": str(exc)})
        follower._prober.start()
        return follower

    def stop(self) -> None:
        self._stopped.set()
        for thread in (self._listener, self._prober):
            if thread.is_alive():
                thread.join(2.0)

    # ------------------------------------------------------------------ per-table state (under _lock)

    def _floor(self, name: str) -> int | None:
        """The offset up to which every accepted version of ``name`` was published (None: unknown)."""
        last, covered = self._last.get(name), self._covered.get(name)
        if last is None and covered is None:
            return None
        return max(-1 if last is None else last, -1 if covered is None else covered)

    def _known(self, name: str) -> int:
        floor = self._floor(name)
        return -1 if floor is None else floor

    def _publish(self, change: VersionChange) -> None:
        last = self._last.get(change.table)
        if last is not None and change.prev_version != last:
            change = replace(change, prev_version=last)  # the version before, as this bus delivered it
        self._last[change.table] = change.version
        self._emit(change)

    def _judge(self, name: str, after: int, upto: int) -> None:
        """Publish the accepted versions of (``after``, ``upto``] of ``name``'s log, a page at a time."""
        table = self._directory.open(name)
        covered = after
        while covered < upto and not self._stopped.is_set():
            page_end = min(covered + PAGE, upto)
            for change in table.changes(covered, page_end):
                if change.version > self._known(name):
                    self._publish(change)
            covered = page_end
            self._covered[name] = max(self._covered.get(name, -1), covered)

    # ------------------------------------------------------------------ the channel

    def _listen(self) -> None:
        redis = self._catalog.redis
        if redis is None:
            self._subscribed.set()
            return
        while not self._stopped.is_set():
            try:
                with redis.subscribe(None) as sub:
                    self._subscribed.set()
                    while not self._stopped.is_set():
                        change = sub.get(timeout=0.5)
                        if change is not None:
                            self.heard(change)
            except SegcatError as exc:
                log.info("global channel unavailable, retrying", extra={"reason": str(exc)})
                self._subscribed.set()  # the probe covers what the channel does not say
                self._stopped.wait(RETRY_S)
            except Exception:
                log.exception("the global channel's listener failed, retrying")
                self._stopped.wait(RETRY_S)

    def heard(self, change: VersionChange) -> None:
        try:
            parsed = TableName.parse(change.table)
        except SegcatError:
            log.warning("ignoring an event of no table", extra={"table": change.table[:200]})
            return
        name = parsed.qualified
        with self._lock:
            known = self._log_ids.get(name)
            if name not in self._log_ids:
                self._unknown_ids.add(name)  # the next probe asks; the event is taken meanwhile
            elif known is not None and change.log_id is not None and change.log_id != known:
                return  # another log's: a table that had this name before (PROTOCOL §6)
        if change.log_id is not None:
            change = replace(change, log_id=None)  # checked: the event carries what watch() yields
        self._directory.add(parsed)
        with self._lock:
            floor = self._floor(name)
            if floor is None:  # the first word of a table the baseline did not have: follow it from here
                self._covered[name] = floor = change.prev_version
            if change.version <= floor:
                return
            if change.prev_version <= floor:
                self._publish(change)
                return
            try:
                self._judge(name, floor, change.version)  # what the channel lost, then the change
            except SegcatError as exc:
                log.warning(
                    "versions missed on the channel were not read", extra={"table": name, "reason": str(exc)}
                )
                self._publish(change)  # the clients fill the gap themselves

    # ------------------------------------------------------------------ the probe

    def baseline(self) -> None:
        names = self._directory.names()
        ends = self._catalog.admin.log_ends(names)
        with self._lock:
            for name in names:
                self._covered.setdefault(name.qualified, ends[name])

    def _probe(self) -> None:
        while not self._stopped.wait(PROBE_S):
            try:
                self.probe_once(time.monotonic())
            except SegcatError as exc:
                log.info("the all-tables probe failed", extra={"reason": str(exc)})
            except Exception:
                log.exception("the all-tables probe failed")

    def probe_once(self, now: float) -> None:
        """Compare one slice of the tables' log ends with what was published (every table when
        there are at most ``PROBE_BATCH``; else the slices take turns)."""
        names = self._directory.names()
        if len(names) > PROBE_BATCH:
            start = self._probe_at % len(names)
            names = (names[start:] + names[:start])[:PROBE_BATCH]
            self._probe_at = start + PROBE_BATCH
        admin = self._catalog.admin
        ends = admin.log_ends(names)
        with self._lock:
            for name in names:  # a table the follower has not seen yet: followed from here
                if self._floor(name.qualified) is None:
                    self._covered[name.qualified] = ends[name]
            moved = [name for name in names if ends[name] > self._known(name.qualified)]
            moved_now = {name.qualified for name in moved}
            for name in names:  # caught up since (tables of other slices keep their clocks)
                if name.qualified not in moved_now:
                    self._stalled.pop(name.qualified, None)
            unknown = [TableName.parse(name) for name in self._unknown_ids]
            self._unknown_ids.clear()
        asked = sorted({*moved, *unknown})
        if not asked:
            return
        ids = admin.topic_ids(asked)
        self._learn_ids(asked, ids)
        if not moved:
            return
        heads = self._heads(moved)
        for name in moved:
            qualified, end = name.qualified, ends[name]
            head = heads.get(qualified)
            if head is not None and ids.get(name) is not None and head.log_id != ids[name]:
                head = None  # another log's head (a table that had this name before)
            with self._lock:
                floor = self._known(qualified)
                if end <= floor:
                    continue
                if head is not None and head.offset >= end and head.version <= floor:
                    self._covered[qualified] = end  # no version since, or the channel told
                    self._stalled.pop(qualified, None)
                    continue
                since = self._stalled.setdefault(qualified, now)
                if now - since < STALL_S:
                    continue
                try:
                    self._judge(qualified, floor, end)
                except SegcatError as exc:
                    log.info("a stalled table was not judged", extra={"table": qualified, "reason": str(exc)})
                    continue
                self._stalled.pop(qualified, None)

    def _learn_ids(self, names: list[TableName], ids: dict[TableName, str | None]) -> None:
        """Record the tables' topic ids; a table whose topic changed (dropped, purged and created
        again) starts over: every version of its new log is published."""
        with self._lock:
            for name in names:
                if name not in ids:
                    continue  # deleted
                qualified, found = name.qualified, ids[name]
                before = self._log_ids.get(qualified)
                if before is not None and found is not None and before != found:
                    self._last.pop(qualified, None)
                    self._covered[qualified] = -1
                self._log_ids[qualified] = found

    def _heads(self, names: list[TableName]) -> dict[str, Head | None]:
        redis = self._catalog.redis
        if redis is None:
            return {}
        try:
            return redis.heads(names)
        except ServiceUnavailable:
            return {}
