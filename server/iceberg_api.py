"""``/iceberg``: the Iceberg REST catalog API, read-only (apache/iceberg ``rest-catalog-open-api.yaml``).

Any Iceberg reader (pyiceberg ``load_catalog(type="rest")``, DuckDB's ``ATTACH ... (TYPE iceberg)``,
Spark's ``RESTCatalog``) finds segcat's tables here: namespaces are segcat namespaces (one level),
tables are the tables whose log has Iceberg metadata published (``catalog.iceberg.pointer``), and
loading one answers the metadata JSON of the newest published version, read from object storage
(``catalog.iceberg.layout``), with the FileIO properties a reader needs (``iceberg_config``).

Nothing here writes: every POST, PUT, PATCH or DELETE under ``/iceberg`` answers 405 naming
segcat's write paths, and ``/v1/config`` lists only the read endpoints, so clients that honour
``endpoints`` (pyiceberg) refuse writes before sending them. Errors take Iceberg's body
(``iceberg_errors``); one table's trouble (metadata gone or unreadable) answers that request only.
"""

from __future__ import annotations

import hashlib
import json
import logging
from bisect import bisect_right
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response

from segcat import SegcatError, ServiceUnavailable, TableDropped, TableName, TableNotFound
from segcat.catalog.iceberg.layout import metadata_path
from segcat.catalog.iceberg.pointer import IcebergPointer, read_pointer, read_pointers
from segcat.catalog.protocol.names import check_identifier
from segcat.catalog.read.table import TableReader
from segcat.catalog.storage.redis import RedisStore
from segcat.server.context import ServerContext, context
from segcat.server.iceberg_config import reader_config
from segcat.server.iceberg_errors import IcebergError
from segcat.server.public_errors import public_message

router = APIRouter(prefix="/iceberg", tags=["iceberg"])
log = logging.getLogger("segcat.serve")
Ctx = Annotated[ServerContext, Depends(context)]

NAMESPACE_SEPARATOR = "\x1f"
"""Iceberg's default separator of a multi-level namespace in a path (segcat's have one level)."""
MAX_PAGE = 10_000
LIST_CHUNK = 500
"""Tables looked at per DescribeTopics request and pipelined Redis read of a listing."""
READ_ENDPOINTS = (
    "GET /v1/{prefix}/namespaces",
    "GET /v1/{prefix}/namespaces/{namespace}",
    "HEAD /v1/{prefix}/namespaces/{namespace}",
    "GET /v1/{prefix}/namespaces/{namespace}/tables",
    "GET /v1/{prefix}/namespaces/{namespace}/tables/{table}",
    "HEAD /v1/{prefix}/namespaces/{namespace}/tables/{table}",
)
WRITE_PATHS = (
    "segcat.write(table, data) (Arrow, pandas), si.write (Spark DataFrames), the segcat Spark sink "
    "(df.writeStream.format('segcat')) or Table.append (files written elsewhere)"
)
READ_ONLY = (
    "segcat's Iceberg REST catalog is read-only: the table's log is its only writer. Write with "
    f"{WRITE_PATHS}; every Iceberg reader then sees the new version here."
)
BLOCKED_HEADER = "X-Segcat-Iceberg-Blocked-Version"

PageToken = Annotated[
    str | None, Query(alias="pageToken", max_length=512, description="Continue after this.")
]
PageSize = Annotated[int | None, Query(alias="pageSize", ge=1, le=MAX_PAGE)]


# ---------------------------------------------------------------------------- configuration


@router.get("/v1/config", summary="Iceberg REST catalog configuration (read-only endpoints)")
def get_config(
    warehouse: Annotated[str | None, Query(max_length=2048, description="Ignored: one warehouse.")] = None,
) -> dict[str, Any]:
    """No defaults or overrides: one catalog per server, no prefix; ``endpoints`` lists what it
    answers, which tells clients that it writes nothing."""
    return {"defaults": {}, "overrides": {}, "endpoints": list(READ_ENDPOINTS)}


# ---------------------------------------------------------------------------- namespaces


