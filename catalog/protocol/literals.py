"""Predicate literals, and how Spark compares each with a column of each stats type.

``literal`` makes a value canonical (or refuses it with ``InvalidPredicate``); ``operand``
places a literal on a column's stats axis the way Spark's implicit coercion compares them
(docs/PROTOCOL.md §4a, "Comparison semantics"), as an interval when Spark's value is not
pinned down: a literal between two values of the column's type, a rounding Spark may make,
or a time whose meaning depends on the session's zone or the column's timestamp kind where
the caller did not state them (``time_semantics``). ``expressions`` tests stats against it.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa

from segcat.catalog.errors import InvalidPredicate
from segcat.catalog.protocol.model import ColumnType, StatValue
from segcat.catalog.protocol.time_semantics import (
    DAY_US,
    PROTOCOL,
    WIDEST_OFFSET_US,
    Semantics,
    TimestampKind,
    micros,
    wall_micros,
)

LiteralValue = StatValue | Decimal
"""What a predicate compares a column with (Decimal: an exact SQL decimal literal)."""

MAX_DECIMAL_DIGITS = 38
"""Spark's widest decimal: an integer or Decimal literal with more digits has no Spark literal."""

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_FIRST_US, _LAST_US = -62_135_596_800_000_000, 253_402_300_799_999_999
"""0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z in µs: what a Python datetime holds."""
_DATE_TEXT = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIMESTAMP_TEXT = re.compile(
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}:\d{2}(?:\.\d{1,6})?(?:Z|[+-]\d{2}:\d{2})?)?"
)
"""String literals whose Spark cast segcat states exactly; any other string keeps every segment."""

DOUBLE = pa.float64()
TIMESTAMP = pa.timestamp("us", tz="UTC")


def literal(value: object) -> LiteralValue:
    """``value`` as a canonical predicate literal, or ``InvalidPredicate`` if it cannot be one.

    numpy scalars become Python values, naive datetimes UTC, aware ones UTC; a pandas
    Timestamp keeps its nanoseconds only when it has some; every NaN is ``math.nan`` (so
    equal predicates compare equal). ``None`` is refused: ``x == NULL`` is never true in
    SQL, ``is_null()`` is what is meant. So is text that is not Unicode (a lone surrogate
    has no UTF-8 form: no SQL literal, no Bloom key) and a time outside the years 1 to 9999
    once in UTC.
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
        return unicode_text(value, "a string literal")
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, dt.datetime):
        return _datetime(value)
    if isinstance(value, dt.date):
        return value
    raise InvalidPredicate(f"no SQL literal for a {type(value).__name__} ({shown(value)})")


def unicode_text(value: str, what: str) -> str:
    """``value`` if it is Unicode text (no lone surrogate), else ``InvalidPredicate`` naming ``what``."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidPredicate(
            f"{what} holds a lone surrogate (U+{ord(value[exc.start]):04X} at {exc.start}): not Unicode text"
        ) from None
    return value


def shown(value: object) -> str:
    try:
        return f"{value!r:.80}"
    except Exception:  # a hostile __repr__ must not hide the refusal
        return "?"


def _decimal(value: Decimal) -> Decimal:
    if not value.is_finite():
        raise InvalidPredicate(f"decimal {value} has no SQL literal (use a float for NaN / infinity)")
    if value.as_tuple().exponent > 0:  # type: ignore[operator]  # 1E+5: Spark refuses negative scales
        if value.adjusted() >= MAX_DECIMAL_DIGITS:
            raise InvalidPredicate(f"decimal literal {value} has more than {MAX_DECIMAL_DIGITS} digits")
        value = Decimal(int(value))
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    if max(len(digits), -exponent) > MAX_DECIMAL_DIGITS:
        raise InvalidPredicate(f"decimal literal {value} has more than {MAX_DECIMAL_DIGITS} digits")
    return value


def _out_of_range(value: object) -> NoReturn:
    raise InvalidPredicate(f"{shown(value)} lies outside the years 1 to 9999 in UTC; no literal for it")


def _datetime(value: dt.datetime) -> dt.datetime:
    if value != value:  # pandas NaT
        raise InvalidPredicate("comparing with NaT (NULL) is never true in SQL; use col(...).is_null()")
    try:
        if hasattr(value, "tz_localize"):  # a pandas Timestamp
            stamp: Any = value
            utc = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
            moment: dt.datetime = utc if utc.nanosecond else utc.to_pydatetime()
            return moment
        if value.tzinfo is None or value.utcoffset() is None:
            return value.replace(tzinfo=dt.UTC)
        return value.astimezone(dt.UTC)
    except (OverflowError, ValueError):
        _out_of_range(value)


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
        _out_of_range(value)
    return moment.replace(tzinfo=dt.UTC)


