"""Each table's accepted versions, from one ``watch()`` per table, fanned out to every SSE client.

One background thread per followed table runs the gap-free ``Table.watch`` and keeps the
newest versions in a ring. A client resuming after version ``v`` gets the ring's versions
after ``v``; if ``v`` is older than the ring, a watcher of its own first fills the gap from
Redis' stream of deltas or the log. Every delivered version is checked against the chain
(``prev_version`` = the last one delivered), so a client never misses or repeats one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable

from segcat.catalog.errors import SegcatError
from segcat.catalog.protocol.names import TableName
from segcat.catalog.read.table import Catalog, Table
from segcat.catalog.read.watch import VersionChange, Watcher
from segcat.server.table_scout import TableScout

log = logging.getLogger("segcat.serve")

_OVERFLOW = object()
"""Put in a client's queue when it fell too far behind: its stream ends, it reconnects and resumes."""

CLIENT_QUEUE = 10_000
RETRY_S = 1.0
STALL_S = 2.0
"""How long the log may run ahead of the materialized head before a feed judges it itself."""
WATCHDOG_S = 1.0


class TableFeed:
    """The accepted versions of one table, as they happen, for any number of asyncio clients."""

    def __init__(
        self, table: Table, loop: asyncio.AbstractEventLoop, keep: int, on_version: Callable[[], None]
    ):
        self.table = table
        self.name = table.name.qualified
        self._loop = loop
        self._ring: deque[VersionChange] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self._clients: set[asyncio.Queue[object]] = set()
        self._stopped = threading.Event()
        self._watcher: Watcher | None = None
        self._on_version = on_version
        self.last = self._head()
        self._base = self.last
        self._stalled_since: float | None = None
        self._judged_upto = -1
        self._thread = threading.Thread(target=self._run, name=f"segcat-feed-{self.name}", daemon=True)
        self._thread.start()

    def _head(self) -> int:
        return self.table.snapshot(include_dropped=True).version

    # ------------------------------------------------------------------ the watcher thread

    def _run(self) -> None:
        while not self._stopped.is_set():
            try:
                with self.table.watch(self.last, poll_s=0.25) as watcher:
                    self._watcher = watcher
                    if self._stopped.is_set():
                        return
                    for change in watcher:
                        self._publish(change)
                        if self._stopped.is_set():
                            return
            except SegcatError as exc:
                log.warning("feed interrupted, retrying", extra={"table": self.name, "reason": str(exc)})
                self._stopped.wait(RETRY_S)
            except Exception:
                if self._stopped.is_set():
                    return
                log.exception("feed failed, retrying", extra={"table": self.name})
                self._stopped.wait(RETRY_S)

    def _publish(self, change: VersionChange) -> None:
        with self._lock:
            if change.version <= self.last:
                return
            self._ring.append(change)
            self.last = change.version
            self._base = self._ring[0].prev_version
        with contextlib.suppress(RuntimeError):  # the loop is closed: the server is stopping
            self._loop.call_soon_threadsafe(self._fan_out, change)

    def _fan_out(self, change: VersionChange) -> None:
        self._on_version()
        for queue in list(self._clients):
            try:
                queue.put_nowait(change)
            except asyncio.QueueFull:
                self._clients.discard(queue)
                queue._queue.clear()  # type: ignore[attr-defined]  # room for the marker
                queue.put_nowait(_OVERFLOW)

    def stop(self) -> None:
        self._stopped.set()
        watcher = self._watcher
        if watcher is not None:
            watcher.stop()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    # ------------------------------------------------------------------ clients (on the event loop)

    async def follow(self, after: int | None) -> AsyncIterator[VersionChange]:
        """Every accepted version after ``after`` (default: from now), in order, none missing."""
        queue: asyncio.Queue[object] = asyncio.Queue(CLIENT_QUEUE)
        self._clients.add(queue)
        try:
            with self._lock:
                last = self.last if after is None else after
                backlog = [c for c in self._ring if c.version > last]
                base = self._base
            while last < base:  # older than the ring: a watcher of our own fills the gap
                for change in await asyncio.to_thread(self._catch_up, last, base):
                    yield change
                    last = change.version
                with self._lock:
                    backlog = [c for c in self._ring if c.version > last]
                    base = self._base
            for change in backlog:
                if change.version > last:
                    async for filled in self._chained(last, change):
                        yield filled
                        last = filled.version
            while True:
                item = await queue.get()
                if item is _OVERFLOW:
                    return
                assert isinstance(item, VersionChange)
                if item.version > last:
                    async for filled in self._chained(last, item):
                        yield filled
                        last = filled.version
        finally:
            self._clients.discard(queue)

    async def _chained(self, last: int, change: VersionChange) -> AsyncIterator[VersionChange]:
        """``change``, after whatever lies between ``last`` and it (never expected; checked anyway)."""
        if change.prev_version > last:
            log.warning(
                "version chain broken, filling",
                extra={"table": self.name, "after": last, "next": change.version},
            )
            for filled in await asyncio.to_thread(self._catch_up, last, change.prev_version):
                yield filled
        yield change

    def _catch_up(self, after: int, upto: int) -> list[VersionChange]:
        """The accepted versions in (after, upto], judged from the log (the materializer may lag)."""
        return self.table.changes(after, upto)

    def judge_stalled(self, log_end: int, materialized_offset: int, now: float) -> None:
        """Called by the hub's watchdog: when the log has run ahead of the materialized head for
        ``STALL_S`` (the materializer is down or behind, so no notification comes), judge the
        records past this feed's last version here and publish them."""
        if log_end <= materialized_offset or log_end <= self._judged_upto:
            self._stalled_since = None
            return
        if self._stalled_since is None:
            self._stalled_since = now
            return
        if now - self._stalled_since < STALL_S:
            return
        with self._lock:
            last = self.last
        for change in self.table.changes(last, log_end):
            self._publish(change)
        self._judged_upto = log_end


