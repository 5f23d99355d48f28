"""Each table's accepted versions, from one ``watch()`` per table, fanned out to every SSE client.

One background thread per followed table runs the gap-free ``Table.watch`` and keeps the
newest versions in a ring. A client resuming after version ``v`` gets the ring's versions
after ``v``; if ``v`` is older than the ring, the versions in between come from the log in
pages of ``PAGE`` offsets, each judged once and shared by every client that needs it
(``CatchUpPages``). Every delivered version is checked against the chain (``prev_version`` =
the last one delivered), so a client never misses or repeats one.

What a client costs is bounded by construction: at most one catch-up page (shared) and a queue
of at most ``CLIENT_EVENTS`` versions and ``CLIENT_BYTES`` of their event data; a client that
falls further behind is cut (``TooSlow``: its stream ends, it reconnects and resumes with
``Last-Event-ID``). A feed no client has followed for ``IDLE_S`` stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from typing import Generic, TypeVar

from segcat import SegcatError, VersionChange, Watcher
from segcat.catalog.read.table import TableReader, Tables

log = logging.getLogger("segcat.serve")

CLIENT_EVENTS = 10_000
CLIENT_BYTES = 4 * 1024 * 1024
"""A client's undelivered event data; past it the client is cut (it reconnects and resumes)."""
PAGE = 1024
"""Log offsets per catch-up page."""
KEEP_PAGES = 8
"""Catch-up pages each feed keeps for the next client that needs them."""
IDLE_S = 60.0
"""A feed no client follows stops after this long (the next client starts it again)."""
RETRY_S = 1.0
STALL_S = 2.0
"""How long the log may run ahead of the materialized head before a feed judges it itself."""
WATCHDOG_S = 1.0

T = TypeVar("T")


class TooSlow(Exception):
    """The client fell more than its budget behind: its stream ends, it resumes where it was."""


class ClientQueue(Generic[T]):
    """One client's undelivered items, bounded by count and by bytes (on the event loop)."""

    def __init__(self, max_items: int = CLIENT_EVENTS, max_bytes: int = CLIENT_BYTES) -> None:
        self._items: deque[tuple[T, int]] = deque()
        self._bytes = 0
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._ready = asyncio.Event()
        self.cut = False

    @property
    def pending_bytes(self) -> int:
        return self._bytes

    def put(self, item: T, size: int) -> bool:
        """Queue ``item`` (``size`` bytes); False, and the client is cut, when that passes a bound."""
        if self.cut:
            return False
        if len(self._items) >= self._max_items or self._bytes + size > self._max_bytes:
            self.stop()
            return False
        self._items.append((item, size))
        self._bytes += size
        self._ready.set()
        return True

    def stop(self) -> None:
        """Cut the client: what it has not read is dropped, its next ``get`` raises ``TooSlow``."""
        self.cut = True
        self._items.clear()
        self._bytes = 0
        self._ready.set()

    async def get(self) -> T:
        while not self._items:
            if self.cut:
                raise TooSlow
            self._ready.clear()
            await self._ready.wait()
        item, size = self._items.popleft()
        self._bytes -= size
        return item