# ---------------------------------------------------------------------------- coercion


NOTHING: Any = object()
"""``Operand.stored`` when no single stored value equals the literal exactly."""


@dataclass(frozen=True)
class Operand:
    """A literal as Spark compares it with a column: in ``domain``, somewhere in [lo, hi].

    ``lo == hi``: exact. Otherwise the literal falls strictly between two values of the
    domain, or Spark's rounding is not pinned down, or its meaning depends on what the
    caller did not state (a time zone, a column's timestamp kind): only the interval is
    certain; None is unbounded. ``nan``: the literal is NaN (double domain). ``stored``:
    the one value of the column's own type Spark finds equal to the literal, for Bloom probes.
    """

    domain: pa.DataType
    lo: Any
    hi: Any
    nan: bool = False
    stored: Any = NOTHING

    @property
    def exact(self) -> bool:
        return self.lo is not None and self.lo == self.hi


def _exact(domain: pa.DataType, value: Any, stored: Any = NOTHING) -> Operand:
    return Operand(domain, value, value, stored=stored)


def _integer_operand(value: int | Decimal) -> Operand:
    """An INT column against an integer or decimal literal: Spark compares exactly (as decimals)."""
    floor, ceil = math.floor(value), math.ceil(value)
    if floor > INT64_MAX:
        return Operand(pa.int64(), INT64_MAX, None)
    if ceil < INT64_MIN:
        return Operand(pa.int64(), None, INT64_MIN)
    lo = floor if floor >= INT64_MIN else None
    hi = ceil if ceil <= INT64_MAX else None
    stored = floor if floor == ceil else NOTHING
    return Operand(pa.int64(), lo, hi, stored=stored)


def folds_to_true(op: str, value: LiteralValue) -> bool:
    """Whether Spark folds ``integral_column op value`` into the constant TRUE (NULL rows included).

    Spark's analyzer rewrites a comparison of an integral column with a decimal literal
    (every integer beyond BIGINT is one) before it looks at any row: ``i <= 2^63`` and
    ``i > -2^63 - 1`` become TRUE, ``i > 2^63`` and ``i <= -2^63 - 1`` FALSE, for every row,
    so a NULL ``i`` matches the first two. ``=``, ``!=`` and ``IN`` are not folded.
    """
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        return False
    if op in ("<", "<="):
        return value > INT64_MAX
    if op in (">", ">="):
        return value < INT64_MIN
    return False


def _double_operand(value: float, kind: ColumnType) -> Operand:
    """A double literal (the column compared as double: FLOAT, or INT cast to double)."""
    if math.isnan(value):
        return Operand(DOUBLE, None, None, nan=True)
    stored: Any = NOTHING
    if kind is ColumnType.FLOAT:
        stored = value
    elif value.is_integer() and abs(value) < 2**53:  # no other int64 casts to this double
        stored = int(value)
    return _exact(DOUBLE, value, stored)


def _as_double(value: int | Decimal, kind: ColumnType) -> Operand:
    """An integer or decimal literal Spark casts to double (a FLOAT column, or an IN list with doubles).

    A BIGINT literal casts exactly as Python's ``float`` does. Otherwise the interval covers
    every rounding Spark could make: a decimal-to-double cast may round twice (one ulp), and
    a non-ANSI session compares a FLOAT (float32) column with an integer as float32.
    """
    rounded = float(value)
    if isinstance(value, int) and kind is ColumnType.INT and INT64_MIN <= value <= INT64_MAX:
        return _double_operand(rounded, kind)
    if isinstance(value, int) and kind is ColumnType.FLOAT:
        if abs(value) <= 2**24:
            return _double_operand(rounded, kind)
        single = np.float32(rounded)
        with np.errstate(over="ignore"):
            down = float(np.nextafter(single, np.float32(-np.inf)))
            up = float(np.nextafter(single, np.float32(np.inf)))
        low, high = math.nextafter(rounded, -math.inf), math.nextafter(rounded, math.inf)
        return Operand(DOUBLE, min(down, low), max(up, high))
    if Decimal(rounded) == Decimal(value):
        return _double_operand(rounded, kind)
    return Operand(DOUBLE, math.nextafter(rounded, -math.inf), math.nextafter(rounded, math.inf))


