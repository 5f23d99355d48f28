"""Pruning never drops a file holding a row that Spark's rules say matches.

Random small files of every stats type (NaN, ±0.0, ±inf, nulls, nanosecond times, …) are
written and described the way Spark jobs describe them (footer stats, float stats and NaN
counts from the rows, Bloom filters) or by plain pyarrow and described from the footer
alone, several row groups each (``tests.pruning_support``); random predicates mix literals of matching and
mismatching types (NaN, Decimal, numpy scalars, integers beyond BIGINT, strings for
dates). The oracle is a brute-force evaluator written here, from Spark SQL's rules, on the
Python values the files were written from; it never looks at segcat's coercion code.
"""

from __future__ import annotations

import datetime as dt
import math
import operator
import re
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segcat.catalog.errors import InvalidPredicate
from segcat.catalog.protocol.expressions import And, Compare, IsIn, IsNull, Not, Or, Predicate, col
from tests.pruning_support import describe, describe_footer, kept, snapshots

EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
D0 = dt.date(2024, 1, 1)
T0_NS = 1_704_067_200 * 10**9  # 2024-01-01T00:00:00Z
NAN = math.nan
T0 = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
PLUS_ONE = dt.timezone(dt.timedelta(hours=1))

# ---------------------------------------------------------------------------- data

TYPES: dict[str, pa.DataType] = {
    "i": pa.int64(),
    "d": pa.float64(),
    "s": pa.string(),
    "dt": pa.date32(),
    "tu": pa.timestamp("us", tz="UTC"),
    "tn": pa.timestamp("ns", tz="UTC"),
    "b": pa.bool_(),
    "bi": pa.binary(),
}
INTS = [-3, -2, -1, 0, 1, 2, 3, 5, 2**24 + 1, 2**53, 2**53 + 1, 2**63 - 1, -(2**63)]
FLOATS = [NAN, -0.0, 0.0, 1.0, -1.0, 2.5, 5.0, math.inf, -math.inf, 1e20, 2.0**53, 2.0**63, 0.1, 16777216.0]
STRINGS = ["", "a", "ab", "b", "é", "2024-01-01"]
DAYS = [-2, -1, 0, 1, 2]
MICROS = [0, 1, -1, 43_200_000_000, 86_400_000_000, 123_456]  # offsets from T0
NANOS = [0, 1, 999, 1000, 1001, 123_456_789, -1, 86_400_000_000_000]
BYTES = [b"", b"\x00", b"\x7f", b"\x80", b"\xff", b"a"]

VALUES: dict[str, st.SearchStrategy[Any]] = {
    "i": st.one_of(st.sampled_from([-2, 0, 2, 3]), st.sampled_from(INTS)),
    "d": st.one_of(st.sampled_from([NAN, -0.0, 0.0, 1.0, 2.5]), st.sampled_from(FLOATS)),
    "s": st.sampled_from(STRINGS),
    "dt": st.sampled_from(DAYS),
    "tu": st.one_of(st.sampled_from([0, 1, -1]), st.sampled_from(MICROS)),
    "tn": st.one_of(st.sampled_from([0, 1, 1000]), st.sampled_from(NANOS)),
    "b": st.booleans(),
    "bi": st.sampled_from(BYTES),
}
"""Row values as the oracle sees them: dates as day offsets, times as offsets (µs / ns)."""


