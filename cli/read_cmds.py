"""``segcat log``, ``segcat show`` and ``segcat diff``: reading a table's timeline."""

from __future__ import annotations

import click
from rich.table import Table as RichTable

from segcat import load_catalog
from segcat.catalog.protocol.jsonio import commit_to_json, dumps, segment_to_json
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.read import snapshot_json
from segcat.cli.params import AS_OF, COUNT, OFFSET, POSITIVE, VERSION, VERSION_OR_TAG
from segcat.cli.render import console, fmt_ts, print_note, replay_progress, segments_view

_STYLE = {
    Outcome.ACCEPTED: "green",
    Outcome.REJECTED: "red",
    Outcome.INVALID: "magenta",
    Outcome.DUPLICATE: "yellow",
    Outcome.PRUNED: "dim",
    Outcome.NOTED: "cyan",
}


@click.command("log")
@click.argument("name")
@click.option("--from", "start", type=OFFSET, default=0, help="First offset to show.")
@click.option("--limit", type=POSITIVE, default=None, help="Show at most this many records (the newest).")
@click.option("--accepted-only", is_flag=True, help="Hide rejected, invalid and duplicate records.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line (strict JSON).")
def log_cmd(name: str, start: int, limit: int | None, accepted_only: bool, as_json: bool) -> None:
    """Every record of table NAME with the rules' verdict: the commit log."""
    table = load_catalog().load_table(name)
    records = [r for r in table.records(start) if not accepted_only or r.verdict.outcome is Outcome.ACCEPTED]
    if limit is not None:
        records = records[-limit:]
    if as_json:
        for r in records:
            click.echo(
                dumps(
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


TEXT_LIMIT = 50
"""Segments ``show`` and ``diff`` list as text unless ``--limit`` says otherwise."""


@click.command("show")
@click.argument("name")
@click.option(
    "--version",
    "version",
    type=VERSION_OR_TAG,
    default=None,
    help="Any offset up to the head, or a tag's name; default: the head.",
)
@click.option(
    "--as-of", "as_of", type=AS_OF, default=None, help="Broker time: epoch ms or ISO-8601 (UTC if no zone)."
)
@click.option(
    "--limit", type=COUNT, default=None, help=f"Segments to list (text: {TEXT_LIMIT}; --json: all)."
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Strict JSON; live_segments is the total, truncated says whether --limit cut the list.",
)
def show_cmd(
    name: str, version: int | str | None, as_of: int | None, limit: int | None, as_json: bool
) -> None:
    """The live segments of table NAME at a version (or tag) or time."""
    if version is not None and as_of is not None:
        raise click.UsageError("give --version or --as-of, not both")
    table = load_catalog().load_table(name)
    if isinstance(version, str):
        version = table.resolve_version(version)
    with replay_progress("replaying") as progress:
        snap = table.snapshot(version, as_of=as_of, progress=progress)
    note = snap.note or snapshot_json.version_note(table, version, snap)
    print_note(note)
    segments = snap.segment_list()
    if as_json:
        listed = segments if limit is None else segments[:limit]
        shown = snapshot_json.document(snap, listed, note)
        click.echo(
            dumps(
                {
                    "table": str(table.name),
                    "version": shown["version"],
                    "timestamp_ms": shown["timestamp_ms"],
                    "note": shown["note"],
                    "live_segments": len(segments),
                    "listed": len(listed),
                    "truncated": len(listed) < len(segments),
                    "rows": snap.live_rows,
                    "bytes": snap.live_bytes,
                    "schema": snap.schema,
                    "properties": snap.properties,
                    "tombstones": shown["tombstones"],
                    "tombstones_apply": shown["tombstones_apply"],
                    "segments": shown["segments"],
                }
            )
        )
        return
    limit = TEXT_LIMIT if limit is None else limit
    console.print(
        f"[bold]{table.name}[/] version [bold cyan]{snap.version}[/] at {fmt_ts(snap.timestamp_ms)}: "
        f"{len(segments):,} live segments, {snap.live_rows:,} rows, {snap.live_bytes:,} bytes"
    )
    for tomb in snap.tombstones:
        console.print(f"  tombstone @{tomb.version}: {tomb.predicate}")
    if snap.properties:
        console.print(f"  properties: {snap.properties}")
    console.print(segments_view(segments, f"live segments at {snap.version}", limit))


@click.command("diff", context_settings={"ignore_unknown_options": True})  # `diff t -1 5`: -1 is a version
@click.argument("name")
@click.argument("from_version", type=VERSION)
@click.argument("to_version", type=VERSION)
@click.option(
    "--limit", type=COUNT, default=None, help=f"Segments to list per side (text: {TEXT_LIMIT}; --json: all)."
)
@click.option(
    "--json",
    "as_json",
    is_flag=True,
    help="Strict JSON, named as SnapshotDiff; added_count/removed_count are the totals.",
)
def diff_cmd(name: str, from_version: int, to_version: int, limit: int | None, as_json: bool) -> None:
    """Segments to load and unload to move table NAME from FROM_VERSION to TO_VERSION."""
    table = load_catalog().load_table(name)
    diff = table.diff(from_version, to_version)
    if as_json:
        added, removed = list(diff.added), list(diff.removed)
        click.echo(
            dumps(
                {
                    "table": str(table.name),
                    "from_version": diff.from_version,
                    "to_version": diff.to_version,
                    "added_count": len(added),
                    "removed_count": len(removed),
                    "truncated": limit is not None and max(len(added), len(removed)) > limit,
                    "added": [segment_to_json(s) for s in added[:limit]],
                    "removed": [segment_to_json(s) for s in removed[:limit]],
                }
            )
        )
        return
    limit = TEXT_LIMIT if limit is None else limit
    console.print(
        f"[bold]{table.name}[/] {diff.from_version} → {diff.to_version}: "
        f"[green]+{len(diff.added)}[/] load, [red]-{len(diff.removed)}[/] unload"
    )
    if diff.added:
        console.print(segments_view(list(diff.added), "load", limit))
    if diff.removed:
        console.print(segments_view(list(diff.removed), "unload", limit))
