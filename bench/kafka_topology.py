"""Commit latency and throughput on a 3-broker KRaft cluster next to a single broker, and what a
broker kill costs the writers — one run.

    .venv/bin/python -m bench.kafka_topology            # full run, updates docs/BENCHMARKS.md
    .venv/bin/python -m bench.kafka_topology --quick    # smoke run: small counts, doc untouched
    .venv/bin/python -m bench.kafka_topology --render bench/results/kafka-topology-<time>.json

The benchmark starts two Kafka stacks of its own (``segcat.local_stack``, not secure), each in a
temporary home with free ports and the Kafka jars linked from the shared stack's cache
(``<repo>/.segcat/kafka-<version>``), and stops both at the end whatever happens:

- ``single``: one KRaft node (broker + controller), tables with replication 1;
- ``three``: three KRaft nodes (broker + controller each), tables with replication 3, min ISR 2,
  no unclean leader election.

Writers are table handles (``Table.append``: idempotent producer, acks=all). They never use Redis; the
client config names the shared dev stack's (``runner.ensure_stack`` keeps it up). Scenarios
(full / quick):

1. ``latency``: per topology, one writer, 1,000 / 100 sequential one-segment appends on a fresh
   table (``commit_segcat.run_sequential``: one untimed commit first);
2. ``throughput``: per topology, 8 writer processes (spawn) × 250 / 30 appends to one fresh
   table, released by a barrier (``commit_segcat.run_concurrent``); aggregate commits/s from the
   release to the last writer's last commit. Scenarios 1 and 2 run 3 / 1 rounds, the topologies
   alternating which goes first, after 300 / 50 untimed warm-up commits per stack (the brokers'
   JIT); figures are the medians of the rounds and percentiles of the pooled samples;
3. ``failover``: on the 3-broker stack (the single one is stopped by then), 4 writer processes
   commit for 30 / 15 s (each goes on, for at most a minute, until a commit it started after the
   kill was acknowledged); at 10 / 4 s the node leading the table's partition is killed with
   SIGKILL (pid from its pid file). Reported: the latency spike around the kill, the time until
   the first commit *started after the kill* was acknowledged, the steady median before,
   commits acknowledged / unknown, and when the metadata showed a new leader. The node is then
   started again (``local_stack.up``) and the ISR waited for; full runs do this 3 times (each on a
   fresh table, killing whichever node leads then) and report the medians;
4. ``follower-kill``: the same once with a follower of the partition killed instead of its
   leader (how long acks=all writes wait for the dead replica to leave the ISR).

Private stacks: ``kafka_topology_stacks``; the kills: ``kafka_topology_kills``; tables:
``kafka_topology_doc``.
"""

from __future__ import annotations

import datetime as dt
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import kafka_topology_doc, runner
from bench.commit_runs import Run
from bench.commit_segcat import run_concurrent, run_sequential
from bench.kafka_topology_kills import failover_run, failover_summary
from bench.kafka_topology_stacks import TOPOLOGIES, PrivateStack, StackMeter, private_stacks, stop
from bench.report import get
from bench.runner import Context, Results, progress, summary
from segcat.catalog.protocol.names import table_name

SCENARIOS = ("latency", "throughput", "failover", "follower-kill")
LATENCY_KEYS = ("median_ms", "p90_ms", "p99_ms", "max_ms")


@dataclass(frozen=True)
class Params:
    rounds: int
    warmup_commits: int
    sequential_commits: int
    writers: int
    commits_per_writer: int
    failover_writers: int
    failover_seconds: float
    kill_at_s: float
    failovers: int
    follower_kills: int

    @classmethod
    def of(cls, quick: bool) -> Params:
        if quick:
            return cls(1, 50, 100, 8, 30, 4, 15.0, 4.0, 1, 1)
        return cls(3, 300, 1000, 8, 250, 4, 30.0, 10.0, 3, 1)


# --------------------------------------------------------------------------- latency and throughput


