"""HTTP API and SSE (``segcat serve``): commit → SSE event latency with 1 and with 1,000 clients on
one server process, and a 50,000-segment snapshot as JSON vs Arrow — one run.

    .venv/bin/python -m bench.serve            # full run, updates docs/BENCHMARKS.md
    .venv/bin/python -m bench.serve --quick    # smoke run: 1 + 50 clients, 5,000 segments, doc untouched
    .venv/bin/python -m bench.serve --only sse1000 --repeats 1 --no-doc   # one scenario
    .venv/bin/python -m bench.serve --render bench/results/serve-<time>.json

Every part is a real process of its own, as in production: a private ``redis-server`` (the
dev Redis holds other work's tables), ``segcat serve`` (one uvicorn process), per scenario a
``segcat materializer`` whose ``--pattern`` matches that scenario's table alone (it publishes
the version notifications the server relays), and for the SSE scenarios a client process
holding every SSE connection and a Redis subscriber process. The benchmark process commits
(``Table.append``) and fetches snapshots. Kafka is the local stack's.

1. ``sse1`` / ``sse1000``: N clients (1; 1,000) each open ``GET /api/tables/<t>/events`` on a
   connection of its own (asyncio on uvloop in one client process); after warm-up commits
   every client has seen, one-segment appends on a fixed schedule (1 client: 200 commits 50 ms
   apart; 1,000: 100 commits 200 ms apart), 3 passes pooled. Latency of a (client, version)
   pair = when the client process read the event's bytes off its socket − just before
   ``append()`` was called (``time.time_ns()`` in both processes: one machine, one clock).
   Also kept: − the return of ``append()``; and, from the Redis subscriber on the table's
   channel, where the time goes: commit → the materializer's notification → the SSE client.
2. ``snapshot``: a table of 50,000 live segments (10 appends of 5,000), then ``GET
   /api/tables/<t>/snapshot`` as one JSON page (``limit=50000``), the default JSON page
   (1,000), all 50,000 as JSON pages of 10,000 (following ``next``), and the whole snapshot with
   ``Accept: application/vnd.apache.arrow.stream`` (decoded with pyarrow); medians of 5
   interleaved rounds after a warm-up round, response sizes; the route's steps redone
   in-process to show where its time goes.
3. ``profile``, ``gc``: the 1,000-client scenario once more on a server restarted through a
   launcher: with a cProfile window, and with a ``gc.callbacks`` hook timing collections.
4. ``tick``: the materializer's once-a-second tick (one watermark query per table) by the
   number of tables it follows, and what it does to commit → notification.

The processes: ``serve_services``; the SSE client and subscriber processes: ``serve_clients``;
the scenarios: ``serve_sse``, ``serve_snapshot``, ``serve_tick``; tables: ``serve_doc``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench import report, runner, serve_doc
from bench.report import get
from bench.runner import Context, Results, progress
from bench.serve_services import Services, busy_processes, wait_for_quiet
from bench.serve_snapshot import snapshot_scenario
from bench.serve_sse import gc_scenario, profile_scenario, sse_scenario
from bench.serve_tick import tick_scenario
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol.names import table_name

SCENARIOS = ("sse1", "sse1000", "snapshot", "profile", "gc", "tick")
TARGET_P99_1_MS = 20.0
TARGET_P99_1000_MS = 250.0


@dataclass(frozen=True)
class Params:
    small_clients: int
    small_commits: int
    small_pause_s: float
    big_clients: int
    big_commits: int
    big_pause_s: float
    snapshot_segments: int
    per_commit: int
    snapshot_reps: int
    json_page: int
    client: str
    tick_tables: tuple[int, ...]
    tick_commits: int
    repeats: int

    @classmethod
    def of(cls, quick: bool, args: argparse.Namespace) -> Params:
        p = (
            cls(1, 40, 0.05, 50, 20, 0.2, 5_000, 1_000, 3, 1_000, "raw", (1, 5), 40, 1)
            if quick
            else cls(1, 200, 0.05, 1_000, 100, 0.2, 50_000, 5_000, 5, 10_000, "raw", (1, 5, 20), 200, 3)
        )
        changes: dict[str, Any] = {}
        if args.clients is not None:
            changes["big_clients"] = args.clients
        if args.client is not None:
            changes["client"] = args.client
        if args.segments is not None:
            changes["snapshot_segments"] = args.segments
        if args.repeats is not None:
            changes["repeats"] = args.repeats
        return replace(p, **changes)


def options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--clients", type=int, help="SSE clients of the big scenario (default 1,000; quick 50)")
    add(
        "--client",
        choices=("raw", "httpx"),
        help="SSE client: raw asyncio protocol (default: cheapest, times bytes off the socket) or httpx",
    )
    add("--segments", type=int, help="live segments of the snapshot table (default 50,000)")
    add("--repeats", type=int, help="passes of each reference SSE scenario, pooled (default 3; quick 1)")
    add(
        "--quiet-load",
        type=float,
        default=None,
        help="before measuring, wait (at most --quiet-wait s) until the 1-minute load average is below this",
    )
    add("--quiet-wait", type=float, default=1800.0, help="longest wait for --quiet-load (s; default 1,800)")


def source_digest() -> str:
    digest = hashlib.sha256()
    for folder in ("catalog", "producers", "materializer", "server"):
        for path in sorted((runner.REPO / folder).rglob("*.py")):
            digest.update(str(path.relative_to(runner.REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def run(ctx: Context) -> Results:
    p = Params.of(ctx.quick, ctx.args)
    quiet = wait_for_quiet(ctx.args.quiet_load, ctx.args.quiet_wait)
    ns = f"benchserve_{uuid.uuid4().hex[:8]}"
    workdir = Path(tempfile.mkdtemp(prefix="segcat-bench-serve-"))
    digest = source_digest()
    services = Services(ctx.config, workdir, ns)
    tables = {
        "sse1": f"{ns}.sse{p.small_clients}",
        "sse1000": f"{ns}.sse{p.big_clients}",
        "snapshot": f"{ns}.snapshot",
        "profile": f"{ns}.profiled{p.big_clients}",
        "gc": f"{ns}.gc{p.big_clients}",
    }
    out: Results = {"params": asdict(p), "namespace": ns, "packages": _packages(), "quiet": quiet}
    out["other_work_at_start"] = busy_processes(exclude=(os.getpid(),))
    created: list[str] = []
    try:
        from segcat import Catalog

        services.start_redis()
        catalog = Catalog(services.config)
        for scenario in ctx.only:
            if scenario in tables:
                catalog.create_table(tables[scenario])
                created.append(tables[scenario])
        out["server_start_s"] = round(services.start_server(), 2)
        progress(f"segcat serve at {services.url} (up in {out['server_start_s']:.1f} s)")
        for scenario in ctx.only:
            started, load = time.perf_counter(), runner.loadavg()
            if scenario != "tick":
                services.start_materializer(tables[scenario])
            if scenario == "tick":
                out[scenario] = tick_scenario(services, ns, p)
            elif scenario == "snapshot":
                out[scenario] = snapshot_scenario(services, tables[scenario], p)
            elif scenario == "profile":
                out[scenario] = profile_scenario(services, tables[scenario], p, workdir)
            elif scenario == "gc":
                out[scenario] = gc_scenario(services, tables[scenario], p, workdir)
            else:
                small = scenario == "sse1"
                out[scenario] = sse_scenario(
                    services,
                    tables[scenario],
                    p.small_clients if small else p.big_clients,
                    p.small_commits if small else p.big_commits,
                    p.small_pause_s if small else p.big_pause_s,
                    p.client,
                    repeats=p.repeats,
                )
            services.check_alive()
            services.stop_materializer()
            out[scenario]["server_rss_mb"] = _rss_mb(services.server.pid if services.server else None)
            out[scenario]["scenario_s"] = round(time.perf_counter() - started, 1)
            out[scenario]["loadavg"] = {"start": load, "end": runner.loadavg()}
            progress(f"{scenario} done in {out[scenario]['scenario_s']:.0f} s")
        mine = tuple(pid for pid in services.pids(services.config).values() if pid is not None)
        out["other_work_at_end"] = busy_processes(
            exclude=(*mine, services.redis.proc.pid if services.redis.proc else 0)
        )
        after = source_digest()
        out["source_digest"] = {"start": digest, "end": after, "changed": after != digest}
        if after != digest:
            progress(f"WARNING: segcat's source changed during the run ({digest} → {after})")
    finally:
        services.stop()
        out["server_log"] = log_errors(workdir / "serve.log")
        if ctx.args.keep:
            progress(f"kept tables {created} and files under {workdir}")
        else:
            for name in [*created, *services.extra_tables]:
                with contextlib.suppress(Exception):
                    TopicAdmin(services.config).delete(table_name(name))
            shutil.rmtree(workdir, ignore_errors=True)
    return out


def log_errors(path: Path) -> dict[str, Any]:
    """ERROR lines in the server's JSON log, counted by message."""
    messages: dict[str, int] = {}
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError, AttributeError):
                record = json.loads(line)
                if record.get("level") in ("error", "critical"):
                    text = f"{record.get('logger')}: {_last_line(str(record.get('msg')))}"
                    if record.get("exc"):
                        text += f" ({_last_line(str(record['exc']))})"
                    messages[text] = messages.get(text, 0) + 1
    return {"error_lines": sum(messages.values()), "messages": messages}


