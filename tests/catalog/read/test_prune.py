"""Data skipping: never drop a segment that holds a matching row; do drop the rest when stats allow."""

from __future__ import annotations

import datetime as dt
import math
import operator
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segcat.catalog.errors import InvalidPredicate
from segcat.catalog.protocol import bloom, rules
from segcat.catalog.protocol.expressions import Predicate, col
from segcat.catalog.protocol.model import ColumnStats, ColumnType, Commit, Operation, Segment
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read.snapshot import Snapshot
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.frame_view import FrameView
from segcat.catalog.storage.parquet_stats import segment_from_parquet
from tests.pruning_support import describe, kept, snapshots

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
        bloom=bloom.build("name", ColumnType.STRING, [r["name"] for r in rows]),
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
    stored = keyframe.to_parquet(keyframe.build(state))  # the object-store copy: full, segment_list() works
    frame = FrameView.from_keyframe(keyframe.from_parquet(stored))
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


# ---------------------------------------------------------------------------- issue 7: never drop a
# file holding matching rows. Each case is one file written and described the way Spark jobs do
# (tests.pruning_support), and a predicate whose answer lives in that file.

D = dt.date(2024, 1, 1)
MIDNIGHT = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


def _keeps(
    tmp_path: Path, columns: dict[str, pa.Array], predicate: Predicate, bloom: str | None = None
) -> bool:
    segment = describe(tmp_path, pa.table(columns), bloom_column=bloom)
    answers = {segment.segment_id in kept(snap, predicate) for snap in snapshots([segment])}
    assert len(answers) == 1, "a replay and a key frame must prune alike"
    return answers.pop()


DOUBLES_WITH_NAN = {"d": pa.array([1.0, math.nan])}


@pytest.mark.parametrize(
    "predicate",
    [
        col("d") != 1.0,  # NaN != 1.0
        col("d") > 5.0,  # NaN is above every number
        col("d") >= math.inf,
        col("d") <= math.nan,  # 1.0 <= NaN
        col("d") == math.nan,  # NaN = NaN
        col("d").isin([math.nan]),
        ~(col("d") <= 5.0),
        ~(col("d") == 1.0),
    ],
    ids=str,
)
def test_a_file_holding_nan_is_kept_where_nan_matches(tmp_path: Path, predicate: Predicate) -> None:
    assert _keeps(tmp_path, DOUBLES_WITH_NAN, predicate)


@pytest.mark.parametrize(
    ("columns", "predicate"),
    [
        ({"i": pa.array([2], pa.int64())}, col("i") < 2.5),
        ({"i": pa.array([2], pa.int64())}, col("i") < Decimal("2.5")),
        ({"i": pa.array([2], pa.int64())}, col("i") != 2.5),
        ({"i": pa.array([2], pa.int64())}, col("i") != Decimal("2.5")),
        ({"i": pa.array([-2], pa.int64())}, col("i") > -2.5),
        ({"i": pa.array([-2], pa.int64())}, col("i") > Decimal("-2.5")),
        ({"i": pa.array([2**63 - 1], pa.int64())}, col("i") == float(2**63)),  # equal as doubles
        ({"dt": pa.array([D], pa.date32())}, col("dt") < dt.datetime(2024, 1, 1, 12)),
        ({"dt": pa.array([D], pa.date32())}, col("dt") >= MIDNIGHT),
        ({"ts": pa.array([MIDNIGHT], pa.timestamp("us", tz="UTC"))}, col("ts") == D),
    ],
    ids=lambda v: str(v) if isinstance(v, Predicate) else "",
)
def test_a_literal_of_another_type_compares_as_spark_does(
    tmp_path: Path, columns: dict[str, pa.Array], predicate: Predicate
) -> None:
    assert _keeps(tmp_path, columns, predicate)


