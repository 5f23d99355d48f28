"""Commit latency and throughput: segcat vs delta-rs vs pyiceberg, all in one run.

    .venv/bin/python -m bench.commit_latency            # full run, updates docs/BENCHMARKS.md
    .venv/bin/python -m bench.commit_latency --quick    # smoke test: small counts, doc untouched

Scenarios (full / quick):
1. ``sequential``: segcat, one writer, 1,000 / 100 sequential one-segment appends on a fresh table;
2. ``concurrent``: segcat, 8 / 2 writer processes appending to one table at once (250 / 50 each);
   ``concurrent-pipelined``: the same writers with 32 commits each in flight (``append_async``);
   ``floor``: the same with bare Kafka producers (no catch-up: the broker's floor);
2a. ``pipelined``: segcat, one process, one writer, 10,000 / 1,000 ``append_async`` with 1,024 in
   flight, three runs on fresh tables (the median run is reported);
3. ``long-log``: segcat, one writer, 10,000 / 1,000 appends: first vs last 1,000 / 100 commits;
4. ``delta``: delta-rs, 1,000 / 100 one-file append transactions on a local table;
5. ``iceberg``: pyiceberg, 1,000 / 100 ``add_files`` commits with a sqlite SQL catalog.

Results go to ``bench/results/commit-latency-<UTC time>.json`` (every per-commit sample) and,
for full runs, to the ``commit-latency`` section of docs/BENCHMARKS.md
(tables: ``commit_doc``; segcat's runs: ``commit_segcat``; delta-rs and pyiceberg: ``peers``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import commit_doc, report, runner
from bench.commit_runs import CpuMeter, Run
from bench.runner import Context, Results, Tick
from segcat.catalog.errors import SegcatError

TARGET_MEDIAN_MS = 4.0
TARGET_DELTA_RATIO = 3.0
TARGET_CONCURRENT_CPS = 2000.0
TARGET_PIPELINED_CPS = 5000.0
SCENARIOS = (
    "sequential",
    "concurrent",
    "concurrent-pipelined",
    "floor",
    "pipelined",
    "long-log",
    "delta",
    "iceberg",
)
KEYS = {
    "sequential": "segcat_sequential",
    "concurrent": "segcat_concurrent",
    "concurrent-pipelined": "segcat_concurrent_pipelined",
    "pipelined": "segcat_pipelined",
    "floor": "kafka_floor",
    "long-log": "segcat_long_log",
    "delta": "delta_sequential",
    "iceberg": "iceberg_sequential",
}
"""Scenario → its key in the results' ``runs``."""


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
    pipelined_commits: int
    pipelined_window: int
    """Commits one pipelining writer keeps in flight (``append_async``)."""
    pipelined_runs: int
    concurrent_window: int
    """Commits each of the concurrent-pipelined writer processes keeps in flight."""

    @classmethod
    def of(cls, quick: bool) -> Params:
        if quick:
            return cls(100, 2, 50, 1000, 100, 100, 200, 1000, 1024, 3, 32)
        return cls(1000, 8, 250, 10_000, 1000, 1000, 1000, 10_000, 1024, 3, 32)


