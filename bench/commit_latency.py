"""Commit latency and throughput: segcat vs delta-rs vs pyiceberg, all in one run.

    .venv/bin/python -m bench.commit_latency            # full run, updates docs/BENCHMARKS.md
    .venv/bin/python -m bench.commit_latency --quick    # smoke test: small counts, doc untouched

Scenarios (full / quick):
1. segcat, one writer, 1,000 / 100 sequential one-segment appends on a fresh table;
2. segcat, 8 / 2 writer processes appending to one table at once (250 / 50 each);
   then, for reference, the same with bare Kafka producers (no catch-up: the broker's floor);
3. segcat, one writer, 10,000 / 1,000 appends: first vs last 1,000 / 100 commits;
4. delta-rs, 1,000 / 100 one-file append transactions on a local table;
5. pyiceberg, 1,000 / 100 ``add_files`` commits with a sqlite SQL catalog.

Results go to ``bench/results/commit-latency-<UTC time>.json`` (every per-commit sample)
and, for full runs, to the ``commit-latency`` section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table as RichTable

from bench import report
from bench.cpu import CpuMeter
from bench.environment import describe
from bench.runs import Run, Tick
from bench.stats import median_ms
from segcat.catalog.config import Config
from segcat.catalog.errors import SegcatError

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"
DOC = REPO / "docs" / "BENCHMARKS.md"
SECTION = "commit-latency"

console = Console(stderr=True)
log = logging.getLogger("segcat.bench")


@dataclass(frozen=True)
class Params:
    sequential_commits: int
    writers: int
    commits_per_writer: int
    long_log_commits: int
    window: int
    peer_commits: int
    warmup_commits: int
    """Untimed commits on a scratch table first, so the broker's JIT is warm for every scenario."""

    @classmethod
    def full(cls) -> Params:
        return cls(1000, 8, 250, 10_000, 1000, 1000, 1000)

    @classmethod
    def quick(cls) -> Params:
        return cls(100, 2, 50, 1000, 100, 100, 200)


ALL_SCENARIOS = ("sequential", "concurrent", "floor", "long-log", "delta", "iceberg")


# --------------------------------------------------------------------------- helpers


def ensure_kafka(config: Config, *, start_stack: bool) -> None:
    """Make sure the broker answers; start the local stack if that is where the config points."""
    from segcat import local_stack as stack
    from segcat.local_stack import kafka as stack_kafka
    from segcat.local_stack.probe import kafka_answers
    from segcat.local_stack.settings import StackSettings

    if kafka_answers(config.bootstrap_servers, timeout_s=5.0):
        return
    local = config.bootstrap_servers == stack_kafka.address(StackSettings.load())
    if not (local and start_stack):
        raise SystemExit(
            f"Kafka at {config.bootstrap_servers} does not answer"
            + ("" if local else " (not the local stack, so it is not started here)")
        )
    console.print("[bold]Kafka is down: starting the local stack…")
    stack.up(StackSettings.load(), reporter=stack.RichReporter())


@contextmanager
def progress_bar(progress: Progress, description: str, total: int) -> Iterator[Tick]:
    task = progress.add_task(description, total=total)

    def tick(n: int) -> None:
        progress.advance(task, n)

    yield tick


