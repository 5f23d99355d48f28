"""``/api/tables``: heads, snapshots (JSON pages or Arrow IPC), history and diffs, all read-only."""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, wait
from functools import partial
from typing import Annotated, Any
from urllib.parse import urlencode

import pyarrow as pa
from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from segcat import InvalidArgument, SegcatError, ServiceUnavailable, Snapshot, TableName, parse_predicate
from segcat.catalog.protocol.jsonio import dumps
from segcat.catalog.protocol.names import check_identifier
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.protocol.tags import tags_of
from segcat.catalog.read import snapshot_json
from segcat.catalog.read.as_of import parse_as_of
from segcat.catalog.storage.redis import Head
from segcat.server import table_pages, views
from segcat.server.context import ServerContext, context
from segcat.server.public_errors import public_message

ARROW_STREAM = "application/vnd.apache.arrow.stream"
MAX_PAGE = 100_000
MAX_HISTORY = 5_000
MAX_VERSION = 2**63 - 2

router = APIRouter(prefix="/api/tables", tags=["tables"])
log = logging.getLogger("segcat.serve")
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


FALLBACK_WORKERS = 4
FALLBACK_BUDGET_S = 20.0
"""How long the overview waits for the heads it reads from the log when Redis does not answer."""


@router.get("", summary="A page of the tables (of a namespace), in name order, with their materialized heads")
def list_tables(
    ctx: Ctx,
    namespace: Annotated[
        str | None, Query(max_length=100, description="Only this namespace's tables.")
    ] = None,
    limit: Annotated[
        int, Query(ge=1, le=table_pages.MAX_LIMIT, description="Tables per page.")
    ] = table_pages.DEFAULT_LIMIT,
    cursor: Annotated[
        str | None,
        Query(max_length=table_pages.MAX_CURSOR, description="The 'next' of the page before."),
    ] = None,
) -> dict[str, Any]:
    """A page costs what its tables cost, whatever the catalog's size: the names come from the
    server's directory (``table_directory``), then one DescribeTopics and one ListOffsets request
    and one pipelined Redis read for the page's tables. A table's trouble (a misconfigured topic,
    say) is its entry's ``error``, never the page's. When Redis does not answer (its calls are
    time-boxed: ``redis_gate``), each head of the page is read as the reader reads it without
    Redis (object storage, then the log), a few tables at a time, within ``FALLBACK_BUDGET_S``."""
    if namespace is not None:
        check_identifier(namespace, "namespace")
    after = None if cursor is None else table_pages.decode_cursor(cursor)
    names = ctx.tables.names()
    if namespace is not None:
        low = bisect_left(names, namespace, key=_namespace_of)
        names = names[low : bisect_right(names, namespace, lo=low, key=_namespace_of)]
    page, last = table_pages.page_of(names, after, limit)
    admin = ctx.tables.catalog.admin
    ids = admin.topic_ids(page)
    for gone in [name for name in page if name not in ids]:  # deleted since the names were read
        ctx.tables.forget(gone)
    page = [name for name in page if name in ids]
    ends = admin.log_ends(page)
    heads = _heads(ctx, page)
    entries: dict[str, dict[str, Any]] = {}
    unread: dict[str, int] = {}
    for name in page:
        qualified = name.qualified
        if qualified not in heads:
            unread[qualified] = ends.get(name, -1)
            continue
        head = heads[qualified]
        if head is not None and ids.get(name) is not None and head.log_id != ids.get(name):
            head = None  # another log's head: a table that had this name before (PROTOCOL §6)
        entries[qualified] = _listed(ctx, qualified, ends.get(name, -1), head)
    if unread:
        entries.update(_heads_from_log(ctx, unread))
    return {
        "tables": [entries[name.qualified] for name in page],
        "next": None if last is None else table_pages.encode_cursor(last),
    }


def _namespace_of(name: TableName) -> str:
    return name.namespace


def _heads(ctx: ServerContext, page: list[TableName]) -> dict[str, Head | None]:
    """The page's materialized heads in one pipelined read; a table left out is read from the log
    (Redis does not answer, or holds a malformed head of it)."""
    redis = ctx.tables.catalog.redis
    if redis is None:
        return {name.qualified: None for name in page}
    try:
        return redis.heads(page)
    except ServiceUnavailable:
        return {}


