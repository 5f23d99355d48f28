"""Broker kills for ``bench.kafka_topology``: writer processes commit while the node leading
(or following) the table's partition is SIGKILLed; what the writers saw, what the metadata and
the surviving controller's log say, and when commits were acknowledged again."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import multiprocessing as mp
import os
import re
import signal
import statistics
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import TYPE_CHECKING, Any

from confluent_kafka import KafkaException

from bench import runner
from bench.commit_segcat import create_table, make_segment
from bench.kafka_topology_stacks import PrivateStack
from bench.report import get
from bench.runner import loadavg, progress
from segcat import load_catalog
from segcat import local_stack as stack
from segcat.catalog.config import Config
from segcat.catalog.errors import CommitConflict, ServiceUnavailable
from segcat.catalog.protocol.model import Operation
from segcat.catalog.protocol.names import table_name
from segcat.local_stack import kafka as stack_kafka

if TYPE_CHECKING:  # the benchmark's parameters; bench.kafka_topology imports this module
    from bench.kafka_topology import Params

OVERTIME_S = 60.0
"""How long a failover writer may go on past its time to see a commit started after the kill acknowledged."""
SPIKE_WINDOW_S = (2.0, 20.0)
"""Commits started this long before / after a kill count for its latency spike."""


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
    (the definitions of tests/catalog/log/test_kafka_faults.py ``failover_report``), plus throughput before
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
    values = [v for r in runs if isinstance(v := get(r, *path), int | float)]
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
