"""Predicates for data skipping and row filters: ``col("ts") >= t & ~(col("user") == "u1")``.

One rule set serves pruning, row filters and tombstones: **Spark SQL's comparison
semantics** (docs/PROTOCOL.md §4a). NULL compares as unknown (no match); NaN = NaN and NaN
is greater than every number, +inf included; -0.0 = 0.0; a literal of another type than
the column is compared the way Spark's implicit coercion compares it (a BIGINT column with
a DOUBLE literal as doubles, a DATE column with a TIMESTAMP literal as the date's midnight
in the session's time zone, a TIMESTAMP column with a string literal as the string cast,
…), and a BIGINT column compared by ``<``/``<=``/``>``/``>=`` with a number beyond BIGINT is
the constant Spark's analyzer folds it to (TRUE for NULL rows too).

Each predicate answers "might a row of this segment match?" for every segment at once,
from the typed ``min:`` / ``max:`` / ``nulls:`` / ``nans:`` columns of ``Snapshot.segments``
(a few Arrow compute calls per leaf), against each literal placed on the column's stats axis
by ``literals.operand``. The promise is one-sided: pruning may keep a segment
without a matching row, it never drops one with a matching row. So whatever is unknown,
unsure or not exactly representable keeps the segment: missing stats, a combination of
column and literal type whose Spark semantics segcat does not model, a literal that falls
between two values of the column's type (compared through its floor and ceiling), a time
whose meaning depends on a time zone or a column kind the caller did not state (compared
through every meaning it can have, ``time_semantics``). NOT is pushed into the leaves
(``negated``), which is exact under SQL's three-valued logic because Spark orders every
comparison domain totally (NaN on top). Equality and ``isin`` also consult Bloom filters,
probed with the literal converted exactly to the column's type, for all candidate segments
at once (``bloom.FilterBatch``).

A predicate is a value: built once, checked once (``InvalidPredicate`` for anything that
cannot be answered), never truthy (``1 < col("i") < 5`` and ``p and q`` would silently drop
a test), nested at most ``MAX_DEPTH`` deep (AND / OR chains are flat, so a chain of any
length costs no depth), so that no operation on it recurses without bound.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from segcat.catalog.errors import InvalidPredicate
from segcat.catalog.protocol import bloom
from segcat.catalog.protocol.literals import (
    DOUBLE,
    NOTHING,
    TIMESTAMP,
    LiteralValue,
    Operand,
    folds_to_true,
    in_operands,
    literal,
    operand,
    shown,
    unicode_text,
)
from segcat.catalog.protocol.model import ColumnType
from segcat.catalog.protocol.time_semantics import PROTOCOL, Semantics

__all__ = ["MAX_DEPTH", "OPS", "And", "Column", "Compare", "IsIn", "IsNull", "LiteralValue", "Not", "Or"]
__all__ += ["Predicate", "bloom_mask", "col", "literal", "stats_kind", "unicode_text"]

OPS = ("==", "!=", "<", "<=", ">", ">=")
MAX_DEPTH = 128
"""The deepest nesting of AND / OR / NOT a predicate may have (a chain of one connective is one
level): twice the text parser's limit (``predicates.MAX_DEPTH``, 64 parentheses and NOTs, each
parenthesis holding at most an OR of ANDs), so every text the parser takes builds; deep enough
for any predicate a person writes, shallow enough that no walk over one nears Python's stack."""

_NEGATE_OP = {"==": "!=", "!=": "==", "<": ">=", ">=": "<", "<=": ">", ">": "<="}
_DOMAIN: dict[ColumnType, pa.DataType] = {
    ColumnType.INT: pa.int64(),
    ColumnType.FLOAT: DOUBLE,
    ColumnType.STRING: pa.string(),
    ColumnType.DATE: pa.date32(),
    ColumnType.TIMESTAMP: TIMESTAMP,
    ColumnType.BOOLEAN: pa.bool_(),
    ColumnType.BINARY: pa.binary(),
}
"""The Arrow type of a column's stats in ``Snapshot.segments`` (catalog.segments_arrow)."""


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
    lo = pc.if_else(pc.is_nan(lo), pa.scalar(None, DOUBLE), lo)
    hi = pc.if_else(pc.is_nan(hi), pa.scalar(None, DOUBLE), hi)
    nans = _array(segments, f"nans:{column}")
    if nans is None:
        return _Stats(kind, lo, hi, has_value, has_value, _true(n))
    has_nan = _filled(pc.greater(nans, 0))
    has_number = has_value if nulls is None or rows is None else _filled(pc.less(pc.add(nulls, nans), rows))
    return _Stats(kind, lo, hi, has_value, has_number, has_nan)


