"""Many tables (issue 24): what a catalog of 1 / 1,000 / 10,000 tables costs — one run.

    .venv/bin/python -m bench.many_tables                       # full run, updates docs/BENCHMARKS.md
    .venv/bin/python -m bench.many_tables --tables 1,1000       # chosen sizes
    .venv/bin/python -m bench.many_tables --quick               # smoke run: small sizes, doc untouched
    .venv/bin/python -m bench.many_tables --render bench/results/many-tables-<time>.json

The benchmark starts a stack of its own (``many_tables_stack``: one KRaft node with a heap for
the largest size, Redis, a warehouse, on free ports; the shared stack is never asked for
anything) and stops it at the end. For each size N, in ascending order, on N fresh tables of
a namespace of their own (``many_<N>``):

1. ``create``: the N tables, with ``catalog.create_tables(names)`` where the catalog has it,
   else ``create_table`` from a pool of threads (the results say which);
2. ``heads``: Redis emptied, one ``segcat materializer`` started over the size's tables; the
   time from its start until every table's head is in Redis at its version (one pipelined
   ``HGET`` of the missing heads per poll), and the materializer's RSS then;
3. ``watch``: 100 active tables among the N (a fixed sample); a writer process commits one-
   segment appends round-robin over them, paced; a watcher process runs ``table.watch()`` on
   each; commit → notification = arrival − the record's broker timestamp. The materializer's
   RSS after the commits;
4. ``serve``: ``segcat serve`` over the same Redis; ``GET /api/tables?limit=100`` (the first
   page where the server pages, which the results record; the whole list where it does not),
   median of several after a warm-up;
5. ``failover``: the single materializer stopped; three (``--instance-id m1..m3``, one group)
   started and waited for until the group coordinator shows the N tables shared among them; a
   sample of the tables of one instance is committed to and its heads waited for (the steady
   case), then that instance is killed with SIGKILL and the same sample committed to at once:
   the time from the kill until every sampled table's head is at its new version, and until
   the coordinator shows the other two holding the N tables.

``create`` and ``heads`` always run (the others need them). Stack and processes:
``many_tables_stack``; writer and watchers: ``many_tables_load``; tables: ``many_tables_doc``.
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import KafkaException

from bench import many_tables_doc, runner
from bench.many_tables_load import WatcherProcess, WriterProcess, latencies_ms
from bench.many_tables_stack import (
    SESSION_TIMEOUT_MS,
    Services,
    broker_limits,
    kafka_heap,
    names,
    private_services,
    rss_bytes,
    table_of,
)
from bench.runner import Context, Results, counting, progress, summary
from segcat import Catalog
from segcat.catalog.errors import SegcatError

SCENARIOS = ("create", "heads", "watch", "serve", "failover")
FULL_SIZES = (1, 1_000, 10_000)
QUICK_SIZES = (1, 100)
CREATE_THREADS = 8
"""Threads of the ``create_table`` loop where ``create_tables`` is missing."""
SEED = 24


@dataclass(frozen=True)
class Params:
    sizes: tuple[int, ...]
    active_tables: int
    watch_commits: int
    watch_pause_s: float
    serve_requests: int
    page_limit: int
    failover_sample: int
    materializers: int
    session_timeout_ms: int

    @classmethod
    def of(cls, quick: bool, sizes: tuple[int, ...] | None) -> Params:
        return cls(
            sizes=sizes or (QUICK_SIZES if quick else FULL_SIZES),
            active_tables=20 if quick else 100,
            watch_commits=100 if quick else 1_000,
            watch_pause_s=0.02,
            serve_requests=3 if quick else 9,
            page_limit=100,
            failover_sample=20 if quick else 100,
            materializers=3,
            session_timeout_ms=SESSION_TIMEOUT_MS,
        )


def head_timeout_s(tables: int) -> float:
    """How long a materializer may take to publish ``tables`` heads before the scenario fails."""
    return 120.0 + tables * 0.12


# --------------------------------------------------------------------------- create


def create(catalog: Catalog, tables: list[str]) -> dict[str, Any]:
    """Create ``tables``: in batches where the catalog can, else a pool of ``create_table``."""
    batch = getattr(catalog, "create_tables", None)
    start = time.perf_counter()
    with counting(f"creating {len(tables):,} tables", len(tables)) as tick:
        if batch is not None:
            method = "create_tables"
            batch(tables, progress=_progress_of(tick))
        else:
            method = f"create_table × N ({CREATE_THREADS} threads)"

            def one(name: str) -> None:
                catalog.create_table(name).close()
                tick(1)

            with ThreadPoolExecutor(CREATE_THREADS) as pool:
                list(pool.map(one, tables))
    seconds = time.perf_counter() - start
    return {
        "method": method,
        "tables": len(tables),
        "seconds": round(seconds, 3),
        "per_table_ms": round(seconds * 1000 / len(tables), 3),
        "tables_per_s": round(len(tables) / seconds, 1),
    }


def _progress_of(tick: runner.Tick) -> runner.Tick:
    """``create_tables``' progress (the count done so far) as ``counting``'s tick (the count just done)."""
    done = 0

    def report(total: int) -> None:
        nonlocal done
        tick(total - done)
        done = total

    return report


# --------------------------------------------------------------------------- watch


def watch(svc: Services, writer: WriterProcess, active: list[str], p: Params) -> dict[str, Any]:
    """Paced commits over the active tables while a watcher process follows each of them."""
    watcher = WatcherProcess(svc.config, active)
    try:
        warmups = 0
        deadline = time.monotonic() + 120 + len(active)
        while watcher.tables_seen < len(active):  # a commit to each until every watcher has one
            if time.monotonic() > deadline:
                raise TimeoutError(f"watchers saw {watcher.tables_seen} of {len(active)} tables")
            watcher.check_alive()
            writer.commit(active)
            warmups += 1
            time.sleep(0.5)
        before = watcher.arrivals
        plan = [active[i % len(active)] for i in range(p.watch_commits)]
        progress(f"  watch: {len(plan):,} paced commits over {len(active)} tables")
        began = time.perf_counter()
        commits = writer.commit(plan, p.watch_pause_s)
        wall = time.perf_counter() - began
        settle(watcher, before + len(commits))
        arrivals = watcher.result()
    finally:
        watcher.kill()
    samples, missing = latencies_ms(commits, arrivals)
    return {
        "active_tables": len(active),
        "commits": len(commits),
        "warmup_rounds": warmups,
        "commits_per_s": round(len(commits) / wall, 1),
        "missing": missing,
        "arrival_minus_broker_ts": summary(samples) if samples else None,
        "samples_us": [round(v * 1000) for v in samples],
    }


def settle(watcher: WatcherProcess, expected: int, limit_s: float = 60.0, quiet_s: float = 1.0) -> None:
    """Wait until the watchers have at least ``expected`` notifications and no more came for
    ``quiet_s`` (a warm-up's late ones count too, so reaching the count alone proves nothing),
    for at most ``limit_s``: what is still missing then is reported as missed."""
    deadline = time.monotonic() + limit_s
    last, since = watcher.arrivals, time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now = watcher.arrivals
        if now != last:
            last, since = now, time.monotonic()
        elif now >= expected and time.monotonic() - since >= quiet_s:
            return


# --------------------------------------------------------------------------- serve


def serve(svc: Services, p: Params) -> dict[str, Any]:
    """``/api/tables``' first page (or whole list) timed, median of ``serve_requests``."""
    started_s = svc.start_server()
    try:
        path = f"/api/tables?limit={p.page_limit}"
        status, body, _ = svc.get_json(path)  # the warm-up, and what the server answers
        if status != 200:
            raise RuntimeError(f"GET {path} answered {status}: {str(body)[:200]}")
        paged = isinstance(body, dict) and "next" in body
        if not paged:
            path = "/api/tables"
        entries = body.get("tables", body) if isinstance(body, dict) else body
        samples = []
        for _ in range(p.serve_requests):
            status, body, elapsed = svc.get_json(path)
            if status != 200:
                raise RuntimeError(f"GET {path} answered {status}")
            samples.append(elapsed)
    finally:
        svc.stop_server()
    return {
        "path": path,
        "paged": paged,
        "entries": len(entries) if isinstance(entries, list) else None,
        "server_start_s": round(started_s, 2),
        "first_page": summary(samples),
    }


# --------------------------------------------------------------------------- failover


def failover(svc: Services, writer: WriterProcess, n: int, p: Params) -> dict[str, Any]:
    """Three materializers share the tables; one is killed; its tables' heads fresh again."""
    group = f"bench-many-{n}-{uuid.uuid4().hex[:6]}"
    members = {f"m{i + 1}" for i in range(p.materializers)}
    began = time.monotonic()
    for member in sorted(members):
        svc.start_materializer(member, group, n)
    owned = svc.wait_assigned(group, members, n, head_timeout_s(n))
    assigned_s = time.monotonic() - began
    victim = max(sorted(owned), key=lambda m: len(owned[m]))
    moved = sorted(table_of(t) for t in owned[victim])
    sample = random.Random(SEED).sample(moved, min(p.failover_sample, len(moved)))
    progress(
        f"  failover: {n:,} tables shared ({ {m: len(t) for m, t in sorted(owned.items())} }); "
        f"{victim} owns {len(moved):,}, sample {len(sample)}"
    )
    # the steady case: the victim serves its tables (and has recovered them) before the kill
    steady_t = time.monotonic()
    committed = {t: v for t, v, _, _ in writer.commit(sample)}
    steady = svc.wait_heads(committed, head_timeout_s(n))
    steady["since_commit_s"] = round(time.monotonic() - steady_t, 3)
    if steady["seconds"] is None:
        raise TimeoutError(f"{steady['missing']} heads of {victim}'s tables never arrived before the kill")
    proc = svc.materializers[victim]
    proc.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    proc.wait(10)
    survivors = members - {victim}
    with ThreadPoolExecutor(1) as pool:  # the coordinator watched while the heads are
        reassigned = pool.submit(_reassigned_after, svc, group, survivors, n, killed, head_timeout_s(n))
        committed = {t: v for t, v, _, _ in writer.commit(sample)}
        commits_s = time.monotonic() - killed
        fresh = svc.wait_heads(committed, head_timeout_s(n) + p.session_timeout_ms / 1000)
        reassigned_s = reassigned.result()
    fresh_s = None if fresh["seconds"] is None else round(commits_s + fresh["seconds"], 3)
    rss = {m: rss_bytes(svc.materializers[m].pid) for m in sorted(survivors)}
    svc.stop_materializers()
    return {
        "group": group,
        "assigned_s": round(assigned_s, 2),
        "owned": {m: len(t) for m, t in sorted(owned.items())},
        "victim": victim,
        "moved_tables": len(moved),
        "sample": len(sample),
        "steady": steady,
        "commits_after_kill_s": round(commits_s, 3),
        "kill_to_fresh_s": fresh_s,
        "fresh": fresh,
        "kill_to_reassigned_s": reassigned_s,
        "survivors_rss_bytes": rss,
    }


def _reassigned_after(
    svc: Services, group: str, survivors: set[str], n: int, killed: float, timeout_s: float
) -> float | None:
    """Seconds from ``killed`` until the coordinator shows ``survivors`` holding all ``n`` tables."""
    try:
        svc.wait_assigned(group, survivors, n, timeout_s)
    except TimeoutError:
        return None
    return round(time.monotonic() - killed, 3)


# --------------------------------------------------------------------------- one size


def attempt(name: str, measure: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """One scenario's figures, or what stopped it: a scenario that fails or times out is
    recorded as such (the doc shows "failed") and the run goes on with the next one."""
    try:
        return measure()
    except (TimeoutError, RuntimeError, SegcatError, KafkaException) as exc:
        progress(f"  {name} FAILED: {type(exc).__name__}: {exc}")
        return {"error": f"{type(exc).__name__}: {exc}"}


def heads(svc: Services, tables: list[str]) -> dict[str, Any]:
    """Redis emptied, one materializer started: until every table's head is in Redis."""
    svc.flush_redis()
    group = f"bench-many-{len(tables)}-single-{uuid.uuid4().hex[:6]}"
    started = time.monotonic()
    proc = svc.start_materializer("m0", group, len(tables))
    out = svc.wait_heads(dict.fromkeys(tables, 0), head_timeout_s(len(tables)))
    out["since_start_s"] = None if out["seconds"] is None else round(time.monotonic() - started, 3)
    out["rss_bytes"] = rss_bytes(proc.pid)
    out["pid"] = proc.pid
    if out["seconds"] is None:
        out["error"] = (
            f"{out['missing']:,} of {len(tables):,} heads not in Redis in {head_timeout_s(len(tables)):.0f} s"
        )
    return out


def one_size(svc: Services, n: int, p: Params, only: tuple[str, ...]) -> dict[str, Any]:
    tables = names(n)
    out: dict[str, Any] = {"tables": n}
    progress(f"{n:,} tables")
    with Catalog(svc.config) as catalog:
        out["create"] = create(catalog, tables)
    out["broker"] = svc.broker_costs()
    writer = WriterProcess(svc.config)
    try:
        out["heads"] = attempt("heads", lambda: heads(svc, tables))
        progress(f"  heads: {out['heads']}")
        if "error" in out["heads"]:
            return out  # the rest measures a materializer that has every table
        pid = out["heads"].pop("pid")
        if "watch" in only:
            active = sorted(random.Random(SEED).sample(tables, min(p.active_tables, n)))
            out["watch"] = attempt("watch", lambda: watch(svc, writer, active, p))
            out["watch"]["rss_bytes_after"] = rss_bytes(pid)
            progress(f"  watch: {out['watch'].get('arrival_minus_broker_ts')}")
        if "serve" in only:
            out["serve"] = attempt("serve", lambda: serve(svc, p))
            progress(f"  serve: {out['serve'].get('first_page')}")
        svc.stop_materializers()
        if "failover" in only and n >= p.materializers:
            out["failover"] = attempt("failover", lambda: failover(svc, writer, n, p))
            progress(f"  failover: kill → fresh {out['failover'].get('kill_to_fresh_s')} s")
    finally:
        writer.close()
        svc.stop_materializers()
    return out


def run(ctx: Context) -> Results:
    p = Params.of(ctx.quick, ctx.args.tables)
    begun = time.monotonic()
    sizes: dict[str, Any] = {}
    timings: dict[str, float] = {}
    limits = broker_limits()
    with private_services(max(p.sizes), ctx.args.keep) as svc:
        timings["stack_up_s"] = round(time.monotonic() - begun, 1)
        for n in p.sizes:
            start = time.monotonic()
            sizes[str(n)] = one_size(svc, n, p, ctx.only)
            timings[f"size_{n}_s"] = round(time.monotonic() - start, 1)
    timings["total_s"] = round(time.monotonic() - begun, 1)
    return {
        "params": asdict(p),
        "broker": {"kafka_heap": kafka_heap(max(p.sizes)), "nodes": 1, **limits},
        "timings": timings,
        "sizes": sizes,
    }


def _sizes(text: str) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(v.replace("_", "")) for v in text.split(",") if v.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected sizes like 1,1000,10000, not {text!r}") from None
    if not values or values[0] < 1 or values[-1] > 100_000:
        raise argparse.ArgumentTypeError("sizes must be between 1 and 100,000 tables")
    return values


def _listed(values: tuple[int, ...]) -> str:
    return ",".join(map(str, values))


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tables",
        type=_sizes,
        default=None,
        metavar="N,N,...",
        help=f"catalog sizes (default {_listed(FULL_SIZES)}; --quick {_listed(QUICK_SIZES)})",
    )


BENCHMARK = runner.Benchmark(
    name="many-tables",
    module="bench.many_tables",
    description="Create, materialize, watch, serve and fail over at 1 / 1,000 / 10,000 tables.",
    scenarios=SCENARIOS,
    run=run,
    render=many_tables_doc.render,
    details=many_tables_doc.details,
    summary=many_tables_doc.summary_text,
    evaluate=many_tables_doc.evaluate,
    options=options,
    wait_for_others_s=600.0,
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCHMARK))
