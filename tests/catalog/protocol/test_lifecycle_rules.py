"""The rules of the ``lifecycle`` feature (docs/PROTOCOL.md §3c), pure: intents, log start, drop,
the purge fence (protocol 3).

Examples for each rule, then hypothesis: random logs of appends, intents, drops and undrops
judged record by record, with the invariants the feature promises.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace

from hypothesis import given, settings
from hypothesis import strategies as st

from segcat.catalog.protocol import versions
from segcat.catalog.protocol.lifecycle import (
    DROPPED_PROPERTY,
    LOG_START_PROPERTY,
    MAX_INTENT_TTL_MS,
    PURGE_PROPERTY,
)
from segcat.catalog.protocol.model import Commit, Intent, Operation, Protocol
from segcat.catalog.protocol.rules import Outcome, Rule
from segcat.catalog.protocol.state import LOCATION_PROPERTY, TableState
from tests.catalog.protocol.test_rules import BROKER_T0, Log, append, commit, seg

ROOT = "s3://lake/warehouse/ns/t"


def lifecycle_log(protocol: Protocol | None = None) -> Log:
    log = Log()
    log.accept(
        commit(
            Operation.UPGRADE_PROTOCOL,
            -1,
            protocol=protocol or versions.new_table_protocol(),
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


def fence(value: str | None = "p-1") -> Commit:
    return props({PURGE_PROPERTY: value})


def test_the_purge_fence_needs_a_dropped_table_and_then_refuses_the_undrop() -> None:
    """Protocol 3 (issue 20, item 3): a purge that saw its fence accepted cannot lose to an undrop."""
    log = lifecycle_log()
    assert log.state.protocol.version >= 3
    log.accept(append(seg("a")))
    not_dropped = log.send(fence())
    assert not_dropped.outcome is Outcome.INVALID and "dropped table" in not_dropped.detail
    dropped_at = log.accept(props({DROPPED_PROPERTY: "1700000000000"}))
    assert log.state.dropped_timestamp_ms == BROKER_T0 + dropped_at  # the broker's time, not the value
    for bad in (fence(None), props({PURGE_PROPERTY: "p", "k": "v"})):
        assert log.send(bad).outcome is Outcome.INVALID
    fenced_at = log.accept(fence())
    assert log.state.purging_version == fenced_at and log.state.dropped
    undrop = log.send(props({DROPPED_PROPERTY: None}))
    assert undrop.outcome is Outcome.REJECTED and undrop.rule is Rule.TABLE_PURGING
    assert undrop.conflicting_version == fenced_at and log.state.dropped
    again = log.send(fence("p-2"))  # a second purge finds the first one's fence
    assert again.outcome is Outcome.INVALID and "already being purged" in again.detail
    rejected = log.send(append(seg("b")))
    assert rejected.outcome is Outcome.REJECTED and rejected.rule is Rule.TABLE_DROPPED
    frame = TableState.from_meta(log.state.to_meta(), dict(log.state.segments))
    assert frame.purging_version == fenced_at and frame.dropped_timestamp_ms == log.state.dropped_timestamp_ms


def test_an_undrop_before_the_fence_wins_and_the_fence_is_invalid() -> None:
    log = lifecycle_log()
    log.accept(props({DROPPED_PROPERTY: "1"}))
    log.accept(props({DROPPED_PROPERTY: None}))
    assert log.state.dropped_timestamp_ms == -1
    verdict = log.send(fence())
    assert verdict.outcome is Outcome.INVALID and log.state.purging_version == -1
    log.accept(append(seg("a")))


def test_protocol_2_keeps_its_verdicts_on_segcat_purge() -> None:
    """Before protocol 3 ``segcat.purge`` is plain text: rule 7 rejects it on a dropped table and
    the undrop is accepted whatever it holds; a leftover value does not fence after an upgrade."""
    log = lifecycle_log(Protocol(2, (versions.LIFECYCLE,)))
    log.accept(fence("left over"))  # plain text on a live table
    log.accept(props({DROPPED_PROPERTY: "1"}))
    verdict = log.send(fence())
    assert verdict.outcome is Outcome.REJECTED and verdict.rule is Rule.TABLE_DROPPED
    log.accept(props({DROPPED_PROPERTY: None}))
    assert log.state.purging_version == -1
    log.accept(commit(Operation.UPGRADE_PROTOCOL, -1, protocol=versions.new_table_protocol()))
    log.accept(props({DROPPED_PROPERTY: "2"}))
    assert log.state.purging_version == -1  # the leftover is no fence
    log.accept(props({DROPPED_PROPERTY: None}))


STEP = st.sampled_from(["append", "intent", "renew", "close", "commit-intent", "drop", "undrop", "fence"])


@dataclass
class DropModel:
    """PROTOCOL §3c's drop / undrop / purge fence, naively: a list of what was accepted."""

    accepted: list[tuple[str, int]] = field(default_factory=list)

    def dropped(self) -> bool:
        drops = [kind for kind, _ in self.accepted if kind in ("drop", "undrop")]
        return bool(drops) and drops[-1] == "drop"

    def fenced(self) -> int | None:
        """The fence's version, if one was accepted while the table was dropped (it never goes)."""
        fences = [version for kind, version in self.accepted if kind == "fence"]
        return fences[0] if fences else None

    def expect(self, kind: str) -> Outcome:
        dropped, fenced = self.dropped(), self.fenced()
        if kind == "drop":
            return Outcome.INVALID if dropped else Outcome.ACCEPTED
        if kind == "fence":
            return Outcome.ACCEPTED if dropped and fenced is None else Outcome.INVALID
        if kind == "undrop":
            if not dropped:
                return Outcome.INVALID  # removes an absent property: changes nothing
            return Outcome.REJECTED if fenced is not None else Outcome.ACCEPTED
        return Outcome.REJECTED if dropped else Outcome.ACCEPTED


@settings(max_examples=150, deadline=None)
@given(st.lists(STEP, max_size=40))
def test_random_lifecycle_logs_keep_their_promises(steps: list[str]) -> None:
    """Intents never change what a reader lists; a dropped table changes only by its undrop or
    its purge fence, and once fenced never again; drop, undrop and fence get the verdicts of a
    naive model of §3c; a key frame's metadata (to_meta / from_meta) judges the rest as a full
    replay does."""
    log = lifecycle_log()
    model = DropModel()
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
        elif step == "fence":
            c = fence(f"p-{n}")
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
        kind = step if step in ("drop", "undrop", "fence") else "other"
        if kind != "other" or before.dropped:
            assert verdict.outcome is model.expect(kind), (step, verdict)
        if verdict.outcome is Outcome.ACCEPTED:
            model.accepted.append((kind, verdict.offset))
        if before.dropped and not undrop and kind != "fence":
            assert verdict.outcome in (Outcome.REJECTED, Outcome.INVALID)
            assert log.state.fingerprint() == before.fingerprint()
        assert log.state.dropped is model.dropped()
        fenced = model.fenced()
        assert log.state.purging_version == (-1 if fenced is None else fenced)
    if halfway is not None:
        replayed = Log()
        replayed.state = halfway
        replayed.next_offset = halfway.version + log.gap if halfway.version >= 0 else 0
        for c in tail:
            replayed.send(c)
        assert replayed.state.fingerprint() == log.state.fingerprint()
        assert replayed.state.intents == log.state.intents
        assert replayed.state.dropped_version == log.state.dropped_version
        assert replayed.state.purging_version == log.state.purging_version
        assert replayed.state.dropped_timestamp_ms == log.state.dropped_timestamp_ms
