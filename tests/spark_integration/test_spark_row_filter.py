"""``row_filter`` answers every row exactly as Spark's filter of the same tombstone does.

Random rows of every column type segcat applies tombstones on, written to one Parquet file
that Spark reads (so both sides see the same values and types: int, bigint, float, double,
string, binary, boolean, date, timestamp, timestamp_ntz), and random predicates over them,
literals of other types included (the coercion table of docs/PROTOCOL.md §4a). Each example
is one Spark query holding every predicate as a column
(``coalesce(to_column(p, utc=True), false)``, what ``si.read`` deletes with); ``row_filter``
must agree row by row wherever it answers, and it may only decline with
``UnsupportedPredicate``.
"""

from __future__ import annotations

import datetime as dt
import math
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from segcat.catalog.errors import UnsupportedPredicate
from segcat.catalog.protocol.expressions import And, Compare, IsIn, IsNull, Not, Or, Predicate
from segcat.catalog.protocol.row_filter import matches
from segcat.spark_integration.filters import to_column
from tests.spark_support import spark

pytestmark = [pytest.mark.spark]

__all__ = ["spark"]

UTC = dt.UTC
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)
H = dt.timedelta(hours=1)

INTS = [-(2**63), -1, 0, 1, 2, 3, 2**53 + 1, 2**62, 2**63 - 1]
DOUBLES = [math.nan, -0.0, 0.0, 1.5, 2.5, 3.0, math.inf, -math.inf, 1e300, 0.1]
FLOAT32 = [math.nan, -0.0, 0.0, 1.5, 2.5, 3.0, math.inf, 16777217.0]
STRINGS = ["", "a", "b", "ab", "é", "𝄞", "A"]
BYTES = [b"", b"\x00", b"a", b"\xff", b"ab"]
DATES = [dt.date(2024, 1, 1), dt.date(2023, 12, 31), dt.date(1970, 1, 1), dt.date(1, 1, 1)]
TIMES = [T0, T0 + H, T0 - H, T0 + dt.timedelta(microseconds=1), dt.datetime(1500, 1, 1, tzinfo=UTC)]

COLUMNS: dict[str, tuple[pa.DataType, list[object]]] = {
    "i": (pa.int64(), INTS),
    "n": (pa.int32(), [v for v in INTS if -(2**31) <= v < 2**31]),
    "d": (pa.float64(), DOUBLES),
    "f": (pa.float32(), FLOAT32),
    "s": (pa.string(), STRINGS),
    "b": (pa.binary(), BYTES),
    "bo": (pa.bool_(), [True, False]),
    "dt": (pa.date32(), DATES),
    "ts": (pa.timestamp("us", tz="UTC"), TIMES),
    "tn": (pa.timestamp("us"), [t.replace(tzinfo=None) for t in TIMES]),
}

_numbers = st.one_of(
    st.sampled_from(INTS),
    st.sampled_from([2**63, -(2**63) - 1, 10**30]),
    st.sampled_from(DOUBLES + FLOAT32),
    st.sampled_from(
        [
            Decimal("2.5"),
            Decimal("0.1"),
            Decimal("3"),
            Decimal("-0.5"),
            Decimal("1.1"),
            Decimal("0.30"),
            Decimal("9223372036854775807.5"),
        ]
    ),
)
_time_text = st.sampled_from(
    ["2024-01-01", "2024-01-01 00:00:00", "2024-01-01T01:00:00+02:00", "2024-01-01T00:00:00.000001Z"]
)
LITERALS: dict[str, st.SearchStrategy[object]] = {
    "i": _numbers,
    "n": _numbers,
    "d": _numbers,
    "f": _numbers,
    "s": st.sampled_from(STRINGS),
    "b": st.sampled_from(BYTES),
    "bo": st.booleans(),
    "dt": st.one_of(
        st.sampled_from(DATES), st.sampled_from(TIMES), st.sampled_from(["2024-01-01", "2023-12-31"])
    ),
    "ts": st.one_of(st.sampled_from(TIMES), st.sampled_from(DATES), _time_text),
    "tn": st.one_of(st.sampled_from(TIMES), st.sampled_from(DATES), _time_text),
}


@st.composite
def _leaf(draw: st.DrawFn) -> Predicate:
    column = draw(st.sampled_from([*COLUMNS, "missing"]))
    literals = LITERALS.get(column, st.sampled_from(INTS))
    shape = draw(st.sampled_from(["compare", "compare", "in", "null"]))
    if shape == "null":
        return IsNull(column, negate=draw(st.booleans()))
    if shape == "in":
        return IsIn(column, tuple(draw(st.lists(literals, min_size=1, max_size=3))))
    return Compare(column, draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">="])), draw(literals))  # type: ignore[arg-type]


_predicates = st.recursive(
    _leaf(),
    lambda inner: st.one_of(
        inner.map(Not),
        st.lists(inner, min_size=2, max_size=3).map(lambda ps: And(*ps)),
        st.lists(inner, min_size=2, max_size=3).map(lambda ps: Or(*ps)),
    ),
    max_leaves=4,
)


@st.composite
def _rows(draw: st.DrawFn) -> pa.Table:
    n = draw(st.integers(1, 12))
    data: dict[str, pa.Array] = {"rid": pa.array(range(n), pa.int64())}
    for name, (kind, pool) in COLUMNS.items():
        values = draw(st.lists(st.one_of(st.none(), st.sampled_from(pool)), min_size=n, max_size=n))
        data[name] = pa.array(values, kind)
    return pa.table(data)


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(rows=_rows(), predicates=st.lists(_predicates, min_size=1, max_size=20))
def test_row_filter_answers_as_spark(
    spark: SparkSession, tmp_path_factory: pytest.TempPathFactory, rows: pa.Table, predicates: list[Predicate]
) -> None:
    path = Path(tmp_path_factory.mktemp("rows")) / "rows.parquet"
    pq.write_table(rows, path)
    read = pq.read_table(path)
    ours: list[tuple[int, list[bool]]] = []
    for k, predicate in enumerate(predicates):
        try:
            ours.append((k, matches(predicate, read).tolist()))
        except UnsupportedPredicate:
            continue
    if not ours:
        return
    frame = spark.read.parquet(str(path))
    columns = [
        F.coalesce(
            to_column(predicates[k], columns=frame.columns, schema=frame.schema, utc=True), F.lit(False)
        ).alias(f"p{k}")
        for k, _ in ours
    ]
    answer = frame.select("rid", *columns).orderBy("rid").collect()
    for k, mask in ours:
        theirs = [bool(row[f"p{k}"]) for row in answer]
        assert mask == theirs, (predicates[k], read.to_pylist())
