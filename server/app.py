"""The ASGI application: API routers, SSE, health, the dashboard, errors, access control."""

from __future__ import annotations

import gc
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from segcat import Config
from segcat.catalog.read.table import Tables
from segcat.server import dashboard, events_api, health_api, iceberg_api, public_errors, tables_api
from segcat.server.access import AccessControl
from segcat.server.activity import ActivityTracker
from segcat.server.context import ServerContext
from segcat.server.event_frames import EventFrames
from segcat.server.metrics import ServeMetrics
from segcat.server.redis_gate import TimeBoxedRedis
from segcat.server.settings import ServeSettings
from segcat.server.table_directory import TableDirectory
from segcat.server.version_bus import VersionBus
from segcat.server.version_feed import FeedHub

log = logging.getLogger("segcat.serve")


def create_app(config: Config, settings: ServeSettings | None = None) -> FastAPI:
    """The whole server for ``config``'s catalog; nothing it answers writes anything."""
    settings = settings or ServeSettings()
    settings.check()
    metrics = ServeMetrics()
    catalog = Tables(config, use_redis=False)
    catalog.redis = TimeBoxedRedis.for_server(config)
    frames = EventFrames()
    tables = TableDirectory(catalog)
    ctx = ServerContext(
        config=config,
        settings=settings,
        tables=tables,
        activity=ActivityTracker(settings.activity_window_s),
        feeds=FeedHub(catalog, settings.replay_limit, metrics.versions_seen.inc, frames.size),
        metrics=metrics,
        frames=frames,
        versions=VersionBus(tables, metrics.versions_seen.inc, frames.size),
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        # what was built at start-up lives as long as the server: keep it out of the collector's
        # full passes, which pause every thread and, during a fan-out, every client's event
        gc.freeze()
        yield
        ctx.versions.stop()
        ctx.feeds.stop()

    app = FastAPI(
        title="segcat",
        summary="Read-only HTTP API of a segcat catalog: tables, snapshots, history, diffs, version events.",
        version="1",
        docs_url=None,  # Swagger UI and ReDoc load their scripts from elsewhere; /openapi.json stays
        redoc_url=None,
        lifespan=lifespan,
    )
    app.state.segcat = ctx
    public_errors.install(app)
    app.include_router(tables_api.router)
    app.include_router(events_api.router)
    app.include_router(health_api.router)
    app.include_router(iceberg_api.router)
    dashboard.mount(app)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(settings.cors_origins),
            allow_methods=["GET"],
            allow_headers=["Authorization", "Last-Event-ID", "Accept"],
            allow_credentials=False,
        )
    app.add_middleware(
        AccessControl,
        token=settings.token,
        metrics=metrics,
        hosts=frozenset({settings.host, *settings.allowed_hosts}),
    )
    return app
