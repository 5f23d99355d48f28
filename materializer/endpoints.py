"""The materializer's HTTP endpoints: ``/metrics`` (Prometheus text) and ``/healthz`` (JSON).

prometheus_client's own ``start_http_server`` answers every path with metrics, so a health
probe could not tell a degraded service from a healthy one; this small server routes by
path and says 404 to anything else.
"""

from __future__ import annotations

import errno
import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from segcat.catalog.errors import ConfigError

log = logging.getLogger("segcat.materializer")

Health = Callable[[], tuple[bool, dict[str, Any]]]
"""Returns (healthy, the JSON document to answer with)."""


class Endpoints:
    """A ThreadingHTTPServer on ``addr:port`` in a daemon thread; ``close`` stops it."""

    def __init__(self, port: int, addr: str, registry: CollectorRegistry, health: Health) -> None:
        handler = _handler(registry, health)
        try:
            self._server = ThreadingHTTPServer((addr, port), handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigError(
                    f"metrics port {port} is in use; set SEGCAT_METRICS_PORT or --metrics-port "
                    "(0 turns the endpoint off)"
                ) from None
            raise ConfigError(
                f"cannot serve metrics on {addr}:{port} ({exc.strerror or exc}); "
                "set SEGCAT_METRICS_ADDR / SEGCAT_METRICS_PORT or --metrics-port"
            ) from None
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            name="segcat-metrics",
            kwargs={"poll_interval": 0.2},
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve(port: int, addr: str, registry: CollectorRegistry, health: Health) -> Endpoints | None:
    """Start the endpoints (port 0 = don't serve); ``ConfigError`` if the port cannot be bound."""
    return Endpoints(port, addr, registry, health) if port else None


def _handler(registry: CollectorRegistry, health: Health) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._answer(head=False)

        def do_HEAD(self) -> None:
            self._answer(head=True)

        def _answer(self, *, head: bool) -> None:
            path = self.path.split("?", 1)[0].rstrip("/") or "/"
            if path == "/metrics":
                self._send(200, CONTENT_TYPE_LATEST, generate_latest(registry), head)
            elif path == "/healthz":
                try:
                    healthy, doc = health()
                except Exception as exc:  # a broken probe must say so, not hang up
                    log.exception("health check failed")
                    healthy, doc = False, {"status": "degraded", "error": f"{type(exc).__name__}: {exc}"}
                body = json.dumps(doc, default=str, sort_keys=True).encode() + b"\n"
                self._send(200 if healthy else 503, "application/json", body, head)
            else:
                body = json.dumps({"error": "not found", "paths": ["/metrics", "/healthz"]}).encode() + b"\n"
                self._send(404, "application/json", body, head)

        def _send(self, status: int, content_type: str, body: bytes, head: bool) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Cache-Control", "no-store")
            self.end_headers()
            if not head:
                self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("http " + format, *args)

    return Handler
