"""What one benchmark scenario produced: per-commit latencies, wall time and notes."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.stats import Summary

Tick = Callable[[int], None]
"""Progress callback: called with the number of commits just completed."""


def no_tick(_: int) -> None:
    """A ``Tick`` that does nothing."""


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
    load_before: tuple[float, float, float] | None = None
    load_after: tuple[float, float, float] | None = None

    @property
    def commits(self) -> int:
        return len(self.latencies_ns)

    @property
    def summary(self) -> Summary:
        return Summary.of(self.latencies_ns)

    @property
    def commits_per_s(self) -> float:
        return self.commits / (self.wall_ns / 1e9) if self.wall_ns > 0 else float("nan")

    def to_json(self, *, samples: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "system": self.system,
            "scenario": self.scenario,
            "writers": self.writers,
            "commits": self.commits,
            "wall_s": round(self.wall_ns / 1e9, 4),
            "commits_per_s": round(self.commits_per_s, 2),
            "latency": self.summary.to_json(),
            "details": self.details,
            "loadavg_before": self.load_before,
            "loadavg_after": self.load_after,
        }
        if samples:
            out["latencies_us"] = [round(ns / 1000, 1) for ns in self.latencies_ns]
        return out


def loadavg() -> tuple[float, float, float]:
    one, five, fifteen = os.getloadavg()
    return (round(one, 2), round(five, 2), round(fifteen, 2))
