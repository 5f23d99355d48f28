"""``segcat watch``: version changes as they happen (``segcat materializer`` is materializer.command)."""

from __future__ import annotations

import click

from segcat import Config, load_catalog
from segcat.catalog.protocol.jsonio import dumps
from segcat.catalog.storage.redis import RedisStore
from segcat.cli.params import POSITIVE, VERSION
from segcat.cli.render import console, fmt_ts


@click.command("watch")
@click.argument("name", required=False)
@click.option("--all", "all_tables", is_flag=True, help="Every table (global channel; needs Redis).")
@click.option(
    "--from",
    "from_version",
    type=VERSION,
    default=None,
    help="Start after this version (-1: from the first; default: the head).",
)
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@click.option("--count", type=POSITIVE, default=None, help="Stop after this many changes.")
def watch_cmd(
    name: str | None, all_tables: bool, from_version: int | None, as_json: bool, count: int | None
) -> None:
    """Print version changes of table NAME as they happen (gap-free)."""
    if all_tables and (name or from_version is not None):
        raise click.UsageError("--all follows every table from now on: it takes no NAME and no --from")
    config = Config.load()
    seen = 0
    if all_tables:
        with RedisStore.from_config(config).subscribe(None) as sub:
            for event in sub:
                click.echo(
                    event.to_json() if as_json else f"{event.table} v{event.version} {event.operation}"
                )
                seen += 1
                if count is not None and seen >= count:
                    return
    if not name:
        raise click.UsageError("name a table, or use --all")
    table = load_catalog(config).load_table(name)
    with table.watch(from_version) as watcher:
        if not as_json:
            console.print(f"watching [bold]{table.name}[/] after version {watcher.last} (Ctrl-C to stop)")
        for change in watcher:
            if as_json:
                click.echo(dumps({**change.to_dict(), "source": change.source}))
            else:
                rows = "" if change.rows_delta is None else f" rows {change.rows_delta:+,}"
                console.print(
                    f"v{change.version} {fmt_ts(change.timestamp_ms)} {change.operation:<14} "
                    f"+{len(change.added)} -{len(change.dropped)}{rows}  [dim]({change.source})[/]"
                )
            seen += 1
            if count is not None and seen >= count:
                return
