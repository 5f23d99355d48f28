"""Predicates for data skipping and row filters: ``col("ts") >= t & ~(col("user") == "u1")``.

One rule set serves pruning, row filters and tombstones: **Spark SQL's comparison
semantics** (docs/PROTOCOL.md §4a). NULL compares as unknown (no match); NaN = NaN and NaN
is greater than every number, +inf included; -0.0 = 0.0; a literal of another type than
the column is compared the way Spark's implicit coercion compares it (a BIGINT column with
a DOUBLE literal as doubles, a DATE column with a TIMESTAMP literal as the date's midnight
UTC, a DATE / TIMESTAMP column with a string literal as the string cast, …).

Each predicate answers "might a row of this segment match?" for every segment at once,
from the typed ``min:`` / ``max:`` / ``nulls:`` / ``nans:`` columns of ``Snapshot.segments``
(a few Arrow compute calls per leaf). The promise is one-sided: pruning may keep a segment
without a matching row, it never drops one with a matching row. So whatever is unknown,
unsure or not exactly representable keeps the segment: missing stats, a combination of
column and literal type whose Spark semantics segcat does not model, a literal that falls
between two values of the column's type (compared through its floor and ceiling). NOT is
pushed into the leaves (``negated``), which is exact under SQL's three-valued logic because
Spark orders every comparison domain totally (NaN on top). Equality and ``isin`` also
consult Bloom filters, probed with the literal converted exactly to the column's type.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from segcat.catalog.errors import InvalidPredicate
from segcat.catalog.protocol import bloom
from segcat.catalog.protocol.model import BloomFilter, ColumnType, StatValue

LiteralValue = StatValue | Decimal
"""What a predicate compares a column with (Decimal: an exact SQL decimal literal)."""

OPS = ("==", "!=", "<", "<=", ">", ">=")
MAX_DECIMAL_DIGITS = 38
"""Spark's widest decimal: an integer or Decimal literal with more digits has no Spark literal."""

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_DAY_US = 86_400_000_000
_NEGATE_OP = {"==": "!=", "!=": "==", "<": ">=", ">=": "<", "<=": ">", ">": "<="}
_DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP_TEXT = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:Z|[+-]\d{2}:\d{2})?)?"
)
"""String literals whose Spark cast segcat states exactly; any other string keeps every segment."""

_DOUBLE = pa.float64()
_TIMESTAMP = pa.timestamp("us", tz="UTC")
_DOMAIN: dict[ColumnType, pa.DataType] = {
    ColumnType.INT: pa.int64(),
    ColumnType.FLOAT: _DOUBLE,
    ColumnType.STRING: pa.string(),
    ColumnType.DATE: pa.date32(),
    ColumnType.TIMESTAMP: _TIMESTAMP,
    ColumnType.BOOLEAN: pa.bool_(),
    ColumnType.BINARY: pa.binary(),
}
"""The Arrow type of a column's stats in ``Snapshot.segments`` (catalog.segments_arrow)."""


# ---------------------------------------------------------------------------- literals


def literal(value: object) -> LiteralValue:
    """``value`` as a canonical predicate literal, or ``InvalidPredicate`` if it cannot be one.

    numpy scalars become Python values, naive datetimes UTC, aware ones UTC; a pandas
    Timestamp keeps its nanoseconds only when it has some; every NaN is ``math.nan`` (so
    equal predicates compare equal). ``None`` is refused: ``x == NULL`` is never true in
    SQL, ``is_null()`` is what is meant.
    """
    if value is None:
        raise InvalidPredicate("comparing with None (NULL) is never true in SQL; use col(...).is_null()")
    if isinstance(value, np.datetime64):
        return _from_datetime64(value)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) >= 10**MAX_DECIMAL_DIGITS:
            raise InvalidPredicate(f"integer literal {value} has more than {MAX_DECIMAL_DIGITS} digits")
        return value
    if isinstance(value, float):
        return math.nan if math.isnan(value) else value
    if isinstance(value, Decimal):
        return _decimal(value)
    if isinstance(value, str):
        return value
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dt.datetime):
        return _datetime(value)
    if isinstance(value, dt.date):
        return value
    raise InvalidPredicate(f"no SQL literal for a {type(value).__name__} ({value!r:.80})")


