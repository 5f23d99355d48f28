"""``segcat serve``: the read-only HTTP API, Server-Sent Events and the live dashboard (docs/HTTP_API.md)."""