def arrow_column(name: str, values: list[Any]) -> pa.Array:
    if name == "dt":
        return pa.array([None if v is None else D0 + dt.timedelta(days=v) for v in values], TYPES[name])
    if name == "tu":
        return pa.array([None if v is None else T0_NS // 1000 + v for v in values], TYPES[name])
    if name == "tn":
        return pa.array([None if v is None else T0_NS + v for v in values], TYPES[name])
    return pa.array(values, TYPES[name])


rows_st = st.lists(
    st.fixed_dictionaries({name: st.one_of(values, values, st.none()) for name, values in VALUES.items()}),
    min_size=1,
    max_size=6,
)
file_st = st.tuples(
    rows_st,
    st.one_of(st.none(), st.sampled_from(list(TYPES))),  # the Bloom column
    st.sampled_from([0, 1, 2, 3]),  # 0: written by segcat's writer; n: plain pyarrow, n rows per row group
)

# ---------------------------------------------------------------------------- literals

LITERALS: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from([*INTS, 2**63, -(2**63) - 1, 10**20, 16777217, 10**38]),
    st.sampled_from([*FLOATS, -2.5, 2.0**53 + 2, float(2**63 - 1)]),
    st.sampled_from(["2.5", "-2.5", "0", "0.0", "1.0", "5", "1E+2", "0.1", "9223372036854775808", "NaN"]).map(
        Decimal
    ),
    st.sampled_from(
        [
            np.int64(2),
            np.int32(-2),
            np.uint64(2**63 + 5),
            np.float32(0.1),
            np.float64(NAN),
            np.float16(2.5),
            np.bool_(True),
            np.str_("a"),
            np.datetime64(T0_NS + 1, "ns"),
            np.datetime64("2024-01-01"),
            np.datetime64(T0_NS // 1000 + 123_456, "us"),
        ]
    ),
    st.sampled_from(
        [
            *STRINGS,
            "2024-01-02",
            "2023-12-31",
            "2024-01-01 00:00:00",
            "2024-01-01T12:00:00Z",
            "2024-01-01 00:00:00.000001+01:00",
            "2024-01-01T00:00:00.123456",
            "2024-1-1",
            "garbage",
        ]
    ),
    st.sampled_from(BYTES),
    st.booleans(),
    st.sampled_from(DAYS).map(lambda d: D0 + dt.timedelta(days=d)),
    st.sampled_from(MICROS).map(lambda us: dt.datetime(2024, 1, 1) + dt.timedelta(microseconds=us)),
    st.sampled_from(MICROS).map(lambda us: T0 + dt.timedelta(microseconds=us)),
    st.sampled_from([T0, T0 + dt.timedelta(hours=1)]).map(lambda t: t.astimezone(PLUS_ONE)),
    st.sampled_from(NANOS).map(lambda ns: pd.Timestamp(T0_NS + ns, unit="ns", tz="UTC")),
    st.none(),
)
OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
_TIMES: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(MICROS).map(lambda us: T0 + dt.timedelta(microseconds=us)),
    st.sampled_from(NANOS).map(lambda ns: pd.Timestamp(T0_NS + ns, unit="ns", tz="UTC")),
    st.sampled_from(DAYS).map(lambda d: D0 + dt.timedelta(days=d)),
)
NEAR: dict[str, st.SearchStrategy[Any]] = {
    "i": st.one_of(
        st.sampled_from(INTS),
        st.sampled_from([2.5, -2.5, 2.0, 0.5, float(2**53), 2.0**63, NAN, math.inf]),
        st.sampled_from(["2.5", "-2.5", "2", "3.0"]).map(Decimal),
    ),
    "d": st.one_of(
        st.sampled_from(FLOATS), st.sampled_from([0, 5, 1, -3, 2**53 + 1]), st.just(Decimal("2.5"))
    ),
    "s": st.sampled_from(STRINGS),
    "dt": st.one_of(_TIMES, st.sampled_from(["2024-01-01", "2024-01-02", "2023-12-31"])),
    "tu": st.one_of(
        _TIMES, st.sampled_from(["2024-01-01", "2024-01-01 00:00:00.000001", "2024-01-01T12:00:00Z"])
    ),
    "tn": _TIMES,
    "b": st.booleans(),
    "bi": st.sampled_from(BYTES),
}
"""Literals of (or close to) each column's own type, so that comparisons often find rows."""

Spec = tuple[Any, ...]


def _leaf(column: str) -> st.SearchStrategy[Spec]:
    literal = st.one_of(NEAR[column], NEAR[column], LITERALS)
    return st.one_of(
        st.tuples(st.just("cmp"), st.just(column), st.sampled_from(list(OPS)), literal),
        st.tuples(st.just("in"), st.just(column), st.lists(literal, max_size=3)),
        st.tuples(st.just("null"), st.just(column), st.booleans()),
    )


def predicates(focus: str) -> st.SearchStrategy[Spec]:
    """Predicate trees whose leaves mostly test ``focus`` (so its edge cases meet each other)."""
    leaves = st.one_of(_leaf(focus), _leaf(focus), st.sampled_from(list(TYPES)).flatmap(_leaf))
    trees = st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.tuples(st.just("and"), inner, inner),
            st.tuples(st.just("or"), inner, inner),
            st.tuples(st.just("not"), inner),
        ),
        max_leaves=3,
    )
    return st.one_of(_leaf(focus), st.tuples(st.just("not"), _leaf(focus)), trees)


