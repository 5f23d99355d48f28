"""Data skipping: never drop a segment that holds a matching row; do drop the rest when stats allow."""

from __future__ import annotations

import datetime as dt
import operator
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from catalog import bloom, keyframe, rules
from catalog.expressions import Predicate, col
from catalog.frame_view import FrameView
from catalog.model import ColumnStats, ColumnType, Commit, Operation, Segment
from catalog.snapshot import Snapshot
from catalog.state import TableState

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
Row = dict[str, Any]


def _segment(sid: str, rows: list[Row]) -> Segment:
    def stats(column: str, kind: ColumnType) -> ColumnStats:
        values = [r[column] for r in rows if r[column] is not None]
        nulls = sum(1 for r in rows if r[column] is None)
        return ColumnStats(
            column, kind, min(values) if values else None, max(values) if values else None, nulls
        )

    return Segment(
        sid,
        f"data/{sid}.parquet",
        100,
        len(rows),
        stats=(
            stats("id", ColumnType.INT),
            stats("name", ColumnType.STRING),
            stats("ts", ColumnType.TIMESTAMP),
        ),
        bloom=bloom.build("name", [r["name"] for r in rows]),
    )


rows_st = st.lists(
    st.fixed_dictionaries(
        {
            "id": st.integers(-50, 50),
            "name": st.one_of(st.none(), st.sampled_from(["ann", "bob", "cy", "dee", "eve", "fay"])),
            "ts": st.integers(0, 100).map(lambda h: T0 + dt.timedelta(hours=h)),
        }
    ),
    min_size=1,
    max_size=6,
)
ops = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
leaf_st = st.one_of(
    st.tuples(st.just("id"), st.sampled_from(list(ops)), st.integers(-60, 60)),
    st.tuples(st.just("name"), st.sampled_from(["==", "!="]), st.sampled_from(["ann", "bob", "zed"])),
    st.tuples(
        st.just("ts"),
        st.sampled_from(list(ops)),
        st.integers(0, 100).map(lambda h: T0 + dt.timedelta(hours=h)),
    ),
    st.tuples(st.just("name"), st.just("isin"), st.lists(st.sampled_from(["ann", "cy", "zed"]), max_size=2)),
    st.tuples(st.just("name"), st.sampled_from(["is_null", "is_not_null"]), st.none()),
)


def _build(leaf: tuple[str, str, Any]) -> tuple[Predicate, Any]:
    column, op, value = leaf
    c = col(column)
    if op == "isin":
        return c.isin(value), lambda r: r[column] is not None and r[column] in value
    if op == "is_null":
        return c.is_null(), lambda r: r[column] is None
    if op == "is_not_null":
        return c.is_not_null(), lambda r: r[column] is not None
    pred = {
        "==": c == value,
        "!=": c != value,
        "<": c < value,
        "<=": c <= value,
        ">": c > value,
        ">=": c >= value,
    }[op]
    return pred, lambda r: r[column] is not None and ops[op](r[column], value)


def _state(data: list[list[Row]]) -> TableState:
    state = TableState("ns.t")
    adds = tuple(_segment(f"s{i}", rows) for i, rows in enumerate(data))
    rules.apply(state, 0, 0, Commit(Commit.new_id(), "ns.t", Operation.APPEND, -1, "w", 0, adds=adds))
    return state


@settings(max_examples=150, deadline=None)
@given(st.lists(rows_st, min_size=1, max_size=8), leaf_st, leaf_st, st.booleans())
def test_pruning_never_drops_a_segment_with_a_matching_row(
    data: list[list[Row]], left: tuple[str, str, Any], right: tuple[str, str, Any], use_and: bool
) -> None:
    (lp, lf), (rp, rf) = _build(left), _build(right)
    predicate = lp & rp if use_and else lp | rp
    matches = (lambda r: lf(r) and rf(r)) if use_and else (lambda r: lf(r) or rf(r))
    state = _state(data)
    must_keep = {f"s{i}" for i, rows in enumerate(data) if any(matches(r) for r in rows)}
    frame = FrameView.from_keyframe(keyframe.from_ipc(keyframe.to_ipc(keyframe.build(state))))
    for snap in (Snapshot(state, "/r"), Snapshot(frame, "/r")):
        kept = {s.segment_id for s in snap.prune(predicate).segment_list()}
        assert must_keep <= kept


def test_stats_and_bloom_filters_really_skip() -> None:
    data = [
        [{"id": i * 10 + j, "name": f"n{i}-{j}", "ts": T0 + dt.timedelta(days=i)} for j in range(10)]
        for i in range(20)
    ]
    state = _state(data)
    snap = Snapshot(state, "/r")
    assert [s.segment_id for s in snap.prune(col("id") == 57).segment_list()] == ["s5"]
    assert snap.prune(col("id") >= 150).live_count == 5
    assert snap.prune(col("ts") < T0 + dt.timedelta(days=2)).live_count == 2
    # names span every segment's [min, max] range alphabetically; only the Bloom filters can skip
    by_bloom = snap.prune(col("name") == "n7-3")
    assert "s7" in {s.segment_id for s in by_bloom.segment_list()}
    assert by_bloom.live_count <= 3
    assert snap.prune((col("id") < 20) & (col("name") == "n1-5")).live_count == 1
    assert snap.prune(col("missing") == 1).live_count == 20  # unknown stats: keep
    pruned = snap.prune(col("id") < 30)
    assert (pruned.live_count, pruned.live_rows) == (3, 30)
