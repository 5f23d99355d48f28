"""The ``materializer`` command (``python -m segcat.materializer``; ``segcat materializer`` can mount it).

Lives beside the service so its options (static membership, session timeout) follow it.
Failures end as ``segcat`` ends them: one ``error:`` line and the README's exit codes.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import replace

import click

from segcat.catalog import logs
from segcat.catalog.config import Config
from segcat.catalog.errors import EXIT_INTERRUPTED, EXIT_INVALID, SegcatError, exit_code
from segcat.catalog.extras import requires


@click.command("materializer")
@click.option("--group", default="segcat-materializer", show_default=True, help="Kafka consumer group.")
@click.option(
    "--instance-id",
    envvar="SEGCAT_MATERIALIZER_INSTANCE_ID",
    default=None,
    help="Static group membership id, stable per instance, so a restarted instance gets its "
    "tables back at once (default: segcat-materializer-<hostname>; '' = dynamic membership). "
    "Env: SEGCAT_MATERIALIZER_INSTANCE_ID.",
)
@click.option(
    "--session-timeout-ms",
    type=click.IntRange(1, 2**31 - 1),
    envvar="SEGCAT_MATERIALIZER_SESSION_TIMEOUT_MS",
    default=None,
    help="How long a silent instance keeps its tables (default 10000, or SEGCAT_KAFKA_SESSION_TIMEOUT_MS; "
    "the broker accepts group.min.session.timeout.ms .. group.max.session.timeout.ms, 6000 .. 1800000 "
    "by default).",
)
@click.option(
    "--group-protocol",
    type=click.Choice(["classic", "consumer"]),
    envvar="SEGCAT_MATERIALIZER_GROUP_PROTOCOL",
    default="classic",
    show_default=True,
    help="classic: cooperative-sticky, assigned by the group's leader (any broker); consumer: "
    "KIP-848, assigned by the broker (Kafka 4.0+; for thousands of tables; the session timeout is "
    "the broker's group.consumer.session.timeout.ms). Env: SEGCAT_MATERIALIZER_GROUP_PROTOCOL.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=None,
    help="/metrics and /healthz port (default from config; 0 = off).",
)
@click.option("--no-redis", is_flag=True, help="Write key frames to object storage only.")
@click.option("--pattern", default=r"^segcat\..*", show_default=True, help="Topic regex to follow.")
def materializer_cmd(
    group: str,
    instance_id: str | None,
    session_timeout_ms: int | None,
    group_protocol: str,
    metrics_port: int | None,
    no_redis: bool,
    pattern: str,
) -> None:
    """Run the materializer: key frames in Redis and on object storage, version notifications."""
    from segcat.materializer.service import Materializer, install_signal_handlers

    logs.configure(logging.INFO)
    config = Config.load()
    if metrics_port is not None:
        config = replace(config, metrics_port=metrics_port)
    service = Materializer(
        config,
        group_id=group,
        use_redis=not no_redis,
        pattern=pattern,
        instance_id=instance_id,
        session_timeout_ms=session_timeout_ms,
        group_protocol=group_protocol,
    )
    install_signal_handlers(service)
    service.run()


def main(argv: Sequence[str] | None = None) -> None:
    """Run the command; a failure (busy port, fenced instance, …) is one line on stderr."""
    try:
        with requires("segcat materializer", "materializer"):
            materializer_cmd.main(
                list(sys.argv[1:] if argv is None else argv),
                prog_name="segcat materializer",
                standalone_mode=False,
            )
    except (click.exceptions.Abort, KeyboardInterrupt):
        sys.exit(EXIT_INTERRUPTED)
    except click.ClickException as exc:
        _fail(f"{exc.format_message()} (see 'segcat materializer -h')")
        sys.exit(EXIT_INVALID)
    except SegcatError as exc:
        _fail(f"{type(exc).__name__}: {exc}")
        sys.exit(exit_code(exc))


def _fail(message: str) -> None:
    text = " ".join(message.split("\n"))
    click.echo(f"{click.style('error:', fg='red', bold=True)} {text}", err=True)
