"""Arbitrary Python values through the writer API: a version or a typed error, never a stray record.

Regression of issue 7 items 11-13: ``size_bytes=1.5`` was stored as 1, ``compact("py1", [])``
iterated the string and published a REJECTED record dropping ``p``, ``y``, ``1``, and a
``base_version`` beyond the head was sent to land as an INVALID record. On a real broker:
after every call the topic's end moved by exactly one record (the accepted commit) or not
at all (the typed error).
"""

from __future__ import annotations

import datetime as dt
import uuid
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import CommitConflict, InvalidCommit, SegcatError
from segcat.catalog.log.reader import LogReader
from segcat.catalog.protocol.expressions import col
from segcat.catalog.protocol.model import BloomFilter, ColumnStats, ColumnType, Operation, Segment
from segcat.catalog.protocol.rules import Outcome
from tests.factories import segment

pytestmark = pytest.mark.kafka

ANY = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=12)
    | st.binary(max_size=8)
    | st.dates()
    | st.datetimes()
    | st.decimals(allow_nan=False),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
"""Any plain Python value, nested a little."""

TRICKY_PATHS = ["/etc/passwd", "file:///etc/passwd", "s3://other/x", "x://../../y", "a\\b", "", "a/../b"]
TEXT = st.text(max_size=20) | st.sampled_from(["data/ok.parquet", *TRICKY_PATHS])
STAT_VALUE = (
    st.none() | st.integers(-(2**64), 2**64) | st.floats() | st.text(max_size=5) | st.booleans() | ANY
)


@st.composite
def stats(draw: st.DrawFn) -> Any:
    if draw(st.integers(0, 9)) == 0:
        return draw(ANY)
    return ColumnStats(
        column=draw(TEXT | ANY),
        type=draw(st.sampled_from(list(ColumnType)) | ANY),
        min=draw(STAT_VALUE),
        max=draw(STAT_VALUE),
        null_count=draw(st.none() | st.integers(-5, 2**64) | ANY),
        nan_count=draw(st.none() | st.integers(-5, 30) | ANY),
    )


SEGMENT_FIELDS = (
    "segment_id",
    "path",
    "size_bytes",
    "row_count",
    "partition",
    "format",
    "stats",
    "bloom",
    "schema",
)


@st.composite
def segments(draw: st.DrawFn) -> Any:
    """A valid fresh segment with, most of the time, one field replaced by something arbitrary."""
    if draw(st.integers(0, 19)) == 0:
        return draw(ANY)
    fresh = f"seg-{uuid.uuid4().hex[:12]}"
    valid: dict[str, Any] = {
        "segment_id": fresh,
        "path": f"data/{fresh}.parquet",
        "size_bytes": draw(st.integers(0, 10**6)),
        "row_count": 10,
        "partition": draw(st.none() | st.sampled_from(["p0", "p1"])),
        "format": "parquet",
        "stats": (ColumnStats("id", ColumnType.INT, 0, 9, 0),),
        "bloom": None,
        "schema": None,
    }
    broken = draw(st.none() | st.sampled_from(SEGMENT_FIELDS))
    arbitrary: dict[str, Any] = {
        "segment_id": TEXT | ANY,
        "path": TEXT | ANY,
        "size_bytes": st.integers(-(2**70), 2**70) | ANY,
        "row_count": st.integers(-5, 2**64) | ANY,
        "partition": TEXT | ANY,
        "format": TEXT | ANY,
        "stats": st.lists(stats(), max_size=3).map(tuple) | ANY,
        "bloom": st.builds(BloomFilter, TEXT, st.integers(-2, 100), st.binary(max_size=4)) | ANY,
        "schema": st.just('{"type": "struct", "fields": []}') | TEXT | ANY,
    }
    if broken is not None:
        valid[broken] = draw(arbitrary[broken])
    return Segment(**valid)


COLLECTION_OF = lambda item: st.lists(item, max_size=3) | st.lists(item, max_size=3).map(tuple)  # noqa: E731
CALLS = st.one_of(
    st.tuples(st.just("append"), COLLECTION_OF(segments())),
    st.tuples(st.just("append"), segments() | ANY),
    st.tuples(
        st.just("compact"), st.text(max_size=5) | COLLECTION_OF(TEXT) | ANY, COLLECTION_OF(segments()) | ANY
    ),
    st.tuples(
        st.just("delete"),
        COLLECTION_OF(TEXT) | TEXT | ANY,
        COLLECTION_OF(st.sampled_from(["id = 1", "1=1; DROP TABLE x", "user = 'a'", ""]) | ANY)
        | st.just([col("id") == 3])
        | TEXT,
    ),
    st.tuples(st.just("set_properties"), st.dictionaries(TEXT, st.none() | TEXT, max_size=2) | ANY),
    st.tuples(st.just("set_schema"), st.just('{"a": 1}') | TEXT | ANY),
    st.tuples(st.just("base"), st.integers(-5, 10**6) | ANY),
)


