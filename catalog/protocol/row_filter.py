"""Predicates evaluated on Arrow rows, exactly as Spark evaluates them (docs/PROTOCOL.md §4a).

Pruning (``expressions``) answers "might a segment hold a matching row?" and may keep too
much; applying a tombstone to rows outside Spark (``catalog.read.changes``) must answer
exactly, row by row, what Spark's filter (``spark_integration.filters.to_column(...,
utc=True)``) answers. Both place a literal on the column's axis with the same code
(``literals.operand``: Spark's implicit coercion, the fold beyond BIGINT, NaN, times), so
there is one semantics; what differs is only the test:

- an exact operand (``lo == hi``) is compared with each value (NaN above every number and
  equal to itself, -0.0 = 0.0, strings and bytes bytewise);
- an operand strictly between two neighbours of a discrete axis (``i < 2.5``, a nanosecond
  time, an integer beyond BIGINT under ``=`` / ``!=``) is compared through them:
  ``x < v`` ⇔ ``x <= floor``, ``x > v`` ⇔ ``x >= ceil``, ``x = v`` never;
- anything else pruning keeps as "unsure" (a double whose rounding Spark does not pin down,
  a combination Spark's coercion does not define here, a DECIMAL column) raises
  ``UnsupportedPredicate``: the caller never gets a guess.

Three-valued logic is Arrow's Kleene logic; the answer is a mask with NULL → no match. The
meaning is the protocol's: UTC, each TIMESTAMP column's kind from its Arrow type (with a
zone: Spark's TIMESTAMP; without: TIMESTAMP_NTZ). A column the rows lack reads as a NULL
literal, as ``to_column(columns=...)`` writes it (no fold applies to it).
"""

from __future__ import annotations

from collections.abc import Collection
from decimal import Decimal
from typing import TypeAlias

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from segcat.catalog.errors import UnsupportedPredicate
from segcat.catalog.protocol.column_types import column_type
from segcat.catalog.protocol.expressions import And, Compare, IsIn, IsNull, Not, Or, Predicate
from segcat.catalog.protocol.literals import (
    DOUBLE,
    INT64_MAX,
    INT64_MIN,
    TIMESTAMP,
    LiteralValue,
    Operand,
    folds_to_true,
    in_operands,
    operand,
    shown,
)
from segcat.catalog.protocol.model import ColumnType
from segcat.catalog.protocol.time_semantics import UTC_ZONE, Semantics, TimestampKind

Rows: TypeAlias = "pa.RecordBatch | pa.Table"

_NAN_RESULT = {"==": False, "!=": True, "<": False, "<=": False, ">": True, ">=": True}
"""``NaN op v`` for a number v: NaN is above every number."""
_TESTS = {
    "==": pc.equal,
    "!=": pc.not_equal,
    "<": pc.less,
    "<=": pc.less_equal,
    ">": pc.greater,
    ">=": pc.greater_equal,
}
_DISCRETE = (pa.int64(), TIMESTAMP)
"""Axes with neighbours: a literal strictly between two of their values is exactly placed."""


def matches(predicate: Predicate, rows: Rows, present: Collection[str] | None = None) -> np.ndarray:
    """A boolean per row: True where ``predicate`` is TRUE (FALSE and NULL: False).

    ``present``: the columns the rows really hold (a file's columns); a column outside it, or
    not in ``rows``, reads as a NULL literal. ``UnsupportedPredicate`` where the exact meaning
    is not modelled (module docstring)."""
    evaluator = _Evaluator(rows, present)
    result = pc.fill_null(evaluator.evaluate(predicate), False)
    return np.asarray(result.to_numpy(zero_copy_only=False), dtype=bool)


def truth(predicate: Predicate, rows: Rows, present: Collection[str] | None = None) -> pa.Array:
    """The three-valued answer per row (a boolean array, NULL where SQL says unknown)."""
    return _Evaluator(rows, present).evaluate(predicate)


