"""Who may ask, and what was asked: the bearer token check and the access log, as ASGI middleware.

Pure ASGI (not ``BaseHTTPMiddleware``) so Server-Sent Events stream through unbuffered. The
access log records the path, never the query string (a browser's first visit carries the
token there), and never a header.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from segcat.server.metrics import ServeMetrics

log = logging.getLogger("segcat.serve.access")

COOKIE = "segcat_token"
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/"})
"""Health probes, and the dashboard's pages and files (no data: they ask the API, which needs the token)."""
OPEN_PREFIXES = ("/static/", "/tables/")


class AccessControl:
    def __init__(self, app: ASGIApp, token: str | None, metrics: ServeMetrics) -> None:
        self.app = app
        self.token = token
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        path: str = scope.get("path", "")
        status = {"code": 0, "first_byte": 0.0}

        async def observed(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
                status["first_byte"] = time.perf_counter() - started
            await send(message)

        try:
            if self.token is not None and scope.get("method") != "OPTIONS":
                query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
                offered = query.get("token")
                if offered is not None and scope.get("method") == "GET":
                    await self._login(scope, query, offered, observed)
                    return
                if not _open(path) and not self._authorised(scope):
                    await _unauthorised(observed)
                    return
            await self.app(scope, receive, observed)
        finally:
            route = _route(scope)
            self.metrics.requests.labels(route, str(status["code"])).inc()
            self.metrics.latency.labels(route).observe(status["first_byte"])
            log.info(
                "request",
                extra={
                    "method": scope.get("method"),
                    "path": path[:300],
                    "status": status["code"],
                    "ms": round((time.perf_counter() - started) * 1000, 1),
                },
            )

    def _authorised(self, scope: Scope) -> bool:
        assert self.token is not None
        expected = self.token.encode()
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, credential = value.partition(b" ")
                if scheme.lower() == b"bearer" and hmac.compare_digest(credential.strip(), expected):
                    return True
            elif name == b"cookie":
                cookie: SimpleCookie = SimpleCookie()
                try:
                    cookie.load(value.decode("latin-1"))
                except Exception:
                    continue
                morsel = cookie.get(COOKIE)
                if morsel is not None and hmac.compare_digest(morsel.value.encode(), expected):
                    return True
        return False

    async def _login(self, scope: Scope, query: dict[str, str], offered: str, send: Send) -> None:
        """``?token=`` from a browser: set the cookie and send it to the same page without the token."""
        assert self.token is not None
        if not hmac.compare_digest(offered.encode(), self.token.encode()):
            await _unauthorised(send)
            return
        rest = urlencode({k: v for k, v in query.items() if k != "token"})
        location = scope.get("path", "/") + (f"?{rest}" if rest else "")
        cookie = f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [(b"location", location.encode()), (b"set-cookie", cookie.encode())],
            }
        )
        await send({"type": "http.response.body", "body": b""})


async def _unauthorised(send: Send) -> None:
    body = json.dumps(
        {
            "error": "unauthorized",
            "message": "this server needs a token: send 'Authorization: Bearer <token>' "
            "(a browser: open /?token=<token> once)",
        }
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"www-authenticate", b'Bearer realm="segcat"'),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _open(path: str) -> bool:
    return path in OPEN_PATHS or path.startswith(OPEN_PREFIXES)


def _route(scope: Scope) -> str:
    """A bounded label: the matched route's template, not the path (table names would explode it)."""
    route = scope.get("route")
    template = getattr(route, "path", None)
    if isinstance(template, str):
        return template
    path: str = scope.get("path", "")
    return "/static" if path.startswith("/static/") else "unmatched"