@router.get("/v1/namespaces", summary="segcat namespaces (one level)")
def list_namespaces(
    ctx: Ctx,
    parent: Annotated[str | None, Query(max_length=1024)] = None,
    page_token: PageToken = None,
    page_size: PageSize = None,
) -> Response:
    known = sorted({name.namespace for name in ctx.tables.names()})
    if parent:  # an empty parent means none (the spec's backward compatibility)
        _check_exists(_namespace(parent), known)
        return _json({"namespaces": []})  # segcat namespaces hold tables, never namespaces
    page, after = page_of(known, page_token, page_size)
    return _json({"namespaces": [[ns] for ns in page], "next-page-token": after})


@router.api_route(
    "/v1/namespaces/{namespace}", methods=["GET", "HEAD"], summary="A namespace (HEAD: whether it exists)"
)
def load_namespace(namespace: str, request: Request, ctx: Ctx) -> Response:
    ns = _namespace(namespace)
    _check_exists(ns, {name.namespace for name in ctx.tables.names()})
    if request.method == "HEAD":
        return Response(status_code=204)
    return _json({"namespace": [ns], "properties": {}})


# ---------------------------------------------------------------------------- tables


@router.get(
    "/v1/namespaces/{namespace}/tables", summary="The namespace's tables that Iceberg readers can load"
)
def list_tables(
    ctx: Ctx, namespace: str, page_token: PageToken = None, page_size: PageSize = None
) -> Response:
    """**Decision — what is listed.** The tables whose current log has published Iceberg metadata:
    what a reader lists it can load. A table not published (yet, or blocked from its first version,
    or dropped) is left out, and loading it by name says why."""
    ns = _namespace(namespace)
    names = [name for name in ctx.tables.names() if name.namespace == ns]
    _check_exists(ns, {name.namespace for name in names})
    tables = [name.table for name in names]
    start = 0 if page_token is None else bisect_right(tables, page_token)
    redis = _redis(ctx)
    listed: list[str] = []
    # a chunk at a time: a page asks Kafka and Redis about the tables it looks at, not all of them
    for low in range(start, len(names), LIST_CHUNK):
        chunk = names[low : low + LIST_CHUNK]
        ids = ctx.tables.catalog.admin.topic_ids(chunk)
        known = [name for name in chunk if name in ids]
        pointers = read_pointers(redis, [(name, ids[name]) for name in known])
        listed.extend(
            name.table for name, pointer in zip(known, pointers, strict=True) if _published(pointer)
        )
        if page_size is not None and len(listed) >= page_size:
            listed = listed[:page_size]
            break
    more = (
        page_size is not None and len(listed) == page_size and bisect_right(tables, listed[-1]) < len(tables)
    )
    return _json(
        {
            "identifiers": [{"namespace": [ns], "name": table} for table in listed],
            "next-page-token": listed[-1] if more else None,
        }
    )