class CatchUpPages:
    """The accepted versions of a table's log in pages of ``PAGE`` offsets, judged once each and
    shared: forty clients resuming from version 0 judge the log once, one page at a time, and
    hold one page each (references to the same objects) instead of the whole history."""

    def __init__(self, load: Callable[[int, int], list[VersionChange]], keep: int = KEEP_PAGES) -> None:
        self._load = load
        """The accepted versions in (after, upto], judged from the log."""
        self._keep = keep
        self._pages: OrderedDict[tuple[int, int], list[VersionChange]] = OrderedDict()
        self._loading: dict[tuple[int, int], asyncio.Task[list[VersionChange]]] = {}
        self.loads = 0
        """Pages judged so far (tests: shared pages are judged once)."""

    @staticmethod
    def bounds(first: int, limit: int) -> tuple[int, int]:
        """The page holding offset ``first``, cut at ``limit``: offsets [start, end]."""
        start = first - first % PAGE
        return start, min(start + PAGE - 1, limit)

    async def page(self, first: int, limit: int) -> tuple[int, list[VersionChange]]:
        """The page holding offset ``first`` (cut at ``limit``): its last offset and its versions."""
        key = self.bounds(first, limit)
        found = self._pages.get(key)
        if found is not None:
            self._pages.move_to_end(key)
            return key[1], found
        task = self._loading.get(key)
        if task is None:
            # a task of its own: a client that leaves mid-page does not fail the others waiting
            task = self._loading[key] = asyncio.ensure_future(self._judge(key))
            task.add_done_callback(_retrieved)  # every waiter may have left: the error is theirs
        return key[1], await asyncio.shield(task)

    async def _judge(self, key: tuple[int, int]) -> list[VersionChange]:
        try:
            changes = await asyncio.to_thread(self._load, key[0] - 1, key[1])
        finally:
            self._loading.pop(key, None)
        self.loads += 1
        self._pages[key] = changes
        while len(self._pages) > self._keep:
            self._pages.popitem(last=False)
        return changes


def _retrieved(task: asyncio.Task[list[VersionChange]]) -> None:
    if not task.cancelled():
        task.exception()


class TableFeed:
    """The accepted versions of one table, as they happen, for any number of asyncio clients."""

    def __init__(
        self,
        table: TableReader,
        loop: asyncio.AbstractEventLoop,
        keep: int,
        on_version: Callable[[], None],
        size_of: Callable[[VersionChange], int] = lambda change: 256,
    ):
        self.table = table
        self.name = table.name.qualified
        self._loop = loop
        self._ring: deque[VersionChange] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self._clients: set[ClientQueue[VersionChange]] = set()
        self._stopped = threading.Event()
        self._watcher: Watcher | None = None
        self._on_version = on_version
        self._size_of = size_of
        self.pages = CatchUpPages(table.changes)
        self.used = time.monotonic()
        """When a client last came or went (the hub stops a feed idle for ``IDLE_S``)."""
        self.last = self._head()
        self._base = self.last
        self._stalled_since: float | None = None
        self._judged_upto = -1
        self._thread = threading.Thread(target=self._run, name=f"segcat-feed-{self.name}", daemon=True)
        self._thread.start()

    def _head(self) -> int:
        return self.table.snapshot(include_dropped=True).version

    @property
    def stopped(self) -> bool:
        return self._stopped.is_set()

    def idle_for(self, now: float) -> float:
        """How long no client has followed this feed (0 while one does)."""
        return 0.0 if self._clients else now - self.used

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
        if not self._clients:
            return
        size = self._size_of(change)
        for queue in list(self._clients):
            if not queue.put(change, size):
                self._clients.discard(queue)

    def stop(self) -> None:
        self._stopped.set()
        watcher = self._watcher
        if watcher is not None:
            watcher.stop()
        for queue in list(self._clients):  # on the loop (the hub's reaper) or at shutdown
            queue.stop()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    # ------------------------------------------------------------------ clients (on the event loop)

    async def follow(self, after: int | None) -> AsyncIterator[VersionChange]:
        """Every accepted version after ``after`` (default: from now), in order, none missing.
        Raises ``TooSlow`` when the client falls more than its budget behind."""
        queue: ClientQueue[VersionChange] = ClientQueue()
        self._clients.add(queue)
        self.used = time.monotonic()
        if self.stopped:
            queue.stop()
        try:
            with self._lock:
                last = self.last if after is None else after
                base = self._base
            covered = last
            while covered < base:  # older than the ring: shared pages of the log fill the gap
                async for change in self._between(covered, base):
                    yield change
                    last = change.version
                covered = base
                with self._lock:
                    base = self._base
            with self._lock:
                backlog = [c for c in self._ring if c.version > last]
            for change in backlog:
                if change.version > last:
                    async for filled in self._chained(last, change):
                        yield filled
                        last = filled.version
            while True:
                item = await queue.get()
                if item.version > last:
                    async for filled in self._chained(last, item):
                        yield filled
                        last = filled.version
        finally:
            self._clients.discard(queue)
            self.used = time.monotonic()

    async def _between(self, after: int, upto: int) -> AsyncIterator[VersionChange]:
        """The accepted versions in (``after``, ``upto``], page by page, each linked to the one
        before it (a page's first version names the page's start, not the version before)."""
        covered, last = after, after
        while covered < upto:
            covered, changes = await self.pages.page(covered + 1, upto)
            for change in changes:
                if change.version > last:
                    yield change if change.prev_version == last else replace(change, prev_version=last)
                    last = change.version

    async def _chained(self, last: int, change: VersionChange) -> AsyncIterator[VersionChange]:
        """``change``, after whatever lies between ``last`` and it (never expected; checked anyway)."""
        if change.prev_version > last:
            log.warning(
                "version chain broken, filling",
                extra={"table": self.name, "after": last, "next": change.version},
            )
            async for filled in self._between(last, change.prev_version):
                yield filled
        yield change

    def judge_stalled(self, log_end: int, materialized_offset: int, now: float) -> None:
        """Called by the hub's watchdog: when the log has run ahead of the materialized head for
        ``STALL_S`` (the materializer is down or behind, so no notification comes), judge the
        records past this feed's last version here, a page at a time, and publish them."""
        if log_end <= materialized_offset or log_end <= self._judged_upto:
            self._stalled_since = None
            return
        if self._stalled_since is None:
            self._stalled_since = now
            return
        if now - self._stalled_since < STALL_S:
            return
        with self._lock:
            covered = self.last
        while covered < log_end and not self._stopped.is_set():
            upto = min(covered + PAGE, log_end)
            for change in self.table.changes(covered, upto):
                self._publish(change)
            covered = upto
        self._judged_upto = log_end


