"""``segcat demo``: the quick start's main job, end to end on real services.

Starts the local stack (unless SEGCAT_BOOTSTRAP_SERVERS points elsewhere) and the
materializer, writes real Parquet segments and commits them while a watcher prints each
new version, races two compactions, soft-deletes a user, then reads the table back from
the key frame in Redis (time travel, pruning, the log, a coordinator's diff).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import click
import pyarrow as pa
import pyarrow.parquet as pq

from segcat import (
    Catalog,
    CommitConflict,
    Config,
    Segment,
    Table,
    col,
    load_catalog,
    local_stack,
    segment_from_parquet,
)
from segcat.cli.params import Integer
from segcat.cli.read_cmds import diff_cmd, log_cmd, show_cmd
from segcat.cli.render import console
from segcat.local_stack.settings import StackSettings


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


DAYS = Integer(1, 366, what="a number of days")
FILES = Integer(1, 100, what="a number of files")


@click.command("demo")
@click.option("--days", type=DAYS, default=4, show_default=True, help="Daily partitions to append.")
@click.option("--files-per-day", type=FILES, default=3, show_default=True)
def demo_cmd(days: int, files_per_day: int) -> None:
    """Run the end-to-end demo: stack, commits from two writers, a race, reads and time travel."""
    if not os.environ.get("SEGCAT_BOOTSTRAP_SERVERS"):
        info = local_stack.up(StackSettings.load(), reporter=local_stack.RichReporter(console))
        os.environ["SEGCAT_BOOTSTRAP_SERVERS"] = info.bootstrap_servers  # for the commands run below
        os.environ.setdefault("SEGCAT_REDIS_URL", info.redis_url)
    config = replace(Config.load(), keyframe_every_commits=4, metrics_port=0)
    namespace = f"demo_{dt.datetime.now(dt.UTC):%Y%m%d_%H%M%S}"
    name = f"{namespace}.events"
    catalog = load_catalog(config)
    table = catalog.create_table(name)
    root = table.location()
    console.rule(f"[bold]table {name}[/] (topic {table.name.topic}, root {root})")
    with _materializer(config, rf"^segcat\.{namespace}\..*"), _watcher(table):
        won, before_compaction = _commits(catalog, root, name, days, files_per_day)
        _wait_materialized(catalog, name)
    _reads(name, table, before_compaction, won)
    catalog.close()


@contextmanager
def _materializer(config: Config, pattern: str) -> Iterator[None]:
    """The materializer service, in a thread, following only this demo's namespace."""
    from segcat.materializer.service import Materializer

    logging.getLogger("segcat.materializer").setLevel(logging.WARNING)
    service = Materializer(config, group_id=f"demo-{uuid.uuid4().hex[:6]}", pattern=pattern)
    ready = threading.Event()
    thread = threading.Thread(target=service.run, kwargs={"ready": ready.set}, daemon=True)
    thread.start()
    ready.wait(30)
    console.print("[dim]materializer running (key frames every 4 commits)[/]")
    try:
        yield
    finally:
        service.stop.set()
        thread.join(30)


@contextmanager
def _watcher(table: Table) -> Iterator[None]:
    """A version watcher printing every change as it arrives (Pub/Sub), as a dashboard would."""
    stop = threading.Event()

    def run() -> None:
        with table.watch(-1, poll_s=0.2) as watcher:
            for change in watcher:
                console.print(
                    f"  [magenta]watch[/] v{change.version} {change.operation} "
                    f"+{len(change.added)} -{len(change.dropped)} [dim]({change.source})[/]"
                )
                if stop.is_set():
                    return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    time.sleep(0.5)
    try:
        yield
    finally:
        time.sleep(0.5)
        stop.set()


def _wait_materialized(catalog: Catalog, name: str) -> None:
    """Until Redis alone answers the head (no tail judged from Kafka: it holds the last version)."""
    table = catalog.load_table(name)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if table.snapshot().origin == "redis":
            return
        time.sleep(0.1)


def _commits(catalog: Catalog, root: str, name: str, days: int, files_per_day: int) -> tuple[int, int]:
    """Daily appends, a compaction race between two writers, and a soft delete."""
    first_day = dt.date(2026, 11, 1)
    with (
        catalog.load_table(name, writer_id="daily-loader") as loader,
        catalog.load_table(name, writer_id="compactor-A") as comp_a,
        catalog.load_table(name, writer_id="compactor-B") as comp_b,
    ):
        for d in range(days):
            day = first_day + dt.timedelta(days=d)
            segments = [_write_day(root, day, 200, d * files_per_day + f) for f in range(files_per_day)]
            started = time.perf_counter()
            version = loader.append(segments, properties={"job": "daily-load", "day": day.isoformat()})
            console.print(
                f"APPEND {day}: {files_per_day} Parquet segments → version [bold]{version}[/] "
                f"({(time.perf_counter() - started) * 1000:.1f} ms)"
            )
        before_compaction = loader.refresh().version

        # two compactors plan on the same image and race for the same segments
        image = comp_a.refresh()
        comp_b.refresh()
        day0 = first_day.isoformat()
        victims = sorted(s for s, live in image.segments.items() if live.segment.partition == day0)
        merged = _write_day(root, first_day, 600, 900)
        won = comp_a.compact(victims, [merged], properties={"job": "compaction"})
        console.print(f"COMPACT by compactor-A: {len(victims)} → 1 segment → version [bold]{won}[/]")
        try:
            comp_b.compact(victims, [_write_day(root, first_day, 600, 901)])
        except CommitConflict as conflict:
            console.print(
                f"COMPACT by compactor-B: [red]CommitConflict[/] rule {conflict.rule}, "
                f"conflicting version {conflict.conflicting_version} (its file is left for vacuum)"
            )
        deleted = loader.delete(predicates=["user = 'user-07'"], properties={"reason": "GDPR request"})
        console.print(f"DELETE (soft, tombstone) user-07 → version [bold]{deleted}[/]")
    return won, before_compaction


def _reads(name: str, table: Table, before_compaction: int, won: int) -> None:
    snap = table.snapshot()
    console.rule(f"[bold]reader[/]: head from [cyan]{snap.origin}[/] (key frame + deltas)")
    cutoff = dt.datetime(2026, 11, 3, tzinfo=dt.UTC)
    early = snap.prune(col("ts") < cutoff)
    console.print(
        f"prune(ts < {cutoff:%Y-%m-%d}): {early.live_count} of {snap.live_count} segments can match, "
        "judged from their min/max stats alone"
    )

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
