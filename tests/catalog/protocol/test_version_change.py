"""``VersionChange``'s one serialiser: it reads back what it writes, refuses anything else by
field, and writes the Pub/Sub and SSE events byte for byte as they were before it."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from segcat.catalog.errors import MalformedChange
from segcat.catalog.protocol.version_change import SOURCES, VersionChange

_LONG = st.integers(min_value=-(2**63), max_value=2**63 - 1)
_IDS = st.lists(st.text(), max_size=5).map(tuple)
changes = st.builds(
    VersionChange,
    table=st.text(),
    version=_LONG,
    prev_version=_LONG,
    timestamp_ms=_LONG,
    commit_id=st.text(),
    operation=st.text(),
    added=_IDS,
    dropped=_IDS,
    rows_delta=st.none() | _LONG,
    bytes_delta=st.none() | _LONG,
    log_id=st.none() | st.text(),
    source=st.sampled_from(SOURCES),
)

_FIELDS = (
    "table",
    "version",
    "prev_version",
    "timestamp_ms",
    "commit_id",
    "operation",
    "added",
    "dropped",
    "rows_delta",
    "bytes_delta",
)


@given(changes)
def test_it_reads_back_what_it_writes(change: VersionChange) -> None:
    for raw in (change.to_json(), change.to_json().encode()):
        assert VersionChange.from_json(raw, source=change.source) == change


@given(changes)
def test_the_pubsub_and_sse_events_are_the_json_they_always_were(change: VersionChange) -> None:
    # what the Pub/Sub event (every field, then the log) and the SSE data (the fields without the
    # reader's ``source``) were, written the way they were written
    legacy = {name: getattr(change, name) for name in _FIELDS}
    legacy["added"], legacy["dropped"] = list(change.added), list(change.dropped)
    if change.log_id is not None:
        legacy["log_id"] = change.log_id
    assert change.to_json() == json.dumps(legacy, separators=(",", ":"))
    assert "source" not in json.loads(change.to_json())


def test_a_published_event_is_byte_for_byte_the_same() -> None:
    change = VersionChange(
        "ns.t", 7, 3, 1_700_000_000_007, "c7", "APPEND", ("seg-7",), (), 100, 10, log_id="AbC-12_x"
    )
    assert change.to_json() == (
        '{"table":"ns.t","version":7,"prev_version":3,"timestamp_ms":1700000000007,"commit_id":"c7",'
        '"operation":"APPEND","added":["seg-7"],"dropped":[],"rows_delta":100,"bytes_delta":10,'
        '"log_id":"AbC-12_x"}'
    )


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ('{"table":1}', "table"),
        ('{"table":"t","version":"7"}', "version"),
        ('{"table":"t","version":true}', "version"),
        ('{"table":"t","version":7,"prev_version":6.0}', "prev_version"),
        ('{"table":"t","version":7,"prev_version":6,"timestamp_ms":1,"commit_id":null}', "commit_id"),
        (
            '{"table":"t","version":7,"prev_version":6,"timestamp_ms":1,"commit_id":"c",'
            '"operation":"APPEND","added":["a",2]}',
            "added",
        ),
        (
            '{"table":"t","version":7,"prev_version":6,"timestamp_ms":1,"commit_id":"c",'
            '"operation":"APPEND","rows_delta":"10"}',
            "rows_delta",
        ),
        (
            '{"table":"t","version":7,"prev_version":6,"timestamp_ms":1,"commit_id":"c",'
            '"operation":"APPEND","log_id":5}',
            "log_id",
        ),
    ],
)
def test_a_wrong_type_is_refused_by_field_never_coerced(raw: str, field: str) -> None:
    with pytest.raises(MalformedChange, match=repr(field)):
        VersionChange.from_json(raw)


@given(st.one_of(st.binary(max_size=64), st.text(max_size=64)))
def test_anything_else_is_a_malformed_change(raw: bytes | str) -> None:
    try:
        change = VersionChange.from_json(raw)
    except MalformedChange as exc:
        assert isinstance(exc, ValueError)  # what followers that skip bad messages catch
        return
    assert isinstance(change, VersionChange)  # parsed: a JSON object with every required field
