"""The loader: fold log records into a ``TableState`` through the rules, nothing else."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from segcat.catalog.protocol import rules
from segcat.catalog.protocol.model import Commit, LogRecord
from segcat.catalog.protocol.rules import Verdict
from segcat.catalog.protocol.state import TableState


@dataclass(frozen=True, slots=True)
class Applied:
    """One record after judgment: what it was, what the rules said, when the broker took it."""

    verdict: Verdict
    commit: Commit | None
    timestamp_ms: int


Listener = Callable[[Applied, TableState], None]


def replay(
    records: Iterable[LogRecord],
    state: TableState,
    *,
    upto: int | None = None,
    listener: Listener | None = None,
) -> TableState:
    """Apply ``records`` (in offset order) to ``state``, stopping after offset ``upto``.

    Records at or below ``state.version`` are skipped, so a replay may safely overlap what
    the state already holds (e.g. a key frame plus the log after it).
    """
    for record in records:
        if upto is not None and record.offset > upto:
            break
        if record.offset <= state.version:
            continue
        verdict, commit = rules.apply_record(state, record)
        if listener is not None:
            listener(Applied(verdict, commit, record.timestamp_ms), state)
    return state
