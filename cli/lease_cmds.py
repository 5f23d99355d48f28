"""``segcat leases``: the version leases readers hold on a table (what vacuum must keep)."""

from __future__ import annotations

import click
from rich.table import Table as RichTable

from segcat import Config
from segcat.catalog.protocol.jsonio import dumps
from segcat.catalog.protocol.names import table_name
from segcat.catalog.storage.redis.leases import LeaseStore
from segcat.cli.render import console


def fmt_duration(ms: int) -> str:
    """``1d 2h``, ``3m 05s``, ``0.4s``: how long until a lease expires."""
    if ms < 1000:
        return f"{ms / 1000:.1f}s"
    seconds = ms // 1000
    days, rest = divmod(seconds, 86_400)
    hours, rest = divmod(rest, 3_600)
    minutes, seconds = divmod(rest, 60)
    if days:
        return f"{days}d {hours}h"
    if hours:
        return f"{hours}h {minutes:02d}m"
    if minutes:
        return f"{minutes}m {seconds:02d}s"
    return f"{seconds}s"


@click.command("leases")
@click.argument("name")
@click.option(
    "--json", "as_json", is_flag=True, help="One JSON object: the table, the oldest version, the leases."
)
def leases_cmd(name: str, as_json: bool) -> None:
    """Live version leases on table NAME: id, version, holder, time left (Redis' clock).

    With --json: also when each lease was taken and its TTL.
    """
    parsed = table_name(name)
    store = LeaseStore.from_config(Config.load())
    try:
        leases = store.live(parsed)
    finally:
        store.close()
    if as_json:
        click.echo(
            dumps(
                {
                    "table": parsed.qualified,
                    "oldest_leased_version": min((lease.version for lease in leases), default=None),
                    "leases": [lease.to_json() for lease in leases],
                }
            )
        )
        return
    if not leases:
        console.print(f"no live leases on [bold]{parsed.qualified}[/]")
        return
    view = RichTable(title=f"leases on {parsed.qualified}")
    view.add_column("lease id", no_wrap=True, min_width=36)  # whole: it is what one copies
    view.add_column("version", no_wrap=True, justify="right")
    view.add_column("holder", overflow="fold")
    view.add_column("expires in", no_wrap=True)
    for lease in leases:
        view.add_row(
            lease.lease_id,
            str(lease.version),
            lease.holder,
            fmt_duration(lease.expires_in_ms),
            style="dim" if lease.expires_in_ms < 5_000 else None,
        )
    view.caption = f"oldest leased version: {leases[0].version}"
    console.print(view)
