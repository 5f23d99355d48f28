"""``/api/tables``: heads, snapshots (JSON pages or Arrow IPC), history and diffs, all read-only."""

from __future__ import annotations

from collections import Counter
from functools import partial
from typing import Annotated, Any
from urllib.parse import urlencode

import pyarrow as pa
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from segcat.catalog.errors import InvalidArgument, SegcatError, ServiceUnavailable
from segcat.catalog.protocol.jsonio import dumps
from segcat.catalog.protocol.predicates import parse_predicate
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.read.as_of import parse_as_of
from segcat.catalog.storage.redis import Head
from segcat.server import views
from segcat.server.context import ServerContext, context
from segcat.server.public_errors import public_message

ARROW_STREAM = "application/vnd.apache.arrow.stream"
MAX_PAGE = 100_000
MAX_HISTORY = 5_000
MAX_VERSION = 2**63 - 2

router = APIRouter(prefix="/api/tables", tags=["tables"])
Ctx = Annotated[ServerContext, Depends(context)]
Version = Annotated[int | None, Query(ge=0, le=MAX_VERSION, description="A version (log offset).")]


def _redis_head(ctx: ServerContext, name: str, log_id: str | None) -> Head | None:
    """The materialized head of the table's log ``log_id`` (None: none, Redis down, or a head of
    another log: a table that had this name before, docs/PROTOCOL.md §6)."""
    redis = ctx.tables.catalog.redis
    if redis is None:
        return None
    try:
        head = redis.head(name)
    except ServiceUnavailable:
        return None
    return head if head is None or log_id is None or head.log_id == log_id else None


