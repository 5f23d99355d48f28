"""Server-Sent Events: one event per accepted version, resumable with ``Last-Event-ID``.

``/api/tables/{table}/events``: the event id is the version. ``/api/events``: every table's
versions, the id a cursor (``event_cursor``) naming each table's last version, so one
``Last-Event-ID`` resumes all of them.

Everything a stream does is its own and ends with it: the feeds it opens are opened by its own
task, its followers are its tasks, and the hub stops a feed nobody follows. A client that reads
too slowly is cut by the bytes it leaves unread (``version_feed.ClientQueue``) and by a send
that blocks for ``SEND_TIMEOUT_S``; it reconnects and resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request
from sse_starlette import EventSourceResponse
from sse_starlette.sse import SendTimeoutError
from starlette.types import Receive, Scope, Send

from segcat import SegcatError, TableName, VersionChange
from segcat.server.context import ServerContext, context
from segcat.server.event_cursor import COMPACT_AT, MAX_CURSOR, Cursor, Rebase, rebase, version_arg
from segcat.server.table_scout import PROBE_S
from segcat.server.version_feed import ClientQueue, TableFeed, TooSlow

router = APIRouter(tags=["events"])
log = logging.getLogger("segcat.serve")
Ctx = Annotated[ServerContext, Depends(context)]
SEND_TIMEOUT_S = 30.0
"""A client whose socket takes no bytes for this long is disconnected."""
COMPACT_EVERY_S = 10.0
_NO_BUFFERING = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class _Stream(EventSourceResponse):
    """An SSE response whose client is dropped when its socket takes nothing for ``SEND_TIMEOUT_S``."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except SendTimeoutError:
            log.info("a client that stopped reading was disconnected", extra={"path": scope.get("path")})


def _response(stream: AsyncIterator[bytes], ctx: ServerContext) -> EventSourceResponse:
    return _Stream(stream, ping=ctx.settings.keepalive_s, headers=_NO_BUFFERING, send_timeout=SEND_TIMEOUT_S)


@router.get("/api/tables/{table}/events", summary="SSE: every accepted version of one table")
async def table_events(
    table: str,
    request: Request,
    ctx: Ctx,
    from_: Annotated[
        str | None, Query(alias="from", max_length=40, description="Resume after this version.")
    ] = None,
    last_event_id: Annotated[str | None, Header(max_length=40)] = None,
) -> EventSourceResponse:
    resume = last_event_id if last_event_id is not None else from_
    after = None if resume is None else version_arg(resume, "Last-Event-ID" if last_event_id else "from")
    opened = await asyncio.to_thread(ctx.tables.open, table)
    feed = await ctx.feeds.feed(opened)

    async def stream() -> AsyncIterator[bytes]:
        ctx.metrics.sse_clients.inc()
        try:
            async for change in feed.follow(after):
                ctx.metrics.events_sent.inc()
                yield ctx.frames.frame(change)
        except TooSlow:
            log.info("a slow client was cut", extra={"table": feed.name})
        finally:
            ctx.metrics.sse_clients.dec()

    return _response(stream(), ctx)


@router.get("/api/events", summary="SSE: every accepted version of every table")
async def all_events(
    request: Request,
    ctx: Ctx,
    from_: Annotated[
        str | None, Query(alias="from", max_length=MAX_CURSOR, description="Resume after this cursor.")
    ] = None,
    last_event_id: Annotated[str | None, Header(max_length=MAX_CURSOR)] = None,
) -> EventSourceResponse:
    """The event id is a cursor: when the stream began, and each table's last version delivered.
    Resuming, a table it names continues after that version; any other table after the last
    version it had when the stream began (broker time ≤ the start), so nothing is missed."""
    resume = last_event_id if last_event_id is not None else from_
    cursor = Cursor(int(time.time() * 1000), {}) if resume is None else Cursor.parse(resume)
    return _response(AllTablesStream(ctx, cursor).run(), ctx)