@router.api_route(
    "/v1/namespaces/{namespace}/tables/{table}",
    methods=["GET", "HEAD"],
    summary="Load a table: its newest published Iceberg metadata and what a reader needs to open its files",
)
def load_table(
    namespace: str,
    table: str,
    request: Request,
    ctx: Ctx,
    snapshots: Annotated[Literal["all", "refs"] | None, Query()] = None,
) -> Response:
    """The LoadTableResult of the newest published version (``metadata-location``, ``metadata``,
    ``config``); HEAD answers 204 for a table that GET would load.

    **Decision — a blocked head.** When a newer version cannot be published as Iceberg (docs/ICEBERG.md),
    the last published version is served, so a reader sees rows segcat agrees with, only older; the
    answer names the blocked version and why: ``config`` entries ``segcat.iceberg.blocked-version``
    and ``segcat.iceberg.blocked-reason``, and the header ``X-Segcat-Iceberg-Blocked-Version``. The
    metadata's ``properties`` carry ``segcat.version``, the segcat version it describes.
    """
    name = TableName(_namespace(namespace), table)
    opened = _open(ctx, name)
    redis = _redis(ctx)
    pointer = read_pointer(redis, name, opened.log_id)
    if not _published(pointer):
        raise IcebergError(404, _unpublished(opened, pointer), "NoSuchTableException")
    assert pointer is not None and pointer.location is not None
    if request.method == "HEAD":
        return Response(status_code=204)
    config = reader_config(ctx.config, credentials=ctx.settings.iceberg_credentials)
    headers: dict[str, str] = {}
    if pointer.blocked_version is not None:
        config["segcat.iceberg.blocked-version"] = str(pointer.blocked_version)
        config["segcat.iceberg.blocked-reason"] = public_message(pointer.reason or "not given")
        headers[BLOCKED_HEADER] = str(pointer.blocked_version)
    etag = _etag(pointer, snapshots, config)
    headers["ETag"] = etag
    if etag in _if_none_match(request):
        return Response(status_code=304, headers=headers)
    pointer, metadata = _metadata(ctx, opened, redis, pointer)
    properties = metadata.setdefault("properties", {})
    if isinstance(properties, dict):
        properties["segcat.version"] = str(pointer.version)
    if snapshots == "refs":
        keep_referenced_snapshots(metadata)
    document = {"metadata-location": pointer.location, "metadata": metadata, "config": config}
    return _json(document, headers)


# ---------------------------------------------------------------------------- writes: refused


@router.post("/v1/oauth/tokens", include_in_schema=False)
def oauth_tokens() -> Response:
    """No OAuth2 flow: the server's token is the bearer token (OAuth's own error body, which
    clients of this endpoint parse)."""
    body = {
        "error": "invalid_client",
        "error_description": "segcat serve issues no tokens: give its token as the catalog's "
        "token property (Authorization: Bearer <token>)",
    }
    return _json(body, status=400)


