"""Who may ask, and what was asked: the host check, the bearer token check and the access log,
as ASGI middleware.

Pure ASGI (not ``BaseHTTPMiddleware``) so Server-Sent Events stream through unbuffered. The
access log records the path, never the query string (a browser's first visit carries the
token there), and never a header.

Without a token, a request must name this server in ``Host:``: a web page whose own name an
attacker rebinds to 127.0.0.1 (DNS rebinding) reaches a loopback server from the victim's
browser, but its requests carry the page's name, which is refused. With a token the page has no
credential to send (the cookie belongs to the server's own name).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import time
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, quote, urlencode

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from segcat.server.iceberg_errors import error_body, is_iceberg_path
from segcat.server.metrics import ServeMetrics

log = logging.getLogger("segcat.serve.access")

COOKIE = "segcat_token"
OPEN_PATHS = frozenset({"/healthz", "/readyz", "/"})
"""Health probes, and the dashboard's pages and files (no data: they ask the API, which needs the token)."""
OPEN_PREFIXES = ("/static/", "/tables/")


class AccessControl:
    def __init__(
        self, app: ASGIApp, token: str | None, metrics: ServeMetrics, hosts: frozenset[str] = frozenset()
    ) -> None:
        self.app = app
        self.token = token
        self.metrics = metrics
        self.hosts = frozenset({"localhost", *(h.lower().rstrip(".") for h in hosts)})
        """Names a request may give in ``Host:`` when no token is set (IP literals always may)."""

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

        iceberg = is_iceberg_path(path)
        try:
            if self.token is None and not self._host_allowed(scope):
                await refuse(
                    observed,
                    400,
                    "invalid_host",
                    "this server answers requests for its own address only (Host: is not one of its "
                    "names); start it with --allowed-host NAME to answer for another name",
                    iceberg=iceberg,
                )
                return
            if self.token is not None and scope.get("method") != "OPTIONS":
                query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
                offered = query.get("token")
                if offered is not None and scope.get("method") == "GET" and not iceberg:
                    await self._login(scope, query, offered, observed)
                    return
                if not _open(path) and not self._authorised(scope):
                    await _unauthorised(observed, iceberg)
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

    def _host_allowed(self, scope: Scope) -> bool:
        """The ``Host:`` header names an IP address, ``localhost`` or a configured name (a request
        without one, HTTP/1.0, comes from no browser page)."""
        values = [value for name, value in scope.get("headers", ()) if name == b"host"]
        if not values:
            return True
        if len(values) > 1:
            return False
        name = host_name(values[0].decode("latin-1"))
        return name is not None and (name in self.hosts or _is_ip(name))

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
            await _unauthorised(send, False)
            return
        rest = urlencode({k: v for k, v in query.items() if k != "token"})
        location = local_path(scope.get("path", "/")) + (f"?{rest}" if rest else "")
        cookie = f"{COOKIE}={self.token}; Path=/; HttpOnly; SameSite=Strict"
        await send(
            {
                "type": "http.response.start",
                "status": 303,
                "headers": [(b"location", location.encode()), (b"set-cookie", cookie.encode())],
            }
        )
        await send({"type": "http.response.body", "body": b""})


async def _unauthorised(send: Send, iceberg: bool) -> None:
    hint = (
        "an Iceberg client: its catalog property token=<token>"
        if iceberg
        else "a browser: open /?token=<token> once"
    )
    await refuse(
        send,
        401,
        "unauthorized",
        f"this server needs a token: send 'Authorization: Bearer <token>' ({hint})",
        [(b"www-authenticate", b'Bearer realm="segcat"')],
        iceberg=iceberg,
    )


async def refuse(
    send: Send,
    status: int,
    kind: str,
    message: str,
    headers: list[tuple[bytes, bytes]] | None = None,
    *,
    iceberg: bool = False,
) -> None:
    """The API's error body (``{"error", "message"}``) before the request reaches the app; under
    ``/iceberg`` Iceberg's (``{"error": {"message", "type", "code"}}``), which its clients parse."""
    if iceberg:
        body = error_body(status, message)
    else:
        body = json.dumps({"error": kind, "message": message}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                *(headers or []),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def local_path(path: str) -> str:
    r"""``path`` as a redirect target that stays on this server: exactly one leading slash (a browser
    reads ``//host`` and ``/\host`` as another host), every other unsafe character percent-encoded."""
    stripped = path.lstrip("/\\")
    if not path.startswith("/") or not stripped:
        return "/"
    return "/" + quote(stripped, safe="/:@!$&'()*+,;=-._~")


def host_name(header: str) -> str | None:
    """The host of a ``Host:`` value (``name``, ``name:port``, ``[v6]:port``), lower case, without a
    trailing dot; None when it is not one."""
    text = header.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        if end < 0 or (text[end + 1 :] and not _port(text[end + 1 :])):
            return None
        return text[1:end]
    name, colon, port = text.rpartition(":") if text.count(":") == 1 else (text, "", "")
    if colon and not _port(":" + port):
        return None
    name = (name if colon else text).rstrip(".")
    return name or None


def _port(text: str) -> bool:
    return text.startswith(":") and text[1:].isdigit() and len(text) <= 6


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


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