def _listed(ctx: ServerContext, name: str, end: int, head: Head | None) -> dict[str, Any]:
    """A table's entry from its materialized head. A table Redis holds no head of is opened (one
    describe, kept by the directory) so that a topic the materializer refuses says why, but its
    log is not read: its ``activity`` is null (docs/HTTP_API.md)."""
    entry = views.head_from_redis(name, head, end)
    try:
        if head is None:
            ctx.tables.open(name)
        entry["activity"] = ctx.activity.activity(
            name, end, partial(ctx.tables.open, name), head, unmaterialized_unknown=True
        )
    except SegcatError as exc:
        entry["activity"] = None
        entry["error"] = public_message(str(exc))
    return entry


def _heads_from_log(ctx: ServerContext, ends: dict[str, int]) -> dict[str, dict[str, Any]]:
    """Each table's head read without Redis, in parallel, within the budget; a table not read in
    time is listed with nulls and says so."""

    def read(name: str) -> dict[str, Any]:
        end = ends[name]
        try:
            opened = ctx.tables.open(name)
            snap = opened.snapshot(end if end >= 0 else None, include_dropped=True)
        except SegcatError as exc:
            entry = views.head_from_redis(name, None, end)
            entry["activity"] = None
            entry["error"] = public_message(str(exc))
            return entry
        entry = views.head_from_log(snap, end)
        try:
            entry["activity"] = ctx.activity.activity(name, end, lambda: opened)
        except SegcatError:
            entry["activity"] = None
        return entry

    pool = ThreadPoolExecutor(FALLBACK_WORKERS, thread_name_prefix="segcat-overview")
    try:
        futures = {name: pool.submit(read, name) for name in ends}
        wait(futures.values(), timeout=FALLBACK_BUDGET_S)
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    out: dict[str, dict[str, Any]] = {}
    for name, future in futures.items():
        if future.done() and not future.cancelled() and future.exception() is None:
            out[name] = future.result()
            continue
        entry = views.head_from_redis(name, None, ends[name])
        entry["activity"] = None
        if future.done() and not future.cancelled():
            log.error(
                "reading a head from the log failed", exc_info=future.exception(), extra={"table": name}
            )
            entry["error"] = "the server failed to read this table's head; see its log"
        else:
            entry["error"] = (
                f"Redis does not answer and the head was not read from the log within {FALLBACK_BUDGET_S:g} s"
            )
        out[name] = entry
    return out


@router.get("/{table}", summary="A table's exact head and what the materializer holds of it")
def table_head(table: str, ctx: Ctx) -> dict[str, Any]:
    opened = ctx.tables.open(table)
    end = opened.log_end()
    snap = opened.snapshot(end, include_dropped=True) if end >= 0 else opened.snapshot(include_dropped=True)
    head = views.head_from_snapshot(snap, _redis_head(ctx, opened.name.qualified, opened.log_id), end)
    head["tags"] = tags_of(snap.properties)
    head["activity"] = ctx.activity.activity(opened.name.qualified, end, lambda: opened)
    return head


