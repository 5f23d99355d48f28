"""A read-only Iceberg REST catalog over a pyiceberg catalog, for the reader harness's own tests.

The harness (``tests/iceberg_readers.py``) must be proven on tables segcat did not write, through
the same REST paths segcat's ``/iceberg`` serves. This serves any pyiceberg ``Catalog`` (a
``SqlCatalog`` in a temporary directory) under a prefix, with the endpoints a reader needs:
``GET /v1/config``, namespaces, table lists, ``GET``/``HEAD`` of a table (LoadTableResult: the
metadata location and the metadata itself), a bearer token when one is set, and Iceberg's error
body for what it does not know. It is a test double of the REST contract, not of segcat.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from pyiceberg.catalog import Catalog
from pyiceberg.exceptions import NoSuchNamespaceError, NoSuchTableError

NAMESPACE_SEPARATOR = "\x1f"
"""How the REST spec joins a multi-level namespace in a path segment."""


class _Handler(BaseHTTPRequestHandler):
    catalog: Catalog
    prefix: str
    token: str | None

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: the tests' output is theirs."""

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def do_POST(self) -> None:
        self._send(405, _error(405, "NotAllowed", "this catalog is read-only"), head=False)

    def _answer(self, *, head: bool) -> None:
        if self.token is not None and self.headers.get("Authorization") != f"Bearer {self.token}":
            self._send(401, _error(401, "NotAuthorizedException", "missing or wrong token"), head=head)
            return
        path = urlsplit(self.path).path
        if not path.startswith(self.prefix):
            self._send(404, _error(404, "NoSuchPath", path), head=head)
            return
        parts = [unquote(p) for p in path[len(self.prefix) :].split("/") if p]
        try:
            status, body = self._route(parts)
        except NoSuchTableError as exc:
            status, body = 404, _error(404, "NoSuchTableException", str(exc))
        except NoSuchNamespaceError as exc:
            status, body = 404, _error(404, "NoSuchNamespaceException", str(exc))
        self._send(status, body, head=head)

    def _route(self, parts: list[str]) -> tuple[int, dict[str, Any]]:
        if parts == ["v1", "config"]:
            return 200, {"defaults": {}, "overrides": {}}
        if parts == ["v1", "namespaces"]:
            return 200, {"namespaces": [list(ns) for ns in self.catalog.list_namespaces()]}
        if len(parts) >= 3 and parts[:2] == ["v1", "namespaces"]:
            namespace = tuple(parts[2].split(NAMESPACE_SEPARATOR))
            rest = parts[3:]
            if not rest:
                props = self.catalog.load_namespace_properties(namespace)
                return 200, {"namespace": list(namespace), "properties": props}
            if rest == ["tables"]:
                tables = self.catalog.list_tables(namespace)
                return 200, {"identifiers": [{"namespace": list(t[:-1]), "name": t[-1]} for t in tables]}
            if len(rest) == 2 and rest[0] == "tables":
                table = self.catalog.load_table((*namespace, rest[1]))
                metadata = json.loads(table.metadata.model_dump_json(by_alias=True, exclude_none=True))
                return 200, {"metadata-location": table.metadata_location, "metadata": metadata, "config": {}}
        return 404, _error(404, "NoSuchPath", "/".join(parts))

    def _send(self, status: int, body: dict[str, Any], *, head: bool) -> None:
        data = json.dumps(body).encode()
        self.send_response(204 if head and status == 200 else status)
        self.send_header("Content-Type", "application/json")
        if not (head and status == 200):
            self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if not head:
            self.wfile.write(data)


def _error(code: int, kind: str, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": code}}


@contextlib.contextmanager
def rest_catalog(catalog: Catalog, *, prefix: str = "/iceberg", token: str | None = None) -> Iterator[str]:
    """Serve ``catalog`` on a free loopback port; yields the catalog URI (``http://…/iceberg``)."""
    handler = type("Handler", (_Handler,), {"catalog": catalog, "prefix": prefix, "token": token})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, name="iceberg-rest-double", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}{prefix}"
    finally:
        server.shutdown()
        thread.join(10)
        server.server_close()
