"""Run the app on uvicorn: in the foreground (``segcat serve``) or in a thread (demo, tests, bench)."""

from __future__ import annotations

import contextlib
import errno
import socket
import threading
import time
from collections.abc import Iterator

import uvicorn
from fastapi import FastAPI

from segcat import ConfigError
from segcat.server.http_limits import BoundedHttpToolsProtocol
from segcat.server.settings import ServeSettings


def bind(settings: ServeSettings) -> socket.socket:
    """The listening socket, bound before uvicorn starts so a busy port is one clear error."""
    family = socket.AF_INET6 if ":" in settings.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.host, settings.port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {settings.port} on {settings.host} is in use; pick another with --port"
            ) from None
        raise ConfigError(
            f"cannot listen on {settings.host}:{settings.port}: {exc.strerror or exc}"
        ) from None
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"


def _server(app: FastAPI) -> uvicorn.Server:
    config = uvicorn.Config(
        app,
        http=BoundedHttpToolsProtocol,  # a request's head is bounded (http_limits)
        log_config=None,  # our JSON lines (segcat.catalog.logs), not uvicorn's
        access_log=False,  # ours never logs query strings (tokens)
        lifespan="on",
        timeout_graceful_shutdown=2,
        backlog=2048,
    )
    return uvicorn.Server(config)


def serve_forever(app: FastAPI, sock: socket.socket) -> None:
    _server(app).run(sockets=[sock])


@contextlib.contextmanager
def serving(app: FastAPI, settings: ServeSettings) -> Iterator[str]:
    """The app served from a background thread; yields its base URL, stops on exit."""
    sock = bind(settings)
    server = _server(app)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="segcat-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise ConfigError("the HTTP server did not start")
        time.sleep(0.02)
    try:
        yield url_of(sock)
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()
