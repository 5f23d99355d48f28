"""Predicates for data skipping: ``col("ts") >= t & (col("user") == "u1")``.

Each predicate answers "might a row of this segment match?" for every segment at once,
from the typed ``min:`` / ``max:`` / ``nulls:`` columns of ``Snapshot.segments`` (one Arrow
compute call per leaf). Unknown stats always mean "might": pruning never drops a segment
that could hold a matching row. Equality and ``isin`` also consult Bloom filters.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from catalog import bloom
from catalog.model import BloomFilter, StatValue

LiteralValue = StatValue | Decimal
"""What a predicate compares a column with (Decimal: an exact SQL decimal literal)."""


class Predicate:
    def __and__(self, other: Predicate) -> Predicate:
        return And(self, other)

    def __or__(self, other: Predicate) -> Predicate:
        return Or(self, other)

    def __invert__(self) -> Predicate:
        return Not(self)

    def might_match(self, segments: pa.Table) -> pa.ChunkedArray | pa.Array:
        """A boolean per segment: False = certainly no matching row."""
        raise NotImplementedError

    def bloom_checks(self) -> list[tuple[str, list[LiteralValue]]]:
        """(column, values) pairs whose absence from a Bloom filter rules a segment out."""
        return []


def _keep_unknown(mask: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray | pa.Array:
    return pc.fill_null(mask, True)


def _scalar(segments: pa.Table, column: str, value: Any) -> pa.Scalar | None:
    name = f"min:{column}"
    if name not in segments.column_names:
        return None
    kind = segments.schema.field(name).type
    if pa.types.is_timestamp(kind) and isinstance(value, dt.datetime) and value.tzinfo is None:
        value = value.replace(tzinfo=dt.UTC)
    try:
        return pa.scalar(value, type=kind)
    except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError):
        return None


def _all(segments: pa.Table) -> pa.Array:
    return pa.array([True] * segments.num_rows, type=pa.bool_())


@dataclass(frozen=True)
class Compare(Predicate):
    column: str
    op: str
    value: LiteralValue

    def might_match(self, segments: pa.Table) -> pa.ChunkedArray | pa.Array:
        scalar = _scalar(segments, self.column, self.value)
        if scalar is None:
            return _all(segments)
        lo, hi = segments.column(f"min:{self.column}"), segments.column(f"max:{self.column}")
        tests: dict[str, Callable[[], Any]] = {
            "==": lambda: pc.and_kleene(pc.less_equal(lo, scalar), pc.greater_equal(hi, scalar)),
            "<": lambda: pc.less(lo, scalar),
            "<=": lambda: pc.less_equal(lo, scalar),
            ">": lambda: pc.greater(hi, scalar),
            ">=": lambda: pc.greater_equal(hi, scalar),
            "!=": lambda: pc.invert(pc.and_kleene(pc.equal(lo, scalar), pc.equal(hi, scalar))),
        }
        return _keep_unknown(tests[self.op]())

    def bloom_checks(self) -> list[tuple[str, list[LiteralValue]]]:
        return [(self.column, [self.value])] if self.op == "==" else []


@dataclass(frozen=True)
class IsIn(Predicate):
    column: str
    values: tuple[LiteralValue, ...]

    def might_match(self, segments: pa.Table) -> pa.ChunkedArray | pa.Array:
        masks = [Compare(self.column, "==", v).might_match(segments) for v in self.values]
        if not masks:
            return pa.array([False] * segments.num_rows, type=pa.bool_())
        result = masks[0]
        for mask in masks[1:]:
            result = pc.or_(result, mask)
        return result

    def bloom_checks(self) -> list[tuple[str, list[LiteralValue]]]:
        return [(self.column, list(self.values))]


@dataclass(frozen=True)
class IsNull(Predicate):
    column: str
    negate: bool = False

    def might_match(self, segments: pa.Table) -> pa.ChunkedArray | pa.Array:
        name = f"nulls:{self.column}"
        if name not in segments.column_names:
            return _all(segments)
        nulls = segments.column(name)
        if self.negate:
            return _keep_unknown(pc.less(nulls, segments.column("row_count")))
        return _keep_unknown(pc.greater(nulls, 0))


@dataclass(frozen=True)
class And(Predicate):
    left: Predicate
    right: Predicate

    def might_match(self, segments: pa.Table) -> pa.ChunkedArray | pa.Array:
        return pc.and_(self.left.might_match(segments), self.right.might_match(segments))

    def bloom_checks(self) -> list[tuple[str, list[LiteralValue]]]:
        return self.left.bloom_checks() + self.right.bloom_checks()


@dataclass(frozen=True)
class Or(Predicate):
    left: Predicate
    right: Predicate

    def might_match(self, segments: pa.Table) -> pa.ChunkedArray | pa.Array:
        return pc.or_(self.left.might_match(segments), self.right.might_match(segments))

    # a Bloom miss on one side of an OR rules nothing out on its own


@dataclass(frozen=True)
class Not(Predicate):
    """SQL NOT: true where ``operand`` is false (unknown stays unknown)."""

    operand: Predicate

    def might_match(self, segments: pa.Table) -> pa.ChunkedArray | pa.Array:
        return _all(segments)  # conservative until negation is pushed into the leaves


class Column:
    """``col("x")``: build predicates with comparison operators."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, value: object) -> Predicate:  # type: ignore[override]
        return Compare(self.name, "==", value)  # type: ignore[arg-type]

    def __ne__(self, value: object) -> Predicate:  # type: ignore[override]
        return Compare(self.name, "!=", value)  # type: ignore[arg-type]

    def __lt__(self, value: StatValue) -> Predicate:
        return Compare(self.name, "<", value)

    def __le__(self, value: StatValue) -> Predicate:
        return Compare(self.name, "<=", value)

    def __gt__(self, value: StatValue) -> Predicate:
        return Compare(self.name, ">", value)

    def __ge__(self, value: StatValue) -> Predicate:
        return Compare(self.name, ">=", value)

    def isin(self, values: Iterable[StatValue]) -> Predicate:
        return IsIn(self.name, tuple(values))

    def is_null(self) -> Predicate:
        return IsNull(self.name)

    def is_not_null(self) -> Predicate:
        return IsNull(self.name, negate=True)

    __hash__ = None  # type: ignore[assignment]


def col(name: str) -> Column:
    return Column(name)


def bloom_excludes(filters: dict[str, BloomFilter], checks: list[tuple[str, list[LiteralValue]]]) -> bool:
    """Whether a segment's Bloom filters prove one AND-ed equality / isin can't match."""
    for column, values in checks:
        flt = filters.get(column)
        if flt is not None and not any(bloom.might_contain(flt, v) for v in values):  # type: ignore[arg-type]
            return True
    return False
