"""Commit latency and throughput on a 3-broker KRaft cluster next to a single broker, and what a
broker kill costs the writers — one run.

    .venv/bin/python -m bench.kafka_topology            # full run (~8 min), updates docs/BENCHMARKS.md
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

Words for the doc: ``kafka_topology_doc``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import multiprocessing as mp
import os
import random
import re
import shutil
import signal
import socket
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, replace
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from bench import kafka_topology_doc, runner
from bench.commit_runs import CpuMeter, Run
from bench.commit_segcat import create_table, make_segment, run_concurrent, run_sequential
from bench.runner import Context, Results, loadavg, progress, summary
from segcat import load_catalog
from segcat import local_stack as stack
from segcat.catalog.config import Config
from segcat.catalog.errors import CommitConflict, SegcatError, ServiceUnavailable
from segcat.catalog.protocol.model import Operation
from segcat.catalog.protocol.names import table_name
from segcat.local_stack import kafka as stack_kafka
from segcat.local_stack import process
from segcat.local_stack.layout import Layout
from segcat.local_stack.settings import NODE_PORT_STRIDE, StackSettings

SCENARIOS = ("latency", "throughput", "failover", "follower-kill")
TOPOLOGIES = {"single": 1, "three": 3}
"""Topology key → number of KRaft nodes."""
LATENCY_KEYS = ("median_ms", "p90_ms", "p99_ms", "max_ms")
OVERTIME_S = 60.0
"""How long a failover writer may go on past its time to see a commit started after the kill acknowledged."""
SPIKE_WINDOW_S = (2.0, 20.0)
"""Commits started this long before / after a kill count for its latency spike."""
_quiet = logging.getLogger("bench.kafka_topology.librdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


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


# --------------------------------------------------------------------------- private stacks
# (the same approach as tests/private_stack.py; benches do not import from tests/)


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_base_port(brokers: int, taken: set[int]) -> int:
    """A Kafka base port whose derived ports (every node's client, controller and inter-broker
    port, the private Redis at +50..+52 and S3 at +60) are free and not in ``taken``'s blocks."""
    rng = random.Random()
    # Below the kernel's range for outgoing connections: a client retrying a killed broker could
    # otherwise get the broker's port as its own source port and keep the broker from coming back.
    highest_base = max(process.ephemeral_port_range()[0] - 100, 10100)
    for _ in range(200):
        base = rng.randrange(10000, highest_base, 100)
        if base in taken:
            continue
        nodes = [base + off + NODE_PORT_STRIDE * n for n in range(brokers) for off in (0, 1, 2)]
        if all(_port_free(p) for p in [*nodes, base + 50, base + 51, base + 52, base + 60]):
            return base
    raise RuntimeError("no free ports for a private Kafka stack")


def shared_kafka_dist(settings: StackSettings) -> Path:
    """The shared stack's jar cache: ``SEGCAT_HOME``'s (usually ``<repo>/.segcat``)."""
    for home in (StackSettings.load().home, runner.REPO / ".segcat"):
        dist = Layout.of(replace(settings, home=home)).kafka_dist
        if dist.is_dir():
            return dist
    return Layout.of(replace(settings, home=runner.REPO / ".segcat")).kafka_dist


def private_settings(home: Path, brokers: int, taken: set[int]) -> StackSettings:
    base = free_base_port(brokers, taken)
    taken.add(base)
    settings = replace(
        StackSettings.load(),
        home=home,
        kafka_port=base,
        kafka_controller_port=base + 1,
        redis_port=base + 50,
        s3_port=base + 60,
        start_timeout_s=180.0,
        brokers=brokers,
        secure=False,
        s3=False,
        redis_cluster=False,
    )
    layout = Layout.of(settings)
    layout.home.mkdir(parents=True, exist_ok=True)
    shared = shared_kafka_dist(settings)
    if shared.is_dir() and not layout.kafka_dist.exists():
        layout.kafka_dist.symlink_to(shared, target_is_directory=True)
    return settings