class FeedHub:
    """The feeds of the tables followed by a table's stream (started on first use, stopped when
    idle or with the server), and a watchdog that keeps them moving while the materializer is down."""

    def __init__(
        self,
        catalog: Tables,
        keep: int,
        on_version: Callable[[], None],
        size_of: Callable[[VersionChange], int] = lambda change: 256,
    ) -> None:
        self._catalog = catalog
        self._on_version = on_version
        self._size_of = size_of
        self._keep = keep
        self._feeds: dict[str, TableFeed] = {}
        self._lock = asyncio.Lock()
        self._stopped = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._watchdog = threading.Thread(target=self._watch_stalls, name="segcat-feed-watchdog", daemon=True)
        self._watchdog.start()

    async def feed(self, table: TableReader) -> TableFeed:
        name = table.name.qualified
        found = self._feeds.get(name)
        if found is not None:
            found.used = time.monotonic()
            return found
        async with self._lock:
            found = self._feeds.get(name)
            if found is None:
                self._loop = loop = asyncio.get_running_loop()
                found = await asyncio.to_thread(
                    TableFeed, table, loop, self._keep, self._on_version, self._size_of
                )
                self._feeds[name] = found
            return found

    def feeds(self) -> list[TableFeed]:
        return list(self._feeds.values())

    # ------------------------------------------------------------------ idle feeds

    def reap(self, now: float) -> list[str]:
        """Stop the feeds no client has followed for ``IDLE_S`` (on the loop); their names."""
        idle = [name for name, feed in self._feeds.items() if feed.idle_for(now) > IDLE_S]
        for name in idle:
            self._feeds.pop(name).stop()
        return idle

    # ------------------------------------------------------------------ the watchdog

    def _watch_stalls(self) -> None:
        while not self._stopped.wait(WATCHDOG_S):
            loop = self._loop
            if loop is not None:
                with contextlib.suppress(RuntimeError):  # the loop is closed: the server is stopping
                    loop.call_soon_threadsafe(self.reap, time.monotonic())
            feeds = self.feeds()
            if not feeds:
                continue
            try:
                ends = self._catalog.admin.log_ends([feed.table.name for feed in feeds])
            except SegcatError:
                continue
            for feed in feeds:
                if feed.stopped:
                    continue
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
        feeds = list(self._feeds.values())
        for feed in feeds:
            feed.stop()
        for feed in feeds:
            feed.join(2.0)
        self._feeds.clear()
