"""``segcat stack up|down|status|env``: the local Kafka, Redis and S3, without Docker."""

from __future__ import annotations

import dataclasses
import os

import click
from rich.console import Console
from rich.table import Table as RichTable

from segcat import local_stack
from segcat.catalog.config import DEFAULT_BOOTSTRAP_SERVERS, DEFAULT_REDIS_URL
from segcat.catalog.protocol.jsonio import dumps
from segcat.local_stack.settings import StackSettings

console = Console()


@click.group()
def stack() -> None:
    """Start, stop or inspect the local Kafka (KRaft), Redis and S3 servers."""


def _with_options(
    settings: StackSettings,
    brokers: int | None,
    secure: bool | None,
    s3: bool | None,
    redis_cluster: bool | None,
) -> StackSettings:
    """Command-line options over the environment / TOML ``[stack]`` settings."""
    chosen = {
        "brokers": brokers,
        "secure": secure,
        "s3": s3,
        "redis_cluster": redis_cluster,
    }
    return dataclasses.replace(settings, **{k: v for k, v in chosen.items() if v is not None})  # type: ignore[arg-type]


def _topology_in_env() -> bool:
    names = ("SEGCAT_STACK_BROKERS", "SEGCAT_STACK_SECURE", "SEGCAT_STACK_S3", "SEGCAT_STACK_REDIS_CLUSTER")
    return any(os.environ.get(name) for name in names)


def _print_settings(settings: StackSettings, principal: str) -> None:
    for line in local_stack.client_settings(settings, principal):
        console.print(f"  {line.shell()}", highlight=False, soft_wrap=True)


@stack.command("up")
@click.option(
    "--brokers", type=click.IntRange(1, 9), default=None, help="Kafka nodes (3: replication 3, min ISR 2)."
)
@click.option("--secure/--no-secure", default=None, help="SASL_SSL + SCRAM + ACLs, and a Redis ACL user.")
@click.option("--s3/--no-s3", default=None, help="Also run an S3-compatible server with a bucket.")
@click.option(
    "--redis-cluster/--no-redis-cluster", default=None, help="Three Redis masters as a Redis Cluster."
)
def up(brokers: int | None, secure: bool | None, s3: bool | None, redis_cluster: bool | None) -> None:
    """Start every service (fetching jars once), wait until all answer, print the client settings."""
    settings = StackSettings.load()
    if (brokers, secure, s3, redis_cluster) == (None, None, None, None) and not _topology_in_env():
        settings = local_stack.effective_settings(settings)  # `up` again: the running topology
    settings = _with_options(settings, brokers, secure, s3, redis_cluster)
    info = local_stack.up(settings, reporter=local_stack.RichReporter(console))
    started = ", ".join(info.started) or "nothing (already running)"
    console.print(
        f"[green]stack up[/] kafka={info.bootstrap_servers} redis={info.redis_url} started: {started}"
    )
    default = not (settings.secure or settings.s3 or settings.redis_cluster or settings.brokers > 1)
    if (
        default
        and info.bootstrap_servers == DEFAULT_BOOTSTRAP_SERVERS
        and info.redis_url == DEFAULT_REDIS_URL
    ):
        return
    principal = "writer" if settings.secure else ""
    console.print(
        "clients reach this stack with"
        + (
            " (as the writer; `segcat stack env --principal reader|materializer` for the others)"
            if principal
            else ""
        )
        + ":"
    )
    _print_settings(settings, principal or "writer")


@stack.command("env")
@click.option(
    "--principal",
    type=click.Choice(["writer", "reader", "materializer"]),
    default="writer",
    show_default=True,
    help="Whose credentials (a --secure stack only).",
)
def env(principal: str) -> None:
    """Print the `export SEGCAT_...` lines a client needs (`eval "$(segcat stack env)"`).

    Secrets are never printed: their lines read them from their files (mode 0600).
    """
    settings = local_stack.effective_settings(StackSettings.load())
    for line in local_stack.client_settings(settings, principal):
        click.echo(line.shell())


@stack.command("down")
def down() -> None:
    """Stop the services this stack started (by pid; nothing else is touched)."""
    stopped = local_stack.down(StackSettings.load(), reporter=local_stack.RichReporter(console))
    console.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@stack.command("status")
@click.option("--json", "as_json", is_flag=True, help="One JSON object, named as StackStatus (exit 5 too).")
def status(as_json: bool) -> None:
    """Show each service: running, answering, pid, address and log file; exit 5 when not running."""
    result = local_stack.status(StackSettings.load())
    if as_json:
        services = [
            {
                "name": svc.name,
                "running": svc.running,
                "answering": svc.answering,
                "pid": svc.pid,
                "address": svc.address,
                "log_path": str(svc.log_path),
            }
            for svc in result.services
        ]
        click.echo(dumps({"running": result.running, "services": services}))
        if not result.running:
            raise SystemExit(5)
        return
    view = RichTable("service", "running", "answering", "pid", "address", "log")
    for svc in result.services:
        view.add_row(
            svc.name,
            str(svc.running),
            str(svc.answering),
            str(svc.pid or "-"),
            svc.address,
            str(svc.log_path),
        )
    console.print(view)
    if not result.running:
        raise SystemExit(5)  # service unavailable (README, "Exit codes")
