"""``segcat table create|list|describe``."""

from __future__ import annotations

import click
from rich.console import Console

from catalog.config import Config
from catalog.table import Catalog

console = Console()


@click.group()
def table() -> None:
    """Create, list and describe tables (one compacted single-partition topic each)."""


@table.command("create")
@click.argument("name")
@click.option("--max-message-bytes", type=int, default=16 * 1024 * 1024, show_default=True)
def create(name: str, max_message_bytes: int) -> None:
    """Create table NAME ('<namespace>.<table>')."""
    created = Catalog(Config.load()).create_table(name, max_message_bytes=max_message_bytes)
    console.print(f"created [bold]{created.name}[/] (topic {created.name.topic})")


@table.command("list")
def list_tables() -> None:
    """List every table on the cluster."""
    for name in Catalog(Config.load()).list_tables():
        console.print(str(name))


@table.command("describe")
@click.argument("name")
def describe(name: str) -> None:
    """Show a table's topic configuration and head."""
    opened = Catalog(Config.load()).table(name)
    console.print(f"[bold]{opened.name}[/]  topic={opened.name.topic}  root={opened.root}")
    console.print(f"head offset: {opened.head_offset()}")
    for key in (
        "cleanup.policy",
        "message.timestamp.type",
        "max.message.bytes",
        "min.compaction.lag.ms",
        "compression.type",
        "min.insync.replicas",
    ):
        console.print(f"  {key} = {opened.info.config.get(key)}")
