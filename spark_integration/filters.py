"""Predicates as Spark row filters, with the meaning pruning gives them (docs/PROTOCOL.md §4a).

``to_column`` turns a ``catalog.protocol.expressions`` predicate into a pyspark ``Column``:

- **Row filters** (``si.read(where=…)``) are evaluated in the reader's Spark session, as
  ``df.filter`` over every file would be; ``session_semantics`` tells pruning that session's
  time zone and the timestamp kinds of the table's columns, so both agree.
- **Tombstones** (``utc=True``) mean what the protocol says whatever the session: every
  comparison whose outcome would depend on the session's time zone is written so that it
  does not (a DATE column compared with a time as its UTC midnight, a string or date
  literal on a TIMESTAMP column as its UTC instant, a time literal on a TIMESTAMP_NTZ column
  as its UTC wall clock), given the column types of the scan's schema.

Literals are built so that Spark holds exactly the value segcat means: times from their
microseconds (``timestamp_micros``: pyspark's own conversion goes through
``java.sql.Timestamp`` and moves times before 1582 by days), dates from their day number
(pyspark's fails before year 1000), integers beyond BIGINT as decimals (as SQL text reads
them). AND / OR chains become balanced trees, so a chain of thousands of terms does not
overflow the JVM's stack when Spark walks it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Collection, Sequence
from decimal import Decimal

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, DateType, StructType, TimestampNTZType, TimestampType

from segcat import Predicate
from segcat.catalog.protocol.expressions import And, Compare, IsIn, IsNull, LiteralValue, Not, Or
from segcat.catalog.protocol.literals import time_text
from segcat.catalog.protocol.time_semantics import DAY_US, Semantics, TimestampKind, micros

_EPOCH = dt.datetime(1970, 1, 1)

Literal = Callable[[int], Column]
"""A timestamp literal from µs: an instant (TIMESTAMP) or a wall clock (TIMESTAMP_NTZ)."""


def session_semantics(spark: SparkSession, schema: StructType | None) -> Semantics:
    """The session ``spark`` evaluates row filters in: its time zone, and which of the table's
    columns (``schema``) are TIMESTAMP and which TIMESTAMP_NTZ."""
    zone = str(spark.conf.get("spark.sql.session.timeZone") or "UTC")
    kinds: dict[str, TimestampKind] = {}
    for field in schema.fields if schema is not None else ():
        if isinstance(field.dataType, TimestampNTZType):
            kinds[field.name.lower()] = TimestampKind.WALL
        elif isinstance(field.dataType, TimestampType):
            kinds[field.name.lower()] = TimestampKind.INSTANT
    return Semantics(zone, kinds)


def to_column(
    predicate: Predicate,
    columns: Collection[str] | None = None,
    *,
    schema: StructType | None = None,
    utc: bool = False,
) -> Column:
    """The Spark row filter equivalent to a ``segcat.catalog.protocol.expressions`` predicate.

    With ``columns`` (the data's columns), a column the data lacks reads as NULL (Spark
    resolves names case-insensitively). With ``utc`` and the data's ``schema``, comparisons
    whose Spark outcome depends on the session's time zone are written to mean what they
    mean at UTC (tombstones); without, Spark's session decides, as in ``df.filter``.
    """
    present = None if columns is None else {c.lower() for c in columns}
    types = {} if schema is None or not utc else {f.name.lower(): f.dataType for f in schema.fields}

    def name(column: str) -> Column:
        if present is not None and column.lower() not in present:
            return F.lit(None)
        return F.col("`" + column.replace("`", "``") + "`")

    def build(node: Predicate) -> Column:
        if isinstance(node, And | Or):
            return balanced([build(part) for part in node.parts], "and" if isinstance(node, And) else "or")
        if isinstance(node, Not):
            return ~build(node.operand)
        if isinstance(node, IsNull):
            return name(node.column).isNotNull() if node.negate else name(node.column).isNull()
        if isinstance(node, IsIn):
            return _isin(name(node.column), node.values, types.get(node.column.lower()))
        if isinstance(node, Compare):
            return _compare(name(node.column), node.op, node.value, types.get(node.column.lower()))
        inverse = node.negated()
        if isinstance(inverse, IsIn):  # NOT IN, made by negating an IsIn
            return ~build(inverse)
        raise TypeError(f"cannot turn {type(node).__name__} into a Spark filter")

    return build(predicate)


def balanced(parts: Sequence[Column], connective: str) -> Column:
    """``parts`` joined by AND / OR as a balanced tree (depth log2 n, not n)."""
    level = list(parts)
    while len(level) > 1:
        joined = []
        for i in range(0, len(level) - 1, 2):
            a, b = level[i], level[i + 1]
            joined.append(a & b if connective == "and" else a | b)
        if len(level) % 2:
            joined.append(level[-1])
        level = joined
    return level[0]


def instant(us: int) -> Column:
    """A TIMESTAMP literal: the instant ``us`` µs after the epoch, exactly."""
    return F.timestamp_micros(F.lit(us))


def wall(us: int) -> Column:
    """A TIMESTAMP_NTZ literal: the wall clock ``us`` µs after 1970-01-01T00:00, exactly."""
    clock = _EPOCH + dt.timedelta(microseconds=us)
    return F.lit(clock.isoformat(sep=" ", timespec="microseconds")).cast("timestamp_ntz")


def day(value: dt.date) -> Column:
    """A DATE literal, exactly (any year)."""
    return F.date_from_unix_date(F.lit((value - _EPOCH.date()).days))


def _lit(value: LiteralValue) -> Column:
    """A Spark literal with the value Spark SQL text would give it."""
    if isinstance(value, bool):
        return F.lit(value)
    if isinstance(value, int) and not -(2**63) <= value < 2**63:
        return F.lit(Decimal(value))
    if isinstance(value, dt.datetime):
        return instant(micros(value))
    if isinstance(value, dt.date):
        return day(value)
    return F.lit(value)


def _utc_midnight(date_column: Column) -> Column:
    """A DATE column as the TIMESTAMP of its midnight in UTC (Spark's cast at UTC, zone-free)."""
    return F.timestamp_micros(F.unix_date(date_column).cast("long") * F.lit(DAY_US))


def _string_instant(value: str) -> int | None:
    """A string the protocol casts to a time, as the instant it names at UTC; None: Spark's to cast."""
    parsed = time_text(value)
    if parsed is None:
        return None
    clock, offset = parsed
    return clock - (offset or 0)


def _pinned(kind: DataType | None, value: LiteralValue, timestamps: bool) -> Column | None:
    """``value`` written so that comparing it with a ``kind`` column means what it means at UTC;
    None when no rewrite is needed. ``timestamps``: the comparison is made as timestamps (a
    DATE column among times: the column is compared as its UTC midnight)."""
    if isinstance(kind, TimestampNTZType):
        if isinstance(value, dt.datetime):
            return wall(micros(value))
        return None  # a date or a string casts to a wall clock without a zone
    if isinstance(kind, TimestampType) or (isinstance(kind, DateType) and timestamps):
        if isinstance(value, dt.datetime):
            return instant(micros(value))
        if isinstance(value, dt.date):
            return instant((value - _EPOCH.date()).days * DAY_US)
        if isinstance(value, str):
            at = _string_instant(value)
            return None if at is None else instant(at)
    return None


def _sub_micro(value: object) -> bool:
    """A pandas Timestamp with nanoseconds: no microsecond value equals it."""
    return isinstance(value, dt.datetime) and bool(getattr(value, "nanosecond", 0))


def _time_axis(kind: DataType | None, values: Sequence[LiteralValue]) -> bool:
    """Whether a DATE column is compared as timestamps (Spark does so when a value is a time)."""
    return isinstance(kind, DateType) and any(isinstance(v, dt.datetime) for v in values)


def _compare(left: Column, op: str, value: LiteralValue, kind: DataType | None = None) -> Column:
    """``left op value``; with ``kind`` (tombstones), pinned to UTC where a zone would matter."""
    timestamps = _time_axis(kind, [value])
    if timestamps:
        left = _utc_midnight(left)
    if isinstance(value, dt.datetime) and _sub_micro(value):
        # x < t ⇔ x <= floor(t) and x > t ⇔ x >= ceil(t) for microsecond x; never equal
        make: Literal = wall if isinstance(kind, TimestampNTZType) else instant
        floor = micros(value)
        never = F.when(left.isNotNull(), F.lit(False))
        exact = {
            "<": left <= make(floor),
            "<=": left <= make(floor),
            ">": left >= make(floor + 1),
            ">=": left >= make(floor + 1),
            "==": never,
            "!=": ~never,
        }
        return exact[op]
    right = _pinned(kind, value, timestamps) if kind is not None else None
    if right is None:
        right = _lit(value)
    ops = {
        "==": left == right,
        "!=": left != right,
        "<": left < right,
        "<=": left <= right,
        ">": left > right,
        ">=": left >= right,
    }
    return ops[op]


def _isin(left: Column, values: tuple[LiteralValue, ...], kind: DataType | None = None) -> Column:
    """``left IN (values)``; a nanosecond value equals no microsecond x (NULL for a NULL x)."""
    timestamps = _time_axis(kind, values)
    if timestamps:
        left = _utc_midnight(left)
    kept: list[Column] = []
    sub_micro = False
    for value in values:
        if _sub_micro(value):
            sub_micro = True
            continue
        pinned = _pinned(kind, value, timestamps) if kind is not None else None
        kept.append(_lit(value) if pinned is None else pinned)
    never = F.when(left.isNotNull(), F.lit(False))
    if not sub_micro:
        return left.isin(kept)
    return left.isin(kept) | never if kept else never
