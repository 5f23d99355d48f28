"""``segcat table create|list|describe|upgrade|drop|undrop|purge``."""

from __future__ import annotations

from typing import IO

import click
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from segcat import load_catalog
from segcat.catalog.log.topics import DEFAULT_MAX_MESSAGE_BYTES, MAX_MAX_MESSAGE_BYTES, MIN_MAX_MESSAGE_BYTES
from segcat.catalog.protocol.jsonio import dumps
from segcat.catalog.protocol.names import table_name
from segcat.cli.name_list import read_names
from segcat.cli.params import Integer

console = Console()
SHOWN = 10
"""How many names the summary of a many-table command spells out."""

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
@click.argument("names", nargs=-1, metavar="NAME...")
@click.option(
    "--from-file",
    "from_file",
    type=click.File("r", encoding="utf-8"),
    default=None,
    help="Also create the tables this file names, one a line ('-': stdin; '#' starts a comment).",
)
@click.option(
    "--max-message-bytes",
    type=MESSAGE_BYTES,
    default=DEFAULT_MAX_MESSAGE_BYTES,
    show_default=True,
    help="The largest commit the tables accept (64 KiB to 2 GiB).",
)
@click.option("--exist-ok", is_flag=True, help="Leave tables that exist already as they are (no error).")
def create(names: tuple[str, ...], from_file: IO[str] | None, max_message_bytes: int, exist_ok: bool) -> None:
    """Create the tables NAME... ('<namespace>.<table>').

    Every name is checked before anything is created; many tables are created in batches (one
    Kafka request per 500 topics). A table exists whole or not at all: when a batch fails, the
    tables not created are named, and the same command with --exist-ok finishes the job.
    """
    wanted = list(names)
    if from_file is not None:
        wanted += read_names(
            from_file, "--from-file " + ("stdin" if from_file.name == "<stdin>" else from_file.name)
        )
    if not wanted:
        raise click.UsageError("name at least one table ('<namespace>.<table>'), or give --from-file")
    catalog = load_catalog()
    if len(wanted) == 1 and not exist_ok:
        created = catalog.create_table(wanted[0], max_message_bytes=max_message_bytes)
        console.print(f"created [bold]{created.name}[/] (topic {created.name.topic})")
        return
    bar_console = Console(stderr=True)
    progress = Progress(
        TextColumn("creating tables"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=bar_console,
        transient=True,
        disable=not bar_console.is_terminal,
    )
    with progress:
        task = progress.add_task("create", total=len(wanted))
        tables = catalog.create_tables(
            wanted,
            max_message_bytes=max_message_bytes,
            exist_ok=exist_ok,
            progress=lambda done: progress.update(task, completed=done),
        )
    shown = ", ".join(str(t.name) for t in tables[:SHOWN]) + (
        f" and {len(tables) - SHOWN:,} more" if len(tables) > SHOWN else ""
    )
    verb = "ready (created, or there already)" if exist_ok else "created"
    console.print(f"{len(tables):,} table{'s' if len(tables) != 1 else ''} {verb}: {escape(shown)}")


@table.command("list")
@click.option("--json", "as_json", is_flag=True, help='One JSON object: {"tables": ["ns.t", ...]}.')
def list_tables(as_json: bool) -> None:
    """List every table on the cluster."""
    names = load_catalog().list_tables()
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
    opened = load_catalog().load_table(name)
    protocol = opened.protocol()
    if as_json:
        head = opened.snapshot(include_dropped=True)
        info = opened.topic
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
        console.print(f"  {key} = {opened.topic.config.get(key)}")


@table.command("upgrade")
@click.argument("name")
def upgrade(name: str) -> None:
    """Move table NAME to this segcat's protocol, recording its location (no-op when it is there)."""
    opened = load_catalog().load_table(name)
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
    parsed = table_name(name)
    version = load_catalog().drop_table(parsed)
    console.print(
        f"dropped [bold]{parsed}[/] at version {version}; "
        f"`segcat table undrop {parsed}` restores it, `segcat table purge {parsed}` deletes it"
    )


@table.command("undrop")
@click.argument("name")
def undrop(name: str) -> None:
    """Bring back a dropped table NAME (before it is purged)."""
    parsed = table_name(name)
    version = load_catalog().undrop_table(parsed)
    console.print(f"undropped [bold]{parsed}[/] at version {version}")


@table.command("purge")
@click.argument("name")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--allow-unfenced",
    is_flag=True,
    help="Purge a protocol-2 table, whose log cannot stop an undrop racing the purge.",
)
def purge_cmd(name: str, yes: bool, allow_unfenced: bool) -> None:
    """Delete a dropped table NAME for good: data, _catalog, Redis keys, then the topic.

    The purge first records its fence in the log; from then on the table can no longer be
    undropped (and an undrop that came first stops the purge before it deletes anything)."""
    catalog = load_catalog()
    opened = catalog.load_table(name)  # TableNotFound before asking
    if not yes:
        click.confirm(f"delete every file and the topic of {opened.name}?", abort=True)
    report = catalog.purge_table(opened.name, allow_unfenced=allow_unfenced)
    fence = "" if report.fence_version is None else f" (fence at version {report.fence_version})"
    console.print(
        f"purged [bold]{report.table}[/]{fence}: {report.data_files:,} data files, "
        f"{report.catalog_objects:,} catalog objects, {report.redis_keys} Redis keys, topic deleted"
    )
