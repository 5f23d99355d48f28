"""Whether the streaming sink's batch is in the table already, beyond the dedup window.

``BatchCommitter.committed_version`` must find a batch committed long ago (fallen out of the
window of accepted commit ids) and must never take a batch for committed when it is not. The
window, the look-back and the scan step are made small so that random logs exercise every path:
the id in the window, a window that never evicted, an earlier batch in the window, the scan.
No services: the log is a list of records.
"""

from __future__ import annotations

import uuid
from collections import OrderedDict
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segcat import CheckpointConflict, Table
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.protocol.state import TableState
from segcat.spark_integration import stream_sink
from segcat.spark_integration.stream_sink import (
    BATCH_PROPERTY,
    QUERY_PROPERTY,
    BatchCommitter,
    batch_commit_id,
)

TABLE = "ns.t"
QUERY = "6a1f0c1e-0000-4000-8000-000000000001"
OTHER = "6a1f0c1e-0000-4000-8000-000000000002"


class Log:
    """Accepted commits, one per version: the sink's (with query and batch) and others."""

    def __init__(self) -> None:
        self.records: list[tuple[str, dict[str, str]]] = []

    def add(self, query: str | None, batch: int | None) -> int:
        if query is None or batch is None:
            self.records.append((str(uuid.uuid4()), {}))
        else:
            props = {QUERY_PROPERTY: query, BATCH_PROPERTY: str(batch)}
            self.records.append((batch_commit_id(TABLE, query, batch), props))
        return len(self.records) - 1

    def state(self, window: int) -> TableState:
        recent = OrderedDict((cid, v) for v, (cid, _) in enumerate(self.records))
        while len(recent) > window:
            recent.popitem(last=False)
        return TableState(table=TABLE, recent_commits=recent)

    def records_between(self, start: int, end: int) -> Iterator[Any]:
        for version in range(start, min(end, len(self.records))):
            cid, props = self.records[version]
            yield SimpleNamespace(
                verdict=SimpleNamespace(outcome=Outcome.ACCEPTED, offset=version),
                commit=SimpleNamespace(commit_id=cid, properties=props),
            )


def committer(log: Log) -> BatchCommitter:
    table = SimpleNamespace(records=log.records_between)
    return BatchCommitter(cast(Table, table), TABLE)


@pytest.fixture(autouse=True)
def small_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stream_sink, "DEDUP_WINDOW", 5)
    monkeypatch.setattr(stream_sink, "LOOKBACK_BATCHES", 2)
    monkeypatch.setattr(stream_sink, "SCAN_CHUNK", 3)
    stream_sink._last_batches.clear()


@settings(max_examples=200, deadline=None)
@given(
    plan=st.lists(
        st.tuples(st.booleans(), st.integers(0, 12), st.booleans()),
        min_size=1,
        max_size=25,
    )
)
def test_a_batch_is_found_committed_exactly_when_it_is(plan: list[tuple[bool, int, bool]]) -> None:
    """``plan``: per batch of QUERY, whether it had rows (a commit), how many other commits follow,
    and whether another query's commit is among them. Then each batch the query could run again
    after a crash (its last committed one, the next one) is judged against the full log."""
    stream_sink._last_batches.clear()
    log = Log()
    committed: dict[int, int] = {}
    for batch, (has_rows, others, other_query) in enumerate(plan):
        if has_rows:
            committed[batch] = log.add(QUERY, batch)
        for k in range(others):
            log.add(OTHER if other_query and k == 0 else None, batch if other_query and k == 0 else None)
    state = log.state(stream_sink.DEDUP_WINDOW)
    last = max(committed, default=-1)
    if last >= 0:
        assert committer(log).committed_version(state, QUERY, last) == committed[last]
    assert committer(log).committed_version(state, QUERY, len(plan)) is None


def test_a_later_batch_in_the_table_than_the_checkpoint_is_a_conflict() -> None:
    log = Log()
    log.add(QUERY, 0)
    log.add(QUERY, 3)
    for _ in range(10):
        log.add(None, None)
    with pytest.raises(CheckpointConflict, match="holds batch 3"):
        committer(log).committed_version(log.state(stream_sink.DEDUP_WINDOW), QUERY, 1)