class _Evaluator:
    def __init__(self, rows: Rows, present: Collection[str] | None) -> None:
        self.rows = rows
        self.n = rows.num_rows
        allowed = None if present is None else {c.lower() for c in present}
        self.columns: dict[str, str] = {}
        for name in reversed(rows.schema.names):  # Spark resolves names case-insensitively
            if allowed is None or name.lower() in allowed:
                self.columns[name.lower()] = name
        kinds = {}
        for field in rows.schema:
            if pa.types.is_timestamp(field.type):
                wall = field.type.tz is None
                kinds[field.name.lower()] = TimestampKind.WALL if wall else TimestampKind.INSTANT
        self.semantics = Semantics(UTC_ZONE, kinds)

    # ------------------------------------------------------------------ helpers

    def _constant(self, value: bool | None) -> pa.Array:
        return (
            pa.array(np.full(self.n, value), type=pa.bool_())
            if value is not None
            else pa.nulls(self.n, pa.bool_())
        )

    def _column(self, name: str) -> pa.Array | None:
        found = self.columns.get(name.lower())
        if found is None:
            return None
        data = self.rows.column(found)
        return data.combine_chunks() if isinstance(data, pa.ChunkedArray) else data

    def _where_valid(self, values: pa.Array, outcome: bool) -> pa.Array:
        """``outcome`` for every non-null value, NULL for a null one."""
        return pc.if_else(pc.is_valid(values), pa.scalar(outcome), pa.scalar(None, pa.bool_()))

    # ------------------------------------------------------------------ the tree

    def evaluate(self, node: Predicate) -> pa.Array:
        if isinstance(node, And):
            result = self.evaluate(node.parts[0])
            for part in node.parts[1:]:
                result = pc.and_kleene(result, self.evaluate(part))
            return result
        if isinstance(node, Or):
            result = self.evaluate(node.parts[0])
            for part in node.parts[1:]:
                result = pc.or_kleene(result, self.evaluate(part))
            return result
        if isinstance(node, Not):
            return pc.invert(self.evaluate(node.operand))
        if isinstance(node, IsNull):
            values = self._column(node.column)
            if values is None:
                return self._constant(not node.negate)
            return pc.is_valid(values) if node.negate else pc.is_null(values)
        if isinstance(node, Compare):
            return self._compare(node.column, node.op, node.value)
        if isinstance(node, IsIn):
            return self._isin(node.column, node.values)
        inverse = node.negated()
        if isinstance(inverse, IsIn):  # NOT IN, made by negating an IsIn
            return pc.invert(self._isin(inverse.column, inverse.values))
        raise UnsupportedPredicate(f"no row semantics for a {type(node).__name__} predicate")

    def _kind(self, column: str, values: pa.Array) -> ColumnType:
        kind = column_type(values.type)
        if kind is ColumnType.OTHER or (
            pa.types.is_unsigned_integer(values.type) and values.type.bit_width == 64
        ):
            raise UnsupportedPredicate(
                f"a tombstone on column {column!r} of type {values.type} (compared with a literal): "
                "segcat applies tombstones outside Spark only on integer, floating-point, string, "
                "binary, boolean, date and timestamp columns; read this table with Spark"
            )
        return kind

    def _compare(self, column: str, op: str, value: LiteralValue) -> pa.Array:
        values = self._column(column)
        if values is None:
            return self._constant(None)  # a NULL literal: every comparison is NULL
        kind = self._kind(column, values)
        if kind is ColumnType.INT:
            if folds_to_true(op, value):
                return self._constant(True)
            if _folds_to_false(op, value):
                return self._constant(False)
        arg = self._operand(kind, value, column, values)
        return self._test(values, kind, op, arg, value, column)

    def _isin(self, column: str, literals: tuple[LiteralValue, ...]) -> pa.Array:
        values = self._column(column)
        if values is None:
            return self._constant(None)
        kind = self._kind(column, values)
        result = self._constant(False)
        if kind is ColumnType.FLOAT:  # every value compared as a double (Spark's common type)
            args: list[Operand | None] = [self._operand(kind, v, column, values) for v in literals]
        else:
            args = in_operands(kind, literals, self.semantics, column)
        for arg, value in zip(args, literals, strict=True):
            if arg is None:
                raise _unsupported(column, values.type, value)
            result = pc.or_kleene(result, self._test(values, kind, "==", arg, value, column))
        return result

    def _operand(self, kind: ColumnType, value: LiteralValue, column: str, values: pa.Array) -> Operand:
        if kind is ColumnType.FLOAT and pa.types.is_float64(values.type) and _bigint(value):
            # a DOUBLE column and a BIGINT literal: Spark casts the literal to double (exactly
            # Python's rounding); pruning, not knowing float from double, keeps an interval
            return Operand(DOUBLE, float(value), float(value))  # type: ignore[arg-type]
        if kind is ColumnType.FLOAT and _plain_decimal(value):
            # a DECIMAL literal with fewer than 16 digits casts to the one nearest double however
            # Spark divides (unscaled / 10^scale in doubles is correctly rounded then)
            return Operand(DOUBLE, float(value), float(value))  # type: ignore[arg-type]
        arg = operand(kind, value, self.semantics, column)
        if arg is None:
            raise _unsupported(column, values.type, value)
        return arg

    def _test(
        self, values: pa.Array, kind: ColumnType, op: str, arg: Operand, value: LiteralValue, column: str
    ) -> pa.Array:
        float_column = kind is ColumnType.FLOAT
        if arg.nan:  # x op NaN: NaN equals NaN and is above every number
            is_nan = pc.is_nan(values) if float_column else pc.equal(pc.is_valid(values), False)
            outcome = {
                "==": is_nan,
                "!=": pc.invert(is_nan),
                "<": pc.invert(is_nan),
                "<=": pc.is_valid(values),
                ">": pc.equal(is_nan, False),
                ">=": is_nan,
            }[op]
            return pc.if_else(pc.is_valid(values), outcome, pa.scalar(None, pa.bool_()))
        axis = values if values.type.equals(arg.domain) else _cast(values, arg.domain, column)
        if arg.exact:
            result = _TESTS[op](axis, pa.scalar(arg.lo, type=arg.domain))
        elif any(arg.domain.equals(d) for d in _DISCRETE) and _between_neighbours(arg):
            # v strictly between lo and hi = lo + 1 (either may be absent: beyond the axis)
            if op in ("<", "<="):
                result = (
                    self._where_valid(values, False)
                    if arg.lo is None
                    else pc.less_equal(axis, pa.scalar(arg.lo, type=arg.domain))
                )
            elif op in (">", ">="):
                result = (
                    self._where_valid(values, False)
                    if arg.hi is None
                    else pc.greater_equal(axis, pa.scalar(arg.hi, type=arg.domain))
                )
            else:
                result = self._where_valid(values, op == "!=")
        else:
            raise UnsupportedPredicate(
                f"{column} {op} {shown(value)}: Spark's comparison of a {values.type} column with this "
                "literal is not pinned down exactly outside Spark (docs/PROTOCOL.md §4a); "
                "read this table with Spark"
            )
        if float_column and not arg.domain.equals(TIMESTAMP):
            result = pc.if_else(pc.is_nan(axis), pa.scalar(_NAN_RESULT[op]), result)
        return result