def _decimal(value: Decimal) -> Decimal:
    if not value.is_finite():
        raise InvalidPredicate(f"decimal {value} has no SQL literal (use a float for NaN / infinity)")
    if value.as_tuple().exponent > 0:  # type: ignore[operator]  # 1E+5: Spark refuses negative scales
        value = Decimal(int(value))
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    if max(len(digits), -exponent) > MAX_DECIMAL_DIGITS:
        raise InvalidPredicate(f"decimal literal {value} has more than {MAX_DECIMAL_DIGITS} digits")
    return value


def _datetime(value: dt.datetime) -> dt.datetime:
    if value != value:  # pandas NaT
        raise InvalidPredicate("comparing with NaT (NULL) is never true in SQL; use col(...).is_null()")
    if hasattr(value, "tz_localize"):  # a pandas Timestamp
        stamp: Any = value
        utc = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
        moment: dt.datetime = utc if utc.nanosecond else utc.to_pydatetime()
        return moment
    return value.replace(tzinfo=dt.UTC) if value.tzinfo is None else value.astimezone(dt.UTC)


def _from_datetime64(value: np.datetime64) -> LiteralValue:
    """A numpy datetime64 (any unit) as a UTC timestamp literal; a day unit is midnight."""
    if np.isnat(value):
        raise InvalidPredicate("comparing with NaT (NULL) is never true in SQL; use col(...).is_null()")
    unit, _ = np.datetime_data(value.dtype)
    if unit in ("ps", "fs", "as"):
        raise InvalidPredicate(f"{value} is finer than nanoseconds")
    if unit == "ns":
        nanos = int(value.astype(np.int64))
        if nanos % 1000:  # a pandas Timestamp (what Arrow gives for nanoseconds)
            stamp: dt.datetime = pa.scalar(nanos, type=pa.timestamp("ns", tz="UTC")).as_py()
            return _datetime(stamp)
        return _EPOCH + dt.timedelta(microseconds=nanos // 1000)
    moment = value.astype("datetime64[us]").item()
    if not isinstance(moment, dt.datetime):
        raise InvalidPredicate(f"{value} lies outside the years 1 to 9999")
    return moment.replace(tzinfo=dt.UTC)


# ---------------------------------------------------------------------------- coercion


_NOTHING: Any = object()
"""``_Operand.stored`` when no single stored value equals the literal exactly."""


@dataclass(frozen=True)
class _Operand:
    """A literal as Spark compares it with a column: in ``domain``, somewhere in [lo, hi].

    ``lo == hi``: exact. Otherwise the literal falls strictly between two values of the
    domain (or Spark's rounding is not pinned down) and only the interval is certain;
    None is unbounded. ``nan``: the literal is NaN (double domain). ``stored``: the one
    value of the column's own type Spark finds equal to the literal, for Bloom probes.
    """

    domain: pa.DataType
    lo: Any
    hi: Any
    nan: bool = False
    stored: Any = _NOTHING

    @property
    def exact(self) -> bool:
        return self.lo is not None and self.lo == self.hi


def _exact(domain: pa.DataType, value: Any, stored: Any = _NOTHING) -> _Operand:
    return _Operand(domain, value, value, stored=stored)


def _integer_operand(value: int | Decimal) -> _Operand:
    """An INT column against an integer or decimal literal: Spark compares exactly (as decimals)."""
    floor, ceil = math.floor(value), math.ceil(value)
    if floor > _INT64_MAX:
        return _Operand(pa.int64(), _INT64_MAX, None)
    if ceil < _INT64_MIN:
        return _Operand(pa.int64(), None, _INT64_MIN)
    lo = floor if floor >= _INT64_MIN else None
    hi = ceil if ceil <= _INT64_MAX else None
    stored = floor if floor == ceil else _NOTHING
    return _Operand(pa.int64(), lo, hi, stored=stored)


def _double_operand(value: float, kind: ColumnType) -> _Operand:
    """A double literal (the column compared as double: FLOAT, or INT cast to double)."""
    if math.isnan(value):
        return _Operand(_DOUBLE, None, None, nan=True)
    stored: Any = _NOTHING
    if kind is ColumnType.FLOAT:
        stored = value
    elif value.is_integer() and abs(value) < 2**53:  # no other int64 casts to this double
        stored = int(value)
    return _exact(_DOUBLE, value, stored)


def _as_double(value: int | Decimal, kind: ColumnType) -> _Operand:
    """An integer or decimal literal Spark casts to double (a FLOAT column, or an IN list with doubles).

    A BIGINT literal casts exactly as Python's ``float`` does. Otherwise the interval covers
    every rounding Spark could make: a decimal-to-double cast may round twice (one ulp), and
    a non-ANSI session compares a FLOAT (float32) column with an integer as float32.
    """
    rounded = float(value)
    if isinstance(value, int) and kind is ColumnType.INT and _INT64_MIN <= value <= _INT64_MAX:
        return _double_operand(rounded, kind)
    if isinstance(value, int) and kind is ColumnType.FLOAT:
        if abs(value) <= 2**24:
            return _double_operand(rounded, kind)
        single = np.float32(rounded)
        with np.errstate(over="ignore"):
            down = float(np.nextafter(single, np.float32(-np.inf)))
            up = float(np.nextafter(single, np.float32(np.inf)))
        low, high = math.nextafter(rounded, -math.inf), math.nextafter(rounded, math.inf)
        return _Operand(_DOUBLE, min(down, low), max(up, high))
    if Decimal(rounded) == Decimal(value):
        return _double_operand(rounded, kind)
    return _Operand(_DOUBLE, math.nextafter(rounded, -math.inf), math.nextafter(rounded, math.inf))


def _time_operand(value: dt.datetime, kind: ColumnType) -> _Operand:
    """A timestamp literal in microseconds; sub-microsecond literals fall between floor and ceil."""
    nanosecond = int(getattr(value, "nanosecond", 0))
    micros = bloom.micros(value)
    if nanosecond:
        return _Operand(_TIMESTAMP, micros, micros + 1)
    stored: Any = _EPOCH + dt.timedelta(microseconds=micros)
    if kind is ColumnType.DATE:
        stored = stored.date() if micros % _DAY_US == 0 else _NOTHING
    return _exact(_TIMESTAMP, micros, stored)


def operand(kind: ColumnType, value: LiteralValue) -> _Operand | None:
    """How Spark compares a ``kind`` column with ``value``; None: segcat does not know (keep)."""
    if isinstance(value, bool):
        return _exact(pa.bool_(), value, value) if kind is ColumnType.BOOLEAN else None
    if kind is ColumnType.INT:
        if isinstance(value, int | Decimal):
            return _integer_operand(value)
        if isinstance(value, float):
            return _double_operand(value, kind)
        return None
    if kind is ColumnType.FLOAT:
        if isinstance(value, float):
            return _double_operand(value, kind)
        if isinstance(value, int | Decimal):
            return _as_double(value, kind)
        return None
    if kind is ColumnType.STRING:
        return _exact(pa.string(), value, value) if isinstance(value, str) else None
    if kind is ColumnType.BINARY:
        return _exact(pa.binary(), value, value) if isinstance(value, bytes) else None
    if kind is ColumnType.DATE:
        if isinstance(value, dt.datetime):
            return _time_operand(value, kind)
        if isinstance(value, dt.date):
            return _exact(pa.date32(), value, value)
        if isinstance(value, str) and _DATE_TEXT.fullmatch(value):
            try:
                day = dt.date.fromisoformat(value)
            except ValueError:
                return None
            return _exact(pa.date32(), day, day)
        return None
    if kind is ColumnType.TIMESTAMP:
        if isinstance(value, dt.datetime):
            return _time_operand(value, kind)
        if isinstance(value, dt.date):
            return _time_operand(dt.datetime.combine(value, dt.time(), tzinfo=dt.UTC), kind)
        if isinstance(value, str) and _TIMESTAMP_TEXT.fullmatch(value):
            try:
                moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                return None
            return _time_operand(_datetime(moment), kind)
        return None
    return None


def _in_operands(kind: ColumnType, values: tuple[LiteralValue, ...]) -> list[_Operand | None]:
    """Operands of an IN list: Spark coerces the column and *all* values to one common type."""
    if not (kind is ColumnType.INT and any(isinstance(v, float) for v in values)):
        return [operand(kind, v) for v in values]
    numeric = (int, Decimal)
    return [
        _as_double(v, kind) if isinstance(v, numeric) and not isinstance(v, bool) else operand(kind, v)
        for v in values
    ]


# ---------------------------------------------------------------------------- stats


def _true(n: int) -> pa.Array:
    return pa.array(np.ones(n, dtype=bool))


def _false(n: int) -> pa.Array:
    return pa.array(np.zeros(n, dtype=bool))


def _filled(mask: Any) -> pa.Array:
    """Unknown (null) is "might match"."""
    out = pc.fill_null(mask, True)
    return out.combine_chunks() if isinstance(out, pa.ChunkedArray) else out


def _array(segments: pa.Table, name: str) -> pa.Array | None:
    if name not in segments.column_names:
        return None
    return segments.column(name).combine_chunks()


def stats_kind(segments: pa.Table, column: str) -> ColumnType | None:
    """The table's type of ``column`` from its stats columns; None: no stats, or a type segcat cannot read."""
    name = f"min:{column}"
    if name not in segments.column_names:
        return None
    arrow = segments.schema.field(name).type
    return next((kind for kind, typed in _DOMAIN.items() if typed.equals(arrow)), None)


@dataclass(frozen=True)
class _Stats:
    """One column's stats for every segment; the masks are filled (unknown = True)."""

    kind: ColumnType
    lo: pa.Array
    hi: pa.Array
    has_value: pa.Array
    """Might hold a non-null value."""
    has_number: pa.Array
    """Might hold a non-null value that is not NaN."""
    has_nan: pa.Array
    """Might hold NaN (FLOAT only)."""

    def bounds(self, domain: pa.DataType) -> tuple[pa.Array, pa.Array]:
        """min / max in ``domain``; the casts are monotonic, so bound tests stay exact."""
        if domain.equals(self.lo.type):
            return self.lo, self.hi
        return pc.cast(self.lo, domain, safe=False), pc.cast(self.hi, domain, safe=False)


def _stats(segments: pa.Table, column: str) -> _Stats | None:
    kind = stats_kind(segments, column)
    lo, hi = _array(segments, f"min:{column}"), _array(segments, f"max:{column}")
    if kind is None or lo is None or hi is None:
        return None
    n = segments.num_rows
    rows = _array(segments, "row_count")
    nulls = _array(segments, f"nulls:{column}")
    has_value = _true(n) if nulls is None or rows is None else _filled(pc.less(nulls, rows))
    if kind is not ColumnType.FLOAT:
        return _Stats(kind, lo, hi, has_value, has_value, _false(n))
    # v1 logs may hold NaN bounds: those bounds say nothing
    lo = pc.if_else(pc.is_nan(lo), pa.scalar(None, _DOUBLE), lo)
    hi = pc.if_else(pc.is_nan(hi), pa.scalar(None, _DOUBLE), hi)
    nans = _array(segments, f"nans:{column}")
    if nans is None:
        return _Stats(kind, lo, hi, has_value, has_value, _true(n))
    has_nan = _filled(pc.greater(nans, 0))
    has_number = has_value if nulls is None or rows is None else _filled(pc.less(pc.add(nulls, nans), rows))
    return _Stats(kind, lo, hi, has_value, has_number, has_nan)


def _compare_mask(stats: _Stats, op: str, arg: _Operand) -> pa.Array:
    """Might a segment hold x with ``x op arg`` true, under Spark's ordering (NaN on top)?"""
    n = len(stats.has_value)
    if arg.nan:  # every number is < NaN; only NaN is == NaN
        return {
            "<": stats.has_number,
            "<=": stats.has_value,
            ">": _false(n),
            ">=": stats.has_nan,
            "==": stats.has_nan,
            "!=": stats.has_number,
        }[op]
    lo, hi = stats.bounds(arg.domain)
    low = None if arg.lo is None else pa.scalar(arg.lo, type=arg.domain)
    high = None if arg.hi is None else pa.scalar(arg.hi, type=arg.domain)

    def numbers(test: Any) -> pa.Array:
        return pc.and_(_filled(test), stats.has_number)

    if op in ("<", "<="):
        if high is None:
            return stats.has_number
        return numbers((pc.less if op == "<" else pc.less_equal)(lo, high))
    if op in (">", ">="):
        if low is None:
            return stats.has_value
        return pc.or_(numbers((pc.greater if op == ">" else pc.greater_equal)(hi, low)), stats.has_nan)
    if op == "==":
        mask = stats.has_number
        if high is not None:
            mask = pc.and_(mask, _filled(pc.less_equal(lo, high)))
        if low is not None:
            mask = pc.and_(mask, _filled(pc.greater_equal(hi, low)))
        return mask
    if not arg.exact:  # "!=" a value strictly between two of the domain: every number differs
        return stats.has_value
    same = pc.fill_null(pc.and_kleene(pc.equal(lo, low), pc.equal(hi, low)), False)
    return pc.or_(pc.and_(pc.invert(same), stats.has_number), stats.has_nan)


# ---------------------------------------------------------------------------- predicates


class Predicate:
    """A boolean SQL expression over one row; ``&``, ``|`` and ``~`` combine predicates."""

    def __and__(self, other: Predicate) -> Predicate:
        return And(self, other)

    def __or__(self, other: Predicate) -> Predicate:
        return Or(self, other)

    def __invert__(self) -> Predicate:
        return Not(self)

    def might_match(self, segments: pa.Table) -> pa.Array:
        """A boolean per segment, never null: False = certainly no matching row."""
        raise NotImplementedError

    def negated(self) -> Predicate:
        """The predicate true exactly where this one is false (SQL NOT, NULL stays NULL)."""
        raise NotImplementedError

    def bloom_might_match(self, flt: BloomFilter, kind: ColumnType) -> bool:
        """False only if the Bloom filter (over a ``kind`` column) proves no row matches."""
        return True

    def may_use_bloom(self) -> bool:
        """Whether ``bloom_might_match`` can ever say False (saves probing)."""
        return False

    def columns(self) -> frozenset[str]:
        """The columns the predicate reads."""
        raise NotImplementedError


@dataclass(frozen=True)
class Compare(Predicate):
    """``column op value``; ``op`` is one of ``OPS``."""

    column: str
    op: str
    value: LiteralValue

    def __post_init__(self) -> None:
        _check_column(self.column)
        if self.op not in OPS:
            raise InvalidPredicate(f"unknown comparison {self.op!r}; one of {', '.join(OPS)}")
        object.__setattr__(self, "value", literal(self.value))

    def might_match(self, segments: pa.Table) -> pa.Array:
        stats = _stats(segments, self.column)
        arg = None if stats is None else operand(stats.kind, self.value)
        if stats is None or arg is None:
            return _true(segments.num_rows)
        return _compare_mask(stats, self.op, arg)

    def negated(self) -> Predicate:
        return Compare(self.column, _NEGATE_OP[self.op], self.value)

    def bloom_might_match(self, flt: BloomFilter, kind: ColumnType) -> bool:
        if self.op != "==" or flt.column != self.column:
            return True
        arg = operand(kind, self.value)
        return arg is None or arg.stored is _NOTHING or bloom.might_contain(flt, kind, arg.stored)

    def may_use_bloom(self) -> bool:
        return self.op == "=="

    def columns(self) -> frozenset[str]:
        return frozenset((self.column,))


@dataclass(frozen=True)
class IsIn(Predicate):
    """``column IN (values)``: Spark compares the column and all values in one common type."""

    column: str
    values: tuple[LiteralValue, ...]

    def __post_init__(self) -> None:
        _check_column(self.column)
        object.__setattr__(self, "values", tuple(literal(v) for v in self.values))

    def might_match(self, segments: pa.Table) -> pa.Array:
        stats = _stats(segments, self.column)
        if stats is None:
            return _true(segments.num_rows)
        result = _false(segments.num_rows)
        for arg in _in_operands(stats.kind, self.values):
            if arg is None:
                return _true(segments.num_rows)
            result = pc.or_(result, _compare_mask(stats, "==", arg))
        return result

    def negated(self) -> Predicate:
        return _NotIn(self.column, self.values)

    def bloom_might_match(self, flt: BloomFilter, kind: ColumnType) -> bool:
        if flt.column != self.column:
            return True
        for arg in _in_operands(kind, self.values):
            if arg is None or arg.stored is _NOTHING or bloom.might_contain(flt, kind, arg.stored):
                return True
        return False

    def may_use_bloom(self) -> bool:
        return True

    def columns(self) -> frozenset[str]:
        return frozenset((self.column,))


@dataclass(frozen=True)
class _NotIn(Predicate):
    """``column NOT IN (values)``: only made by ``negated`` (write ``~col(c).isin(...)``)."""

    column: str
    values: tuple[LiteralValue, ...]

    def might_match(self, segments: pa.Table) -> pa.Array:
        result = _true(segments.num_rows)
        stats = _stats(segments, self.column)
        if stats is None:
            return result
        for arg in _in_operands(stats.kind, self.values):
            if arg is None:  # one value segcat cannot place changes the list's common type: keep
                return _true(segments.num_rows)
            result = pc.and_(result, _compare_mask(stats, "!=", arg))
        return result

    def negated(self) -> Predicate:
        return IsIn(self.column, self.values)

    def columns(self) -> frozenset[str]:
        return frozenset((self.column,))


@dataclass(frozen=True)
class IsNull(Predicate):
    """``column IS NULL`` (``negate=True``: ``IS NOT NULL``); NaN is not NULL."""

    column: str
    negate: bool = False
    """True: ``IS NOT NULL``."""

    def __post_init__(self) -> None:
        _check_column(self.column)

    def might_match(self, segments: pa.Table) -> pa.Array:
        nulls, rows = _array(segments, f"nulls:{self.column}"), _array(segments, "row_count")
        if nulls is None or rows is None:
            return _true(segments.num_rows)
        if self.negate:
            return _filled(pc.less(nulls, rows))
        return _filled(pc.greater(nulls, 0))

    def negated(self) -> Predicate:
        return IsNull(self.column, negate=not self.negate)

    def columns(self) -> frozenset[str]:
        return frozenset((self.column,))


def _flatten(predicate: Predicate, kind: type[And] | type[Or]) -> Iterator[Predicate]:
    """The operands of a chain of ``kind`` nodes, left to right, without recursion."""
    stack = [predicate]
    while stack:
        node = stack.pop()
        if isinstance(node, kind):
            stack.extend((node.right, node.left))
        else:
            yield node


def _balanced(kind: type[And] | type[Or], parts: list[Predicate]) -> Predicate:
    if len(parts) == 1:
        return parts[0]
    middle = len(parts) // 2
    return kind(_balanced(kind, parts[:middle]), _balanced(kind, parts[middle:]))


@dataclass(frozen=True)
class And(Predicate):
    left: Predicate
    right: Predicate

    def might_match(self, segments: pa.Table) -> pa.Array:
        masks = (part.might_match(segments) for part in _flatten(self, And))
        result = next(masks)
        for mask in masks:
            result = pc.and_(result, mask)
        return result

    def negated(self) -> Predicate:
        return _balanced(Or, [part.negated() for part in _flatten(self, And)])

    def bloom_might_match(self, flt: BloomFilter, kind: ColumnType) -> bool:
        return all(part.bloom_might_match(flt, kind) for part in _flatten(self, And))

    def may_use_bloom(self) -> bool:
        return any(part.may_use_bloom() for part in _flatten(self, And))

    def columns(self) -> frozenset[str]:
        return frozenset().union(*(part.columns() for part in _flatten(self, And)))


@dataclass(frozen=True)
class Or(Predicate):
    left: Predicate
    right: Predicate

    def might_match(self, segments: pa.Table) -> pa.Array:
        masks = (part.might_match(segments) for part in _flatten(self, Or))
        result = next(masks)
        for mask in masks:
            result = pc.or_(result, mask)
        return result

    def negated(self) -> Predicate:
        return _balanced(And, [part.negated() for part in _flatten(self, Or)])

    def bloom_might_match(self, flt: BloomFilter, kind: ColumnType) -> bool:
        return any(part.bloom_might_match(flt, kind) for part in _flatten(self, Or))

    def may_use_bloom(self) -> bool:
        return all(part.may_use_bloom() for part in _flatten(self, Or))

    def columns(self) -> frozenset[str]:
        return frozenset().union(*(part.columns() for part in _flatten(self, Or)))


@dataclass(frozen=True)
class Not(Predicate):
    """SQL NOT: true where ``operand`` is false (NULL stays NULL); answered by pushing it inwards."""

    operand: Predicate

    def might_match(self, segments: pa.Table) -> pa.Array:
        return self.operand.negated().might_match(segments)

    def negated(self) -> Predicate:
        return self.operand

    def bloom_might_match(self, flt: BloomFilter, kind: ColumnType) -> bool:
        return self.operand.negated().bloom_might_match(flt, kind)

    def may_use_bloom(self) -> bool:
        return self.operand.negated().may_use_bloom()

    def columns(self) -> frozenset[str]:
        return self.operand.columns()


def _check_column(name: object) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidPredicate(f"a column name is non-empty text, not {name!r}")


# ---------------------------------------------------------------------------- building


class Column:
    """``col("x")``: build predicates with comparison operators (literals as in ``literal``)."""

    def __init__(self, name: str) -> None:
        _check_column(name)
        self.name = name

    def _compare(self, op: str, value: object) -> Predicate:
        if value is None:
            hint = "is_null()" if op == "==" else "is_not_null()"
            raise InvalidPredicate(f"col({self.name!r}) {op} None is never true in SQL; use col(...).{hint}")
        return Compare(self.name, op, value)  # type: ignore[arg-type]  # literal() checks it

    def __eq__(self, value: object) -> Predicate:  # type: ignore[override]
        return self._compare("==", value)

    def __ne__(self, value: object) -> Predicate:  # type: ignore[override]
        return self._compare("!=", value)

    def __lt__(self, value: object) -> Predicate:
        return self._compare("<", value)

    def __le__(self, value: object) -> Predicate:
        return self._compare("<=", value)

    def __gt__(self, value: object) -> Predicate:
        return self._compare(">", value)

    def __ge__(self, value: object) -> Predicate:
        return self._compare(">=", value)

    def isin(self, values: Iterable[object]) -> Predicate:
        return IsIn(self.name, tuple(values))  # type: ignore[arg-type]  # literal() checks them

    def is_null(self) -> Predicate:
        return IsNull(self.name)

    def is_not_null(self) -> Predicate:
        return IsNull(self.name, negate=True)

    __hash__ = None  # type: ignore[assignment]


def col(name: str) -> Column:
    return Column(name)


def bloom_excludes(predicate: Predicate, flt: BloomFilter, segments: pa.Table, row: int) -> bool:
    """Whether segment ``row``'s Bloom filter proves it holds no row matching ``predicate``.

    The filter is only read when the segment's stats for its column are of the table's type
    (the wide ``nulls:`` column is set): the column type decides how literals are hashed,
    and a segment whose column had another type (a protocol-1 log) was hashed otherwise.
    """
    if not bloom.usable(flt):
        return False
    kind = stats_kind(segments, flt.column)
    nulls = f"nulls:{flt.column}"
    if kind is None or nulls not in segments.column_names or not segments.column(nulls)[row].is_valid:
        return False
    return not predicate.bloom_might_match(flt, kind)
