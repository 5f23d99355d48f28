"""``segcat prune`` and ``segcat vacuum``: what the lifecycle removes (docs/LIFECYCLE.md)."""

from __future__ import annotations

import json

import click
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from segcat import load_catalog
from segcat.cli.params import DURATION, POSITIVE
from segcat.cli.render import console


@click.command("prune")
@click.argument("name")
@click.option("--retain-versions", type=POSITIVE, default=None, help="Keep the last N offsets in Kafka.")
@click.option("--retain-age", type=DURATION, default=None, help="Keep what is younger (7d, 12h).")
@click.option("--dry-run", is_flag=True, help="Say where the log would be cut; write nothing.")
@click.option("--json", "as_json", is_flag=True, help="The plan and the outcome as one JSON object.")
def prune_cmd(
    name: str, retain_versions: int | None, retain_age: int | None, dry_run: bool, as_json: bool
) -> None:
    """Cut table NAME's Kafka log from its beginning; the versions stay readable from object storage."""
    table = load_catalog().load_table(name)
    result = table.prune_log(retain_versions=retain_versions, retain_age_ms=retain_age, dry_run=dry_run)
    plan = result.plan
    if as_json:
        click.echo(
            json.dumps(
                {
                    "table": plan.table,
                    "log_start_before": plan.log_start,
                    "prune_point": plan.prune_point,
                    "limited_by": plan.limit,
                    "null_records": len(plan.nulls),
                    "kept_keys": len(plan.kept_keys),
                    "dry_run": dry_run,
                    "marker_version": result.marker_version,
                }
            )
        )
        return
    if not plan.prunes:
        console.print(f"[bold]{plan.table}[/]: nothing to prune: {plan.limit}")
        return
    verb = "would prune" if dry_run else "pruned"
    console.print(
        f"[bold]{plan.table}[/]: {verb} offsets {plan.log_start}..{plan.prune_point} "
        f"(limited by {plan.limit}); {len(plan.nulls)} null records"
        + (f", {len(plan.kept_keys)} keys kept for their later records" if plan.kept_keys else "")
    )
    if result.marker_version is not None:
        console.print(
            f"log start is now {plan.prune_point + 1} (recorded at version {result.marker_version})"
        )


@click.command("vacuum")
@click.argument("name")
@click.option("--retain-versions", type=POSITIVE, default=None, help="Versions > head − N keep files.")
@click.option("--grace", type=DURATION, default=None, help="Unneeded for this long (7d).")
@click.option("--dry-run", is_flag=True, help="List everything that would be deleted; delete nothing.")
@click.option("--ignore-leases", is_flag=True, help="Vacuum even when Redis (the leases) cannot be read.")
@click.option("--no-orphans", is_flag=True, help="Skip the listing of data/ (dropped files only).")
@click.option("--json", "as_json", is_flag=True, help="The summary and every file as one JSON object.")
def vacuum_cmd(
    name: str,
    retain_versions: int | None,
    grace: int | None,
    dry_run: bool,
    ignore_leases: bool,
    no_orphans: bool,
    as_json: bool,
) -> None:
    """Delete files of table NAME that no kept or leased version and no live write intent needs."""
    table = load_catalog().load_table(name)
    progress = Progress(
        TextColumn("deleting"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=as_json or dry_run,
    )
    with progress:
        task = progress.add_task("delete", total=None)

        def advance(done: int, total: int) -> None:
            progress.update(task, completed=done, total=total)

        report = table.vacuum(
            retain_versions=retain_versions,
            grace_ms=grace,
            dry_run=dry_run,
            ignore_leases=ignore_leases,
            orphans=not no_orphans,
            progress=advance,
        )
    if as_json:
        click.echo(json.dumps(report.to_json()))
        return
    if dry_run:
        for item in report.files:
            console.print(f"would delete [{item.reason}] {escape(item.path)}")
    view = RichTable(title=f"vacuum of {report.table} (horizon {report.horizon}, head {report.head})")
    for column in ("reason", "files", "bytes"):
        view.add_column(column)
    for reason, counts in sorted(report.by_reason().items()):
        view.add_row(reason, f"{counts['files']:,}", f"{counts['bytes']:,}")
    console.print(view)
    verb = "would delete" if dry_run else "deleted"
    total = len(report.files) if dry_run else report.deleted
    console.print(
        f"{verb} {total:,} files; kept {report.kept_by_grace:,} inside the grace period and "
        f"{report.kept_by_intent:,} under open write intents"
        + (
            f"; {report.kept_by_recheck:,} saved by the last look before deleting"
            if report.kept_by_recheck
            else ""
        )
        + (f"; leased versions: {list(report.leased_versions)}" if report.leased_versions else "")
        + (
            f"; {report.kept_by_tag:,} kept for tagged versions {list(report.tagged_versions)}"
            if report.kept_by_tag
            else ""
        )
    )