def _between_neighbours(arg: Operand) -> bool:
    if arg.lo is None or arg.hi is None:
        return arg.lo is not None or arg.hi is not None
    return bool(arg.hi - arg.lo == 1)


def _cast(values: pa.Array, domain: pa.DataType, column: str) -> pa.Array:
    """``values`` on the comparison axis: monotonic casts Spark makes too (int → long or double,
    float → double, date → its UTC midnight, a wall clock → its µs)."""
    try:
        if pa.types.is_date(values.type) and domain.equals(TIMESTAMP):
            return pc.cast(pc.cast(values, pa.timestamp("us")), domain)
        if pa.types.is_timestamp(values.type) and domain.equals(TIMESTAMP):
            return pc.cast(values, pa.timestamp(values.type.unit, tz="UTC")).cast(domain, safe=False)
        return pc.cast(values, domain, safe=not pa.types.is_floating(domain))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise UnsupportedPredicate(
            f"column {column!r} ({values.type}) cannot be compared as {domain}: {exc}"
        ) from None


def _bigint(value: LiteralValue) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value <= INT64_MAX


def _plain_decimal(value: LiteralValue) -> bool:
    """A decimal whose unscaled value and power of ten are both exact doubles."""
    if not isinstance(value, Decimal):
        return False
    _, digits, exponent = value.as_tuple()
    assert isinstance(exponent, int)
    unscaled = int("".join(map(str, digits)) or "0")
    return unscaled < 2**53 and -22 <= exponent <= 0


def _folds_to_false(op: str, value: LiteralValue) -> bool:
    """Whether Spark folds ``integral_column op value`` into the constant FALSE, NULL rows included
    (the other side of ``literals.folds_to_true``: no BIGINT satisfies the test)."""
    if isinstance(value, bool) or not isinstance(value, int | Decimal):
        return False
    if op in ("<", "<="):
        return value < INT64_MIN
    if op in (">", ">="):
        return value > INT64_MAX
    return False


def _unsupported(column: str, arrow: pa.DataType, value: LiteralValue) -> UnsupportedPredicate:
    return UnsupportedPredicate(
        f"column {column!r} ({arrow}) compared with {shown(value)} ({type(value).__name__}): "
        "a combination whose Spark semantics segcat does not model (docs/PROTOCOL.md §4a); "
        "read this table with Spark"
    )
