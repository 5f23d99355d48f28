"""``segcat serve``: the read-only HTTP API, SSE and the dashboard, in the foreground."""

from __future__ import annotations

import logging

import click

from segcat.catalog import logs
from segcat.catalog.config import Config
from segcat.server.settings import DEFAULT_HOST, DEFAULT_PORT, ServeSettings


@click.command("serve")
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True)
@click.option(
    "--token",
    envvar="SEGCAT_SERVE_TOKEN",
    default=None,
    help="Bearer token every request must carry (env SEGCAT_SERVE_TOKEN; needed beyond loopback).",
)
@click.option(
    "--insecure", is_flag=True, help="Listen beyond loopback without a token (trusted networks only)."
)
@click.option(
    "--cors-origin",
    "cors_origins",
    multiple=True,
    help="Allow this origin to call the API from a browser (repeatable; CORS is off by default).",
)
def serve_cmd(host: str, port: int, token: str | None, insecure: bool, cors_origins: tuple[str, ...]) -> None:
    """Serve the HTTP API, version events (SSE) and the live dashboard, read-only."""
    from segcat.server.app import create_app
    from segcat.server.runner import bind, serve_forever, url_of

    settings = ServeSettings(
        host=host, port=port, token=token or None, insecure=insecure, cors_origins=cors_origins
    )
    settings.check()
    logs.configure(logging.INFO)
    app = create_app(Config.load(), settings)
    sock = bind(settings)
    url = url_of(sock)
    hint = " (open /?token=… once in a browser)" if settings.token else ""
    click.echo(f"segcat serve: dashboard at {url}/ , API at {url}/api/tables{hint}", err=True)
    serve_forever(app, sock)
