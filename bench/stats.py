"""Latency summaries: medians and nearest-rank percentiles over per-commit samples."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

NS_PER_MS = 1_000_000


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of an already sorted, non-empty sequence."""
    if not sorted_values:
        raise ValueError("percentile of an empty sample")
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


@dataclass(frozen=True)
class Summary:
    """Per-commit latency figures in milliseconds."""

    count: int
    median_ms: float
    p90_ms: float
    p99_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float

    @classmethod
    def of(cls, samples_ns: Sequence[int]) -> Summary:
        ms = sorted(s / NS_PER_MS for s in samples_ns)
        return cls(
            count=len(ms),
            median_ms=statistics.median(ms),
            p90_ms=percentile(ms, 90),
            p99_ms=percentile(ms, 99),
            mean_ms=statistics.fmean(ms),
            min_ms=ms[0],
            max_ms=ms[-1],
        )

    def to_json(self) -> dict[str, Any]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}


def median_ms(samples_ns: Sequence[int]) -> float:
    return statistics.median(samples_ns) / NS_PER_MS if samples_ns else float("nan")
