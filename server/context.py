"""What every request handler shares: the catalog's tables, activity counts, version feeds and
the version bus of the all-tables streams, metrics."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import Request

from segcat import Config
from segcat.server.activity import ActivityTracker
from segcat.server.event_frames import EventFrames
from segcat.server.metrics import ServeMetrics
from segcat.server.settings import ServeSettings
from segcat.server.table_directory import TableDirectory
from segcat.server.version_bus import VersionBus
from segcat.server.version_feed import FeedHub


@dataclass
class ServerContext:
    config: Config
    settings: ServeSettings
    tables: TableDirectory
    activity: ActivityTracker
    feeds: FeedHub
    metrics: ServeMetrics
    frames: EventFrames
    versions: VersionBus


def context(request: Request) -> ServerContext:
    found: ServerContext = request.app.state.segcat
    return found