def build(spec: Spec) -> Predicate:
    kind = spec[0]
    if kind == "cmp":
        c = col(spec[1])
        return {
            "==": lambda v: c == v,
            "!=": lambda v: c != v,
            "<": lambda v: c < v,
            "<=": lambda v: c <= v,
            ">": lambda v: c > v,
            ">=": lambda v: c >= v,
        }[spec[2]](spec[3])
    if kind == "in":
        return col(spec[1]).isin(spec[2])
    if kind == "null":
        return col(spec[1]).is_not_null() if spec[2] else col(spec[1]).is_null()
    if kind == "not":
        return ~build(spec[1])
    left, right = build(spec[1]), build(spec[2])
    return left & right if kind == "and" else left | right


# ---------------------------------------------------------------------------- the oracle
# A truth value is a set of possible SQL outcomes (True / False / None = NULL); MAYBE is a
# combination whose Spark result this oracle does not claim (an error, a lenient cast).

Truth = frozenset[bool | None]
MAYBE: Truth = frozenset({True, False, None})
NULL: Truth = frozenset({None})
_UNKNOWN = object()
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_ISO_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:\d{2})?")


def _plain(value: Any) -> Any:
    """A literal as Python sees it: numpy scalars unwrapped, times as ns since the epoch (UTC)."""
    if isinstance(value, np.datetime64):
        return ("time", int(value.astype("datetime64[ns]").astype(np.int64)))
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, pd.Timestamp):
        return ("time", int(value.value))
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        delta = aware - EPOCH
        return ("time", (delta.days * 86_400 + delta.seconds) * 10**9 + delta.microseconds * 1000)
    if isinstance(value, dt.date):
        return ("date", (value - EPOCH.date()).days)
    return value


def _order(x: float) -> tuple[int, float]:
    """Spark's double order: NaN above everything, -0.0 = 0.0."""
    return (1, 0.0) if math.isnan(x) else (0, x + 0.0)


def _keys(column: str, x: Any, literal: Any, as_double: bool = False) -> tuple[Any, Any] | object:
    """(stored, literal) in the one domain Spark compares them in, or _UNKNOWN."""
    lit = _plain(literal)
    if isinstance(lit, bool) or column == "b":
        return (x, lit) if column == "b" and isinstance(lit, bool) else _UNKNOWN
    if column == "i":
        if isinstance(lit, float) or (as_double and isinstance(lit, int | Decimal)):
            return _order(float(x)), _order(float(lit))
        if isinstance(lit, int | Decimal):
            return Decimal(x), Decimal(lit)
        return _UNKNOWN
    if column == "d":
        if isinstance(lit, int | float | Decimal):
            return _order(x), _order(float(lit))
        return _UNKNOWN
    if column == "s":
        return (x, lit) if isinstance(lit, str) else _UNKNOWN
    if column == "bi":
        return (x, lit) if isinstance(lit, bytes) else _UNKNOWN
    if column == "dt":
        if isinstance(lit, tuple) and lit[0] == "date":
            return (D0 - EPOCH.date()).days + x, lit[1]
        if isinstance(lit, tuple):  # a timestamp: the date at midnight UTC, as a timestamp
            return ((D0 - EPOCH.date()).days + x) * 86_400 * 10**9, lit[1]
        if isinstance(lit, str) and _ISO_DATE.fullmatch(lit):
            return (D0 - EPOCH.date()).days + x, (dt.date.fromisoformat(lit) - EPOCH.date()).days
        return _UNKNOWN
    stored = T0_NS + (x * 1000 if column == "tu" else x)
    if isinstance(lit, tuple):
        return stored, lit[1] if lit[0] == "time" else lit[1] * 86_400 * 10**9
    if isinstance(lit, str) and (_ISO_DATE.fullmatch(lit) or _ISO_TIME.fullmatch(lit)):
        parsed = _plain(dt.datetime.fromisoformat(lit.replace("Z", "+00:00")))
        return stored, parsed[1]
    return _UNKNOWN


def _compare(column: str, x: Any, op: str, literal: Any, as_double: bool = False) -> Truth:
    lit = _plain(literal)
    if column == "i" and isinstance(lit, int | Decimal) and not isinstance(lit, bool) and not as_double:
        # Spark's analyzer folds BIGINT <, <=, >, >= a decimal beyond BIGINT into a constant,
        # for every row, NULL included (an integer beyond BIGINT is a decimal literal)
        if (op in ("<", "<=") and lit > 2**63 - 1) or (op in (">", ">=") and lit < -(2**63)):
            return frozenset({True})
        if (op in ("<", "<=") and lit < -(2**63)) or (op in (">", ">=") and lit > 2**63 - 1):
            return frozenset({False})
    if x is None:
        return NULL
    keys = _keys(column, x, literal, as_double)
    if keys is _UNKNOWN:
        return MAYBE
    stored, lit = keys  # type: ignore[misc]
    return frozenset({OPS[op](stored, lit)})