@dataclass(frozen=True)
class _Time:
    """A time literal: the instant, a date's midnight or a string's wall clock, and its offset.

    ``at``: µs since the epoch: the instant (``offset`` 0), or the wall clock read as UTC
    (a date, or a string: ``offset`` is the string's own offset, None when it has none).
    ``width``: 1 for a nanosecond instant, which lies strictly inside (at, at + 1).
    """

    at: int
    offset: int | None
    wall: bool
    width: int = 0


def _time_literal(value: LiteralValue, kind: ColumnType) -> _Time | None:
    if isinstance(value, dt.datetime):
        width = 1 if getattr(value, "nanosecond", 0) else 0
        return _Time(micros(value), 0, wall=False, width=width)
    if isinstance(value, dt.date):
        return _Time((value - _EPOCH.date()).days * DAY_US, None, wall=True)
    if isinstance(value, str) and kind is ColumnType.TIMESTAMP:
        parsed = time_text(value)
        return None if parsed is None else _Time(parsed[0], parsed[1], wall=True)
    return None


def time_text(value: str) -> tuple[int, int | None] | None:
    """A string the protocol casts to a time (``yyyy-mm-dd[ T]hh:mm:ss[.ffffff][Z|±hh:mm]`` or a
    date): its wall clock in µs (read as UTC) and its offset in µs (None: it names none).
    None: any other string, whose cast is Spark's business."""
    if not _TIMESTAMP_TEXT.fullmatch(value):
        return None
    try:
        moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    shift = moment.utcoffset()
    offset = None if shift is None else shift // dt.timedelta(microseconds=1)
    if offset is not None and abs(offset) > WIDEST_OFFSET_US:
        return None  # Spark has no such offset
    return wall_micros(moment), offset


def _time_candidates(time: _Time, kind: ColumnType, column: str, semantics: Semantics) -> list[int]:
    """Where the literal may fall on the column's stats axis, for every meaning it can have.

    The axis is µs: instants for a TIMESTAMP column, the wall clock (as UTC) for a
    TIMESTAMP_NTZ column and for a DATE column compared with a time (Spark casts the date to
    its midnight in the session's zone: comparing that with an instant t is comparing the
    wall-clock midnight with t's wall clock in the zone).
    """
    out: list[int] = []
    column_kind = TimestampKind.WALL if kind is ColumnType.DATE else semantics.kind(column)
    if column_kind in (None, TimestampKind.INSTANT):
        if not time.wall:
            out.append(time.at)
        elif time.offset is not None:
            out.append(time.at - time.offset)
        else:  # a wall clock read in the session's zone
            low, high = semantics.offsets(time.at)
            out += [time.at - high, time.at - low]
    if column_kind in (None, TimestampKind.WALL):
        if time.wall:  # a string's offset is ignored against a wall clock
            out.append(time.at)
        else:  # the instant's wall clock in the session's zone
            low, high = semantics.offsets(time.at)
            out += [time.at + low, time.at + high]
    return out


def _time_operand(value: LiteralValue, kind: ColumnType, column: str, semantics: Semantics) -> Operand | None:
    time = _time_literal(value, kind)
    if time is None:
        return None
    found = _time_candidates(time, kind, column, semantics)
    lo, hi = min(found), max(found) + time.width
    if lo != hi:
        return Operand(TIMESTAMP, lo, hi)
    stored: Any = NOTHING
    if kind is ColumnType.DATE:
        stored = _EPOCH.date() + dt.timedelta(days=lo // DAY_US) if lo % DAY_US == 0 else NOTHING
    elif _FIRST_US <= lo <= _LAST_US:
        stored = _EPOCH + dt.timedelta(microseconds=lo)
    return _exact(TIMESTAMP, lo, stored)


def operand(
    kind: ColumnType, value: LiteralValue, semantics: Semantics = PROTOCOL, column: str = ""
) -> Operand | None:
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
            return _time_operand(value, kind, column, semantics)
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
        return _time_operand(value, kind, column, semantics)
    return None


def in_operands(
    kind: ColumnType, values: tuple[LiteralValue, ...], semantics: Semantics, column: str
) -> list[Operand | None]:
    """Operands of an IN list: Spark coerces the column and *all* values to one common type."""
    if not (kind is ColumnType.INT and any(isinstance(v, float) for v in values)):
        return [operand(kind, v, semantics, column) for v in values]
    numeric = (int, Decimal)
    return [
        _as_double(v, kind) if isinstance(v, numeric) and not isinstance(v, bool) else operand(kind, v)
        for v in values
    ]
