"""Issue 20 items 17, 18, 21, 22: predicates give Spark's answers or a typed ``InvalidPredicate``.

Nothing built from any Python value may crash with an untyped error, recurse without bound,
or silently mean something else than it reads (``1 < col("i") < 5``, ``p and q``,
``isin("abc")``); and pruning keeps what Spark itself would match for literals beyond
BIGINT (Spark folds the comparison into TRUE, NULL rows included) and for ISO strings with
an offset on a TIMESTAMP_NTZ column (Spark ignores the offset).
"""

from __future__ import annotations

import datetime as dt
import math
import pickle
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segcat.catalog.errors import InvalidPredicate
from segcat.catalog.protocol.expressions import MAX_DEPTH, Not, Predicate, col
from segcat.catalog.protocol.predicates import MAX_DEPTH as PARSER_DEPTH
from segcat.catalog.protocol.predicates import parse_predicate, to_sql
from tests.pruning_support import describe, kept, snapshots

UTC = dt.UTC
PLUS5 = dt.timezone(dt.timedelta(hours=5))
MINUS5 = dt.timezone(dt.timedelta(hours=-5))


REFUSED: dict[str, Any] = {
    "year 1 at +05:00": lambda: col("ts") == dt.datetime(1, 1, 1, tzinfo=PLUS5),
    "datetime.max at -05:00": lambda: col("ts") < dt.datetime.max.replace(tzinfo=MINUS5),
    "year 1 in a list": lambda: col("ts").isin(
        [dt.datetime(1, 1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=2)))]
    ),
    "lone surrogate": lambda: col("s") == "a\ud800b",
    "lone surrogate in a list": lambda: col("s").isin(["ok", "\udfff"]),
    "lone surrogate column": lambda: col("\ud800") == 1,
    "pred & 1": lambda: (col("i") > 1) & 1,
    "pred | None": lambda: (col("i") > 1) | None,
    "1 & pred": lambda: 1 & (col("i") > 1),
    "True | pred": lambda: True | (col("i") > 1),
    "pred & column": lambda: (col("i") > 1) & col("j"),
    "isin(5)": lambda: col("i").isin(5),
    "isin(None)": lambda: col("i").isin(None),
    "isin('abc')": lambda: col("s").isin("abc"),
    "isin(b'ab')": lambda: col("s").isin(b"ab"),
    "isin(dict)": lambda: col("s").isin({"a": 1}),
    "1 < col < 5": lambda: 1 < col("i") < 5,
    "p and q": lambda: (col("i") > 1) and (col("i") < 5),
    "not p": lambda: not (col("i") > 1),
    "bool(col)": lambda: bool(col("i")),
    "decimal 1E+100000000": lambda: col("n") == Decimal("1E+100000000"),
    "TIMESTAMP after 9999 UTC": lambda: parse_predicate("ts = TIMESTAMP '9999-12-31T23:59:59-01:00'"),
    "TIMESTAMP before year 1 UTC": lambda: parse_predicate("ts = TIMESTAMP '0001-01-01T00:00:00+01:00'"),
    "text with a lone surrogate": lambda: parse_predicate("s = 'a\ud800'"),
    "10,000 NOTs": lambda: parse_predicate("NOT " * 10_000 + "x = 1"),
    "10,000 parentheses": lambda: parse_predicate("(" * 10_000 + "x = 1" + ")" * 10_000),
}


@pytest.mark.parametrize("build", list(REFUSED.values()), ids=list(REFUSED))
def test_what_cannot_be_answered_is_a_typed_refusal(build: Any) -> None:
    with pytest.raises(InvalidPredicate):
        build()


