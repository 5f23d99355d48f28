"""Property tests of the commit reader: whatever it is fed, it answers with a ``Commit`` or a typed
``SegcatError``, never with another exception (issue 7, items 11 and 12).

Three kinds of input: arbitrary JSON text, arbitrary JSON-ish Python values (NaN, huge
integers, lone surrogates, tuples, bytes, non-string keys), and valid documents with one
field swapped for an arbitrary value (which reach the deepest checks). A document that is
accepted must be exactly the JSON form of the commit it yields (nothing coerced) and must
encode (nothing the writer would crash on).
"""

from __future__ import annotations

import datetime as dt
import json
import string
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from segcat.catalog.errors import MalformedCommit, SegcatError
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.jsonio import commit_from_json, commit_to_json, dumps, parse_json
from segcat.catalog.protocol.model import (
    BloomFilter,
    ColumnStats,
    ColumnType,
    Commit,
    Isolation,
    Operation,
    Protocol,
    Segment,
    Tombstone,
)
from tests.strategies import SETTINGS

INT64 = st.integers(-(2**63), 2**63 - 1)
NATURAL = st.integers(0, 2**63 - 1)

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(-(2**80), 2**80),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    st.sampled_from(["APPEND", "INT", "FLOAT", "NaN", "Infinity", "2020-01-01", "AA==", "data/a.parquet"]),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.text(max_size=12), inner, max_size=5),
    ),
    max_leaves=30,
)
"""Values ``json.loads`` can return."""

python_scalars = st.one_of(
    json_scalars,
    st.floats(),  # NaN and ±inf
    st.integers(min_value=2**200),
    st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=2),
    st.binary(max_size=4),
    st.just(()),
    st.just(object()),
)
jsonish_values = st.recursive(
    python_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=8), st.integers(0, 3), st.none()), inner, max_size=5),
    ),
    max_leaves=30,
)
"""What a Python caller might pass instead of a decoded document."""


def _read(doc: Any) -> Commit | SegcatError:
    try:
        return commit_from_json(doc, table="ns.t", writer_id="w", base_version=-1, now_ms=0)
    except SegcatError as exc:
        assert str(exc) and "\n" not in str(exc)
        return exc


@settings(SETTINGS, max_examples=300)
@given(json_values)
def test_any_json_value_is_a_commit_or_a_typed_error(doc: Any) -> None:
    _read(doc)


@settings(SETTINGS, max_examples=300)
@given(jsonish_values)
def test_any_python_value_is_a_commit_or_a_typed_error(doc: Any) -> None:
    _read(doc)


@settings(SETTINGS, max_examples=300)
@given(
    st.one_of(
        st.text(alphabet=string.printable, max_size=200), json_values.map(json.dumps), st.binary(max_size=64)
    )
)
def test_any_text_is_parsed_strictly_or_refused(text: str | bytes) -> None:
    try:
        doc = parse_json(text, source="fuzz.json")
    except MalformedCommit:
        return
    _read(doc)


# --------------------------------------------------------------------- valid documents, one field broken


def stat_values(kind: ColumnType) -> st.SearchStrategy[Any]:
    by_kind: dict[ColumnType, st.SearchStrategy[Any]] = {
        ColumnType.INT: INT64,
        ColumnType.FLOAT: st.floats(),
        ColumnType.STRING: st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=10),
        ColumnType.DATE: st.dates(),
        ColumnType.TIMESTAMP: st.datetimes(
            min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30), timezones=st.just(dt.UTC)
        ),
        ColumnType.BOOLEAN: st.booleans(),
        ColumnType.BINARY: st.binary(max_size=10),
        ColumnType.OTHER: st.none(),
    }
    return st.one_of(st.none(), by_kind[kind])


names = st.text(alphabet=string.ascii_letters + string.digits + "_-./", min_size=1, max_size=12)