class FeedHub:
    """The feeds of every followed table (started on first use, stopped with the server), a
    watchdog that keeps them moving while the materializer is down, and, once an all-tables
    stream is open, a scout that names the tables that moved."""

    def __init__(self, catalog: Catalog, keep: int, on_version: Callable[[], None]) -> None:
        self._catalog = catalog
        self._on_version = on_version
        self._keep = keep
        self._feeds: dict[str, TableFeed] = {}
        self._lock = asyncio.Lock()
        self._stopped = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scout: TableScout | None = None
        self._listeners: set[asyncio.Queue[TableFeed]] = set()
        self._opening: set[str] = set()
        self._watchdog = threading.Thread(target=self._watch_stalls, name="segcat-feed-watchdog", daemon=True)
        self._watchdog.start()

    async def feed(self, table: Table) -> TableFeed:
        name = table.name.qualified
        found = self._feeds.get(name)
        if found is not None:
            return found
        async with self._lock:
            found = self._feeds.get(name)
            if found is None:
                self._loop = loop = asyncio.get_running_loop()
                found = await asyncio.to_thread(TableFeed, table, loop, self._keep, self._on_version)
                self._feeds[name] = found
                for listener in list(self._listeners):
                    listener.put_nowait(found)
            return found

    def feeds(self) -> list[TableFeed]:
        return list(self._feeds.values())

    # ------------------------------------------------------------------ the all-tables stream

    def new_feeds(self) -> tuple[list[TableFeed], asyncio.Queue[TableFeed]]:
        """The feeds there are, and a queue that gets every feed started from now on (on the loop)."""
        self._loop = asyncio.get_running_loop()
        queue: asyncio.Queue[TableFeed] = asyncio.Queue()
        self._listeners.add(queue)
        if self._scout is None:
            self._scout = TableScout(self._catalog, self.moved)
        return self.feeds(), queue

    def latest_ends(self) -> dict[TableName, int]:
        """Every table's log end as the scout last saw it (empty before its first probe)."""
        return {} if self._scout is None else self._scout.ends

    def forget(self, queue: asyncio.Queue[TableFeed]) -> None:
        self._listeners.discard(queue)

    def moved(self, name: str) -> None:
        """``name`` moved (from any thread): make sure it has a feed."""
        loop = self._loop
        if name in self._feeds or name in self._opening or loop is None:
            return
        self._opening.add(name)

        async def open_feed() -> None:
            try:
                table = await asyncio.to_thread(self._catalog.table, name)
                await self.feed(table)
            except SegcatError as exc:
                log.info("no feed for a table that moved", extra={"table": name, "reason": str(exc)})
            finally:
                self._opening.discard(name)

        try:
            asyncio.run_coroutine_threadsafe(open_feed(), loop)
        except RuntimeError:
            self._opening.discard(name)

    # ------------------------------------------------------------------ the watchdog

    def _watch_stalls(self) -> None:
        while not self._stopped.wait(WATCHDOG_S):
            feeds = self.feeds()
            if not feeds:
                continue
            try:
                ends = self._catalog.admin.log_ends([feed.table.name for feed in feeds])
            except SegcatError:
                continue
            for feed in feeds:
                try:
                    head = self._catalog.redis.head(feed.name) if self._catalog.redis is not None else None
                    if head is not None and feed.table.log_id not in (None, head.log_id):
                        head = None  # another log's (a table that had this name before)
                    materialized = -1 if head is None else head.offset
                    feed.judge_stalled(ends.get(feed.table.name, -1), materialized, time.monotonic())
                except SegcatError as exc:
                    log.info("watchdog skipped a feed", extra={"table": feed.name, "reason": str(exc)})
                except Exception:
                    log.exception("watchdog failed on a feed", extra={"table": feed.name})

    def stop(self) -> None:
        self._stopped.set()
        if self._scout is not None:
            self._scout.stop()
        feeds = list(self._feeds.values())
        for feed in feeds:
            feed.stop()
        for feed in feeds:
            feed.join(2.0)
        self._feeds.clear()