def _latency_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians of the runs' figures and the percentiles of every sample pooled."""
    pooled = [us / 1000 for r in runs for us in r["latencies_us"]]
    return {
        "runs": len(runs),
        "median_of_runs": {
            k: round(statistics.median(r["latency"][k] for r in runs), 4) for k in LATENCY_KEYS
        },
        "pooled": summary(pooled) if pooled else None,
        "commits_per_s_runs": [r["commits_per_s"] for r in runs],
        "commits_per_s_median": round(statistics.median(r["commits_per_s"] for r in runs), 2),
        "loadavg_1min_runs": [(r["loadavg_before"] or [None])[0] for r in runs],
    }


def measure_rounds(
    stacks: dict[str, PrivateStack], p: Params, only: tuple[str, ...], run_id: str
) -> dict[str, Any]:
    rounds: list[dict[str, Any]] = []
    warmup: dict[str, Any] = {}
    keys = list(stacks)
    for key in keys:
        s = stacks[key]
        table = f"bench.topology_{run_id}_{key}_warmup"
        with runner.counting(
            f"{key}: {p.warmup_commits:,} warm-up commits (not reported)", p.warmup_commits
        ) as t:
            warm = run_sequential(s.config, table, p.warmup_commits, tick=t)
        warmup[key] = {
            "commits": warm.commits,
            "median_ms": summary([ns / 1e6 for ns in warm.latencies_ns])["median_ms"],
        }
    for index in range(p.rounds):
        order = keys if index % 2 == 0 else keys[::-1]
        entry: dict[str, Any] = {"round": index + 1, "order": order}
        for key in order:
            s = stacks[key]
            meter = StackMeter(s.config, s.node_pids())
            out: dict[str, Any] = {}
            if "latency" in only:
                table = f"bench.topology_{run_id}_{key}_seq{index + 1}"
                what = f"round {index + 1}/{p.rounds}, {key}: {p.sequential_commits:,} sequential appends"
                with runner.counting(what, p.sequential_commits) as t:
                    run = run_sequential(s.config, table, p.sequential_commits, tick=t, meter=meter)
                out["latency"] = _with_partition(run, s, table)
            if "throughput" in only:
                table = f"bench.topology_{run_id}_{key}_conc{index + 1}"
                total = p.writers * p.commits_per_writer
                what = (
                    f"round {index + 1}/{p.rounds}, {key}: {p.writers} writer processes × "
                    f"{p.commits_per_writer:,} appends"
                )
                with runner.counting(what, total) as t:
                    run = run_concurrent(
                        s.config, table, p.writers, p.commits_per_writer, tick=t, meter=meter
                    )
                out["throughput"] = _with_partition(run, s, table)
            entry[key] = out
            figures = [
                f"{kind} median {r['latency']['median_ms']:.2f} ms, p99 {r['latency']['p99_ms']:.2f} ms, "
                f"{r['commits_per_s']:,.0f} commits/s"
                for kind, r in out.items()
            ]
            progress(f"  {key}: " + "; ".join(figures))
        rounds.append(entry)

    topologies: dict[str, Any] = {}
    for key in keys:
        s = stacks[key]
        topologies[key] = {
            "brokers": s.settings.brokers,
            "replication_factor": s.config.replication_factor,
            "min_insync_replicas": s.config.min_insync_replicas,
            "stack_start_s": s.started_s,
            **{
                kind: _latency_summary([r[key][kind] for r in rounds])
                for kind in ("latency", "throughput")
                if kind in only
            },
        }
    return {"warmup": warmup, "rounds": rounds, "topologies": topologies}


def _with_partition(run: Run, s: PrivateStack, table: str) -> dict[str, Any]:
    out = run.to_json()
    leader, replicas, isr = s.partition(table_name(table).topic)
    out["details"]["partition"] = {"leader": leader, "replicas": replicas, "isr": isr}
    return out