@st.composite
def stats_entries(draw: st.DrawFn, column: str) -> ColumnStats:
    kind = draw(st.sampled_from(ColumnType))
    return ColumnStats(
        column,
        kind,
        draw(stat_values(kind)),
        draw(stat_values(kind)),
        draw(st.one_of(st.none(), NATURAL)),
        draw(st.one_of(st.none(), NATURAL)) if kind is ColumnType.FLOAT else None,
    )


@st.composite
def valid_segments(draw: st.DrawFn) -> Segment:
    columns = draw(st.lists(names, max_size=3, unique=True))
    return Segment(
        segment_id=draw(names),
        path=draw(names),
        size_bytes=draw(NATURAL),
        row_count=draw(NATURAL),
        partition=draw(st.one_of(st.none(), names)),
        format=draw(st.sampled_from(["parquet", "orc"])),
        stats=tuple(draw(stats_entries(c)) for c in columns),
        bloom=draw(
            st.one_of(
                st.none(),
                st.builds(BloomFilter, names, st.integers(1, 2**31 - 1), st.binary(min_size=1, max_size=8)),
            )
        ),
        schema=draw(st.one_of(st.none(), st.text(max_size=10))),
    )


@st.composite
def valid_commits(draw: st.DrawFn) -> Commit:
    """Commits in the JSON reader's domain (the rules may still refuse them: not its business)."""
    operation = draw(st.sampled_from([op for op in Operation if op is not Operation.UNKNOWN]))
    upgrade = operation is Operation.UPGRADE_PROTOCOL
    return Commit(
        commit_id=str(draw(st.uuids())),
        table="ns.t",
        operation=operation,
        base_version=draw(st.integers(-1, 2**63 - 1)),
        writer_id=draw(names),
        timestamp_ms=draw(NATURAL),
        adds=tuple(draw(st.lists(valid_segments(), max_size=2))),
        drops=tuple(draw(st.lists(names, max_size=2))),
        tombstones=tuple(Tombstone(p) for p in draw(st.lists(names, max_size=2))),
        replace_scope=tuple(draw(st.lists(names, max_size=2))),
        isolation=draw(st.sampled_from(Isolation)),
        properties=draw(st.dictionaries(names, st.text(max_size=5), max_size=2)),
        table_properties=draw(st.dictionaries(names, st.one_of(st.none(), st.text(max_size=5)), max_size=2)),
        schema=draw(st.one_of(st.none(), st.just('{"type": "struct"}'))),
        protocol=Protocol(
            draw(st.integers(1, 2**31 - 1)), tuple(draw(st.lists(names, max_size=3, unique=True)))
        )
        if upgrade
        else None,
    )


def _same(a: Commit, b: Commit) -> bool:
    """Equality, with NaN stats equal to NaN stats."""
    return dumps(commit_to_json(a), sort_keys=True) == dumps(commit_to_json(b), sort_keys=True)


@settings(SETTINGS, max_examples=200)
@given(valid_commits())
def test_valid_commits_round_trip_through_strict_json(commit: Commit) -> None:
    text = dumps(commit_to_json(commit))  # allow_nan=False: non-finite stats are strings
    back = commit_from_json(parse_json(text), table="ns.t", writer_id="x", base_version=-1, now_ms=0)
    assert _same(back, commit)


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            out.extend(_paths(value, (*prefix, key)))
    elif isinstance(doc, list):
        for i, value in enumerate(doc):
            out.extend(_paths(value, (*prefix, i)))
    return out


@settings(SETTINGS, max_examples=400)
@given(valid_commits(), st.data())
def test_a_valid_document_with_one_field_swapped_is_a_commit_or_a_typed_error(
    commit: Commit, data: st.DataObject
) -> None:
    doc = json.loads(dumps(commit_to_json(commit)))
    path = data.draw(st.sampled_from(_paths(doc)[1:] or [("operation",)]))
    replacement = data.draw(st.one_of(json_values, jsonish_values))
    target = doc
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = replacement
    result = _read(doc)
    if isinstance(result, Commit):  # accepted: then nothing was coerced, and the writer can send it
        assert json.loads(dumps(commit_to_json(result))) == doc
        codec.encode_commit(result)
