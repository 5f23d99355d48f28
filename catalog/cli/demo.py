"""``segcat demo``: the quick start's main job, end to end on real services.

Starts the local stack (unless SEGCAT_BOOTSTRAP_SERVERS points elsewhere), writes real
Parquet segments, commits them, races two compactions, and reads the table back.
"""

from __future__ import annotations

import datetime as dt
import os
import time
import uuid
from pathlib import Path

import click
import pyarrow as pa
import pyarrow.parquet as pq

from catalog import stack as local_stack
from catalog.cli.read_cmds import diff_cmd, log_cmd, show_cmd
from catalog.cli.render import console
from catalog.config import Config
from catalog.errors import CommitConflict
from catalog.model import Segment
from catalog.parquet_stats import segment_from_parquet
from catalog.table import Catalog
from producers import TableWriter


def _write_day(root: str, day: dt.date, rows: int, seed: int) -> Segment:
    """One real Parquet file for ``day`` under the table root, described by its footer."""
    relative = f"data/day={day.isoformat()}/part-{uuid.uuid4().hex[:12]}.parquet"
    target = Path(root) / relative
    target.parent.mkdir(parents=True, exist_ok=True)
    ids = pa.array(range(seed * 1_000, seed * 1_000 + rows), type=pa.int64())
    start = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
    data = pa.table(
        {
            "event_id": ids,
            "ts": pa.array(
                [start + dt.timedelta(seconds=i * 37) for i in range(rows)], type=pa.timestamp("us", "UTC")
            ),
            "user": pa.array([f"user-{(seed * 7 + i) % 50:02d}" for i in range(rows)]),
            "amount": pa.array([round((i * 3.7) % 100, 2) for i in range(rows)], type=pa.float64()),
        }
    )
    tmp = target.with_suffix(".tmp")
    pq.write_table(data, tmp)
    os.replace(tmp, target)
    return segment_from_parquet(
        str(target), segment_id=target.stem, relative_path=relative, partition=day.isoformat()
    )


@click.command("demo")
@click.option("--days", type=int, default=4, show_default=True, help="Daily partitions to append.")
@click.option("--files-per-day", type=int, default=3, show_default=True)
def demo_cmd(days: int, files_per_day: int) -> None:
    """Run the end-to-end demo: stack, commits from two writers, a race, reads and time travel."""
    config = Config.load()
    if not os.environ.get("SEGCAT_BOOTSTRAP_SERVERS"):
        local_stack.up(config, reporter=local_stack.RichReporter(console))
    name = f"demo.events_{dt.datetime.now(dt.UTC):%Y%m%d_%H%M%S}"
    catalog = Catalog(config)
    table = catalog.create_table(name)
    console.rule(f"[bold]table {name}[/] (topic {table.name.topic}, root {table.root})")

    first_day = dt.date(2026, 11, 1)
    with (
        TableWriter(config, name, writer_id="daily-loader") as loader,
        TableWriter(config, name, writer_id="compactor-A") as comp_a,
        TableWriter(config, name, writer_id="compactor-B") as comp_b,
    ):
        for d in range(days):
            day = first_day + dt.timedelta(days=d)
            segments = [_write_day(table.root, day, 200, d * files_per_day + f) for f in range(files_per_day)]
            started = time.perf_counter()
            version = loader.append(segments, properties={"job": "daily-load", "day": day.isoformat()})
            console.print(
                f"APPEND {day}: {files_per_day} Parquet segments → version [bold]{version}[/] "
                f"({(time.perf_counter() - started) * 1000:.1f} ms)"
            )
        before_compaction = loader.state.version

        # two compactors plan on the same image and race for the same segments
        comp_a.refresh()
        comp_b.refresh()
        day0 = first_day.isoformat()
        victims = sorted(s for s, live in comp_a.state.segments.items() if live.segment.partition == day0)
        merged = _write_day(table.root, first_day, 600, 900)
        won = comp_a.compact(victims, [merged], properties={"job": "compaction"})
        console.print(f"COMPACT by compactor-A: {len(victims)} → 1 segment → version [bold]{won}[/]")
        try:
            comp_b.compact(victims, [_write_day(table.root, first_day, 600, 901)])
        except CommitConflict as conflict:
            console.print(
                f"COMPACT by compactor-B: [red]CommitConflict[/] rule {conflict.rule}, "
                f"conflicting version {conflict.conflicting_version} (its file is left for vacuum)"
            )
        deleted = loader.delete(predicates=["user = 'user-07'"], properties={"reason": "GDPR request"})
        console.print(f"DELETE (soft, tombstone) user-07 → version [bold]{deleted}[/]")

    console.rule("[bold]segcat log[/]")
    log_cmd.main([name], standalone_mode=False)
    console.rule("[bold]segcat show (head)[/]")
    show_cmd.main([name, "--limit", "8"], standalone_mode=False)
    console.rule(f"[bold]segcat show --version {before_compaction}[/] (time travel)")
    show_cmd.main([name, "--version", str(before_compaction), "--limit", "4"], standalone_mode=False)
    console.rule(f"[bold]segcat diff {before_compaction} {won}[/] (what a coordinator loads / unloads)")
    diff_cmd.main([name, str(before_compaction), str(won)], standalone_mode=False)
    console.print(
        f"\n[green]demo done[/]: try `segcat show {name} --as-of <ISO time>` or `segcat log {name}`"
    )
