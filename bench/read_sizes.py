"""The sizes of the read-paths bench: one full run and a ``--quick`` smoke run."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any


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
    """Repetitions for cells where one call takes under ``runner.FAST_MS``."""
    slow_budget_s: float
    """Time budget of one slow cell; it gets fewer repetitions when one call is this slow."""
    bulk_commits: int = 50
    bulk_per_commit: int = 1_000
    """The bulk load: commits × segments each, read before the periodic key frame."""

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "per_commit": {str(k): v for k, v in self.per_commit.items()}}


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
    bulk_commits=5,
    bulk_per_commit=100,
)
