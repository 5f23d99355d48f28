"""The HTTP layer's bound on a request's head (request line and headers), before the app sees it.

uvicorn's httptools protocol collects every header a client sends, however many and however long;
this one stops reading a request whose head passes ``MAX_HEAD`` bytes (431) or whose URL passes
``MAX_URL`` (414), answering with the API's error body, so one request cannot make the server
hold megabytes of headers. (Everything a
legitimate request carries fits: the longest is an all-tables ``Last-Event-ID`` cursor, whose own
bound is smaller.) A request the parser refuses for any other reason gets the error body too.
"""

from __future__ import annotations

import json

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

MAX_HEAD = 256 * 1024
"""Request line plus headers, in bytes."""
MAX_URL = 60 * 1024
"""The request target (path and query), in bytes: httptools cannot parse one of 64 KiB or more."""


class HeadTooLarge(Exception):
    """Raised from a parser callback: httptools stops and the protocol answers 431."""


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    _head_bytes = 0
    _url_bytes = 0
    _too_large = False
    _url_too_long = False

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_bytes = self._url_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._url_bytes += len(url)
        if self._url_bytes > MAX_URL:
            self._url_too_long = True
            raise HeadTooLarge
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def _count(self, size: int) -> None:
        self._head_bytes += size
        if self._head_bytes > MAX_HEAD:
            self._too_large = True
            raise HeadTooLarge

    def send_400_response(self, msg: str) -> None:
        if self._url_too_long:
            status, kind = 414, "uri_too_long"
            message = f"the URL is longer than {MAX_URL} bytes (send an event cursor as Last-Event-ID)"
        elif self._too_large:
            status, kind = 431, "request_header_fields_too_large"
            message = f"the request line and headers are longer than {MAX_HEAD} bytes"
        else:
            status, kind, message = 400, "invalid_request", "the request is not valid HTTP/1.1"
        body = json.dumps({"error": kind, "message": message}).encode()
        head = [STATUS_LINE[status]]
        for name, value in self.server_state.default_headers:
            head += [name, b": ", value, b"\r\n"]
        head += [
            b"content-type: application/json\r\n",
            b"content-length: " + str(len(body)).encode() + b"\r\n",
            b"connection: close\r\n\r\n",
            body,
        ]
        self.transport.write(b"".join(head))
        self.transport.close()
