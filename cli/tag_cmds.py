"""``segcat tag create|list|drop``: named versions that vacuum and history retention keep."""

from __future__ import annotations

import click
from rich.table import Table as RichTable

from segcat import Table, load_catalog
from segcat.catalog.errors import SegcatError
from segcat.catalog.protocol.jsonio import dumps
from segcat.cli.params import TAG, VERSION_OR_TAG
from segcat.cli.render import console, fmt_ts


@click.group("tag")
def tag() -> None:
    """Named versions: readable by name (`segcat show T --version NAME`), kept by vacuum and
    history retention until dropped, exported as Iceberg tag refs."""


@tag.command("create")
@click.argument("name")
@click.argument("tag_name", metavar="TAG", type=TAG)
@click.option(
    "--version",
    "version",
    type=VERSION_OR_TAG,
    default=None,
    help="The version to name (an offset, or another tag); default: the head.",
)
@click.option("--replace", is_flag=True, help="Move TAG if it exists (otherwise that is an error).")
def create_cmd(name: str, tag_name: str, version: int | str | None, replace: bool) -> None:
    """Name a version of table NAME as TAG (leased and checked whole first)."""
    with load_catalog().load_table(name) as table:
        committed = table.tag(tag_name, version, replace=replace)
        tagged = table.tags().get(tag_name)
    console.print(
        f"[bold]{table.name}[/]: tag [bold cyan]{tag_name}[/] names version [bold]{tagged}[/] "
        f"(commit at version {committed})"
    )


@tag.command("list")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="One JSON object: the table and its tags.")
def list_cmd(name: str, as_json: bool) -> None:
    """The tags of table NAME, with the time of each tagged version."""
    table = load_catalog().load_table(name)
    tags = table.tags()
    if as_json:
        click.echo(dumps({"table": table.name.qualified, "tags": tags}))
        return
    if not tags:
        console.print(f"no tags on [bold]{table.name}[/]")
        return
    view = RichTable(title=f"tags of {table.name}")
    view.add_column("tag", overflow="fold")
    view.add_column("version", no_wrap=True, justify="right")
    view.add_column("committed at (broker time)", no_wrap=True)
    for tag_name, version in tags.items():
        view.add_row(tag_name, str(version), _committed_at(table, version))
    console.print(view)


def _committed_at(table: Table, version: int) -> str:
    try:
        return fmt_ts(table.snapshot(version, include_dropped=True).timestamp_ms)
    except SegcatError:
        return "-"


@tag.command("drop")
@click.argument("name")
@click.argument("tag_name", metavar="TAG", type=TAG)
def drop_cmd(name: str, tag_name: str) -> None:
    """Remove TAG from table NAME: vacuum may then remove what only its version listed."""
    with load_catalog().load_table(name) as table:
        version = table.drop_tag(tag_name)
    console.print(f"[bold]{table.name}[/]: tag [bold cyan]{tag_name}[/] dropped (version {version})")
