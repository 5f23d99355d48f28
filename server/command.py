"""``segcat serve``: the read-only HTTP API, SSE and the dashboard, in the foreground."""

from __future__ import annotations

import logging

import click
from click.core import ParameterSource

from segcat import Config, ConfigError
from segcat.catalog import logs
from segcat.server.settings import DEFAULT_HOST, DEFAULT_PORT, ServeSettings, read_token_file


@click.command("serve")
@click.option("--host", default=DEFAULT_HOST, show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True)
@click.option(
    "--token-file",
    envvar="SEGCAT_SERVE_TOKEN_FILE",
    default=None,
    help="File holding the bearer token every request must carry (env SEGCAT_SERVE_TOKEN_FILE; "
    "needed beyond loopback).",
)
@click.option(
    "--token",
    envvar="SEGCAT_SERVE_TOKEN",
    default=None,
    help="The bearer token itself (env SEGCAT_SERVE_TOKEN). On the command line it shows in `ps`: "
    "prefer --token-file or the environment.",
)
@click.option(
    "--insecure", is_flag=True, help="Listen beyond loopback without a token (trusted networks only)."
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    help="Also answer requests naming this host (Host:) when no token is set (repeatable; the bound "
    "address, localhost and IP addresses always are).",
)
@click.option(
    "--cors-origin",
    "cors_origins",
    multiple=True,
    help="Allow this origin to call the API from a browser (repeatable; CORS is off by default).",
)
@click.option(
    "--iceberg-credentials",
    is_flag=True,
    help="Hand the server's S3 credentials (AWS_ACCESS_KEY_ID, ...) to Iceberg REST clients with "
    "each table they load (needs a token; off by default: readers bring their own).",
)
@click.pass_context
def serve_cmd(
    ctx: click.Context,
    host: str,
    port: int,
    token_file: str | None,
    token: str | None,
    insecure: bool,
    allowed_hosts: tuple[str, ...],
    cors_origins: tuple[str, ...],
    iceberg_credentials: bool,
) -> None:
    """Serve the HTTP API, version events (SSE) and the live dashboard, read-only."""
    from segcat.server.app import create_app
    from segcat.server.runner import bind, serve_forever, url_of

    if token_file and token:
        raise ConfigError("give the token once: --token-file or --token (SEGCAT_SERVE_TOKEN), not both")
    if token_file:
        token = read_token_file(token_file)
    elif token and ctx.get_parameter_source("token") is ParameterSource.COMMANDLINE:
        click.echo(
            "segcat serve: warning: --token shows in `ps` to every user of this machine; "
            "prefer --token-file or SEGCAT_SERVE_TOKEN",
            err=True,
        )
    settings = ServeSettings(
        host=host,
        port=port,
        token=token or None,
        insecure=insecure,
        cors_origins=cors_origins,
        allowed_hosts=allowed_hosts,
        iceberg_credentials=iceberg_credentials,
    )
    settings.check()
    logs.configure(logging.INFO)
    app = create_app(Config.load(), settings)
    sock = bind(settings)
    url = url_of(sock)
    hint = " (open /?token=… once in a browser)" if settings.token else ""
    click.echo(
        f"segcat serve: dashboard at {url}/ , API at {url}/api/tables , Iceberg REST catalog at "
        f"{url}/iceberg{hint}",
        err=True,
    )
    serve_forever(app, sock)