def test_nesting_is_bounded_and_double_negation_cancels() -> None:
    base = col("i") > 1
    predicate: Predicate = base
    for _ in range(10_000):
        predicate = ~predicate
    assert predicate == base  # NOT NOT p is p under three-valued logic, NULL included
    deep: Predicate = base
    with pytest.raises(InvalidPredicate, match="deeper than"):
        for _ in range(10_000):
            deep = Not(deep)
    assert deep.depth == MAX_DEPTH
    alternating_deepest: Predicate = base
    for k in range(MAX_DEPTH // 3):
        alternating_deepest = ~((alternating_deepest | (col("j") == k)) & (col("k") == k))
    segments = pa.table({"row_count": pa.array([1], pa.int64())})
    for tree in (deep, alternating_deepest):  # every walk over the deepest trees stays on the stack
        assert tree.depth >= MAX_DEPTH - 2
        assert tree == pickle.loads(pickle.dumps(tree)) and hash(tree) and repr(tree)
        assert tree.negated().negated().columns() == tree.columns()
        assert (~tree).might_match(segments).to_pylist() == tree.might_match(segments).to_pylist() == [True]
    alternating: Predicate = base
    with pytest.raises(InvalidPredicate, match="deeper than"):
        for k in range(10_000):
            alternating = (alternating & (col("j") == k)) | (col("k") == k)
    # a chain of one connective is one level, however long: no depth, no recursion
    chain = base
    for k in range(5_000):
        chain = chain | (col("i") == k)
    assert chain.depth == 1 and to_sql(parse_predicate(to_sql(chain))) == to_sql(chain)
    assert parse_predicate(to_sql(chain)) == chain
    segments = pa.table({"row_count": pa.array([1], pa.int64())})
    assert (~chain).might_match(segments).to_pylist() == [True]
    # the deepest text the parser takes (64 levels, each an OR of an AND) builds: no verdict of a
    # tombstone the grammar accepted changes
    text = "x = 1"
    for _ in range(PARSER_DEPTH - 1):
        text = f"x = 1 OR y = 1 AND ({text})"
    assert parse_predicate(text).depth == 2 * (PARSER_DEPTH - 1) <= MAX_DEPTH
    with pytest.raises(InvalidPredicate):
        parse_predicate(f"x = 1 OR y = 1 AND ({text})")


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("files")


def test_literals_beyond_bigint_keep_what_spark_folds_to_true(root: Path) -> None:
    """Spark's analyzer folds ``i <= 2^63`` (an integral column, a decimal beyond BIGINT) into TRUE
    for every row: a file whose ``i`` is all NULL matches, and pruning must keep it."""
    nulls = describe(root, pa.table({"i": pa.array([None, None], pa.int64())}))
    some = describe(root, pa.table({"i": pa.array([1, None], pa.int64())}))
    for view in snapshots([nulls, some]):
        for predicate in (
            col("i") > -(2**63) - 1,
            col("i") > -(10**37),
            col("i") >= Decimal("-9223372036854775808.5"),
            col("i") <= 2**63,
            col("i") < Decimal("9223372036854775807.5"),
            ~(col("i") > 2**63),
        ):
            assert kept(view, predicate) == {nulls.segment_id, some.segment_id}, predicate
        # folded to FALSE, or not folded at all (=, !=, IN): NULL rows do not match
        for predicate in (col("i") > 2**63, col("i") == 2**63, col("i") != 2**63, col("i").isin([2**63])):
            assert nulls.segment_id not in kept(view, predicate), predicate


def test_a_string_with_an_offset_keeps_what_a_timestamp_ntz_column_matches(root: Path) -> None:
    """Spark casts ``'2024-01-02T04:00:00+02:00'`` for a TIMESTAMP_NTZ column to 04:00 and ignores
    the offset: a file holding 03:00 matches ``<``, ``!=`` and ``NOT IN``."""
    three = describe(root, pa.table({"t": pa.array([dt.datetime(2024, 1, 2, 3)], pa.timestamp("us"))}))
    text = "2024-01-02T04:00:00+02:00"
    for view in snapshots([three]):
        for predicate in (col("t") < text, col("t") != text, ~col("t").isin([text]), col("t") <= text):
            assert kept(view, predicate) == {three.segment_id}, predicate


def test_times_beyond_the_years_python_holds_prune_without_crashing(root: Path) -> None:
    """Strings a TIMESTAMP column casts to instants outside 0001..9999 UTC are answered in µs."""
    late = describe(
        root, pa.table({"t": pa.array([dt.datetime(9999, 12, 31, 23)], pa.timestamp("us", "UTC"))})
    )
    early = describe(
        root, pa.table({"t": pa.array([dt.datetime(1, 1, 1, 0, 30)], pa.timestamp("us", "UTC"))})
    )
    for view in snapshots([late, early]):
        assert kept(view, col("t") < "9999-12-31T23:59:59-01:00") == {late.segment_id, early.segment_id}
        assert kept(view, col("t") > "0001-01-01T00:00:00+01:00") == {late.segment_id, early.segment_id}
        assert kept(view, col("t") == "9999-12-31T23:59:59-01:00") == set()


# ---------------------------------------------------------------------------- any Python value

ANYTHING: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(),
    st.decimals(),
    st.text(alphabet=st.characters(codec=None, categories=None), max_size=4),
    st.binary(max_size=4),
    st.dates(),
    st.datetimes(timezones=st.one_of(st.none(), st.timezones(), st.just(PLUS5), st.just(MINUS5))),
    st.sampled_from([np.int64(3), np.float32(math.nan), np.datetime64("NaT"), np.datetime64(1, "as")]),
    st.sampled_from(["9999-12-31T23:59:59-01:00", "0001-01-01T00:00:00+01:00", "2024-01-01T00:00:00+18:30"]),
    st.lists(st.integers(), max_size=2),
    st.dictionaries(st.text(max_size=1), st.integers(), max_size=1),
    st.just(object()),
    st.just(col("other")),
)


def _any_predicate(data: st.DataObject) -> Predicate:
    column = data.draw(st.sampled_from(["i", "d", "s", "dt", "ts", "tn", "missing"]))
    value = data.draw(ANYTHING)
    how = data.draw(st.sampled_from(["==", "!=", "<", "<=", ">", ">=", "isin", "isin_one", "&", "|"]))
    c = col(column)
    if how == "isin":
        return c.isin(value)
    if how == "isin_one":
        return c.isin([value])
    if how in ("&", "|"):
        left = c.is_null()
        return left & value if how == "&" else left | value  # type: ignore[no-any-return]
    return {  # type: ignore[no-any-return]
        "==": lambda: c == value,
        "!=": lambda: c != value,
        "<": lambda: c < value,
        "<=": lambda: c <= value,
        ">": lambda: c > value,
        ">=": lambda: c >= value,
    }[how]()


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_value_builds_an_answerable_predicate_or_is_refused(root: Path, data: st.DataObject) -> None:
    table = pa.table(
        {
            "i": pa.array([1, None], pa.int64()),
            "d": pa.array([math.nan, -0.0]),
            "s": pa.array(["a", None]),
            "dt": pa.array([dt.date(2024, 1, 1), None]),
            "ts": pa.array([dt.datetime(2024, 1, 1), None], pa.timestamp("us", "UTC")),
            "tn": pa.array([dt.datetime(2024, 1, 1), None], pa.timestamp("us")),
        }
    )
    views = _VIEWS.setdefault("views", snapshots([describe(root, table, bloom_column="s")]))
    try:
        predicate = _any_predicate(data)
    except InvalidPredicate:
        return
    for view in views:
        view.prune(predicate)
        view.prune(~predicate)
    try:
        text = to_sql(predicate)
    except InvalidPredicate:
        return  # nanoseconds, or IN (): no SQL literal
    assert parse_predicate(text) == predicate


_VIEWS: dict[str, Any] = {}