def ratios(topologies: dict[str, Any]) -> dict[str, float | None]:
    """Three brokers over one, for the headline figures."""

    def ratio(*path: str) -> float | None:
        a = get(topologies, "three", *path)
        b = get(topologies, "single", *path)
        return None if a is None or not b else round(a / b, 3)

    return {
        "latency_median": ratio("latency", "median_of_runs", "median_ms"),
        "latency_p99": ratio("latency", "median_of_runs", "p99_ms"),
        "latency_pooled_p99": ratio("latency", "pooled", "p99_ms"),
        "throughput_commits_per_s": ratio("throughput", "commits_per_s_median"),
        "throughput_latency_median": ratio("throughput", "median_of_runs", "median_ms"),
    }


# --------------------------------------------------------------------------- the run

KAFKA_DEFAULTS = {
    "broker.session.timeout.ms": 9000,
    "broker.heartbeat.interval.ms": 2000,
    "replica.lag.time.max.ms": 30000,
    "controller.quorum.election.timeout.ms": 1000,
    "controller.quorum.fetch.timeout.ms": 2000,
}
"""The Kafka defaults the failover figures depend on; the stacks set none of them (checked in
Kafka's source: KRaftConfigs, ReplicationConfigs, QuorumConfig)."""


def run(ctx: Context) -> Results:
    p = Params.of(ctx.quick)
    run_id = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S") + "_" + uuid.uuid4().hex[:6]
    redis_url = ctx.config.redis_url
    workdir = Path(tempfile.mkdtemp(prefix="segcat-topology-work-"))
    measured: dict[str, Any] = {}
    failovers: list[dict[str, Any]] = []
    follower: list[dict[str, Any]] = []
    timings: dict[str, float] = {}
    begun = time.monotonic()
    wanted_rounds = bool({"latency", "throughput"} & set(ctx.only))
    keys = list(TOPOLOGIES) if wanted_rounds else ["three"]
    try:
        with private_stacks(keys, redis_url, ctx.args.keep) as stacks:
            timings["stacks_up_s"] = round(time.monotonic() - begun, 1)
            if wanted_rounds:
                start = time.monotonic()
                measured = measure_rounds(stacks, p, ctx.only, run_id)
                timings["rounds_s"] = round(time.monotonic() - start, 1)
                if "single" in stacks and {"failover", "follower-kill"} & set(ctx.only):
                    stop(stacks["single"].settings)  # idle JVMs off the two cores for the kills
            three = stacks["three"]
            start = time.monotonic()
            for i in range(p.failovers if "failover" in ctx.only else 0):
                table = f"bench.topology_{run_id}_failover{i + 1}"
                label = f"leader kill {i + 1}/{p.failovers}"
                failovers.append(failover_run(three, p, table, "leader", workdir, label))
            for i in range(p.follower_kills if "follower-kill" in ctx.only else 0):
                table = f"bench.topology_{run_id}_follower{i + 1}"
                label = f"follower kill {i + 1}/{p.follower_kills}"
                follower.append(failover_run(three, p, table, "follower", workdir, label))
            timings["kills_s"] = round(time.monotonic() - start, 1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    timings["total_s"] = round(time.monotonic() - begun, 1)
    out: dict[str, Any] = {
        "params": asdict(p),
        "run_id": run_id,
        "kafka_defaults": KAFKA_DEFAULTS,
        "timings": timings,
        **measured,
    }
    if "topologies" in measured:
        out["ratios"] = ratios(measured["topologies"])
    if failovers:
        out["failover"] = {"summary": failover_summary(failovers), "runs": failovers}
    if follower:
        out["follower_kill"] = {"summary": failover_summary(follower), "runs": follower}
    return out


BENCHMARK = runner.Benchmark(
    name="kafka-topology",
    module="bench.kafka_topology",
    description="Commit latency/throughput on 3 KRaft brokers vs one, and a leader kill's cost to writers.",
    scenarios=SCENARIOS,
    run=run,
    render=kafka_topology_doc.render,
    details=kafka_topology_doc.details,
    wait_for_others_s=600.0,
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCHMARK))
