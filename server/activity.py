"""Commits and conflicts in the last minute of broker time, per table, read incrementally.

The first ask replays the records since the window's start (from the nearest key frame);
later asks read only the records past the last one seen, so the overview's refresh costs
nothing for a table where nothing happened. A table whose newest record is an accepted
version older than the window is known to be idle without opening it.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.read.table import TableReader
from segcat.catalog.storage.redis import Head


@dataclass
class _Recent:
    upto: int
    records: deque[tuple[int, str, str]] = field(default_factory=deque)
    """(broker time, outcome, operation) of the records in the window, oldest first."""


class ActivityTracker:
    def __init__(self, window_s: int) -> None:
        self.window_ms = window_s * 1000
        self._tables: dict[str, _Recent] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def _lock(self, name: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(name, threading.Lock())

    def activity(
        self,
        name: str,
        log_end: int,
        open_table: Callable[[], TableReader],
        head: Head | None = None,
        *,
        unmaterialized_unknown: bool = False,
    ) -> dict[str, Any] | None:
        """The counts for ``name`` up to ``log_end``; ``head`` (the materialized one) may spare a replay.
        With ``unmaterialized_unknown``: None for a table Redis holds no head of (the overview of a
        catalog the materializer has not reached would otherwise replay every table)."""
        now_ms = int(time.time() * 1000)
        since = now_ms - self.window_ms
        with self._lock(name):
            recent = self._tables.get(name)
            if recent is None and _idle(head, log_end, since):
                return self._counts(deque())
            if recent is None and head is None and unmaterialized_unknown:
                return None
            if recent is None:
                table = open_table()
                start = table.resolve_version(as_of_ms=max(since, 0)).bound + 1
                recent = self._tables[name] = _Recent(upto=start - 1)
            if log_end > recent.upto:
                for entry in open_table().timeline(recent.upto + 1, log_end + 1):
                    applied = entry.applied
                    operation = "UNDECODABLE" if applied.commit is None else applied.commit.operation.value
                    recent.records.append((applied.timestamp_ms, applied.verdict.outcome.value, operation))
                recent.upto = log_end
            while recent.records and recent.records[0][0] < since:
                recent.records.popleft()
            return self._counts(recent.records)

    def _counts(self, records: deque[tuple[int, str, str]]) -> dict[str, Any]:
        accepted = Outcome.ACCEPTED.value
        by_outcome = Counter(outcome for _, outcome, _ in records)
        by_operation = Counter(op for _, outcome, op in records if outcome == accepted)
        return {
            "window_s": self.window_ms // 1000,
            "commits": by_outcome.get(accepted, 0),
            "conflicts": by_outcome.get(Outcome.REJECTED.value, 0),
            "by_outcome": dict(sorted(by_outcome.items())),
            "by_operation": dict(sorted(by_operation.items())),
        }


def _idle(head: Head | None, log_end: int, since_ms: int) -> bool:
    """The log's newest record is the materialized head's accepted version, older than the window."""
    return (
        head is not None
        and head.offset == head.version == log_end
        and head.timestamp_ms is not None
        and head.timestamp_ms < since_ms
    )