@dataclass
class PrivateStack:
    """One running private stack and a client config for it."""

    key: str
    settings: StackSettings
    config: Config
    started_s: float
    _admin: AdminClient | None = None

    @property
    def layout(self) -> Layout:
        return Layout.of(self.settings)

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            conf: dict[str, Any] = {
                **stack_kafka.stack_client_config(self.layout, self.settings),
                "logger": _quiet,
                "log_level": 2,
            }
            self._admin = AdminClient(conf)
        return self._admin

    def partition(self, topic: str, timeout_s: float = 10.0) -> tuple[int, list[int], list[int]]:
        """(leader node id, replicas, in-sync replicas) of the table's partition."""
        part = self.admin.list_topics(topic=topic, timeout=timeout_s).topics[topic].partitions[0]
        return int(part.leader), sorted(int(n) for n in part.replicas), sorted(int(n) for n in part.isrs)

    def node_record(self, node_id: int) -> process.PidRecord:
        """The pid record of node ``node_id`` (1-based), verified as our running process."""
        name = stack_kafka.node_name(self.settings, node_id - 1)
        record = process.read_pid_file(self.layout.pid_file(name))
        if record is None or not process.is_ours(record):
            raise RuntimeError(f"{name} of the {self.key} stack is not running")
        return record

    def node_pids(self) -> list[int]:
        return [self.node_record(n + 1).pid for n in range(self.settings.brokers)]

    def wait_for_isr(self, topic: str, size: int, timeout_s: float = 180.0) -> float:
        """Seconds until the partition's ISR has ``size`` replicas."""
        start = time.monotonic()
        while True:
            with contextlib.suppress(KafkaException, KeyError, IndexError):
                if len(self.partition(topic, 5.0)[2]) >= size:
                    return time.monotonic() - start
            if time.monotonic() - start > timeout_s:
                raise RuntimeError(f"the ISR of {topic} did not reach {size} within {timeout_s:.0f} s")
            time.sleep(0.25)


def client_config(settings: StackSettings, redis_url: str) -> Config:
    env = {
        **stack.client_environment(settings),
        "SEGCAT_HOME": str(settings.home / "client"),
        "SEGCAT_WAREHOUSE": str(settings.home / "warehouse"),
        "SEGCAT_REQUEST_TIMEOUT_S": "30",
        "SEGCAT_REDIS_URL": redis_url,
    }
    return Config.load(env=env)