def _not(t: Truth) -> Truth:
    return frozenset(None if v is None else not v for v in t)


def _and(a: Truth, b: Truth) -> Truth:
    out: set[bool | None] = set()
    for x in a:
        for y in b:
            out.add(False if x is False or y is False else (None if x is None or y is None else True))
    return frozenset(out)


def _or(a: Truth, b: Truth) -> Truth:
    return _not(_and(_not(a), _not(b)))


def evaluate(predicate: Predicate, row: dict[str, Any]) -> Truth:
    if isinstance(predicate, Compare):
        return _compare(predicate.column, row[predicate.column], predicate.op, predicate.value)
    if isinstance(predicate, IsIn):
        if not predicate.values:
            return frozenset({False})  # Spark 4: x IN () is false, even for a NULL x
        plain = [_plain(v) for v in predicate.values]
        # Spark compares the column and all values in one common type: doubles once one is a double
        as_double = any(isinstance(v, float) for v in plain)
        result: Truth = frozenset({False})
        for value in predicate.values:
            step = _compare(predicate.column, row[predicate.column], "==", value, as_double)
            if step == MAYBE:
                return MAYBE
            result = _or(result, step)
        return result
    if isinstance(predicate, IsNull):
        return frozenset({(row[predicate.column] is None) != predicate.negate})
    if isinstance(predicate, Not):
        return _not(evaluate(predicate.operand, row))
    if isinstance(predicate, And | Or):
        combine = _and if isinstance(predicate, And) else _or
        truth = evaluate(predicate.parts[0], row)
        for part in predicate.parts[1:]:
            truth = combine(truth, evaluate(part, row))
        return truth
    raise AssertionError(predicate)


# ---------------------------------------------------------------------------- the property


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("files")


@pytest.mark.parametrize("focus", list(TYPES))
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_prune_never_drops_a_file_holding_a_matching_row(root: Path, focus: str, data: st.DataObject) -> None:
    files = data.draw(st.lists(file_st, min_size=1, max_size=4), label="files")
    segments = [
        describe(root, _table(rows), bloom_column=bloom_column)
        if not group_rows
        else describe_footer(root, _table(rows), group_rows)
        for rows, bloom_column, group_rows in files
    ]
    views = snapshots(segments)
    # several predicates per set of files: writing files costs far more than pruning them
    for spec in data.draw(st.lists(predicates(focus), min_size=1, max_size=8), label="predicates"):
        try:
            predicate = build(spec)
        except InvalidPredicate:
            continue  # None, NaT, a decimal NaN or a literal Spark cannot hold: refused up front
        must_keep = {
            segment.segment_id
            for segment, (rows, _, _) in zip(segments, files, strict=True)
            if any(True in evaluate(predicate, row) for row in rows)
        }
        for snap in views:
            try:
                survivors = kept(snap, predicate)
            except InvalidPredicate:
                continue  # allowed: a predicate that cannot be answered
            assert not must_keep - survivors, f"{predicate} dropped files holding matching rows"


def _table(rows: list[dict[str, Any]]) -> pa.Table:
    return pa.table({name: arrow_column(name, [r[name] for r in rows]) for name in TYPES})


@pytest.mark.parametrize(
    "predicate",
    [
        col("i") == 2.5,
        col("i").isin([2**53 + 1, 0.5]),  # one double makes the whole list compare as doubles
        ~col("d").isin([NAN, 1.0]),
        col("tn") == pd.Timestamp(T0_NS + 1, unit="ns", tz="UTC"),
        col("dt") == "2024-01-01",
    ],
    ids=str,
)
def test_the_oracle_itself(predicate: Predicate) -> None:
    """A few hand-checked answers, so the oracle is known to speak Spark."""
    row = {"i": 2**53, "d": NAN, "s": "a", "dt": 0, "tu": 0, "tn": 1, "b": True, "bi": b""}
    expected = {
        "Compare(column='i', op='==', value=2.5)": frozenset({False}),
        "IsIn(column='i', values=(9007199254740993, 0.5))": frozenset({True}),
        "Not(operand=IsIn(column='d', values=(nan, 1.0)))": frozenset({False}),
        "Compare(column='tn', op='==', value=Timestamp('2024-01-01 00:00:00.000000001+0000', tz='UTC'))": (
            frozenset({True})
        ),
        "Compare(column='dt', op='==', value='2024-01-01')": frozenset({True}),
    }
    assert evaluate(predicate, row) == expected[str(predicate)]
