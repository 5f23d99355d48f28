"""CPU accounting around a scenario: machine busy share and the Kafka broker's CPU time.

On a 2-core machine the writers, the broker and the benchmark share the same cores, so
"where does the time go" is partly "who burns the CPU". Reads ``/proc`` (Linux only);
elsewhere the figures are simply missing.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from segcat.catalog.config import Config
from segcat.local_stack import kafka as stack_kafka
from segcat.local_stack import process
from segcat.local_stack.layout import Layout
from segcat.local_stack.settings import StackSettings

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def broker_pid(config: Config) -> int | None:
    """The local stack's Kafka pid (verified as ours), or None for an external cluster."""
    if config.bootstrap_servers != stack_kafka.address(StackSettings.load()):
        return None
    record = process.read_pid_file(Layout.of(StackSettings.load()).pid_file(stack_kafka.NAME))
    if record is None or not process.is_ours(record):
        return None
    return record.pid


def _machine_ticks() -> tuple[int, int] | None:
    """(busy, total) jiffies over all CPUs since boot."""
    try:
        first = Path("/proc/stat").read_text().splitlines()[0].split()
    except (OSError, IndexError):
        return None
    values = [int(v) for v in first[1:]]
    idle = values[3] + (values[4] if len(values) > 4 else 0)  # idle + iowait
    total = sum(values[:8])  # guest time is already counted in user
    return total - idle, total


def _process_ticks(pid: int | None) -> int | None:
    if pid is None:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime (fields 14 and 15 of stat)


@dataclass(frozen=True)
class CpuSample:
    machine: tuple[int, int] | None
    broker: int | None


class CpuMeter:
    """``start()`` before a scenario, ``stop(commits, writer_cpu_ns)`` after it."""

    def __init__(self, config: Config) -> None:
        self._pid = broker_pid(config)
        self._start: CpuSample | None = None

    def _sample(self) -> CpuSample:
        return CpuSample(_machine_ticks(), _process_ticks(self._pid))

    def start(self) -> None:
        self._start = self._sample()

    def stop(self, commits: int, writer_cpu_ns: int | None = None) -> dict[str, Any]:
        end = self._sample()
        start = self._start
        out: dict[str, Any] = {"cpus": os.cpu_count()}
        if start is None or commits <= 0:
            return out
        if start.machine and end.machine and end.machine[1] > start.machine[1]:
            busy = end.machine[0] - start.machine[0]
            total = end.machine[1] - start.machine[1]
            out["machine_busy_pct"] = round(100 * busy / total, 1)
            out["machine_cpu_ms_per_commit"] = round(busy / _TICKS * 1000 / commits, 3)
        if start.broker is not None and end.broker is not None:
            out["broker_cpu_ms_per_commit"] = round((end.broker - start.broker) / _TICKS * 1000 / commits, 3)
        if writer_cpu_ns is not None:
            out["writer_cpu_ms_per_commit"] = round(writer_cpu_ns / 1e6 / commits, 3)
        return out
