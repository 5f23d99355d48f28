"""The HTTP server in a background thread for tests: ``with serving(config) as url: ...``."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

import httpx

from segcat.catalog.config import Config
from segcat.server.app import create_app
from segcat.server.runner import serving as run_in_thread
from segcat.server.settings import ServeSettings


@contextlib.contextmanager
def serving(config: Config, **options: Any) -> Iterator[str]:
    """``segcat serve`` for ``config`` on a free loopback port; yields the base URL."""
    settings = ServeSettings(**{"port": 0, **options})
    app = create_app(config, settings)
    with run_in_thread(app, settings) as url:
        yield url


def iter_events(response: httpx.Response) -> Iterator[tuple[str, dict[str, Any]]]:
    """The SSE events of a streaming response as they come, as (id, data)."""
    event_id, data = "", ""
    for line in response.iter_lines():
        if line.startswith("id:"):
            event_id = line[3:].strip()
        elif line.startswith("data:"):
            data = line[5:].strip()
        elif line == "" and data:
            yield event_id, json.loads(data)
            event_id, data = "", ""


def read_events(response: httpx.Response, count: int) -> list[tuple[str, dict[str, Any]]]:
    """The next ``count`` SSE events of a streaming response, as (id, data)."""
    events: list[tuple[str, dict[str, Any]]] = []
    if count <= 0:
        return events
    for event in iter_events(response):
        events.append(event)
        if len(events) >= count:
            break
    return events