@contextlib.contextmanager
def private_stacks(keys: list[str], redis_url: str, keep: bool) -> Iterator[dict[str, PrivateStack]]:
    """Start a private stack per key (in order); stop every one of them, and remove their
    homes (unless ``keep``), however the block ends."""
    root = Path(tempfile.mkdtemp(prefix="segcat-topology-"))
    taken: set[int] = set()
    settings = {key: private_settings(root / key, TOPOLOGIES[key], taken) for key in keys}
    stacks: dict[str, PrivateStack] = {}
    try:
        for key in keys:
            s = settings[key]
            progress(f"starting the private {key} stack ({s.brokers} node(s), {s.bootstrap_servers})")
            start = time.monotonic()
            stack.up(s)
            stacks[key] = PrivateStack(
                key, s, client_config(s, redis_url), round(time.monotonic() - start, 1)
            )
            progress(f"  {key} stack up in {stacks[key].started_s} s")
        yield stacks
    finally:
        for key in keys:
            stop(settings[key])
        if keep:
            progress(f"kept the private stacks' homes (logs, data) under {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def stop(settings: StackSettings) -> None:
    try:
        stopped = stack.down(settings, timeout_s=15.0)
    except SegcatError as exc:  # never mask the run's own error; say what is left
        progress(f"WARNING: could not stop the private stack in {settings.home}: {exc}")
        return
    if stopped:
        progress(f"stopped the private stack in {settings.home.name}: {', '.join(stopped)}")


# --------------------------------------------------------------------------- CPU


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _process_ticks(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime + stime


class StackMeter(CpuMeter):
    """``CpuMeter`` (machine, writer CPU) plus the CPU of every node of a private stack."""

    def __init__(self, config: Config, pids: list[int]) -> None:
        super().__init__(config)
        self._pids = pids
        self._nodes0: list[int | None] = []

    def start(self) -> None:
        super().start()
        self._nodes0 = [_process_ticks(p) for p in self._pids]

    def stop(self, commits: int, client_cpu_ns: int | None = None) -> dict[str, Any]:
        out = super().stop(commits, client_cpu_ns)
        now = [_process_ticks(p) for p in self._pids]
        if commits > 0 and self._nodes0 and all(v is not None for v in [*now, *self._nodes0]):
            used = [b - a for a, b in zip(self._nodes0, now, strict=True) if a is not None and b is not None]
            out["brokers_cpu_ms_per_commit"] = round(sum(used) / _TICKS * 1000 / commits, 3)
            out["per_node_cpu_ms_per_commit"] = [round(u / _TICKS * 1000 / commits, 3) for u in used]
        return out


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
        a = _dig(topologies, "three", *path)
        b = _dig(topologies, "single", *path)
        return None if a is None or not b else round(a / b, 3)

    return {
        "latency_median": ratio("latency", "median_of_runs", "median_ms"),
        "latency_p99": ratio("latency", "median_of_runs", "p99_ms"),
        "latency_pooled_p99": ratio("latency", "pooled", "p99_ms"),
        "throughput_commits_per_s": ratio("throughput", "commits_per_s_median"),
        "throughput_latency_median": ratio("throughput", "median_of_runs", "median_ms"),
    }


def _dig(node: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


# --------------------------------------------------------------------------- failover


def _failover_worker(
    config: Config,
    table: str,
    index: int,
    seconds: float,
    start: Barrier,
    killed_at: Synchronized[float],
    out: str,
) -> None:
    """One writer process: warm up, wait at the barrier, then append for ``seconds`` — and past
    that, until a commit it started after the kill (``killed_at``, set by the parent) has been
    acknowledged, for at most ``OVERTIME_S`` more. A commit whose fate the writer cannot learn
    (``ServiceUnavailable``) is UNKNOWN and the writer goes on. Times are ``time.monotonic()``
    (CLOCK_MONOTONIC: one clock for every process on the machine)."""
    runner.quiet_logging()
    # "connection refused" from every client of every writer while the node is down: expected
    logging.getLogger("segcat.librdkafka").setLevel(logging.CRITICAL)
    logging.getLogger("segcat").setLevel(logging.ERROR)
    results: list[dict[str, Any]] = []
    error: str | None = None
    try:
        with load_catalog(config).load_table(table, writer_id=f"bench-failover-{index}") as writer:
            writer.append([make_segment(f"warmup{index}", 0)])
            start.wait(timeout=300)
            deadline = time.monotonic() + seconds
            resumed = False
            k = 0
            while True:
                now = time.monotonic()
                if now >= deadline + OVERTIME_S or (now >= deadline and (resumed or not killed_at.value)):
                    break
                k += 1
                commit = writer.new_commit(Operation.APPEND, adds=[make_segment(f"f{index}", k)])
                entry: dict[str, Any] = {"writer": index, "started": time.monotonic()}
                try:
                    entry |= {"outcome": "ACCEPTED", "version": writer.commit(commit)}
                except CommitConflict as conflict:
                    entry |= {"outcome": "REJECTED", "version": conflict.version}
                except ServiceUnavailable as exc:
                    entry |= {"outcome": "UNKNOWN", "error": str(exc)[:300]}
                    time.sleep(0.05)
                entry["ended"] = time.monotonic()
                results.append(entry)
                kill = killed_at.value
                if kill and entry["started"] > kill and entry["outcome"] != "UNKNOWN":
                    resumed = True
    except BaseException as exc:
        with contextlib.suppress(Exception):
            start.abort()
        error = f"{type(exc).__name__}: {exc}"
    Path(out).write_text(json.dumps({"index": index, "results": results, "error": error}))


@dataclass
class Watch:
    """What the parent saw in the metadata after a kill (polled every 0.2 s)."""

    leader_after_s: float | None = None
    """First time the partition's leader was a live node other than the killed one."""
    new_leader: int | None = None
    isr_shrunk_after_s: float | None = None
    """First time the killed node was out of the partition's ISR."""
    polls: int = 0


def _watch(
    s: PrivateStack, topic: str, victim: int, was_leader: bool, killed: float, until: float, watch: Watch
) -> None:
    """Poll the partition's metadata until it shows a new leader (when the leader was killed)
    and the killed node out of the ISR, or until ``until``."""

    def pending() -> bool:
        return (was_leader and watch.leader_after_s is None) or watch.isr_shrunk_after_s is None

    while time.monotonic() < until and pending():
        try:
            leader, _, isr = s.partition(topic, 1.0)
        except (KafkaException, KeyError, IndexError):
            leader, isr = -1, [victim]
        watch.polls += 1
        now = time.monotonic() - killed
        if was_leader and watch.leader_after_s is None and leader not in (-1, victim):
            watch.leader_after_s, watch.new_leader = round(now, 3), leader
        if watch.isr_shrunk_after_s is None and victim not in isr:
            watch.isr_shrunk_after_s = round(now, 3)
        time.sleep(0.2)


_ACTIVE = re.compile(
    r"^\[([^\]]+)\] INFO \[QuorumController id=(\d+)\] Becoming the active controller at epoch (\d+)"
)
_FENCED = re.compile(
    r"^\[([^\]]+)\] INFO .*Fencing broker (\d+) (?:at epoch \d+ )?because its session has timed out"
)


def _log_time(stamp: str) -> float | None:
    """A log4j ``[yyyy-MM-dd HH:mm:ss,SSS]`` stamp (local time) as epoch seconds."""
    try:
        return dt.datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp()
    except ValueError:
        return None


def _log_lines(s: PrivateStack) -> Iterator[str]:
    for node in range(s.settings.brokers):
        path = s.layout.log_file(stack_kafka.node_name(s.settings, node))
        with contextlib.suppress(OSError), path.open(errors="replace") as fh:
            yield from fh


def active_controller(s: PrivateStack) -> int | None:
    """The KRaft node that last became the active controller (highest epoch), from the logs."""
    best: tuple[int, int] | None = None
    for line in _log_lines(s):
        if m := _ACTIVE.match(line):
            epoch, node = int(m.group(3)), int(m.group(2))
            if best is None or epoch > best[0]:
                best = (epoch, node)
    return None if best is None else best[1]


def controller_events(s: PrivateStack, victim: int, killed_wall: float) -> dict[str, float | None]:
    """From the surviving nodes' logs: when a new active controller took over and when the
    victim was fenced for its session timing out, in seconds after the kill (ms resolution)."""
    takeover: float | None = None
    fenced: float | None = None
    for line in _log_lines(s):
        if (m := _ACTIVE.match(line)) and (t := _log_time(m.group(1))) and t >= killed_wall - 0.001:
            takeover = t - killed_wall if takeover is None else min(takeover, t - killed_wall)
        elif (
            (m := _FENCED.match(line))
            and int(m.group(2)) == victim
            and (t := _log_time(m.group(1)))
            and t >= killed_wall - 0.001
        ):
            fenced = t - killed_wall if fenced is None else min(fenced, t - killed_wall)
    return {
        "controller_takeover_after_s": None if takeover is None else round(takeover, 3),
        "fenced_after_s": None if fenced is None else round(fenced, 3),
    }


def failover_figures(results: list[dict[str, Any]], killed: float) -> dict[str, Any]:
    """The latency spike around the kill and the time until commits were acknowledged again
    (the definitions of tests/test_kafka_faults.py ``failover_report``), plus throughput before
    and after. ``started``/``ended`` are relative to the writers' release."""
    before_w, after_w = SPIKE_WINDOW_S
    acked = [r for r in results if r["outcome"] in ("ACCEPTED", "REJECTED")]
    around = [
        r["ended"] - r["started"] for r in results if killed - before_w <= r["started"] <= killed + after_w
    ]
    ends_after = sorted(r["ended"] for r in acked if r["ended"] > killed)
    fresh = sorted(r["ended"] for r in acked if r["started"] > killed)
    steady = sorted(r["ended"] - r["started"] for r in acked if r["started"] < killed - before_w)
    resumed = (fresh[0] - killed) if fresh else None
    later = sorted(
        r["ended"] - r["started"]
        for r in acked
        if resumed is not None and r["started"] > killed + resumed + 1
    )
    in_flight = [r for r in results if r["started"] <= killed < r["ended"]]
    before_span = max(killed - 1.0, 1e-9)
    after_start = killed + resumed + 1 if resumed is not None else None
    last_end = max((r["ended"] for r in results), default=killed)
    after_count = sum(1 for r in acked if after_start is not None and r["started"] > after_start)
    return {
        "spike_s": round(max(around, default=0.0), 3),
        "first_ack_after_s": round(ends_after[0] - killed, 3) if ends_after else None,
        "first_new_commit_acked_after_s": None if resumed is None else round(resumed, 3),
        "steady_median_ms": round(1000 * statistics.median(steady), 3) if steady else None,
        "after_median_ms": round(1000 * statistics.median(later), 3) if later else None,
        "commits_per_s_before": round(
            sum(1 for r in acked if r["started"] >= 1.0 and r["ended"] <= killed) / before_span, 1
        ),
        "commits_per_s_after": (
            round(after_count / (last_end - after_start), 1)
            if after_start is not None and last_end > after_start
            else None
        ),
        "in_flight_at_kill": len(in_flight),
        "commits": len(results),
        "acknowledged": len(acked),
        "accepted": sum(1 for r in acked if r["outcome"] == "ACCEPTED"),
        "unknown": sum(1 for r in results if r["outcome"] == "UNKNOWN"),
    }


def failover_run(
    s: PrivateStack, p: Params, table: str, victim_role: str, workdir: Path, label: str
) -> dict[str, Any]:
    """Writers for ``p.failover_seconds``; at ``p.kill_at_s`` SIGKILL the partition's leader (or a
    follower); then start the node again and wait until the ISR is whole."""
    create_table(s.config, table)
    topic = table_name(table).topic
    s.wait_for_isr(topic, s.settings.brokers)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(p.failover_writers + 1)
    killed_at = ctx.Value("d", 0.0)
    outs = [workdir / f"{table}-{i}.json" for i in range(p.failover_writers)]
    procs = [
        ctx.Process(
            target=_failover_worker,
            args=(s.config, table, i, p.failover_seconds, barrier, killed_at, str(out)),
            name=f"bench-failover-{i}",
        )
        for i, out in enumerate(outs)
    ]
    progress(
        f"{label}: {p.failover_writers} writers for {p.failover_seconds:.0f} s, kill at {p.kill_at_s:.0f} s"
    )
    load_before = loadavg()
    for proc in procs:
        proc.start()
    watch = Watch()
    try:
        barrier.wait(timeout=300)
        released = time.monotonic()
        time.sleep(max(0.0, released + p.kill_at_s - time.monotonic()))
        leader, replicas, isr = s.partition(topic)
        victim = leader if victim_role == "leader" else next(n for n in isr if n != leader)
        controller = active_controller(s)
        load_at_kill = loadavg()
        record = s.node_record(victim)
        os.kill(record.pid, signal.SIGKILL)
        killed = time.monotonic()
        killed_at.value = killed
        killed_wall = time.time()
        progress(
            f"  killed node {victim} ({victim_role}; pid {record.pid}) at {killed - released:.1f} s; "
            f"partition leader {leader}, ISR {isr}, active controller {controller}"
        )
        watcher = threading.Thread(
            target=_watch,
            args=(
                s,
                topic,
                victim,
                victim == leader,
                killed,
                killed + p.failover_seconds + OVERTIME_S,
                watch,
            ),
            daemon=True,
        )
        watcher.start()
        for proc in procs:
            proc.join(timeout=p.failover_seconds + OVERTIME_S + 120)
        watcher.join(timeout=5)
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
    reports = [json.loads(out.read_text()) for out in outs if out.exists()]
    errors = [r["error"] for r in reports if r["error"]]
    if len(reports) < len(outs) or errors:
        raise RuntimeError(f"{len(outs) - len(reports)} failover writer(s) did not report; errors: {errors}")
    events = controller_events(s, victim, killed_wall)
    restart_start = time.monotonic()
    stack.up(s.settings)
    restarted_s = time.monotonic() - restart_start
    isr_s = s.wait_for_isr(topic, s.settings.brokers)
    results = sorted(
        (
            {
                **r,
                "started": round(r["started"] - released, 4),
                "ended": round(r["ended"] - released, 4),
            }
            for report in reports
            for r in report["results"]
        ),
        key=lambda r: r["started"],
    )
    figures = failover_figures(results, killed - released)
    out = {
        "label": label,
        "victim_role": victim_role,
        "victim": victim,
        "partition_before": {"leader": leader, "replicas": replicas, "isr": isr},
        "active_controller_before": controller,
        "victim_was_active_controller": None if controller is None else controller == victim,
        "killed_at_s": round(killed - released, 3),
        "killed_utc": dt.datetime.fromtimestamp(killed_wall, dt.UTC).isoformat(timespec="milliseconds"),
        "figures": figures,
        "metadata": {
            "new_leader": watch.new_leader,
            "leader_elected_after_s": watch.leader_after_s,
            "isr_shrunk_after_s": watch.isr_shrunk_after_s,
            "polls": watch.polls,
        },
        "logs": events,
        "restart": {"up_s": round(restarted_s, 1), "isr_whole_after_s": round(isr_s, 1)},
        "loadavg_before": load_before,
        "loadavg_at_kill": load_at_kill,
        "loadavg_after": loadavg(),
        "samples": [
            {
                "writer": r["writer"],
                "start_s": r["started"],
                "latency_ms": round(1000 * (r["ended"] - r["started"]), 2),
                "outcome": r["outcome"],
                **({"error": r["error"]} if "error" in r else {}),
            }
            for r in results
        ],
    }
    f = figures
    progress(
        f"  spike {f['spike_s']:.2f} s, first new commit acknowledged "
        f"{f['first_new_commit_acked_after_s']} s "
        f"after the kill, metadata leader {watch.new_leader} after {watch.leader_after_s} s, ISR without "
        f"node {victim} after {watch.isr_shrunk_after_s} s; {f['acknowledged']} acknowledged, "
        f"{f['unknown']} unknown; node back in {restarted_s:.1f} s, ISR whole {isr_s:.1f} s later"
    )
    return out


FAILOVER_KEYS = (
    "spike_s",
    "first_ack_after_s",
    "first_new_commit_acked_after_s",
    "steady_median_ms",
    "after_median_ms",
    "commits_per_s_before",
    "commits_per_s_after",
    "in_flight_at_kill",
    "acknowledged",
    "unknown",
)


def _median_of(runs: list[dict[str, Any]], *path: str) -> float | None:
    values = [v for r in runs if isinstance(v := _dig(r, *path), int | float)]
    return round(statistics.median(values), 3) if values else None


def failover_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "runs": len(runs),
        "median": {
            **{k: _median_of(runs, "figures", k) for k in FAILOVER_KEYS},
            "leader_elected_after_s": _median_of(runs, "metadata", "leader_elected_after_s"),
            "isr_shrunk_after_s": _median_of(runs, "metadata", "isr_shrunk_after_s"),
            "fenced_after_s": _median_of(runs, "logs", "fenced_after_s"),
            "restart_up_s": _median_of(runs, "restart", "up_s"),
            "isr_whole_after_s": _median_of(runs, "restart", "isr_whole_after_s"),
        },
        "victim_was_active_controller": [r["victim_was_active_controller"] for r in runs],
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
    summary=kafka_topology_doc.summary,
    wait_for_others_s=600.0,
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCHMARK))