@router.get("/{table}/tags", summary="The table's tags: named versions, kept until dropped")
def tags(table: str, ctx: Ctx) -> Response:
    """Each tag's name and version at the exact head (``segcat.tag.*`` properties), with the
    broker time of the tagged version; ``/snapshot?tag=NAME`` reads one."""
    opened = ctx.tables.open(table)
    end = opened.log_end()
    snap = opened.snapshot(end, include_dropped=True) if end >= 0 else opened.snapshot(include_dropped=True)
    found = tags_of(snap.properties)
    return _json(
        {
            "table": opened.name.qualified,
            "version": snap.version,
            "tags": [{"name": name, "version": version} for name, version in found.items()],
        }
    )


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
    tag: Annotated[str | None, Query(max_length=200, description="The version this tag names.")] = None,
    where: Annotated[str | None, Query(max_length=16_384, description="A predicate to prune by.")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 1_000,
    after: Annotated[str | None, Query(max_length=512, description="Continue after this segment id.")] = None,
) -> Any:
    if sum(x is not None for x in (version, as_of, tag)) > 1:
        raise InvalidArgument("give one of version, as_of and tag")
    predicate = parse_predicate(where) if where is not None else None
    opened = ctx.tables.open(table)
    if tag is not None:
        version = opened.resolve_version(tag).bound
    snap = opened.snapshot(version, _as_of(as_of))
    note = snap.note or snapshot_json.version_note(opened, version, snap)
    total, rows, size = snap.live_count, snap.live_rows, snap.live_bytes
    applies = snapshot_json.tombstones_apply(snap)
    if predicate is not None:
        snap = snap.prune(predicate)
    if ARROW_STREAM in request.headers.get("accept", ""):
        return _arrow(snap, total, note, applies)
    page = snap.segment_page(after, limit)
    next_url = None
    if len(page) == limit and snap.segment_page(page[-1].segment_id, 1):
        query = {"version": snap.version, "limit": limit, "after": page[-1].segment_id}
        if where is not None:
            query["where"] = where
        next_url = f"{request.url.path}?{urlencode(query)}"
    shown = snapshot_json.document(snap, page, note, applies)
    return _json(
        {
            "table": shown["table"],
            "version": shown["version"],
            "timestamp_ms": shown["timestamp_ms"],
            "note": shown["note"],
            "origin": snap.origin,
            "live_segments": total,
            "live_rows": rows if predicate is None else None,
            "live_bytes": size if predicate is None else None,
            "tombstones": shown["tombstones"],
            "tombstones_apply": shown["tombstones_apply"],
            "where": where,
            "matched_segments": snap.live_count,
            "segments": shown["segments"],
            "next": next_url,
        }
    )


def _json(document: dict[str, Any]) -> Response:
    """Strict JSON straight from the dict: the documents are JSON-ready already, and FastAPI's
    ``jsonable_encoder`` would walk every value of every segment again before ``json.dumps``."""
    return Response(dumps(document).encode(), media_type="application/json")


def _arrow(snap: Snapshot, total: int, note: str | None, applies: bool) -> Response:
    """The (pruned) segments as one Arrow IPC stream; the version, note and tombstones ride in the
    schema's metadata (``segcat.*`` keys, JSON values), each segment's ``added_version`` is a column."""
    segments = snap.segments
    schema = segments.schema.with_metadata(snapshot_json.arrow_metadata(snap, note, applies))
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        writer.write_table(segments.replace_schema_metadata(schema.metadata))
    return Response(
        sink.getvalue().to_pybytes(),
        media_type=ARROW_STREAM,
        headers={
            "X-Segcat-Version": str(snap.version),
            "X-Segcat-Timestamp-Ms": str(snap.timestamp_ms),
            "X-Segcat-Live-Segments": str(total),
            "X-Segcat-Tombstones": str(len(snap.tombstones)),
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
    intents: Annotated[
        bool, Query(description="Also list INTENT records (NOTED: write intents, not versions).")
    ] = False,
) -> Response:
    """The records of ``[from, to)``: versions and the records that were not accepted, with why.
    INTENT records are not versions and ``history()``, ``watch()`` and the streams leave them out;
    so does this unless ``intents=true`` (``verdict_counts`` counts every record of the range)."""
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
    elif not intents:
        records = [r for r in records if r["outcome"] != Outcome.NOTED.value]
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
    """Each listed segment carries its ``added_version``, and ``tombstones`` are the table's at
    ``to``: a client moving from ``from`` applies those newer than ``from`` to the segments they cover."""
    opened = ctx.tables.open(table)
    before, after = opened.snapshot(from_), opened.snapshot(to)
    found = before.diff(after)
    return _json(
        {
            "table": opened.name.qualified,
            "from_version": found.from_version,
            "to_version": found.to_version,
            "load_count": len(found.added),
            "unload_count": len(found.removed),
            "load": snapshot_json.segments(after, found.added[:limit]),
            "unload": snapshot_json.segments(before, found.removed[:limit]),
            "tombstones": snapshot_json.tombstones(after),
        }
    )
