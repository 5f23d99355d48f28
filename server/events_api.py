"""Server-Sent Events: one event per accepted version, resumable with ``Last-Event-ID``.

``/api/tables/{table}/events``: the event id is the version. ``/api/events``: every table's
versions, the id a cursor (``event_cursor``) naming each table's last version, so one
``Last-Event-ID`` resumes all of them.

A table's stream follows that table's feed (``version_feed``; the hub stops a feed nobody
follows). The all-tables stream follows the version bus (``version_bus``): one subscription to
Redis' global channel for every table and every client, no thread or feed per table. A client that reads
too slowly is cut by the bytes it leaves unread (``version_feed.ClientQueue``) and by a send
that blocks for ``SEND_TIMEOUT_S``; it reconnects and resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request
from sse_starlette import EventSourceResponse
from sse_starlette.sse import SendTimeoutError
from starlette.types import Receive, Scope, Send

from segcat import SegcatError, TableName, VersionChange
from segcat.server.context import ServerContext, context
from segcat.server.event_cursor import COMPACT_AT, MAX_CURSOR, Cursor, Rebase, rebase, version_arg
from segcat.server.version_feed import PAGE, TooSlow

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
    """One client's all-tables stream: the versions of the bus (``version_bus``: one subscription
    to the global channel for every table and client), and, for a table that moved while the
    client was away or whose versions the bus did not link to the last one delivered, the
    versions in between read from the log (only for those tables)."""

    def __init__(self, ctx: ServerContext, cursor: Cursor) -> None:
        self.ctx = ctx
        self.cursor = cursor
        self.start_ms = cursor.start_ms
        """When the stream began (the cursor's start moves on when it is compacted)."""
        self.after: dict[str, int] = {}
        """Each table's position: its last version delivered, or the log offset it resumes after."""
        self.newest_ms = 0
        self._compacting: asyncio.Task[Rebase | None] | None = None
        self._compacted_at = 0.0

    async def run(self) -> AsyncIterator[bytes]:
        ctx = self.ctx
        admin = ctx.tables.catalog.admin
        queue = await ctx.versions.attach()  # before the ends are read: nothing falls between
        ctx.metrics.sse_clients.inc()
        try:
            names = await asyncio.to_thread(ctx.tables.names)
            known = {name.qualified for name in names}
            for gone in set(self.cursor.positions) - known:  # deleted since: nothing to resume
                del self.cursor.positions[gone]
            ends_then = await asyncio.to_thread(admin.log_ends, names)  # before the lookup below: no gap
            firsts = await asyncio.to_thread(admin.first_offsets_after, names, self.start_ms)
            since = {n.qualified: first - 1 for n, first in firsts.items() if first is not None}
            """Tables with records after the start: each resumes after the record before."""
            ends = {name.qualified: end for name, end in ends_then.items()}
            self.after = {**ends, **since, **self.cursor.positions}
            for name in sorted(name for name, after in self.after.items() if ends.get(name, -1) > after):
                async for change in self._from_log(name, self.after[name], ends[name]):
                    frame = self._deliver(change)
                    if frame is None:
                        return
                    yield frame
            while True:
                change = await queue.get()
                async for linked in self._linked(change):
                    frame = self._deliver(linked)
                    if frame is None:
                        return
                    yield frame
        except TooSlow:
            log.info("a slow all-tables client was cut")
        finally:
            ctx.metrics.sse_clients.dec()
            ctx.versions.detach(queue)
            if self._compacting is not None:
                self._compacting.cancel()

    def _deliver(self, change: VersionChange) -> bytes | None:
        """The frame of ``change``, the cursor moved past it (None: the cursor outgrew its bound)."""
        self.after[change.table] = self.cursor.positions[change.table] = change.version
        self.newest_ms = max(self.newest_ms, change.timestamp_ms)
        text = self.cursor.text()
        if len(text) > MAX_CURSOR:
            log.warning("an all-tables stream ended: its cursor outgrew the bound")
            return None  # the client resumes with the last cursor it got, once compaction can
        self.ctx.metrics.events_sent.inc()
        if len(text) > COMPACT_AT:
            self._compact()
        return self.ctx.frames.frame(change, text)

    async def _linked(self, change: VersionChange) -> AsyncIterator[VersionChange]:
        """``change`` if this client has not had it, after the versions between (from the log)."""
        name = change.table
        after = self.after.get(name)
        if after is None:  # a table created since the stream began (or unknown to it then)
            after = self.after[name] = await self._resume_point(name)
        if change.version <= after:
            return
        if change.prev_version <= after:
            yield change
            return
        async for filled in self._from_log(name, after, change.version):
            yield filled

    async def _resume_point(self, name: str) -> int:
        """Where a table the stream did not know resumes: after its last record at the start time."""
        try:
            parsed = TableName.parse(name)
            admin = self.ctx.tables.catalog.admin
            first = (await asyncio.to_thread(admin.first_offsets_after, [parsed], self.start_ms))[parsed]
        except SegcatError as exc:
            log.info("a new table's start was not found", extra={"table": name, "reason": str(exc)})
            return -1
        return -1 if first is None else first - 1

    async def _from_log(self, name: str, after: int, upto: int) -> AsyncIterator[VersionChange]:
        """The accepted versions of (``after``, ``upto``], judged from the log a page at a time
        (a table's trouble ends its part of the catch-up, not the stream)."""
        covered = after
        try:
            table = await asyncio.to_thread(self.ctx.tables.open, name)
            while covered < upto:
                page_end = min(covered + PAGE, upto)
                for change in await asyncio.to_thread(table.changes, covered, page_end):
                    last = self.after.get(name, after)
                    if change.version > last:
                        yield change if change.prev_version <= last else replace(change, prev_version=last)
                covered = page_end
        except SegcatError as exc:
            log.warning("a table's versions were not read", extra={"table": name, "reason": str(exc)})

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