def _compare_mask(stats: _Stats, op: str, arg: Operand) -> pa.Array:
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
    """A boolean SQL expression over one row; ``&``, ``|`` and ``~`` combine predicates.

    ``semantics`` (every method that compares) is the session the predicate is answered in;
    the default is the protocol's (UTC, timestamp kinds unknown).
    """

    depth = 0
    """How deeply AND / OR / NOT nest in it (a leaf: 0); never more than ``MAX_DEPTH``."""

    def __and__(self, other: object) -> Predicate:
        return And(self, _operand_of("&", other))

    def __or__(self, other: object) -> Predicate:
        return Or(self, _operand_of("|", other))

    def __rand__(self, other: object) -> Predicate:
        return And(_operand_of("&", other), self)

    def __ror__(self, other: object) -> Predicate:
        return Or(_operand_of("|", other), self)

    def __invert__(self) -> Predicate:
        return Not(self)

    def __bool__(self) -> NoReturn:
        raise InvalidPredicate(
            "the truth value of a predicate is ambiguous: it is true for some rows and false for "
            "others. Combine predicates with &, | and ~ (not `and`, `or`, `not`), and write "
            "1 < col('i') < 5 as (col('i') > 1) & (col('i') < 5)"
        )

    def might_match(self, segments: pa.Table, semantics: Semantics = PROTOCOL) -> pa.Array:
        """A boolean per segment, never null: False = certainly no matching row."""
        raise NotImplementedError

    def negated(self) -> Predicate:
        """The predicate true exactly where this one is false (SQL NOT, NULL stays NULL)."""
        raise NotImplementedError

    def bloom_rows(self, batch: bloom.FilterBatch, column: str, semantics: Semantics) -> np.ndarray | None:
        """Per filter of ``batch`` (Bloom filters over ``column``): False only where the filter proves
        no row matches; None: the filters cannot tell (every segment might match)."""
        return None

    def may_use_bloom(self) -> bool:
        """Whether ``bloom_rows`` can ever say False (saves probing)."""
        return False

    def columns(self) -> frozenset[str]:
        """The columns the predicate reads."""
        raise NotImplementedError


def _operand_of(op: str, other: object) -> Predicate:
    if isinstance(other, Predicate):
        return other
    raise InvalidPredicate(
        f"{op} combines predicates; {shown(other)} (a {type(other).__name__}) is not one "
        "(compare a column with a value: col('x') == 1)"
    )


@dataclass(frozen=True)
class Compare(Predicate):
    """``column op value``; ``op`` is one of ``OPS``."""

    column: str
    op: str
    value: LiteralValue

    def __post_init__(self) -> None:
        _check_column(self.column)
        if self.op not in OPS:
            raise InvalidPredicate(f"unknown comparison {shown(self.op)}; one of {', '.join(OPS)}")
        object.__setattr__(self, "value", literal(self.value))

    def might_match(self, segments: pa.Table, semantics: Semantics = PROTOCOL) -> pa.Array:
        stats = _stats(segments, self.column)
        if stats is not None and stats.kind is ColumnType.INT and folds_to_true(self.op, self.value):
            return _true(segments.num_rows)  # Spark: TRUE for every row, NULL included
        arg = None if stats is None else operand(stats.kind, self.value, semantics, self.column)
        if stats is None or arg is None:
            return _true(segments.num_rows)
        return _compare_mask(stats, self.op, arg)

    def negated(self) -> Predicate:
        return Compare(self.column, _NEGATE_OP[self.op], self.value)

    def bloom_rows(self, batch: bloom.FilterBatch, column: str, semantics: Semantics) -> np.ndarray | None:
        if self.op != "==" or column != self.column:
            return None
        arg = operand(batch.kind, self.value, semantics, column)
        if arg is None or arg.stored is NOTHING:
            return None
        return batch.might_contain(arg.stored)

    def may_use_bloom(self) -> bool:
        return self.op == "=="

    def columns(self) -> frozenset[str]:
        return frozenset((self.column,))


def _values(values: object, column: str) -> tuple[LiteralValue, ...]:
    """An IN list's values, each a literal; a bare string is refused (``isin("abc")`` is not
    ``IN ('a', 'b', 'c')``), and so is anything that is not a collection of values."""
    if isinstance(values, str | bytes | bytearray | memoryview | Mapping) or not isinstance(values, Iterable):
        raise InvalidPredicate(
            f"isin on {column!r} takes a list of values, not a {type(values).__name__} "
            f"({shown(values)}); write isin([value]) for one value"
        )
    return tuple(literal(v) for v in values)


