"""Server-Sent Events: one event per accepted version, resumable with ``Last-Event-ID``.

``/api/tables/{table}/events``: the event id is the version. ``/api/events``: every table's
versions, the id a cursor naming each table's last version (``ns.a=41,ns.b=7``), so one
``Last-Event-ID`` resumes all of them; a table the cursor does not name starts at its first
version (it was created since), a table known when a fresh stream starts at its head.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Header, Query, Request
from sse_starlette import EventSourceResponse

from segcat.catalog.errors import InvalidArgument, SegcatError
from segcat.catalog.protocol.names import table_name
from segcat.catalog.read.watch import VersionChange
from segcat.server.context import ServerContext, context
from segcat.server.table_scout import PROBE_S
from segcat.server.version_feed import TableFeed

router = APIRouter(tags=["events"])
log = logging.getLogger("segcat.serve")
Ctx = Annotated[ServerContext, Depends(context)]
MAX_CURSOR = 1_000_000


def _version_arg(text: str, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise InvalidArgument(f"{what} must be a version (an integer ≥ -1), not {text[:40]!r}") from None
    if not -1 <= value <= 2**63 - 2:
        raise InvalidArgument(f"{what} {value} is not a version")
    return value


@router.get("/api/tables/{table}/events", summary="SSE: every accepted version of one table")
async def table_events(
    table: str,
    request: Request,
    ctx: Ctx,
    from_: Annotated[str | None, Query(alias="from", description="Resume after this version.")] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    resume = last_event_id if last_event_id is not None else from_
    after = None if resume is None else _version_arg(resume, "Last-Event-ID" if last_event_id else "from")
    opened = await asyncio.to_thread(ctx.tables.open, table)
    feed = await ctx.feeds.feed(opened)

    async def stream() -> AsyncIterator[bytes]:
        ctx.metrics.sse_clients.inc()
        try:
            async for change in feed.follow(after):
                ctx.metrics.events_sent.inc()
                yield ctx.frames.frame(change)
        finally:
            ctx.metrics.sse_clients.dec()

    return EventSourceResponse(stream(), ping=ctx.settings.keepalive_s, headers=_NO_BUFFERING)


_NO_BUFFERING = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def parse_cursor(text: str) -> tuple[int, dict[str, int]]:
    """``@T;ns.a=41,ns.b=7`` → (T, {"ns.a": 41, "ns.b": 7}); ``InvalidArgument`` naming what is wrong."""
    if len(text) > MAX_CURSOR:
        raise InvalidArgument("the event cursor is too long")
    since, sep, named = text.partition(";")
    if not sep or not since.startswith("@"):
        raise InvalidArgument(
            "an event cursor is '@<start ms>;<table>=<version>,...' (as sent in the event ids)"
        )
    start_ms = _version_arg(since[1:], "the cursor's start time")
    cursor: dict[str, int] = {}
    for part in filter(None, named.split(",")):
        name, sep, version = part.partition("=")
        if not sep:
            raise InvalidArgument(f"the event cursor's part {part[:80]!r} is not table=version")
        cursor[table_name(name).qualified] = _version_arg(version, f"the cursor's version of {name}")
    return start_ms, cursor


def format_cursor(start_ms: int, cursor: dict[str, int]) -> str:
    return f"@{start_ms};" + ",".join(f"{name}={version}" for name, version in sorted(cursor.items()))


@router.get("/api/events", summary="SSE: every accepted version of every table")
async def all_events(
    request: Request,
    ctx: Ctx,
    from_: Annotated[str | None, Query(alias="from", description="Resume after this cursor.")] = None,
    last_event_id: Annotated[str | None, Header()] = None,
) -> EventSourceResponse:
    """The event id is a cursor: when the stream began, and each table's last version delivered.
    Resuming, a table it names continues after that version; any other table after the last
    version it had when the stream began (broker time ≤ the start), so nothing is missed."""
    resume = last_event_id if last_event_id is not None else from_
    start_ms, positions = (int(time.time() * 1000), {}) if resume is None else parse_cursor(resume)

    async def stream() -> AsyncIterator[bytes]:
        merged: asyncio.Queue[tuple[str, VersionChange]] = asyncio.Queue(10_000)
        followers: dict[str, asyncio.Task[None]] = {}
        admin = ctx.tables.catalog.admin
        names = await asyncio.to_thread(ctx.tables.names)
        ends_then = await asyncio.to_thread(admin.log_ends, names)  # before the lookup below: no gap
        firsts = await asyncio.to_thread(admin.first_offsets_after, names, start_ms)
        since: dict[str, int] = {n.qualified: first - 1 for n, first in firsts.items() if first is not None}
        """Unnamed tables with records after the start: follow them after the record before."""

        async def follow(feed: TableFeed) -> None:
            try:
                after = positions.get(feed.name, since.get(feed.name))
                if after is None:
                    after = (await asyncio.to_thread(feed.table.resolve_version, None, start_ms)).bound
                async for change in feed.follow(after):
                    await merged.put((feed.name, change))
            except SegcatError as exc:  # this table's trouble ends its part of the stream, not the rest
                log.warning(
                    "a table left the all-tables stream", extra={"table": feed.name, "reason": str(exc)}
                )
            except Exception:
                log.exception("a table left the all-tables stream", extra={"table": feed.name})

        def start(feed: TableFeed) -> None:
            if feed.name not in followers:
                followers[feed.name] = asyncio.create_task(follow(feed))

        async def start_new(queue: asyncio.Queue[TableFeed]) -> None:
            while True:
                start(await queue.get())

        async def compare_ends() -> None:
            """Tables whose log moved since the stream began (the materializer may be down)."""
            while True:
                await asyncio.sleep(PROBE_S)
                for name, end in ctx.feeds.latest_ends().items():
                    if name.qualified not in followers and end != ends_then.get(name, -1):
                        ctx.feeds.moved(name.qualified)

        existing, added = ctx.feeds.new_feeds()
        for feed in existing:
            start(feed)
        for name in {*positions, *since}:
            ctx.feeds.moved(name)
        tasks = [asyncio.create_task(start_new(added)), asyncio.create_task(compare_ends())]
        ctx.metrics.sse_clients.inc()
        try:
            while True:
                name, change = await merged.get()
                if change.version <= positions.get(name, -1):
                    continue
                positions[name] = change.version
                ctx.metrics.events_sent.inc()
                yield ctx.frames.frame(change, format_cursor(start_ms, positions))
        finally:
            ctx.metrics.sse_clients.dec()
            ctx.feeds.forget(added)
            for task in [*tasks, *followers.values()]:
                task.cancel()

    return EventSourceResponse(stream(), ping=ctx.settings.keepalive_s, headers=_NO_BUFFERING)