@pytest.mark.parametrize(
    ("columns", "bloom", "predicate"),
    [
        ({"d": pa.array([1.0, 5.0, 9.0])}, "d", col("d") == 5),
        ({"d": pa.array([1.0, 5.0, 9.0])}, "d", col("d").isin([5, 100])),
        ({"d": pa.array([1.0, 5.0, 9.0])}, "d", col("d") == Decimal("5.0")),
        ({"i": pa.array([1, 5, 9], pa.int64())}, "i", col("i") == 5.0),
        ({"dt": pa.array([D - DAY, D, D + DAY])}, "dt", col("dt") == dt.datetime(2024, 1, 1)),
        ({"dt": pa.array([D - DAY, D, D + DAY])}, "dt", col("dt") == "2024-01-01"),
        (
            {"ts": pa.array([MIDNIGHT - DAY, MIDNIGHT, MIDNIGHT + DAY])},
            "ts",
            col("ts") == D,
        ),
        ({"d": pa.array([-1.0, -0.0, 1.0])}, "d", col("d") == 0.0),
        ({"d": pa.array([-1.0, -0.0, 0.0, 1.0])}, "d", col("d") == 0.0),
        ({"d": pa.array([-1.0, 0.0, -0.0, 1.0])}, "d", col("d") == -0.0),
        ({"d": pa.array([-1.0, -0.0, 1.0])}, "d", col("d").isin([0])),
    ],
    ids=lambda v: str(v) if isinstance(v, Predicate) else "",
)
def test_bloom_filters_find_what_spark_finds_equal(
    tmp_path: Path, columns: dict[str, pa.Array], bloom: str, predicate: Predicate
) -> None:
    assert _keeps(tmp_path, columns, predicate, bloom=bloom)