@dataclass(frozen=True)
class IsIn(Predicate):
    """``column IN (values)``: Spark compares the column and all values in one common type."""

    column: str
    values: tuple[LiteralValue, ...]

    def __post_init__(self) -> None:
        _check_column(self.column)
        object.__setattr__(self, "values", _values(self.values, self.column))

    def might_match(self, segments: pa.Table, semantics: Semantics = PROTOCOL) -> pa.Array:
        stats = _stats(segments, self.column)
        if stats is None:
            return _true(segments.num_rows)
        result = _false(segments.num_rows)
        for arg in in_operands(stats.kind, self.values, semantics, self.column):
            if arg is None:
                return _true(segments.num_rows)
            result = pc.or_(result, _compare_mask(stats, "==", arg))
        return result

    def negated(self) -> Predicate:
        return _NotIn(self.column, self.values)

    def bloom_rows(self, batch: bloom.FilterBatch, column: str, semantics: Semantics) -> np.ndarray | None:
        if column != self.column:
            return None
        out = np.zeros(batch.size, dtype=bool)
        for arg in in_operands(batch.kind, self.values, semantics, column):
            if arg is None or arg.stored is NOTHING:
                return None
            out |= batch.might_contain(arg.stored)
        return out

    def may_use_bloom(self) -> bool:
        return True

    def columns(self) -> frozenset[str]:
        return frozenset((self.column,))


@dataclass(frozen=True)
class _NotIn(Predicate):
    """``column NOT IN (values)``: only made by ``negated`` (write ``~col(c).isin(...)``)."""

    column: str
    values: tuple[LiteralValue, ...]

    def might_match(self, segments: pa.Table, semantics: Semantics = PROTOCOL) -> pa.Array:
        result = _true(segments.num_rows)
        stats = _stats(segments, self.column)
        if stats is None:
            return result
        for arg in in_operands(stats.kind, self.values, semantics, self.column):
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
        if not isinstance(self.negate, bool):
            raise InvalidPredicate(f"IsNull.negate is True or False, not {shown(self.negate)}")

    def might_match(self, segments: pa.Table, semantics: Semantics = PROTOCOL) -> pa.Array:
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


def _nest(node: Predicate, parts: Iterable[Predicate]) -> None:
    """Record ``node``'s depth, refusing one beyond ``MAX_DEPTH`` (every walk over a predicate
    recurses once per level, so a bound on depth is a bound on the stack)."""
    depth = 1 + max(part.depth for part in parts)
    if depth > MAX_DEPTH:
        raise InvalidPredicate(f"predicate nests AND / OR / NOT deeper than {MAX_DEPTH} levels")
    object.__setattr__(node, "depth", depth)


def _chain(kind: type[And] | type[Or], parts: tuple[object, ...]) -> tuple[Predicate, ...]:
    """The operands of a connective, each a predicate, nested chains of the same one spliced in
    (``a & (b & c)`` is ``a & b & c``: the same SQL, and no depth for a long chain)."""
    out: list[Predicate] = []
    for part in parts:
        if isinstance(part, kind):
            out.extend(part.parts)
        else:
            out.append(_operand_of("AND" if kind is And else "OR", part))
    if len(out) < 2:
        raise InvalidPredicate(f"{kind.__name__} takes at least two predicates, got {len(out)}")
    return tuple(out)


@dataclass(frozen=True, init=False)
class And(Predicate):
    """``parts[0] AND parts[1] AND …``: true where every part is (SQL's three-valued AND)."""

    parts: tuple[Predicate, ...]

    def __init__(self, *parts: Predicate) -> None:
        object.__setattr__(self, "parts", _chain(And, parts))
        _nest(self, self.parts)

    def might_match(self, segments: pa.Table, semantics: Semantics = PROTOCOL) -> pa.Array:
        result = self.parts[0].might_match(segments, semantics)
        for part in self.parts[1:]:
            result = pc.and_(result, part.might_match(segments, semantics))
        return result

    def negated(self) -> Predicate:
        return Or(*[part.negated() for part in self.parts])

    def bloom_rows(self, batch: bloom.FilterBatch, column: str, semantics: Semantics) -> np.ndarray | None:
        out: np.ndarray | None = None
        for part in self.parts:
            rows = part.bloom_rows(batch, column, semantics)
            if rows is not None:
                out = rows if out is None else out & rows
        return out

    def may_use_bloom(self) -> bool:
        return any(part.may_use_bloom() for part in self.parts)

    def columns(self) -> frozenset[str]:
        return frozenset().union(*(part.columns() for part in self.parts))


