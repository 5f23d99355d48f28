"""Feed log records, in order, to the rules and the image; a listener sees each one judged."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from segcat.catalog.protocol import rules
from segcat.catalog.protocol.model import LogRecord
from segcat.catalog.protocol.rules import Applied
from segcat.catalog.protocol.state import TableState

__all__ = ["Applied", "Listener", "replay"]

Listener = Callable[[Applied, TableState], None]


def replay(
    records: Iterable[LogRecord],
    state: TableState,
    *,
    upto: int | None = None,
    listener: Listener | None = None,
    own: rules.OwnRecords | None = None,
) -> TableState:
    """Apply ``records`` (in offset order) to ``state``, stopping after offset ``upto``.

    Records at or below ``state.version`` are skipped, so a replay may safely overlap what
    the state already holds (e.g. a key frame plus the log after it). ``own``: a writer's
    own records (``rules.apply_record``).
    """
    for record in records:
        if upto is not None and record.offset > upto:
            break
        if record.offset <= state.version:
            continue
        applied = rules.apply_record(state, record, own)
        if listener is not None:
            listener(applied, state)
    return state
