"""Shared pieces of the read-path benchmark (``bench.read_paths``): sizes, timing, profiles.

Timing rules, the same for every system: one untimed warm-up call (unless a single call is
too slow to afford it), a ``gc.collect()`` before every timed call (outside the timing),
wall time with ``perf_counter_ns``; the figure reported is the median of the repetitions.
Slow cells (a 1M-segment Kafka replay) run as many repetitions as fit a time budget, at
least one, and say so.
"""

from __future__ import annotations

import cProfile
import gc
import logging
import os
import pstats
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

NS_PER_MS = 1_000_000
FAST_MS = 100.0


@dataclass(frozen=True)
class Sizes:
    """Everything that scales between a full run and ``--quick``."""

    list_sizes: tuple[int, ...]
    """Live segments of the open + list tables."""
    per_commit: dict[int, int]
    """Segments per bulk commit, by table size."""
    tail_commits: int
    """One-segment commits after the bulk (after the key frame): the deltas a reader applies."""
    peer_size: int
    """The size at which delta-rs and pyiceberg run beside segcat (one of ``list_sizes``)."""
    tt_commits: int
    tt_per_commit: int
    tt_keyframe_every: int
    """Key-frame interval (segcat K) and checkpoint interval (delta-rs) of the time-travel tables."""
    watch_commits: int
    watch_pause_s: float
    catchup_commits: int
    catchup_writers: int
    reps: int
    fast_reps: int
    """Repetitions for cells where one call takes under ``FAST_MS`` (cheap, and their medians are noisier)."""
    slow_budget_s: float
    """Time budget of one slow cell; it gets fewer repetitions when one call is this slow."""

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["per_commit"] = {str(k): v for k, v in self.per_commit.items()}
        return out


FULL = Sizes(
    list_sizes=(1_000, 50_000, 1_000_000),
    per_commit={1_000: 50, 50_000: 1_000, 1_000_000: 10_000},
    tail_commits=10,
    peer_size=50_000,
    tt_commits=100,
    tt_per_commit=500,
    tt_keyframe_every=8,
    watch_commits=1_000,
    watch_pause_s=0.01,
    catchup_commits=100_000,
    catchup_writers=2,
    reps=5,
    fast_reps=15,
    slow_budget_s=150.0,
)

QUICK = Sizes(
    list_sizes=(200, 2_000),
    per_commit={200: 20, 2_000: 200},
    tail_commits=5,
    peer_size=2_000,
    tt_commits=20,
    tt_per_commit=50,
    tt_keyframe_every=8,
    watch_commits=60,
    watch_pause_s=0.005,
    catchup_commits=2_000,
    catchup_writers=2,
    reps=3,
    fast_reps=3,
    slow_budget_s=20.0,
)


def bulk_plan(total: int, per_commit: int) -> list[int]:
    """Segments per commit adding ``total`` segments in commits of ``per_commit`` (last one smaller)."""
    full, rest = divmod(total, per_commit)
    return [per_commit] * full + ([rest] if rest else [])


# --------------------------------------------------------------------------- timing


@dataclass
class Timing:
    """Repeated wall-time samples of one operation."""

    samples_ms: list[float]
    warmup: int
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    def to_json(self) -> dict[str, Any]:
        return {
            "median_ms": round(self.median_ms, 3),
            "min_ms": round(min(self.samples_ms), 3),
            "max_ms": round(max(self.samples_ms), 3),
            "reps": len(self.samples_ms),
            "warmup": self.warmup,
            "samples_ms": [round(s, 3) for s in self.samples_ms],
            "note": self.note,
            "details": self.details,
        }


def measure(
    fn: Callable[[], T],
    *,
    reps: int,
    fast_reps: int | None = None,
    warmup: int = 1,
    budget_s: float | None = None,
    check: Callable[[T], None] | None = None,
) -> Timing:
    """Median-able samples of ``fn()``; ``check`` validates each result (outside the timing).

    With ``fast_reps``, a call faster than ``FAST_MS`` gets that many repetitions instead;
    with ``budget_s``, the repetitions after the first are cut to what fits the budget.
    """
    for _ in range(warmup):
        result = fn()
        if check is not None:
            check(result)
        del result
    samples: list[float] = []
    wanted = reps
    while len(samples) < wanted:
        gc.collect()
        start = time.perf_counter_ns()
        result = fn()
        elapsed = time.perf_counter_ns() - start
        samples.append(elapsed / NS_PER_MS)
        if check is not None:
            check(result)
        del result
        if len(samples) == 1 and fast_reps is not None and samples[0] < FAST_MS:
            wanted = max(reps, fast_reps)
        if budget_s is not None and len(samples) == 1:
            wanted = max(1, min(wanted, int(budget_s // max(elapsed / 1e9, 1e-9))))
    note = ""
    if len(samples) < reps:
        note = f"{len(samples)} repetition(s) only: one call takes {samples[0] / 1000:.1f} s"
    gc.collect()
    return Timing(samples, warmup, note)


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()`` and its wall time in ms."""
    start = time.perf_counter_ns()
    result = fn()
    return result, (time.perf_counter_ns() - start) / NS_PER_MS


# --------------------------------------------------------------------------- profiles


def _where(filename: str) -> str:
    for marker in ("site-packages/", "/work/main/", "lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return os.path.basename(filename)


def summarize_profile(
    stats: pstats.Stats, calls: int = 1, top: int = 15, focus: tuple[str, ...] = ()
) -> dict[str, list[dict[str, Any]]]:
    """The ``top`` functions by own time and by cumulative time, in ms per profiled call.

    ``focus`` names functions (the part in parentheses) reported whatever their rank.
    """
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    rows: list[dict[str, Any]] = []
    for (filename, line, func), (_, ncalls, tottime, cumtime, _) in raw.items():
        if "/bench/" in filename:
            continue  # the benchmark's own lambdas and wrappers
        rows.append(
            {
                "function": f"{_where(filename)}:{line}({func})" if line else func,
                "ncalls": ncalls // max(calls, 1),
                "tottime_ms": round(tottime * 1000 / max(calls, 1), 2),
                "cumtime_ms": round(cumtime * 1000 / max(calls, 1), 2),
            }
        )
    by_own = sorted(rows, key=lambda r: r["tottime_ms"], reverse=True)[:top]
    by_cum = sorted(rows, key=lambda r: r["cumtime_ms"], reverse=True)[:top]
    picked = [r for r in rows if r["function"].rsplit("(", 1)[-1].rstrip(")") in focus]
    picked.sort(key=lambda r: r["cumtime_ms"], reverse=True)
    return {"by_own_time": by_own, "by_cumulative_time": by_cum, "focus": picked}


def profile(
    fn: Callable[[], object], *, calls: int = 3, top: int = 15, focus: tuple[str, ...] = ()
) -> dict[str, Any]:
    """cProfile ``calls`` calls of ``fn`` (after one warm-up); figures per call."""
    fn()
    profiler = cProfile.Profile()
    for _ in range(calls):
        gc.collect()
        profiler.enable()
        fn()
        profiler.disable()
    return {"calls": calls, **summarize_profile(pstats.Stats(profiler), calls, top, focus)}


def profile_file(path: Path, *, calls: int = 1, top: int = 20, focus: tuple[str, ...] = ()) -> dict[str, Any]:
    """Summary of a cProfile dump written by another process."""
    return {"calls": calls, **summarize_profile(pstats.Stats(str(path)), calls, top, focus)}


def quiet_logging() -> None:
    """Warnings only: the materializer logs every key frame at INFO."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger().setLevel(logging.WARNING)
