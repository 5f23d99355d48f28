"""The rules of the ``lifecycle`` feature (docs/PROTOCOL.md §3c), pure: intents, log start, drop.

Examples for each rule, then hypothesis: random logs of appends, intents, drops and undrops
judged record by record, with the invariants the feature promises.
"""

from __future__ import annotations

import uuid
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from segcat.catalog.protocol import versions
from segcat.catalog.protocol.lifecycle import DROPPED_PROPERTY, LOG_START_PROPERTY, MAX_INTENT_TTL_MS
from segcat.catalog.protocol.model import Commit, Intent, Operation, Protocol
from segcat.catalog.protocol.rules import Outcome, Rule
from segcat.catalog.protocol.state import LOCATION_PROPERTY, TableState
from tests.test_rules import BROKER_T0, Log, append, commit, seg

ROOT = "s3://lake/warehouse/ns/t"


def lifecycle_log() -> Log:
    log = Log()
    log.accept(
        commit(
            Operation.UPGRADE_PROTOCOL,
            -1,
            protocol=versions.new_table_protocol(),
            table_properties={LOCATION_PROPERTY: ROOT},
        )
    )
    assert versions.has_lifecycle(log.state.protocol)
    return log


def intent(intent_id: str, ttl_ms: int = 60_000, prefix: str = "data/") -> Commit:
    return commit(Operation.INTENT, -1, intent=Intent(intent_id, prefix, ttl_ms))


def props(changes: dict[str, str | None], base: int = -1) -> Commit:
    return commit(Operation.SET_PROPERTIES, base, table_properties=changes)


def test_an_intent_is_noted_not_a_version() -> None:
    log = lifecycle_log()
    head = log.state.last_accepted_version
    iid = str(uuid.uuid4())
    verdict = log.send(intent(iid))
    assert verdict.outcome is Outcome.NOTED
    assert log.state.last_accepted_version == head and log.state.version == verdict.offset
    opened = log.state.intents[iid]
    assert opened.expires_ms == BROKER_T0 + verdict.offset + 60_000 and opened.prefix == "data/"
    renewal = log.send(intent(iid, ttl_ms=120_000))
    assert renewal.outcome is Outcome.NOTED
    assert log.state.intents[iid].expires_ms == BROKER_T0 + renewal.offset + 120_000
    version = log.accept(append(seg("a"), base=log.head, intent=Intent(iid, "data/", 0)))
    assert iid not in log.state.intents and log.state.last_accepted_version == version
    other = str(uuid.uuid4())
    log.send(intent(other))
    assert log.send(intent(other, ttl_ms=0)).outcome is Outcome.NOTED  # an abort
    assert log.state.intents == {}


def test_intent_field_rules() -> None:
    log = lifecycle_log()
    bad = [
        commit(Operation.INTENT, -1),  # no intent
        intent("not-a-uuid"),
        intent(str(uuid.uuid4()), ttl_ms=-1),
        intent(str(uuid.uuid4()), ttl_ms=MAX_INTENT_TTL_MS + 1),
        intent(str(uuid.uuid4()), prefix="../elsewhere/"),
        intent(str(uuid.uuid4()), prefix="/abs/path"),
        intent(str(uuid.uuid4()), prefix="s3://other-bucket/x/"),  # not under the location
        replace(intent(str(uuid.uuid4())), adds=(seg("x"),)),
        append(seg("y"), intent=Intent(str(uuid.uuid4()), "data/", 5)),  # a data commit closes: ttl 0
        replace(props({"k": "v"}), intent=Intent(str(uuid.uuid4()), "data/", 0)),
    ]
    for c in bad:
        verdict = log.send(c)
        assert verdict.outcome is Outcome.INVALID and verdict.rule is Rule.MALFORMED, (c, verdict)
    assert log.send(intent(str(uuid.uuid4()), prefix=f"{ROOT}/data/day=1/")).outcome is Outcome.NOTED


def test_without_the_feature_intents_are_invalid_and_reserved_properties_plain() -> None:
    log = Log()
    log.accept(
        commit(
            Operation.UPGRADE_PROTOCOL,
            -1,
            protocol=Protocol(2, ()),
            table_properties={LOCATION_PROPERTY: ROOT},
        )
    )
    assert log.send(intent(str(uuid.uuid4()))).outcome is Outcome.INVALID
    log.accept(props({DROPPED_PROPERTY: "1"}))
    assert not log.state.dropped  # a plain property on a table without the feature
    log.accept(append(seg("a")))