def _last_line(text: str) -> str:
    """A traceback's last line (the exception), or a message's first."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    found = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    return found if len(found) <= 160 else found[:157] + "…"


def _rss_mb(pid: int | None) -> dict[str, float] | None:
    if pid is None:
        return None
    found = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                found[line.split(":")[0]] = round(int(line.split()[1]) / 1024, 1)
    return found


def _packages() -> dict[str, str]:
    names = ("fastapi", "starlette", "uvicorn", "uvloop", "httptools", "sse-starlette", "httpx", "redis")
    return {name: runner.package_version(name) for name in names}


def evaluate(results: Results) -> None:
    big = get(results, "params", "big_clients") or 1000
    results["targets"] = [
        report.target(
            "commit → SSE event p99, 1 client",
            get(results, "sse1", "commit_to_event", "p99_ms"),
            TARGET_P99_1_MS,
            "ms",
        ),
        report.target(
            f"commit → SSE event p99, {big:,} clients",
            get(results, "sse1000", "commit_to_event", "p99_ms"),
            TARGET_P99_1000_MS,
            "ms",
        ),
    ]


BENCHMARK = runner.Benchmark(
    name="serve",
    module="bench.serve",
    description="segcat serve: commit → SSE event with 1 and 1,000 clients, snapshot JSON vs Arrow.",
    scenarios=SCENARIOS,
    run=run,
    render=serve_doc.render,
    details=serve_doc.details,
    evaluate=evaluate,
    options=options,
    wait_for_others_s=600.0,
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCHMARK))