def growth(run: Run, window: int) -> dict[str, Any]:
    """Median of the first vs the last ``window`` commits of a run (does a commit get dearer?)."""
    window = max(1, min(window, run.commits // 2))
    first, last = (
        runner.summary(runner.to_ms(s))["median_ms"]
        for s in (run.latencies_ns[:window], run.latencies_ns[-window:])
    )
    return {"window": window, "first_median_ms": first, "last_median_ms": last}


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--before",
        type=Path,
        metavar="RESULTS_JSON",
        help="a run of the previous code (e.g. from a git worktree of HEAD), shown beside this one",
    )


def before_of(path: Path | None) -> dict[str, Any] | None:
    """The figures of an earlier run to compare with (its file, tree, load and per-scenario rates)."""
    if path is None:
        return None
    saved = runner.load_results(path)
    return {
        "results_file": runner.relative(path),
        "tree": saved["environment"].get("git"),
        "date_utc": saved["environment"].get("date_utc"),
        "loadavg_at_start": saved["environment"].get("loadavg_at_start"),
        "runs": {
            key: {
                "commits_per_s": run["commits_per_s"],
                "median_ms": run["latency"]["median_ms"],
                "p99_ms": run["latency"]["p99_ms"],
                "cpu": run["details"].get("cpu"),
            }
            for key, run in saved["runs"].items()
        },
    }


def run(ctx: Context) -> Results:
    from bench import commit_segcat, peers

    config, p = ctx.config, Params.of(ctx.quick)
    run_id = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S") + "_" + uuid.uuid4().hex[:6]
    tables: list[str] = []

    def table(kind: str) -> str:
        tables.append(f"bench.commit_latency_{run_id}_{kind}")
        return tables[-1]

    meter = CpuMeter(config)
    workdir = Path(tempfile.mkdtemp(prefix="segcat-bench-"))
    sequential, concurrent = commit_segcat.run_sequential, commit_segcat.run_concurrent
    writers = p.writers * p.commits_per_writer
    steps: dict[str, tuple[str, int, Callable[[Tick], Run]]] = {
        "sequential": (
            f"segcat: {p.sequential_commits:,} sequential appends",
            p.sequential_commits,
            lambda tick: sequential(config, table("seq"), p.sequential_commits, tick=tick, meter=meter),
        ),
        "concurrent": (
            f"segcat: {p.writers} writer processes × {p.commits_per_writer:,}",
            writers,
            lambda tick: concurrent(
                config, table("conc"), p.writers, p.commits_per_writer, tick=tick, meter=meter
            ),
        ),
        "concurrent-pipelined": (
            f"segcat: {p.writers} writer processes × {p.commits_per_writer:,}, "
            f"{p.concurrent_window} in flight each",
            writers,
            lambda tick: concurrent(
                config,
                table("concpipe"),
                p.writers,
                p.commits_per_writer,
                tick=tick,
                meter=meter,
                window=p.concurrent_window,
            ),
        ),
        "pipelined": (
            f"segcat: {p.pipelined_runs} × {p.pipelined_commits:,} pipelined appends, "
            f"{p.pipelined_window} in flight",
            p.pipelined_runs * p.pipelined_commits,
            lambda tick: commit_segcat.run_pipelined(
                config,
                lambda: table(f"pipe{len(tables)}"),
                p.pipelined_commits,
                p.pipelined_window,
                p.pipelined_runs,
                tick=tick,
                meter=meter,
            ),
        ),
        "floor": (
            f"Kafka floor: {p.writers} bare producers × {p.commits_per_writer:,}",
            writers,
            lambda tick: concurrent(
                config, table("floor"), p.writers, p.commits_per_writer, tick=tick, meter=meter, raw=True
            ),
        ),
        "long-log": (
            f"segcat: {p.long_log_commits:,}-commit log",
            p.long_log_commits,
            lambda tick: sequential(
                config,
                table("long"),
                p.long_log_commits,
                scenario="long-log",
                tick=tick,
                windows=p.window,
                cold_start=True,
                meter=meter,
            ),
        ),
        "delta": (
            f"delta-rs: {p.peer_commits:,} append transactions",
            p.peer_commits,
            lambda tick: peers.run_delta(workdir, p.peer_commits, tick=tick, meter=meter),
        ),
        "iceberg": (
            f"pyiceberg: {p.peer_commits:,} add_files commits",
            p.peer_commits,
            lambda tick: peers.run_iceberg(workdir, p.peer_commits, tick=tick, meter=meter),
        ),
    }
    runs: dict[str, Run] = {}
    warmup: dict[str, Any] | None = None
    try:
        segcat_scenarios = {
            "sequential",
            "concurrent",
            "concurrent-pipelined",
            "floor",
            "pipelined",
            "long-log",
        }
        if p.warmup_commits and set(ctx.only) & segcat_scenarios:
            with runner.counting(
                f"segcat: {p.warmup_commits:,} warm-up commits (not reported)", p.warmup_commits
            ) as tick:
                warm = sequential(config, table("warmup"), p.warmup_commits, tick=tick)
            warmup = {
                "commits": warm.commits,
                "median_ms": runner.summary(runner.to_ms(warm.latencies_ns))["median_ms"],
            }
        for name in ctx.only:
            description, total, step = steps[name]
            with runner.counting(description, total) as tick:
                runs[KEYS[name]] = step(tick)
    finally:
        if ctx.args.keep:
            runner.progress(f"kept tables {tables} and peer tables under {workdir}")
        else:
            for name in tables:
                try:
                    commit_segcat.drop_table(config, name)
                except SegcatError as exc:
                    runner.progress(f"could not drop {name}: {exc}")
            shutil.rmtree(workdir, ignore_errors=True)
    for key in ("segcat_sequential", "delta_sequential", "iceberg_sequential"):
        if key in runs:
            runs[key].details["growth"] = growth(runs[key], 100)
    return {
        "params": asdict(p),
        "run_id": run_id,
        "warmup": warmup,
        "codec": commit_segcat.measure_codec()
        if {"sequential", "concurrent", "pipelined"} & set(ctx.only)
        else None,
        "runs": {k: v.to_json() for k, v in runs.items()},
        "before": before_of(ctx.args.before),
    }


# --------------------------------------------------------------------------- checks


def evaluate(results: Results) -> None:
    """The peers' median latency over segcat's, and the issue's three targets."""
    runs = results["runs"]
    seq = report.get(runs, "segcat_sequential", "latency", "median_ms")
    results["ratios"] = {
        f"{peer}_over_segcat_median": None if not seq or other is None else round(other / seq, 2)
        for peer in ("delta", "iceberg")
        for other in [report.get(runs, f"{peer}_sequential", "latency", "median_ms")]
    }
    delta_ratio = results["ratios"]["delta_over_segcat_median"]
    targets = []
    if seq is not None:
        targets.append(report.target("segcat median commit latency (1 writer)", seq, TARGET_MEDIAN_MS, "ms"))
    if delta_ratio is not None:
        targets.append(
            report.target(
                "segcat faster than delta-rs (median latency ratio)", delta_ratio, TARGET_DELTA_RATIO, "×"
            )
        )
    if conc := runs.get("segcat_concurrent"):
        what = f"aggregate throughput with {conc['writers']} writer processes"
        targets.append(report.target(what, conc["commits_per_s"], TARGET_CONCURRENT_CPS, "commits/s"))
    if conc := runs.get("segcat_concurrent_pipelined"):
        what = (
            f"aggregate throughput with {conc['writers']} writer processes, "
            f"{conc['details']['window']} commits in flight each"
        )
        targets.append(report.target(what, conc["commits_per_s"], TARGET_CONCURRENT_CPS, "commits/s"))
    if pipe := runs.get("segcat_pipelined"):
        what = f"one process, pipelined appends ({pipe['details']['window']} in flight), median of runs"
        targets.append(report.target(what, pipe["commits_per_s"], TARGET_PIPELINED_CPS, "commits/s"))
    results["targets"] = targets


BENCHMARK = runner.Benchmark(
    name="commit-latency",
    module="bench.commit_latency",
    description="Commit latency/throughput of segcat vs delta-rs and pyiceberg.",
    scenarios=SCENARIOS,
    run=run,
    render=commit_doc.render,
    details=commit_doc.details,
    evaluate=evaluate,
    options=options,
    wait_for_others_s=900.0,
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCHMARK))