def _high(config: Config, table: Table) -> int:
    with LogReader(config, table.name) as reader:
        return reader.watermarks()[1]


def _call(writer: Table, call: tuple[Any, ...]) -> int:
    kind, *args = call
    if kind == "append":
        return writer.append(args[0])
    if kind == "compact":
        return writer.compact(args[0], args[1])
    if kind == "delete":
        return writer.delete(drops=args[0], predicates=args[1])
    if kind == "set_properties":
        return writer.set_properties(args[0])
    if kind == "set_schema":
        return writer.set_schema(args[0])
    fresh = segment(f"b-{uuid.uuid4().hex[:8]}")
    commit = writer.new_commit(Operation.APPEND, adds=[fresh], base_version=args[0])
    return writer.commit(commit)


@pytest.fixture(scope="module")
def shared_table(catalog: Catalog) -> Table:
    return catalog.create_table(f"test.writer_api_{uuid.uuid4().hex[:8]}")


@settings(
    max_examples=150,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)
@given(calls=st.lists(CALLS, min_size=1, max_size=3))
def test_every_call_gives_a_version_or_a_typed_error_and_nothing_stray(
    config: Config, shared_table: Table, calls: list[tuple[Any, ...]]
) -> None:
    with load_catalog(config).load_table(shared_table.name) as writer:
        for call in calls:
            before = _high(config, shared_table)
            try:
                version = _call(writer, call)
            except InvalidCommit as exc:  # pragma: no cover - would mean the pre-check missed something
                raise AssertionError(f"an INVALID record reached the log for {call!r}: {exc}") from exc
            except CommitConflict as exc:
                assert exc.version is None, f"a REJECTED record reached the log for {call!r}"
                assert _high(config, shared_table) == before
                event(f"{call[0]}: conflict seen before sending")
                continue
            except SegcatError as exc:
                assert _high(config, shared_table) == before, f"a record was written for {call!r}"
                event(f"{call[0]}: {type(exc).__name__}")
                continue
            event(f"{call[0]}: written")
            after = _high(config, shared_table)
            if version == before:  # accepted now, at the offset the topic's end had
                assert after == before + 1
                (record,) = list(shared_table.records(version, version + 1))
                assert record.verdict.outcome is Outcome.ACCEPTED
            else:  # a DUPLICATE answered from the image: not re-sent
                assert version < before and after == before


def test_known_regressions_write_nothing(config: Config, table: Table) -> None:
    with load_catalog(config).load_table(table.name) as writer:
        writer.append([segment("py1")])
        before = _high(config, table)
        for bad in (
            lambda: writer.compact("py1", []),
            lambda: writer.append([Segment("s", "data/s.parquet", 1.5, 1)]),  # type: ignore[arg-type]
            lambda: writer.append([Segment("s", "data/s.parquet", True, 1)]),
            lambda: writer.append([Segment(None, "data/s.parquet", 1, 1)]),  # type: ignore[arg-type]
            lambda: writer.append([Segment("s", None, 1, 1)]),  # type: ignore[arg-type]
            lambda: writer.append(Segment("s", "data/s.parquet", 1, 1)),  # type: ignore[arg-type]
            lambda: writer.delete(predicates="id = 1"),
            lambda: writer.delete(predicates=["1=1; DROP TABLE x"]),
            lambda: writer.append([Segment("s", "file:///etc/passwd", 1, 1)]),
            lambda: writer.append([Segment("s", "data/s.parquet", 2**70, 1)]),
            lambda: writer.set_properties({"k": {"nested": 1}}),  # type: ignore[dict-item]
            lambda: writer.append(
                [
                    Segment(
                        "s", "data/s.parquet", 1, 1, stats=(ColumnStats("x", ColumnType.INT, Decimal(1), 2),)
                    )
                ]
            ),
            lambda: writer.append(
                [
                    Segment(
                        "s",
                        "data/s.parquet",
                        1,
                        1,
                        stats=(ColumnStats("x", ColumnType.DATE, dt.date(2024, 1, 1), "x"),),
                    )
                ]
            ),
        ):
            with pytest.raises(SegcatError):
                bad()
        assert _high(config, table) == before
        assert writer.delete(predicates=[col("id") == 3]) == before  # an expression is written as text
    (record,) = list(table.records(before))
    assert record.commit is not None and record.commit.tombstones[0].predicate == "id = 3"