def growth(run: Run, window: int) -> dict[str, Any]:
    """Median of the first vs the last ``window`` commits of a run."""
    window = max(1, min(window, run.commits // 2))
    return {
        "window": window,
        "first_median_ms": round(median_ms(run.latencies_ns[:window]), 4),
        "last_median_ms": round(median_ms(run.latencies_ns[-window:]), 4),
    }


def print_summary(results: dict[str, Any]) -> None:
    table = RichTable(title="Commit latency")
    for col in ("run", "commits", "median ms", "p99 ms", "commits/s"):
        table.add_column(col, justify="right" if col != "run" else "left")
    for key, run in results["runs"].items():
        lat = run["latency"]
        table.add_row(
            key,
            f"{run['commits']:,}",
            f"{lat['median_ms']:.2f}",
            f"{lat['p99_ms']:.2f}",
            f"{run['commits_per_s']:,.0f}",
        )
    console.print(table)
    long_run = results["runs"].get("segcat_long_log")
    if long_run:
        d = long_run["details"]
        console.print(
            f"long log: first {d['window']:,} median {d['first_window']['median_ms']:.2f} ms "
            f"p99 {d['first_window']['p99_ms']:.2f} ms; last {d['window']:,} median "
            f"{d['last_window']['median_ms']:.2f} ms p99 {d['last_window']['p99_ms']:.2f} ms"
        )
    for name, value in results["ratios"].items():
        if value is not None:
            console.print(f"{name}: {value:.2f}×")
    for t in results["targets"]:
        mark = "[green]met" if t["met"] else "[red]NOT met"
        console.print(f"{mark}[/]  {t['target']}: {t['measured']}")


# --------------------------------------------------------------------------- main


def run_all(config: Config, params: Params, scenarios: tuple[str, ...], *, keep: bool) -> dict[str, Any]:
    from bench import segcat_runs
    from bench.peers import run_delta, run_iceberg

    run_id = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S") + "_" + uuid.uuid4().hex[:6]
    tables: list[str] = []

    def table(kind: str) -> str:
        name = f"bench.commit_latency_{run_id}_{kind}"
        tables.append(name)
        return name

    runs: dict[str, Run] = {}
    meter = CpuMeter(config)
    workdir = Path(tempfile.mkdtemp(prefix="segcat-bench-"))
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    steps: list[tuple[str, str, int, Callable[[Tick], Run]]] = [
        (
            "sequential",
            f"segcat: {params.sequential_commits:,} sequential appends",
            params.sequential_commits,
            lambda tick: segcat_runs.run_sequential(
                config, table("seq"), params.sequential_commits, tick=tick, meter=meter
            ),
        ),
        (
            "concurrent",
            f"segcat: {params.writers} writer processes × {params.commits_per_writer:,}",
            params.writers * params.commits_per_writer,
            lambda tick: segcat_runs.run_concurrent(
                config, table("conc"), params.writers, params.commits_per_writer, tick=tick, meter=meter
            ),
        ),
        (
            "floor",
            f"Kafka floor: {params.writers} bare producers × {params.commits_per_writer:,}",
            params.writers * params.commits_per_writer,
            lambda tick: segcat_runs.run_concurrent(
                config,
                table("floor"),
                params.writers,
                params.commits_per_writer,
                tick=tick,
                meter=meter,
                raw=True,
            ),
        ),
        (
            "long-log",
            f"segcat: {params.long_log_commits:,}-commit log",
            params.long_log_commits,
            lambda tick: segcat_runs.run_sequential(
                config,
                table("long"),
                params.long_log_commits,
                scenario="long-log",
                tick=tick,
                windows=params.window,
                cold_start=True,
                meter=meter,
            ),
        ),
        (
            "delta",
            f"delta-rs: {params.peer_commits:,} append transactions",
            params.peer_commits,
            lambda tick: run_delta(workdir, params.peer_commits, tick=tick, meter=meter),
        ),
        (
            "iceberg",
            f"pyiceberg: {params.peer_commits:,} add_files commits",
            params.peer_commits,
            lambda tick: run_iceberg(workdir, params.peer_commits, tick=tick, meter=meter),
        ),
    ]
    keys = {
        "sequential": "segcat_sequential",
        "concurrent": "segcat_concurrent",
        "floor": "kafka_floor",
        "long-log": "segcat_long_log",
        "delta": "delta_sequential",
        "iceberg": "iceberg_sequential",
    }
    warmup: dict[str, Any] | None = None
    try:
        with Progress(*columns, console=console) as progress:
            if params.warmup_commits and set(scenarios) & {"sequential", "concurrent", "floor", "long-log"}:
                description = f"segcat: {params.warmup_commits:,} warm-up commits (not reported)"
                with progress_bar(progress, description, params.warmup_commits) as tick:
                    warm = segcat_runs.run_sequential(
                        config, table("warmup"), params.warmup_commits, tick=tick
                    )
                warmup = {"commits": warm.commits, "median_ms": round(warm.summary.median_ms, 4)}
            for name, description, total, fn in steps:
                if name not in scenarios:
                    continue
                with progress_bar(progress, description, total) as tick:
                    runs[keys[name]] = fn(tick)
    finally:
        if not keep:
            for name in tables:
                try:
                    segcat_runs.drop_table(config, name)
                except SegcatError as exc:
                    log.warning("could not drop %s: %s", name, exc)
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            console.print(f"kept tables {tables} and peer tables under {workdir}")

    codec_cost = segcat_runs.measure_codec() if set(scenarios) & {"sequential", "concurrent"} else None
    for key in ("segcat_sequential", "delta_sequential", "iceberg_sequential"):
        if key in runs:
            runs[key].details["growth"] = growth(runs[key], 100)
    return {
        "run_id": run_id,
        "warmup": warmup,
        "codec": codec_cost,
        "runs": {k: v.to_json() for k, v in runs.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.commit_latency",
        description="Commit latency/throughput of segcat vs delta-rs and pyiceberg.",
    )
    parser.add_argument("--quick", action="store_true", help="small counts for a smoke test")
    parser.add_argument(
        "--only",
        action="append",
        choices=ALL_SCENARIOS,
        help="run only these scenarios (repeatable; default: all)",
    )
    parser.add_argument("--write-doc", action="store_true", help="update docs/BENCHMARKS.md in --quick mode")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/BENCHMARKS.md")
    parser.add_argument("--doc", type=Path, default=DOC, help="the markdown file to update")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    parser.add_argument("--keep", action="store_true", help="keep the benchmark topics and peer tables")
    parser.add_argument(
        "--no-start-stack", action="store_true", help="fail instead of starting the local stack"
    )
    parser.add_argument(
        "--render", type=Path, metavar="RESULTS_JSON", help="only re-render the doc section from a saved run"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    if args.render:
        saved = json.loads(args.render.read_text())
        report.update_section(args.doc, SECTION, report.render(saved))
        console.print(f"updated {args.doc}")
        return 0

    config = Config.load()
    ensure_kafka(config, start_stack=not args.no_start_stack)
    params = Params.quick() if args.quick else Params.full()
    scenarios = tuple(args.only) if args.only else ALL_SCENARIOS
    command = ".venv/bin/python -m bench.commit_latency" + (" --quick" if args.quick else "")
    if args.only:
        command += "".join(f" --only {s}" for s in args.only)

    environment = describe(config, REPO)
    console.print(
        f"[bold]commit latency[/] ({'quick' if args.quick else 'full'}) against {config.bootstrap_servers}; "
        f"{environment['nproc']} CPUs, load {environment['loadavg_at_start']}"
    )
    measured = run_all(config, params, scenarios, keep=args.keep)

    args.results_dir.mkdir(parents=True, exist_ok=True)
    out_path = args.results_dir / f"commit-latency-{measured['run_id']}.json"
    try:
        shown_path = str(out_path.resolve().relative_to(REPO))
    except ValueError:
        shown_path = str(out_path)
    results: dict[str, Any] = {
        "benchmark": SECTION,
        "mode": "quick" if args.quick else "full",
        "command": command,
        "results_file": shown_path,
        "environment": environment,
        "parameters": params.__dict__,
        "warmup": measured["warmup"],
        "codec": measured["codec"],
        "runs": measured["runs"],
    }
    results["ratios"] = report.ratios(results)
    results["targets"] = report.targets(results)
    out_path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    console.print(f"results: {shown_path}")
    print_summary(results)

    if not args.no_doc and (not args.quick or args.write_doc):
        report.update_section(args.doc, SECTION, report.render(results))
        console.print(f"updated {args.doc.relative_to(REPO) if args.doc.is_relative_to(REPO) else args.doc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
