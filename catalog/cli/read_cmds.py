"""``segcat log``, ``segcat show`` and ``segcat diff``: reading a table's timeline."""

from __future__ import annotations

import json

import click
from rich.table import Table as RichTable

from catalog.cli.render import console, fmt_ts, parse_as_of, replay_progress, segments_view
from catalog.config import Config
from catalog.jsonio import commit_to_json, segment_to_json
from catalog.rules import Outcome
from catalog.table import Catalog

_STYLE = {
    Outcome.ACCEPTED: "green",
    Outcome.REJECTED: "red",
    Outcome.INVALID: "magenta",
    Outcome.DUPLICATE: "yellow",
    Outcome.PRUNED: "dim",
}


@click.command("log")
@click.argument("name")
@click.option("--from", "start", type=int, default=0, help="First offset to show.")
@click.option("--limit", type=int, default=None, help="Show at most this many records (the newest).")
@click.option("--accepted-only", is_flag=True, help="Hide rejected, invalid and duplicate records.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
def log_cmd(name: str, start: int, limit: int | None, accepted_only: bool, as_json: bool) -> None:
    """Every record of table NAME with the rules' verdict: the commit log."""
    table = Catalog(Config.load()).table(name)
    records = [r for r in table.records(start) if not accepted_only or r.verdict.outcome is Outcome.ACCEPTED]
    if limit is not None:
        records = records[-limit:]
    if as_json:
        for r in records:
            click.echo(
                json.dumps(
                    {
                        "offset": r.verdict.offset,
                        "timestamp_ms": r.timestamp_ms,
                        "outcome": r.verdict.outcome.value,
                        "rule": r.verdict.rule,
                        "detail": r.verdict.detail,
                        "commit": None if r.commit is None else commit_to_json(r.commit),
                    }
                )
            )
        return
    view = RichTable(title=f"log of {table.name}")
    for column in ("version", "time (broker)", "verdict", "operation", "+seg", "-seg", "writer", "detail"):
        view.add_column(column)
    for r in records:
        c = r.commit
        style = _STYLE[r.verdict.outcome]
        view.add_row(
            str(r.verdict.offset),
            fmt_ts(r.timestamp_ms),
            f"[{style}]{r.verdict.outcome.value}[/]",
            c.operation.value if c else "-",
            str(len(c.adds)) if c else "-",
            str(len(c.drops)) if c else "-",
            c.writer_id if c else "-",
            (f"{r.verdict.rule}: " if r.verdict.rule else "") + r.verdict.detail,
        )
    console.print(view)


@click.command("show")
@click.argument("name")
@click.option("--version", "version", type=int, default=None, help="Any offset; default: the head.")
@click.option("--as-of", "as_of", default=None, help="Broker time: epoch ms or ISO-8601.")
@click.option("--limit", type=int, default=50, show_default=True, help="Segments to list.")
@click.option("--json", "as_json", is_flag=True)
def show_cmd(name: str, version: int | None, as_of: str | None, limit: int, as_json: bool) -> None:
    """The live segments of table NAME at a version or time."""
    if version is not None and as_of is not None:
        raise click.UsageError("give --version or --as-of, not both")
    table = Catalog(Config.load()).table(name)
    with replay_progress(table, "replaying") as listener:
        snap = table.snapshot(version, None if as_of is None else parse_as_of(as_of), listener=listener)
    segments = snap.segment_list()
    if as_json:
        click.echo(
            json.dumps(
                {
                    "table": str(table.name),
                    "version": snap.version,
                    "timestamp_ms": snap.timestamp_ms,
                    "live_segments": len(segments),
                    "rows": snap.live_rows,
                    "bytes": snap.live_bytes,
                    "schema": snap.schema,
                    "properties": snap.properties,
                    "tombstones": [{"predicate": t.predicate, "version": t.version} for t in snap.tombstones],
                    "segments": [segment_to_json(s) for s in segments[:limit]],
                }
            )
        )
        return
    console.print(
        f"[bold]{table.name}[/] version [bold cyan]{snap.version}[/] at {fmt_ts(snap.timestamp_ms)}: "
        f"{len(segments):,} live segments, {snap.live_rows:,} rows, {snap.live_bytes:,} bytes"
    )
    for tomb in snap.tombstones:
        console.print(f"  tombstone @{tomb.version}: {tomb.predicate}")
    if snap.properties:
        console.print(f"  properties: {snap.properties}")
    console.print(segments_view(segments, f"live segments at {snap.version}", limit))


@click.command("diff")
@click.argument("name")
@click.argument("from_version", type=int)
@click.argument("to_version", type=int)
@click.option("--limit", type=int, default=50, show_default=True)
def diff_cmd(name: str, from_version: int, to_version: int, limit: int) -> None:
    """Segments to load and unload to move table NAME from FROM_VERSION to TO_VERSION."""
    table = Catalog(Config.load()).table(name)
    diff = table.diff(from_version, to_version)
    console.print(
        f"[bold]{table.name}[/] {diff.from_version} → {diff.to_version}: "
        f"[green]+{len(diff.added)}[/] load, [red]-{len(diff.removed)}[/] unload"
    )
    if diff.added:
        console.print(segments_view(list(diff.added), "load", limit))
    if diff.removed:
        console.print(segments_view(list(diff.removed), "unload", limit))
