"""``/healthz`` (the process answers), ``/readyz`` (Kafka and Redis answer), ``/metrics``."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse, Response
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from segcat import SegcatError
from segcat.server.context import ServerContext, context
from segcat.server.public_errors import public_message

router = APIRouter(tags=["health"])
Ctx = Annotated[ServerContext, Depends(context)]


@router.get("/healthz", summary="Liveness: the process serves")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


def _probe_kafka(ctx: ServerContext) -> dict[str, Any]:
    try:
        return {"ok": True, "tables": len(ctx.tables.names())}
    except SegcatError as exc:
        return {"ok": False, "error": public_message(str(exc))}


def _probe_redis(ctx: ServerContext) -> dict[str, Any]:
    redis = ctx.tables.catalog.redis
    if redis is None:
        return {"ok": True, "configured": False}
    try:
        with redis.guarded("ping"):
            redis.client.ping()
    except SegcatError as exc:
        return {"ok": False, "error": public_message(str(exc))}
    return {"ok": True, "configured": True}


@router.get("/readyz", summary="Readiness: Kafka and Redis answer (503 otherwise)")
async def readyz(ctx: Ctx) -> JSONResponse:
    kafka, redis = await asyncio.gather(
        asyncio.to_thread(_probe_kafka, ctx), asyncio.to_thread(_probe_redis, ctx)
    )
    ready = bool(kafka["ok"] and redis["ok"])
    body = {"ready": ready, "kafka": kafka, "redis": redis, "feeds": len(ctx.feeds.feeds())}
    return JSONResponse(body, status_code=200 if ready else 503)


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def metrics(ctx: Ctx) -> Response:
    ctx.metrics.feeds.set(len(ctx.feeds.feeds()))
    return Response(generate_latest(ctx.metrics.registry), media_type=CONTENT_TYPE_LATEST)
