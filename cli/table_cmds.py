"""``segcat table create|list|describe|upgrade|drop|undrop|purge``."""

from __future__ import annotations

import click
from rich.console import Console
from rich.markup import escape

from segcat.catalog.config import Config
from segcat.catalog.log.topics import DEFAULT_MAX_MESSAGE_BYTES, MAX_MAX_MESSAGE_BYTES, MIN_MAX_MESSAGE_BYTES
from segcat.catalog.protocol.jsonio import dumps
from segcat.catalog.read.purge import purge
from segcat.catalog.read.table import Catalog
from segcat.cli.params import Integer

console = Console()

MESSAGE_BYTES = Integer(
    MIN_MAX_MESSAGE_BYTES,
    MAX_MAX_MESSAGE_BYTES,
    what="a usable max.message.bytes",
    note=" (64 KiB is the floor: below it most commits would not fit)",
)


@click.group()
def table() -> None:
    """Create, list, describe and upgrade tables (one compacted single-partition topic each)."""


@table.command("create")
@click.argument("name")
@click.option(
    "--max-message-bytes",
    type=MESSAGE_BYTES,
    default=DEFAULT_MAX_MESSAGE_BYTES,
    show_default=True,
    help="The largest commit the table accepts (64 KiB to 2 GiB).",
)
def create(name: str, max_message_bytes: int) -> None:
    """Create table NAME ('<namespace>.<table>')."""
    created = Catalog(Config.load()).create_table(name, max_message_bytes=max_message_bytes)
    console.print(f"created [bold]{created.name}[/] (topic {created.name.topic})")


@table.command("list")
@click.option("--json", "as_json", is_flag=True, help='One JSON object: {"tables": ["ns.t", ...]}.')
def list_tables(as_json: bool) -> None:
    """List every table on the cluster."""
    names = Catalog(Config.load()).list_tables()
    if as_json:
        click.echo(dumps({"tables": [name.qualified for name in names]}))
        return
    for name in names:
        console.print(str(name), markup=False, highlight=False)


@table.command("describe")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="One JSON object, named as the Python API.")
def describe(name: str, as_json: bool) -> None:
    """Show a table's topic configuration, protocol, location and head."""
    opened = Catalog(Config.load()).table(name)
    protocol = opened.protocol()
    if as_json:
        head = opened.snapshot(include_dropped=True)
        info = opened.info
        click.echo(
            dumps(
                {
                    "table": opened.name.qualified,
                    "protocol": {"version": protocol.version, "features": list(protocol.features)},
                    "location": opened.location(),
                    "head_offset": opened.head_offset(),
                    "version": head.version,
                    "log_start": head.log_start,
                    "dropped": head.dropped,
                    "topic": {
                        "name": info.name.topic,
                        "partitions": info.partitions,
                        "max_message_bytes": info.max_message_bytes,
                        "config": dict(sorted(info.config.items())),
                    },
                }
            )
        )
        return
    features = ", ".join(protocol.features) or "none"
    console.print(f"[bold]{opened.name}[/]  topic={opened.name.topic}")
    console.print(f"protocol: {protocol.version} (features: {escape(features)})")
    console.print(f"location: {escape(opened.location())}")
    console.print(f"head offset: {opened.head_offset()}")
    head = opened.snapshot(include_dropped=True)
    console.print(f"first version in Kafka: {head.log_start}" + ("  [red]DROPPED[/]" if head.dropped else ""))
    for key in (
        "cleanup.policy",
        "message.timestamp.type",
        "max.message.bytes",
        "min.compaction.lag.ms",
        "compression.type",
        "min.insync.replicas",
    ):
        console.print(f"  {key} = {opened.info.config.get(key)}")


@table.command("upgrade")
@click.argument("name")
def upgrade(name: str) -> None:
    """Move table NAME to this segcat's protocol, recording its location (no-op when it is there)."""
    opened = Catalog(Config.load()).table(name)
    before = opened.protocol()
    version = opened.upgrade_protocol()
    after = opened.protocol()
    if after == before:
        console.print(f"[bold]{opened.name}[/] already at protocol {after.version} (version {version})")
        return
    console.print(
        f"[green]upgraded[/] [bold]{opened.name}[/] from protocol {before.version} to protocol "
        f"[bold]{after.version}[/] at version {version}; location {escape(opened.location())}"
    )


@table.command("drop")
@click.argument("name")
def drop(name: str) -> None:
    """Drop table NAME: readers and writers get TableDropped until it is undropped or purged."""
    opened = Catalog(Config.load()).table(name)
    version = opened.drop()
    console.print(
        f"dropped [bold]{opened.name}[/] at version {version}; "
        f"`segcat table undrop {opened.name}` restores it, `segcat table purge {opened.name}` deletes it"
    )


@table.command("undrop")
@click.argument("name")
def undrop(name: str) -> None:
    """Bring back a dropped table NAME (before it is purged)."""
    opened = Catalog(Config.load()).table(name)
    version = opened.undrop()
    console.print(f"undropped [bold]{opened.name}[/] at version {version}")


@table.command("purge")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def purge_cmd(name: str, yes: bool) -> None:
    """Delete a dropped table NAME for good: data, _catalog, Redis keys, then the topic."""
    catalog = Catalog(Config.load())
    opened = catalog.table(name)
    if not yes:
        click.confirm(f"delete every file and the topic of {opened.name}?", abort=True)
    report = purge(catalog, opened)
    console.print(
        f"purged [bold]{report.table}[/]: {report.data_files:,} data files, {report.catalog_objects:,} "
        f"catalog objects, {report.redis_keys} Redis keys, topic deleted"
    )
