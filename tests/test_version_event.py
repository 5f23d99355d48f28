"""Version events as published: the JSON carries every field, and ``from_json`` reads it back."""

from __future__ import annotations

import dataclasses
import json

from hypothesis import given
from hypothesis import strategies as st

from segcat.catalog.storage.redis import VersionEvent

_LONG = st.integers(min_value=-(2**63), max_value=2**63 - 1)
events = st.builds(
    VersionEvent,
    table=st.text(),
    version=_LONG,
    prev_version=_LONG,
    timestamp_ms=_LONG,
    commit_id=st.text(),
    operation=st.text(),
    added=st.lists(st.text(), max_size=5),
    dropped=st.lists(st.text(), max_size=5),
    rows_delta=_LONG,
    bytes_delta=_LONG,
)


@given(events)
def test_the_json_is_every_field_and_reads_back(event: VersionEvent) -> None:
    assert json.loads(event.to_json()) == dataclasses.asdict(event)
    assert VersionEvent.from_json(event.to_json()) == event
    assert VersionEvent.from_json(event.to_json().encode()) == event


@given(st.one_of(st.binary(max_size=64), st.text(max_size=64)))
def test_anything_else_is_a_value_error(raw: bytes | str) -> None:
    try:
        VersionEvent.from_json(raw)
    except ValueError:
        return
    # whatever parsed must be an event with every required field
    assert isinstance(json.loads(raw), dict)
