"""A writer's own records, judged by the commit it holds instead of by decoding them.

``rules.apply_record(..., own=...)`` takes a record a writer produced as the commit it holds,
``Prechecked`` where its field rules passed; the verdicts and the image must be exactly those of
decoding every record, whatever happened between the writer's check and its record's offset
(another writer's protocol upgrade included).
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from segcat.catalog.protocol import codec, rules
from segcat.catalog.protocol.model import LogRecord
from segcat.catalog.protocol.replay import replay
from segcat.catalog.protocol.rules import Prechecked, Verdict
from segcat.catalog.protocol.state import TableState
from tests.strategies import SETTINGS, Scenario, scenarios


def _verdicts(scenario: Scenario, own: rules.OwnRecords | None) -> tuple[TableState, list[Verdict]]:
    verdicts: list[Verdict] = []
    state = replay(
        scenario.records,
        TableState(scenario.table),
        listener=lambda a, _: verdicts.append(a.verdict),
        own=own,
    )
    return state, verdicts


@settings(SETTINGS, max_examples=150)
@given(scenarios(), st.data())
def test_judging_own_records_by_the_held_commit_gives_the_verdicts_and_image_of_decoding(
    scenario: Scenario, data: st.DataObject
) -> None:
    """Each "own" record was checked as a writer checks it: on the image some records earlier
    (``lag``), with the field rules of that image's protocol, exactly as ``Writer._prejudge``."""
    lag = data.draw(st.integers(0, 5), label="lag")
    images: list[TableState] = [TableState(scenario.table)]
    replay(scenario.records, TableState(scenario.table), listener=lambda _, s: images.append(s.copy()))
    held: dict[int, Prechecked] = {}
    for i, record in enumerate(scenario.records):
        commit = scenario.intended[i]
        if commit is None or record.value is None or not data.draw(st.booleans(), label=f"own {i}"):
            continue
        if record.key != commit.commit_id.encode() or record.value != codec.encode_commit(commit):
            continue  # not the bytes the writer produced (the pipeline's ``_own`` compares them)
        if not codec.round_trips_exactly(commit):
            continue
        before = images[max(0, i - lag)]
        at = before.version + 1
        if rules.malformation(commit, at, before.table, before.protocol.version) is not None:
            continue  # the writer would have refused it: never sent
        held[record.offset] = Prechecked(commit, before.table, at, before.protocol.version)

    def own(record: LogRecord) -> Prechecked | None:
        return held.get(record.offset)

    decoded_state, decoded = _verdicts(scenario, None)
    own_state, judged = _verdicts(scenario, own)
    assert judged == decoded
    assert own_state == decoded_state
    assert own_state.fingerprint() == decoded_state.fingerprint()


def test_a_check_made_under_another_protocol_is_made_again() -> None:
    state = TableState("ns.t")
    commit = codec.decode_commit(codec.encode_commit(_commit()))
    checked = Prechecked(commit, "ns.t", 0, state.protocol.version + 1)
    assert not checked.holds(state, 5)
    assert Prechecked(commit, "ns.t", 0, state.protocol.version).holds(state, 5)
    assert not Prechecked(commit, "ns.other", 0, state.protocol.version).holds(state, 5)
    assert not Prechecked(commit, "ns.t", 6, state.protocol.version).holds(state, 5)


def _commit() -> rules.Commit:
    from tests.factories import segment

    return rules.Commit(
        "0f8fad5b-d9cb-469f-a165-70867728950e", "ns.t", rules.Operation.APPEND, -1, "w", 1, (segment("a"),)
    )


def test_the_held_copy_is_the_commit_with_dicts_of_its_own() -> None:
    """A tripwire: ``Writer``'s held copy and ``codec.round_trips_exactly`` name every field of a
    commit; a new field must be added to both (and to this list)."""
    from dataclasses import fields

    from segcat.catalog.write.writer import _prechecked

    assert [f.name for f in fields(rules.Commit)] == [
        "commit_id", "table", "operation", "base_version", "writer_id", "timestamp_ms", "adds", "drops",
        "tombstones", "replace_scope", "isolation", "properties", "table_properties", "schema", "protocol",
        "intent",
    ]  # fmt: skip
    commit = replace(_commit(), properties={"a": "b"}, table_properties={"c": None})
    held = _prechecked(commit, TableState("ns.t"))
    assert held is not None and held.commit == commit
    assert held.commit.properties is not commit.properties
    assert held.commit.table_properties is not commit.table_properties
    assert (held.table, held.offset, held.version) == ("ns.t", 0, 1)