def test_log_start_moves_forward_only() -> None:
    log = lifecycle_log()
    log.accept(append(seg("a")))
    assert log.send(props({LOG_START_PROPERTY: "x"})).outcome is Outcome.INVALID
    assert log.send(props({LOG_START_PROPERTY: str(log.head + 100)})).outcome is Outcome.INVALID
    log.accept(props({LOG_START_PROPERTY: "2"}))
    assert log.state.log_start == 2
    assert log.send(props({LOG_START_PROPERTY: "1"})).outcome is Outcome.INVALID
    assert log.send(props({LOG_START_PROPERTY: None})).outcome is Outcome.INVALID


def test_a_dropped_table_rejects_all_but_the_undrop() -> None:
    log = lifecycle_log()
    log.accept(append(seg("a")))
    assert log.send(props({DROPPED_PROPERTY: "1", "k": "v"})).outcome is Outcome.INVALID
    dropped_at = log.accept(props({DROPPED_PROPERTY: "1700000000000"}))
    assert log.state.dropped and log.state.dropped_version == dropped_at
    for c in (append(seg("b")), intent(str(uuid.uuid4())), props({"k": "v"})):
        verdict = log.send(c)
        assert verdict.outcome is Outcome.REJECTED and verdict.rule is Rule.TABLE_DROPPED
        assert verdict.conflicting_version == dropped_at
    assert log.send(props({DROPPED_PROPERTY: "1"})).outcome is Outcome.INVALID  # already dropped
    log.accept(props({DROPPED_PROPERTY: None}))
    assert not log.state.dropped
    log.accept(append(seg("b")))


STEP = st.sampled_from(["append", "intent", "renew", "close", "commit-intent", "drop", "undrop"])


@settings(max_examples=150, deadline=None)
@given(st.lists(STEP, max_size=40))
def test_random_lifecycle_logs_keep_their_promises(steps: list[str]) -> None:
    """Intents never change what a reader lists; a dropped table changes only by its undrop;
    a key frame's metadata (to_meta / from_meta) judges the rest as a full replay does."""
    log = lifecycle_log()
    ids: list[str] = []
    halfway: TableState | None = None
    tail: list[Commit] = []
    for i, step in enumerate(steps):
        n = i + 1
        if step == "append":
            c = append(seg(f"s{n}"), base=log.head)
        elif step == "intent" or (step in ("renew", "close", "commit-intent") and not ids):
            ids.append(str(uuid.uuid4()))
            c = intent(ids[-1])
        elif step == "renew":
            c = intent(ids[-1], ttl_ms=90_000)
        elif step == "close":
            c = intent(ids.pop(), ttl_ms=0)
        elif step == "commit-intent":
            c = append(seg(f"s{n}"), base=log.head, intent=Intent(ids.pop(), "data/", 0))
        elif step == "drop":
            c = props({DROPPED_PROPERTY: str(n)})
        else:
            c = props({DROPPED_PROPERTY: None})
        if i == len(steps) // 2:
            halfway = TableState.from_meta(log.state.to_meta(), dict(log.state.segments))
        if halfway is not None:
            tail.append(c)
        before = log.state.copy()
        verdict = log.send(c)
        if verdict.outcome is Outcome.NOTED:
            assert c.operation is Operation.INTENT
            assert log.state.fingerprint() == before.fingerprint()
            assert log.state.last_accepted_version == before.last_accepted_version
        undrop = (
            c.operation is Operation.SET_PROPERTIES and c.table_properties.get(DROPPED_PROPERTY, "-") is None
        )
        if before.dropped and not undrop:
            assert verdict.outcome in (Outcome.REJECTED, Outcome.INVALID)
            assert log.state.fingerprint() == before.fingerprint()
    if halfway is not None:
        replayed = Log()
        replayed.state = halfway
        replayed.next_offset = halfway.version + log.gap if halfway.version >= 0 else 0
        for c in tail:
            replayed.send(c)
        assert replayed.state.fingerprint() == log.state.fingerprint()
        assert replayed.state.intents == log.state.intents
        assert replayed.state.dropped_version == log.state.dropped_version