def _as_of(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return parse_as_of(text)
    except ValueError as exc:
        raise InvalidArgument(f"as_of: {exc}") from None


@router.get("", summary="Every table with its materialized head")
def list_tables(ctx: Ctx) -> dict[str, Any]:
    """Cheap for many tables: one metadata and one ListOffsets request, one Redis read per table;
    a table's trouble (a misconfigured topic, say) is its entry's ``error``, never the list's."""
    names = ctx.tables.names()
    ends = ctx.tables.catalog.admin.log_ends(names)
    ids = ctx.tables.catalog.admin.topic_ids(names)
    out = []
    for name in names:
        qualified = name.qualified
        end = ends.get(name, -1)
        head = _redis_head(ctx, qualified, ids.get(name))
        entry = views.head_from_redis(qualified, head, end)
        try:
            entry["activity"] = ctx.activity.activity(
                qualified, end, partial(ctx.tables.open, qualified), head
            )
        except SegcatError as exc:
            entry["activity"] = None
            entry["error"] = public_message(str(exc))
        out.append(entry)
    return {"tables": out}


@router.get("/{table}", summary="A table's exact head and what the materializer holds of it")
def table_head(table: str, ctx: Ctx) -> dict[str, Any]:
    opened = ctx.tables.open(table)
    end = opened.log_end()
    snap = opened.snapshot(end, include_dropped=True) if end >= 0 else opened.snapshot(include_dropped=True)
    head = views.head_from_snapshot(snap, _redis_head(ctx, opened.name.qualified, opened.log_id), end)
    head["activity"] = ctx.activity.activity(opened.name.qualified, end, lambda: opened)
    return head


@router.get(
    "/{table}/snapshot",
    summary="Live segments at a version or time: JSON pages, or Arrow IPC with Accept: " + ARROW_STREAM,
    responses={200: {"content": {"application/json": {}, ARROW_STREAM: {}}}},
)
def snapshot(
    table: str,
    request: Request,
    ctx: Ctx,
    version: Version = None,
    as_of: Annotated[str | None, Query(description="Epoch ms or ISO-8601 (UTC if no zone).")] = None,
    where: Annotated[str | None, Query(max_length=16_384, description="A predicate to prune by.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1_000,
    after: Annotated[str | None, Query(max_length=512, description="Continue after this segment id.")] = None,
) -> Any:
    if version is not None and as_of is not None:
        raise InvalidArgument("give version or as_of, not both")
    predicate = parse_predicate(where) if where is not None else None
    opened = ctx.tables.open(table)
    snap = opened.snapshot(version, _as_of(as_of))
    total = snap.live_count
    if predicate is not None:
        snap = snap.prune(predicate)
    if ARROW_STREAM in request.headers.get("accept", ""):
        return _arrow(snap.segments, snap.version, snap.timestamp_ms, total)
    page = snap.segment_page(after, limit)
    next_url = None
    if len(page) == limit and snap.segment_page(page[-1].segment_id, 1):
        query = {"version": snap.version, "limit": limit, "after": page[-1].segment_id}
        if where is not None:
            query["where"] = where
        next_url = f"{request.url.path}?{urlencode(query)}"
    return _json(
        {
            "table": snap.table,
            "version": snap.version,
            "timestamp_ms": snap.timestamp_ms,
            "note": snap.note,
            "origin": snap.origin,
            "live_segments": total,
            "live_rows": snap.live_rows if predicate is None else None,
            "live_bytes": snap.live_bytes if predicate is None else None,
            "where": where,
            "matched_segments": snap.live_count,
            "segments": views.segments(page),
            "next": next_url,
        }
    )


def _json(document: dict[str, Any]) -> Response:
    """Strict JSON straight from the dict: the documents are JSON-ready already, and FastAPI's
    ``jsonable_encoder`` walking 50,000 segments was half of a big snapshot's time."""
    return Response(dumps(document).encode(), media_type="application/json")


def _arrow(segments: pa.Table, version: int, timestamp_ms: int, total: int) -> Response:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, segments.schema) as writer:
        writer.write_table(segments)
    return Response(
        sink.getvalue().to_pybytes(),
        media_type=ARROW_STREAM,
        headers={
            "X-Segcat-Version": str(version),
            "X-Segcat-Timestamp-Ms": str(timestamp_ms),
            "X-Segcat-Live-Segments": str(total),
        },
    )


@router.get("/{table}/history", summary="Log records with verdicts and the table's totals after each")
def history(
    table: str,
    ctx: Ctx,
    from_: Annotated[int | None, Query(alias="from", ge=0, le=MAX_VERSION)] = None,
    to: Annotated[int | None, Query(ge=0, le=MAX_VERSION + 1, description="Exclusive.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_HISTORY)] = 100,
    accepted_only: bool = False,
) -> Response:
    opened = ctx.tables.open(table)
    end = opened.log_end() + 1
    stop = end if to is None else min(to, end)
    start = max(stop - limit, 0) if from_ is None else from_
    if start > stop:
        raise InvalidArgument(f"from ({start}) is after to ({stop})")
    stop = min(stop, start + limit)
    entries = opened.timeline(start, stop) if stop > start else []
    records = [views.record(e) for e in entries]
    counts = Counter(r["outcome"] for r in records)
    if accepted_only:
        records = [r for r in records if r["outcome"] == Outcome.ACCEPTED.value]
    return _json(
        {
            "table": opened.name.qualified,
            "from": start,
            "to": stop,
            "log_end": end - 1,
            "records": records,
            "verdict_counts": dict(sorted(counts.items())),
            "next_from": stop if stop < end else None,
        }
    )


@router.get("/{table}/diff", summary="Segments to load and unload between two versions")
def diff(
    table: str,
    ctx: Ctx,
    from_: Annotated[int, Query(alias="from", ge=0, le=MAX_VERSION)],
    to: Annotated[int, Query(ge=0, le=MAX_VERSION)],
    limit: Annotated[int, Query(ge=0, le=MAX_PAGE, description="Segments listed per side.")] = 1_000,
) -> Response:
    opened = ctx.tables.open(table)
    found = opened.diff(from_, to)
    return _json(
        {
            "table": opened.name.qualified,
            "from_version": found.from_version,
            "to_version": found.to_version,
            "load_count": len(found.added),
            "unload_count": len(found.removed),
            "load": views.segments(found.added[:limit]),
            "unload": views.segments(found.removed[:limit]),
        }
    )
