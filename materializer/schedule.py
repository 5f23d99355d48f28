"""When each table next needs time-based work: a heap of deadlines with lazy invalidation.

The materializer owns thousands of tables, most of them idle. Its periodic work (a key frame
T seconds after the last commit, a Redis rebuild, the Iceberg publisher's retry, the reset of a
table's back-off) must cost in proportion to the tables that have such work due, not to the
number of tables followed. Each table says when it next needs time (``TableMaterializer.due``);
the service keeps that deadline here and asks only for the tables whose deadline has passed.

A key has at most one deadline. Setting a new one leaves the old heap entry in place (lazy
invalidation: it is skipped when popped), and the heap is rebuilt when such stale entries
outnumber the live ones, so memory stays proportional to the keys scheduled.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

_COMPACT_SLACK = 64
"""Stale entries tolerated beyond the live ones before the heap is rebuilt."""


class Schedule(Generic[K]):
    """Keys with one deadline each (any float clock, e.g. ``time.monotonic()``). Not thread-safe:
    one loop owns it."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, K]] = []
        self._deadline: dict[K, tuple[float, int]] = {}
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._deadline)

    def __contains__(self, key: object) -> bool:
        return key in self._deadline

    def deadline(self, key: K) -> float | None:
        """The key's deadline (None: not scheduled)."""
        entry = self._deadline.get(key)
        return None if entry is None else entry[0]

    def set(self, key: K, deadline: float | None) -> None:
        """Replace the key's deadline (None: no time-based work; the key is dropped)."""
        if deadline is None:
            self.cancel(key)
            return
        current = self._deadline.get(key)
        if current is not None and current[0] == deadline:
            return
        entry = (deadline, next(self._seq))
        self._deadline[key] = entry
        heapq.heappush(self._heap, (*entry, key))
        self._compact()

    def earliest(self, key: K, deadline: float) -> None:
        """Bring the key's deadline forward to ``deadline`` (never later than it is)."""
        current = self.deadline(key)
        if current is None or deadline < current:
            self.set(key, deadline)

    def cancel(self, key: K) -> None:
        """Forget the key (its heap entry turns stale)."""
        if self._deadline.pop(key, None) is not None:
            self._compact()

    def next_deadline(self) -> float | None:
        """The earliest deadline of any key (None: nothing scheduled)."""
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float, limit: int) -> list[K]:
        """Up to ``limit`` keys whose deadline is ≤ ``now``, earliest first; each is unscheduled
        (the caller sets its next deadline after doing its work). The others stay due."""
        due: list[K] = []
        while len(due) < limit:
            self._drop_stale()
            if not self._heap or self._heap[0][0] > now:
                break
            _, _, key = heapq.heappop(self._heap)
            del self._deadline[key]
            due.append(key)
        return due

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap:
            deadline, seq, key = heap[0]
            if self._deadline.get(key) == (deadline, seq):
                return
            heapq.heappop(heap)

    def _compact(self) -> None:
        if len(self._heap) > 2 * len(self._deadline) + _COMPACT_SLACK:
            self._heap = [(d, s, k) for k, (d, s) in self._deadline.items()]
            heapq.heapify(self._heap)