def test_nanosecond_timestamps_round_the_bounds_outwards(tmp_path: Path) -> None:
    base = 1_700_000_000_000_000_000
    # …123454.600 and …123456.400 µs: to the nearest µs the min would round up and the max down
    column = {"ts": pa.array([base + 123_454_600, base + 123_456_400], pa.timestamp("ns", tz="UTC"))}
    start = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(microseconds=base // 1000)
    assert _keeps(tmp_path, column, col("ts") > start + dt.timedelta(microseconds=123_456))
    assert _keeps(tmp_path / "b", column, col("ts") < start + dt.timedelta(microseconds=123_455))
    exact = pd.Timestamp(base + 123_456_400, unit="ns", tz="UTC")
    assert _keeps(tmp_path / "c", column, col("ts") >= exact)
    assert _keeps(tmp_path / "d", column, col("ts").isin([exact]))
    # the max is stored as …123457 µs (rounded up): a literal above it prunes
    assert not _keeps(tmp_path / "e", column, col("ts") > exact + pd.Timedelta(1, unit="us"))


@pytest.mark.parametrize(
    ("columns", "bloom", "predicate", "matches"),
    [
        ({"i": pa.array([1, 5], pa.int64())}, "i", col("i") == 2**63, False),
        ({"i": pa.array([1, 5], pa.int64())}, "i", col("i").isin([-(2**63) - 1, 5]), True),
        ({"d": pa.array([1.0, 1e20])}, "d", col("d") == 10**20, True),
        ({"i": pa.array([1, 5], pa.int64())}, "i", col("i") == np.int64(5), True),
        ({"d": pa.array([0.5, 2.0])}, "d", col("d") == np.float32(0.5), True),
        ({"d": pa.array([0.5, 2.0])}, "d", col("d").isin([np.float64(2.0), np.int32(7)]), True),
        ({"ts": pa.array([MIDNIGHT])}, "ts", col("ts") == np.datetime64("2024-01-01T00:00:00"), True),
        ({"ts": pa.array([MIDNIGHT])}, "ts", col("ts") == pd.Timestamp("2024-01-01"), True),
    ],
    ids=lambda v: str(v) if isinstance(v, Predicate) else "",
)
def test_literals_that_used_to_crash_are_answered(
    tmp_path: Path, columns: dict[str, pa.Array], bloom: str, predicate: Predicate, matches: bool
) -> None:
    segment = describe(tmp_path, pa.table(columns), bloom_column=bloom)
    for snap in snapshots([segment]):
        assert (segment.segment_id in kept(snap, predicate)) >= matches


def test_comparing_with_none_is_refused_with_a_pointer_to_is_null() -> None:
    with pytest.raises(InvalidPredicate, match="is_null"):
        col("x") == None  # noqa: B015, E711
    with pytest.raises(InvalidPredicate, match="is_not_null"):
        col("x") != None  # noqa: B015, E711
    with pytest.raises(InvalidPredicate):
        col("x").isin([1, None])
    with pytest.raises(InvalidPredicate):
        _ = col("x") < pd.NaT
    with pytest.raises(InvalidPredicate):
        _ = col("x") == object()


def test_a_float16_column_does_not_break_the_footer(tmp_path: Path) -> None:
    half = pa.array(np.array([1.5, np.nan, -2.0], dtype=np.float16))
    path = tmp_path / "half.parquet"
    pq.write_table(pa.table({"h": half, "i": pa.array([1, 2, 3], pa.int64())}), path)
    segment = segment_from_parquet(str(path), segment_id="half", relative_path="half.parquet")
    stats = {s.column: s for s in segment.stats}
    assert (stats["h"].min, stats["h"].max, stats["h"].nan_count) == (-2.0, 1.5, None)  # NaN: unknown
    for snap in snapshots([segment]):
        assert kept(snap, col("h") > 1.0) == {"half"}
        assert kept(snap, col("h") > 1.5) == {"half"}  # may hold NaN: the footer does not say
        assert kept(snap, col("h") < -2.0) == set()


def test_files_segcat_writes_carry_float_stats_spark_cannot_misread(tmp_path: Path) -> None:
    """Float columns get their stats from the rows (NaN counted), and none in the Parquet
    footer: Spark's filter pushdown trusts footer min/max that skip NaN and would drop them."""
    data = pa.table({"d": pa.array([1.0, math.nan, None, -0.0]), "i": pa.array([1, 2, 3, 4])})
    segment = describe(tmp_path, data)
    stats = {s.column: s for s in segment.stats}
    assert (stats["d"].min, stats["d"].max, stats["d"].null_count, stats["d"].nan_count) == (-0.0, 1.0, 1, 1)
    footer = pq.read_metadata(tmp_path / segment.path).row_group(0)
    assert footer.column(0).statistics is None
    assert footer.column(1).statistics is not None


def test_pruning_still_skips_what_it_can(tmp_path: Path) -> None:
    low = describe(tmp_path, pa.table({"i": pa.array([1, 2], pa.int64()), "d": pa.array([1.0, 2.0])}))
    high = describe(tmp_path, pa.table({"i": pa.array([8, 9], pa.int64()), "d": pa.array([8.0, 9.0])}))
    assert {s.column: s.nan_count for s in low.stats if s.column == "d"} == {"d": 0}
    cases = {
        col("i") < 2.5: {low},
        col("i") > Decimal("2.5"): {high},
        col("i") == 2**63: set(),
        col("i") == 8.5: {high},  # kept: stats say 8.5 lies in [8.0, 9.0] as doubles
        col("d") > 5.0: {high},  # nan_count = 0: no NaN to match
        col("d") == math.nan: set(),
        col("d") < math.nan: {low, high},
        col("d") > math.nan: set(),
        ~(col("i") >= 3): {low},
        ~((col("i") < 5) | (col("d") < 5.0)): {high},
        ~col("i").isin([8.0, 9]): {low, high},  # NOT IN keeps unless a file holds one value only
        col("i").isin([]): set(),
        ~col("i").isin([]): {low, high},
        col("i").is_null(): set(),
    }
    for snap in snapshots([low, high]):
        for predicate, expected in cases.items():
            assert kept(snap, predicate) == {s.segment_id for s in expected}, predicate