@dataclass(frozen=True, init=False)
class Or(Predicate):
    """``parts[0] OR parts[1] OR …``: true where some part is (SQL's three-valued OR)."""

    parts: tuple[Predicate, ...]

    def __init__(self, *parts: Predicate) -> None:
        object.__setattr__(self, "parts", _chain(Or, parts))
        _nest(self, self.parts)

    def might_match(self, segments: pa.Table, semantics: Semantics = PROTOCOL) -> pa.Array:
        result = self.parts[0].might_match(segments, semantics)
        for part in self.parts[1:]:
            result = pc.or_(result, part.might_match(segments, semantics))
        return result

    def negated(self) -> Predicate:
        return And(*[part.negated() for part in self.parts])

    def bloom_rows(self, batch: bloom.FilterBatch, column: str, semantics: Semantics) -> np.ndarray | None:
        out = np.zeros(batch.size, dtype=bool)
        for part in self.parts:
            rows = part.bloom_rows(batch, column, semantics)
            if rows is None:
                return None
            out |= rows
        return out

    def may_use_bloom(self) -> bool:
        return all(part.may_use_bloom() for part in self.parts)

    def columns(self) -> frozenset[str]:
        return frozenset().union(*(part.columns() for part in self.parts))


@dataclass(frozen=True)
class Not(Predicate):
    """SQL NOT: true where ``operand`` is false (NULL stays NULL); answered by pushing it inwards."""

    operand: Predicate

    def __post_init__(self) -> None:
        _nest(self, (_operand_of("NOT", self.operand),))

    def __invert__(self) -> Predicate:
        return self.operand  # NOT NOT p is p, NULL included

    def might_match(self, segments: pa.Table, semantics: Semantics = PROTOCOL) -> pa.Array:
        return self.operand.negated().might_match(segments, semantics)

    def negated(self) -> Predicate:
        return self.operand

    def bloom_rows(self, batch: bloom.FilterBatch, column: str, semantics: Semantics) -> np.ndarray | None:
        return self.operand.negated().bloom_rows(batch, column, semantics)

    def may_use_bloom(self) -> bool:
        return self.operand.negated().may_use_bloom()

    def columns(self) -> frozenset[str]:
        return self.operand.columns()


def _check_column(name: object) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidPredicate(f"a column name is non-empty text, not {shown(name)}")
    unicode_text(name, "a column name")


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

    def __bool__(self) -> NoReturn:
        raise InvalidPredicate(f"col({self.name!r}) is a column, not a condition: compare it with a value")

    def isin(self, values: Iterable[object]) -> Predicate:
        """``column IN (values)``: ``values`` is a list (any collection) of literals, never a bare string."""
        return IsIn(self.name, values)  # type: ignore[arg-type]  # _values() checks them

    def is_null(self) -> Predicate:
        return IsNull(self.name)

    def is_not_null(self) -> Predicate:
        return IsNull(self.name, negate=True)

    __hash__ = None  # type: ignore[assignment]


def col(name: str) -> Column:
    return Column(name)


def bloom_mask(
    predicate: Predicate, segments: pa.Table, candidates: np.ndarray, semantics: Semantics = PROTOCOL
) -> np.ndarray:
    """``candidates`` (a boolean per segment) without the segments whose Bloom filter proves they
    hold no row matching ``predicate``; every filter over one column is probed in one batch.

    A filter is only read when the segment's stats for its column are of the table's type (the
    wide ``nulls:`` column is set): the column type decides how literals are hashed, and a
    segment whose column had another type (a protocol-1 log) was hashed otherwise.
    """
    names = segments.column_names
    if not predicate.may_use_bloom() or "bloom_bits" not in names or "bloom_column" not in names:
        return candidates
    out = candidates.copy()
    bloom_columns = segments.column("bloom_column")
    for column in sorted(predicate.columns()):
        kind = stats_kind(segments, column)
        nulls = f"nulls:{column}"
        if kind is None or nulls not in names:
            continue
        here = pc.and_(
            pc.fill_null(pc.equal(bloom_columns, pa.scalar(column, pa.string())), False),
            pc.is_valid(segments.column(nulls)),
        )
        rows = np.flatnonzero(out & _numpy(here))
        if not len(rows):
            continue
        picked = segments.select(["bloom_bits", "bloom_hashes"]).take(pa.array(rows))
        batch = bloom.FilterBatch(
            kind, picked.column("bloom_bits").combine_chunks(), picked.column("bloom_hashes").combine_chunks()
        )
        found = predicate.bloom_rows(batch, column, semantics)
        if found is not None:
            out[rows] = found
    return out


def _numpy(mask: pa.Array | pa.ChunkedArray) -> np.ndarray:
    filled = pc.fill_null(mask, False)
    return np.asarray(filled.to_numpy(zero_copy_only=False), dtype=bool)
