"""Errors as JSON a client can act on: a kind, a message, a status; never a traceback or a path."""

from __future__ import annotations

import logging
import re

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from segcat import (
    ConfigError,
    InvalidArgument,
    InvalidTableName,
    MisconfiguredTable,
    SegcatError,
    ServiceUnavailable,
    TableDropped,
    TableNotFound,
    UnsafeLocation,
    UnsupportedProtocol,
    VersionExpired,
    VersionNotFound,
)
from segcat.server.iceberg_errors import IcebergError, error_body, is_iceberg_path

log = logging.getLogger("segcat.serve")

_STATUS: tuple[tuple[type[Exception], int, str], ...] = (
    (InvalidTableName, 400, "invalid_table_name"),
    (InvalidArgument, 400, "invalid_argument"),
    (TableNotFound, 404, "table_not_found"),
    (VersionExpired, 410, "version_expired"),
    (VersionNotFound, 404, "version_not_found"),
    (TableDropped, 410, "table_dropped"),
    (UnsafeLocation, 409, "unsafe_location"),
    (MisconfiguredTable, 409, "misconfigured_table"),
    (UnsupportedProtocol, 409, "unsupported_protocol"),
    (ServiceUnavailable, 503, "service_unavailable"),
    (ConfigError, 500, "config_error"),
)

_PATH = re.compile(r"(?<![\w:/])(?:[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+|/[^\s'\",;:)]+)")
"""Absolute paths and URIs (they may name a warehouse bucket, a home directory, credentials)."""


def public_message(text: str) -> str:
    return _PATH.sub("<path>", text)[:2000]


def error_response(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse({"error": kind, "message": public_message(message)}, status_code=status)


def iceberg_response(status: int, message: str, kind: str | None = None) -> Response:
    """The Iceberg REST catalog's error body (``iceberg_errors``) with the same public message."""
    return Response(error_body(status, public_message(message), kind), status, media_type="application/json")


def _answer(request: Request, status: int, kind: str, message: str) -> Response:
    """The API's body, or Iceberg's under ``/iceberg`` (its clients parse no other)."""
    if is_iceberg_path(request.url.path):
        return iceberg_response(status, message)
    return error_response(status, kind, message)


def classify(exc: Exception) -> tuple[int, str]:
    for cls, status, kind in _STATUS:
        if isinstance(exc, cls):
            return status, kind
    return 500, "internal"


def install(app: FastAPI) -> None:
    """Every error the app can raise, as ``{"error", "message"}`` with the right status (under
    ``/iceberg`` as Iceberg's ``{"error": {"message", "type", "code"}}``)."""

    async def segcat_error(request: Request, exc: Exception) -> Response:
        status, kind = classify(exc)
        if status >= 500 and not isinstance(exc, ServiceUnavailable):
            log.error("request failed", exc_info=exc, extra={"path": request.url.path})
            return _answer(request, status, "internal", "the server failed to answer; see its log")
        return _answer(request, status, kind, str(exc))

    async def unexpected(request: Request, exc: Exception) -> Response:
        """Anything else: a 500 without details (the traceback goes to the server's log only)."""
        return _answer(request, 500, "internal", "the server failed to answer; see its log")

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        kind = {401: "unauthorized", 404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http")
        response = _answer(request, exc.status_code, kind, str(exc.detail))
        if exc.headers:
            response.headers.update(exc.headers)
        return response

    async def validation_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, RequestValidationError)
        problems = []
        for error in exc.errors():
            where = ".".join(str(part) for part in error.get("loc", ()) if part not in ("query", "path"))
            problems.append(f"{where}: {error.get('msg', 'invalid')}")
        return _answer(request, 400, "invalid_argument", "; ".join(problems) or "invalid request")

    async def iceberg_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, IcebergError)
        response = iceberg_response(exc.status, exc.message, exc.kind)
        response.headers.update(exc.headers)
        return response

    app.add_exception_handler(SegcatError, segcat_error)
    app.add_exception_handler(Exception, unexpected)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(IcebergError, iceberg_error)