@router.api_route(
    "/{path:path}", methods=["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False
)
def refuse_write(path: str, request: Request) -> Response:
    """Every write, whatever the path; a GET of a path the catalog does not have is 404 (not 405)."""
    if request.method in ("GET", "HEAD"):
        raise IcebergError(
            404, f"the Iceberg REST catalog has no endpoint {path[:200]!r}", "NotFoundException"
        )
    raise IcebergError(405, READ_ONLY, headers={"Allow": "GET, HEAD"})


# ---------------------------------------------------------------------------- helpers


def _namespace(raw: str) -> str:
    """The segcat namespace a path or ``parent`` names (one level; ``InvalidTableName`` → 400)."""
    if NAMESPACE_SEPARATOR in raw:
        raise IcebergError(
            404,
            f"namespace {raw.replace(NAMESPACE_SEPARATOR, '.')[:100]!r} does not exist: segcat "
            "namespaces have one level",
            "NoSuchNamespaceException",
        )
    return check_identifier(raw, "namespace")


def _check_exists(ns: str, known: set[str] | list[str]) -> None:
    if ns not in known:
        raise IcebergError(
            404, f"namespace {ns!r} does not exist: no segcat table is in it", "NoSuchNamespaceException"
        )


def page_of(items: list[str], after: str | None, size: int | None) -> tuple[list[str], str | None]:
    """The sorted ``items`` after ``after``: ``size`` of them and the next token, or all."""
    start = 0 if after is None else bisect_right(items, after)
    if size is None:
        return items[start:], None
    page = items[start : start + size]
    return page, page[-1] if start + size < len(items) else None


def _redis(ctx: ServerContext) -> RedisStore:
    redis = ctx.tables.catalog.redis
    if redis is None:
        raise ServiceUnavailable("this server has no Redis, where the Iceberg pointers are")
    return redis


def _open(ctx: ServerContext, name: TableName) -> TableReader:
    try:
        return ctx.tables.open(name.qualified)
    except TableNotFound:
        raise IcebergError(404, f"table {name} does not exist", "NoSuchTableException") from None


def _published(pointer: IcebergPointer | None) -> bool:
    return pointer is not None and pointer.version >= 0 and pointer.location is not None


def _unpublished(opened: TableReader, pointer: IcebergPointer | None) -> str:
    """Why ``opened`` has no Iceberg metadata to serve (the 404's message)."""
    name = opened.name
    if pointer is not None and pointer.blocked_version is not None:
        return (
            f"table {name} has no Iceberg metadata: its version {pointer.blocked_version} cannot be "
            f"published as Iceberg ({pointer.reason or 'no reason given'}) and no earlier version was"
        )
    try:
        opened.snapshot(stale_ok=True)
    except TableDropped:
        return f"table {name} is dropped, and with it its Iceberg metadata (`segcat table undrop {name}`)"
    except (SegcatError, OSError):
        pass  # the plain answer below holds whatever the head says
    return (
        f"table {name} has no Iceberg metadata yet: no materializer with Iceberg publishing has "
        "published a version of it"
    )


def _metadata(
    ctx: ServerContext, opened: TableReader, redis: RedisStore, pointer: IcebergPointer
) -> tuple[IcebergPointer, dict[str, Any]]:
    """The metadata JSON of ``pointer``'s version, read from object storage. A file gone because a
    newer version replaced it meanwhile (vacuum) is read again from the newer pointer, once."""
    files = opened.files
    if files is None:
        raise ServiceUnavailable(
            f"table {opened.name} has no object storage to read its Iceberg metadata from"
        )
    for attempt in range(2):
        try:
            raw = ctx.tables.catalog.store.get(metadata_path(files, pointer.version))
        except FileNotFoundError:
            newer = read_pointer(redis, opened.name, opened.log_id)
            if attempt == 0 and _published(newer) and newer is not None and newer.version != pointer.version:
                pointer = newer
                continue
            raise ServiceUnavailable(
                f"the Iceberg metadata of version {pointer.version} of {opened.name} is missing from "
                "object storage; the materializer publishes it again when it replays the version"
            ) from None
        except OSError as exc:
            raise ServiceUnavailable(
                f"object storage did not answer reading the Iceberg metadata of {opened.name}: {exc}"
            ) from None
        return pointer, _parse(raw, opened.name, pointer.version)
    raise AssertionError("unreachable")


def _parse(raw: bytes, name: TableName, version: int) -> dict[str, Any]:
    try:
        metadata = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        metadata = None
    if not isinstance(metadata, dict) or not isinstance(metadata.get("format-version"), int):
        log.error("unreadable Iceberg metadata", extra={"table": name.qualified, "version": version})
        raise IcebergError(
            500,
            f"the Iceberg metadata of version {version} of {name} is unreadable (not table metadata JSON)",
        )
    return metadata


def keep_referenced_snapshots(metadata: dict[str, Any]) -> None:
    """``snapshots=refs``: only the snapshots a branch or tag names (and the current one)."""
    refs = metadata.get("refs")
    wanted = (
        {ref.get("snapshot-id") for ref in refs.values() if isinstance(ref, dict)}
        if isinstance(refs, dict)
        else set()
    )
    wanted.add(metadata.get("current-snapshot-id"))
    found = metadata.get("snapshots")
    if isinstance(found, list):
        metadata["snapshots"] = [s for s in found if isinstance(s, dict) and s.get("snapshot-id") in wanted]


def _etag(pointer: IcebergPointer, snapshots: str | None, config: dict[str, str]) -> str:
    """Changes whenever the answer would: another metadata file, a blocked version, a config."""
    basis = json.dumps([pointer.location, pointer.version, snapshots, sorted(config.items())])
    return '"' + hashlib.sha256(basis.encode()).hexdigest()[:32] + '"'


def _if_none_match(request: Request) -> set[str]:
    header = request.headers.get("if-none-match", "")
    return {part.strip().removeprefix("W/") for part in header.split(",") if part.strip()}


def _json(document: dict[str, Any], headers: dict[str, str] | None = None, status: int = 200) -> Response:
    return Response(
        json.dumps(document, separators=(",", ":")).encode(),
        status_code=status,
        media_type="application/json",
        headers=headers,
    )
