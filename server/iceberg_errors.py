"""Errors of the Iceberg REST catalog (``/iceberg``) in Iceberg's own body.

The Iceberg REST spec (``rest-catalog-open-api.yaml``, ``IcebergErrorResponse``) answers every
error as ``{"error": {"message", "type", "code"}}``, and its clients (pyiceberg, Iceberg Java,
DuckDB) parse that body to raise their own typed errors (``NoSuchTableException`` ...). Every
error under ``/iceberg`` therefore takes this shape, whoever raises it: the catalog's handlers,
the app's error handlers (``public_errors``), the access control (``access``). Messages are the
API's public ones: no paths, no URIs, never a traceback.
"""

from __future__ import annotations

import json

PREFIX = "/iceberg"

TYPES: dict[int, str] = {
    400: "BadRequestException",
    401: "NotAuthorizedException",
    403: "ForbiddenException",
    404: "NotFoundException",
    405: "UnsupportedOperationException",
    406: "UnsupportedOperationException",
    410: "NotFoundException",
    500: "InternalServerError",
    503: "ServiceUnavailableException",
}
"""The Iceberg exception type of a status when the handler names none more precise."""


class IcebergError(Exception):
    """An answer of the Iceberg catalog other than 200: its status, Iceberg type and message."""

    def __init__(
        self, status: int, message: str, kind: str | None = None, headers: dict[str, str] | None = None
    ):
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind or type_of(status)
        self.headers = headers or {}


def is_iceberg_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def type_of(status: int) -> str:
    return TYPES.get(status, "InternalServerError" if status >= 500 else "BadRequestException")


def error_body(status: int, message: str, kind: str | None = None) -> bytes:
    """``{"error": {"message", "type", "code"}}`` as JSON bytes."""
    document = {"error": {"message": message, "type": kind or type_of(status), "code": status}}
    return json.dumps(document).encode()
