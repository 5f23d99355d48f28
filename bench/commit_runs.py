"""What one commit-latency scenario produced, and the CPU it cost.

A ``Run`` is one scenario on one system: per-commit latencies, wall time, load average and
details. ``CpuMeter`` adds CPU per commit for the machine, the committing process(es) and the
broker: on a 2-core machine the writers, the broker and the benchmark share the cores, so
"where does the time go" is partly "who burns the CPU" (reads ``/proc``; elsewhere the figures
are simply missing). ``timed_commits`` is the timed loop segcat, delta-rs and pyiceberg share.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench.runner import Tick, loadavg, summary, time_each, to_ms
from segcat.catalog.config import Config

T = TypeVar("T")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
"""Jiffies per second, the unit of ``/proc`` CPU times."""


@dataclass
class Run:
    """One scenario on one system."""

    system: str
    scenario: str
    latencies_ns: list[int]
    wall_ns: int
    """From the first timed commit's start to the last one's end (over all writers)."""
    writers: int = 1
    details: dict[str, Any] = field(default_factory=dict)
    load_before: list[float] | None = None
    load_after: list[float] | None = None

    @property
    def commits(self) -> int:
        return len(self.latencies_ns)

    @property
    def commits_per_s(self) -> float:
        return self.commits / (self.wall_ns / 1e9) if self.wall_ns > 0 else float("nan")

    def to_json(self) -> dict[str, Any]:
        return {
            "system": self.system,
            "scenario": self.scenario,
            "writers": self.writers,
            "commits": self.commits,
            "wall_s": round(self.wall_ns / 1e9, 4),
            "commits_per_s": round(self.commits_per_s, 2),
            "latency": summary(to_ms(self.latencies_ns)),
            "details": self.details,
            "loadavg_before": self.load_before,
            "loadavg_after": self.load_after,
            "latencies_us": [round(ns / 1000, 1) for ns in self.latencies_ns],
        }


# --------------------------------------------------------------------------- CPU


def broker_pid(config: Config) -> int | None:
    """The local stack's Kafka pid (verified as ours), or None for an external cluster."""
    from segcat.local_stack import kafka as stack_kafka
    from segcat.local_stack import process
    from segcat.local_stack.layout import Layout
    from segcat.local_stack.settings import StackSettings

    settings = StackSettings.load()
    if config.bootstrap_servers != stack_kafka.address(settings):
        return None
    record = process.read_pid_file(Layout.of(settings).pid_file(stack_kafka.NAME))
    return record.pid if record is not None and process.is_ours(record) else None


def machine_ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs since boot."""
    try:
        values = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    except (OSError, IndexError):
        return None
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is already counted in user
    return total - idle, total


def process_ticks(pid: int | None) -> int | None:
    """User + system jiffies of process ``pid`` (None when it is gone or not given)."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14 and 15 of stat)


class CpuMeter:
    """``start()`` before a timed loop, ``stop(commits, client_cpu_ns)`` after it."""

    def __init__(self, config: Config) -> None:
        self._pid = broker_pid(config)
        self._start: tuple[tuple[int, int] | None, int | None] | None = None

    def start(self) -> None:
        self._start = (machine_ticks(), process_ticks(self._pid))

    def stop(self, commits: int, client_cpu_ns: int | None = None) -> dict[str, Any]:
        machine, broker = machine_ticks(), process_ticks(self._pid)
        out: dict[str, Any] = {"cpus": os.cpu_count()}
        if self._start is None or commits <= 0:
            return out
        machine0, broker0 = self._start
        if machine0 and machine and machine[1] > machine0[1]:
            busy, total = machine[0] - machine0[0], machine[1] - machine0[1]
            out["machine_busy_pct"] = round(100 * busy / total, 1)
            out["machine_cpu_ms_per_commit"] = round(busy / CLOCK_TICKS * 1000 / commits, 3)
        if broker0 is not None and broker is not None:
            out["broker_cpu_ms_per_commit"] = round((broker - broker0) / CLOCK_TICKS * 1000 / commits, 3)
        if client_cpu_ns is not None:
            out["writer_cpu_ms_per_commit"] = round(client_cpu_ns / 1e6 / commits, 3)
        return out


def timed_commits(
    system: str,
    scenario: str,
    items: Sequence[T],
    commit: Callable[[T], object],
    *,
    tick: Tick,
    meter: CpuMeter | None = None,
    after: Callable[[], None] | None = None,
) -> Run:
    """``commit(item)`` for every item, each timed; CPU and load average around the whole loop.
    ``after`` runs after each commit, outside its sample (e.g. closing its phase accounting)."""

    def each() -> None:
        if after is not None:
            after()
        tick(1)

    load_before = loadavg()
    if meter is not None:
        meter.start()
    cpu_start = time.process_time_ns()
    latencies, wall = time_each(items, commit, each)
    client_cpu = time.process_time_ns() - cpu_start
    run = Run(system, scenario, latencies, wall, load_before=load_before)
    if meter is not None:
        run.details["cpu"] = meter.stop(len(latencies), client_cpu)
    run.load_after = loadavg()
    return run