class AllTablesStream:
    """One client's all-tables stream: its followers, the feeds it asked for, its cursor."""

    def __init__(self, ctx: ServerContext, cursor: Cursor) -> None:
        self.ctx = ctx
        self.cursor = cursor
        self.start_ms = cursor.start_ms
        """When the stream began (the cursor's start moves on when it is compacted)."""
        self.delivered = dict(cursor.positions)
        self.merged: ClientQueue[tuple[str, VersionChange]] = ClientQueue()
        self.followers: dict[str, asyncio.Task[None]] = {}
        self.resume_after: dict[str, int] = {}
        self.newest_ms = 0
        self._compacting: asyncio.Task[Rebase | None] | None = None
        self._compacted_at = 0.0

    async def run(self) -> AsyncIterator[bytes]:
        ctx = self.ctx
        admin = ctx.tables.catalog.admin
        names = await asyncio.to_thread(ctx.tables.names)
        known = {name.qualified for name in names}
        for gone in set(self.cursor.positions) - known:  # deleted since: nothing to resume
            del self.cursor.positions[gone]
        ends_then = await asyncio.to_thread(admin.log_ends, names)  # before the lookup below: no gap
        firsts = await asyncio.to_thread(admin.first_offsets_after, names, self.start_ms)
        since = {n.qualified: first - 1 for n, first in firsts.items() if first is not None}
        """Tables with records after the start: each resumes after the record before."""
        ends = {name.qualified: end for name, end in ends_then.items()}
        self.resume_after = {**ends, **since, **self.cursor.positions}
        moved = {name for name, after in self.resume_after.items() if ends.get(name, -1) > after}

        existing, added = ctx.feeds.new_feeds()
        for feed in existing:
            self._follow(feed)
        tasks = [
            asyncio.create_task(self._open(sorted(moved))),
            asyncio.create_task(self._follow_new(added)),
            asyncio.create_task(self._compare_ends(ends_then)),
        ]
        ctx.metrics.sse_clients.inc()
        try:
            while True:
                name, change = await self.merged.get()
                if change.version <= self.delivered.get(name, -1):
                    continue
                self.delivered[name] = self.cursor.positions[name] = change.version
                self.newest_ms = max(self.newest_ms, change.timestamp_ms)
                text = self.cursor.text()
                if len(text) > MAX_CURSOR:
                    log.warning("an all-tables stream ended: its cursor outgrew the bound")
                    return  # the client resumes with the last cursor it got, once compaction can
                ctx.metrics.events_sent.inc()
                yield ctx.frames.frame(change, text)
                if len(text) > COMPACT_AT:
                    self._compact()
        except TooSlow:
            log.info("a slow all-tables client was cut")
        finally:
            ctx.metrics.sse_clients.dec()
            ctx.feeds.forget(added)
            for task in [*tasks, *self.followers.values()]:
                task.cancel()
            if self._compacting is not None:
                self._compacting.cancel()

    def _follow(self, feed: TableFeed) -> None:
        if feed.name not in self.followers:
            self.followers[feed.name] = asyncio.create_task(self._deliver(feed))

    async def _deliver(self, feed: TableFeed) -> None:
        """One table's versions into the stream, from where this client is."""
        try:
            after = self.resume_after.get(feed.name, -1)  # unknown at the start: created since
            async for change in feed.follow(after):
                if not self.merged.put((feed.name, change), self.ctx.frames.size(change)):
                    return
        except TooSlow:
            self.merged.stop()  # this client fell behind on one table: the stream ends, it resumes
        except SegcatError as exc:  # this table's trouble ends its part of the stream, not the rest
            log.warning("a table left the all-tables stream", extra={"table": feed.name, "reason": str(exc)})
        except Exception:
            log.exception("a table left the all-tables stream", extra={"table": feed.name})

    async def _open(self, names: list[str]) -> None:
        """Feeds for the tables that moved since the cursor's positions, one at a time (this task
        ends with the stream: nothing is opened for a client that left)."""
        for name in names:
            if name in self.followers:
                continue
            try:
                table = await asyncio.to_thread(self.ctx.tables.open, name)
                self._follow(await self.ctx.feeds.feed(table))
            except SegcatError as exc:
                log.info("no feed for a table that moved", extra={"table": name, "reason": str(exc)})

    async def _follow_new(self, queue: asyncio.Queue[TableFeed]) -> None:
        while True:
            self._follow(await queue.get())

    async def _compare_ends(self, ends_then: dict[TableName, int]) -> None:
        """Tables whose log moved since the stream began (the materializer may be down)."""
        while True:
            await asyncio.sleep(PROBE_S)
            for name, end in self.ctx.feeds.latest_ends().items():
                if name.qualified not in self.followers and end != ends_then.get(name, -1):
                    self.ctx.feeds.moved(name.qualified)

    # ------------------------------------------------------------------ compaction

    def _compact(self) -> None:
        """Start moving the cursor's start time forward (one at a time, every ``COMPACT_EVERY_S``)."""
        now = time.monotonic()
        if self._compacting is not None or now - self._compacted_at < COMPACT_EVERY_S:
            return
        self._compacted_at = now
        snapshot = Cursor(self.cursor.start_ms, dict(self.cursor.positions))
        self._compacting = asyncio.create_task(asyncio.to_thread(self._rebase, snapshot, self.newest_ms))
        self._compacting.add_done_callback(self._compacted)

    def _rebase(self, snapshot: Cursor, newest_ms: int) -> Rebase | None:
        tables = self.ctx.tables
        try:
            return rebase(
                tables.catalog.admin,
                tables.names(),
                snapshot,
                newest_ms,
                lambda name, after, upto: not tables.open(name).changes(after, upto),
            )
        except SegcatError as exc:
            log.info("the event cursor was not compacted", extra={"reason": str(exc)})
            return None

    def _compacted(self, task: asyncio.Task[Rebase | None]) -> None:
        self._compacting = None
        if task.cancelled():
            return
        with contextlib.suppress(Exception):
            found = task.result()
            if found is not None:
                found.apply(self.cursor)
