"""``segcat stack up|down|status``: the local Kafka + Redis, without Docker."""

from __future__ import annotations

import click
from rich.console import Console
from rich.table import Table as RichTable

from segcat import local_stack
from segcat.catalog.config import DEFAULT_BOOTSTRAP_SERVERS, DEFAULT_REDIS_URL
from segcat.local_stack.settings import StackSettings

console = Console()


@click.group()
def stack() -> None:
    """Start, stop or inspect the local Kafka (KRaft) broker and Redis."""


@stack.command("up")
def up() -> None:
    """Start both services (fetching Kafka's jars once) and wait until they answer."""
    info = local_stack.up(StackSettings.load(), reporter=local_stack.RichReporter(console))
    started = ", ".join(info.started) or "nothing (already running)"
    console.print(
        f"[green]stack up[/] kafka={info.bootstrap_servers} redis={info.redis_url} started: {started}"
    )
    if info.bootstrap_servers != DEFAULT_BOOTSTRAP_SERVERS or info.redis_url != DEFAULT_REDIS_URL:
        console.print("clients reach this stack with:")
        console.print(f"  export SEGCAT_BOOTSTRAP_SERVERS={info.bootstrap_servers}")
        console.print(f"  export SEGCAT_REDIS_URL={info.redis_url}")


@stack.command("down")
def down() -> None:
    """Stop the services this stack started (by pid; nothing else is touched)."""
    stopped = local_stack.down(StackSettings.load(), reporter=local_stack.RichReporter(console))
    console.print(f"stopped: {', '.join(stopped) or 'nothing was running'}")


@stack.command("status")
def status() -> None:
    """Show each service: running, answering, pid, address and log file; exit 5 when not running."""
    result = local_stack.status(StackSettings.load())
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
