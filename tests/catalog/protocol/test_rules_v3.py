"""What protocol 3 changes (docs/PROTOCOL.md §3a "Protocol 3", §3b), and the decisions §3b–§4 pin.

Each rule change runs on a protocol-2 log (its verdict kept: an old log keeps its meaning) and
on a protocol-3 log. Everything goes through the full record path (Avro + rules).
"""

from __future__ import annotations

import uuid
from dataclasses import replace

import pytest

from segcat.catalog.protocol import rules, versions
from segcat.catalog.protocol.lifecycle import DROPPED_PROPERTY, LOG_START_PROPERTY
from segcat.catalog.protocol.model import (
    ColumnStats,
    ColumnType,
    Commit,
    Intent,
    Operation,
    Protocol,
)
from segcat.catalog.protocol.rules import Outcome, Rule
from segcat.catalog.protocol.state import LOCATION_PROPERTY
from tests.catalog.protocol.test_rules import Log, append, commit, seg

ROOT = "s3://lake/warehouse/ns/t"
LIFECYCLE = (versions.LIFECYCLE,)


def upgrade(
    version: int, features: tuple[str, ...] = (), props: dict[str, str | None] | None = None, base: int = -1
) -> Commit:
    return commit(
        Operation.UPGRADE_PROTOCOL,
        base,
        protocol=Protocol(version, features),
        table_properties={LOCATION_PROPERTY: ROOT} if props is None else props,
    )


def log_at(version: int, features: tuple[str, ...] = (), root: str = ROOT) -> Log:
    log = Log()
    log.accept(upgrade(version, features, {LOCATION_PROPERTY: root}))
    assert log.state.protocol == Protocol(version, features)
    return log


def set_props(changes: dict[str, str | None]) -> Commit:
    return commit(Operation.SET_PROPERTIES, -1, table_properties=changes)


def intent() -> Commit:
    return commit(Operation.INTENT, -1, intent=Intent(str(uuid.uuid4()), "data/", 60_000))


# ---------------------------------------------------------------------------- one file, one segment


@pytest.mark.parametrize(
    ("root", "first", "second"),
    [
        (ROOT, "data/e1.parquet", f"{ROOT}/data/e1.parquet"),
        (ROOT, f"{ROOT}/data/e1.parquet", "s3a://lake/warehouse/ns/t/data/e1.parquet"),
        (ROOT, f"{ROOT}/data/e1.parquet", "S3://lake/warehouse/ns/t/data/e1.parquet"),
        ("/tmp/wh/ns/t", "data/e1.parquet", "file:///tmp/wh/ns/t/data/e1.parquet"),
        ("file:///tmp/wh/ns/t/", "data/e1.parquet", "file://localhost/tmp/wh/ns/t/data/e1.parquet"),
    ],
)
def test_v3_one_file_added_twice_under_two_spellings_is_invalid(root: str, first: str, second: str) -> None:
    """Regression (issue 20, item 6): protocol 2 compared added paths literally, so one APPEND made
    the file live twice and its rows counted twice. Protocol 3 compares their path keys (step 6)."""
    adds = (seg("a", path=first), seg("b", path=second))
    old = log_at(2, root=root)
    assert old.send(append(*adds)).outcome is Outcome.ACCEPTED  # protocol 2's verdict, kept
    assert len(old.state.segments) == 2 and len(old.state.paths) == 1

    new = log_at(3, root=root)
    verdict = new.send(append(*adds))
    assert verdict.outcome is Outcome.INVALID and verdict.rule is Rule.MALFORMED
    assert "'a' and 'b' name the same file" in verdict.detail
    assert new.state.segments == {}
    new.accept(append(adds[0]))
    again = new.send(append(replace(adds[1], segment_id="c")))  # against a live one: rule 4b, as before
    assert again.outcome is Outcome.REJECTED and again.rule is Rule.DUPLICATE_PATH


def test_v3_distinct_files_and_a_rewrite_of_one_path_stay_accepted() -> None:
    log = log_at(3)
    log.accept(append(seg("a", path="data/x.parquet"), seg("b", path=f"{ROOT}/data/y.parquet")))
    rewrite = commit(
        Operation.COMPACT, log.head, drops=("a",), adds=(seg("a2", path=f"{ROOT}/data/x.parquet"),)
    )
    log.accept(rewrite)  # a commit dropping a segment may re-add its file (§4, duplicate data)
    assert sorted(log.state.segments) == ["a2", "b"]


# ---------------------------------------------------------------------------- what an upgrade may carry


@pytest.mark.parametrize("start", [1, 2])
def test_an_upgrade_to_3_records_the_location_and_nothing_else(start: int) -> None:
    """§3b: protocol 1 and 2 let an upgrade carry any table property; an upgrade *to* 3 carries
    only the location, whichever protocol judges it."""
    for target, outcome in ((2, Outcome.ACCEPTED), (3, Outcome.INVALID)):
        log = Log() if start == 1 else log_at(2)
        props = {"owner": "x"} if start == 2 else {LOCATION_PROPERTY: ROOT, "owner": "x"}
        if target == start:
            continue
        verdict = log.send(upgrade(target, (), props))
        assert verdict.outcome is outcome, (start, target, verdict)
        if outcome is Outcome.INVALID:
            assert "carries no table property but segcat.location" in verdict.detail


@pytest.mark.parametrize("location", [None, "relative/x", "s3://b/has/../dots"])
def test_an_upgrade_to_3_records_a_real_location(location: str | None) -> None:
    """Protocol 1 took any text, even null, as the location an upgrade to 2 recorded (kept); an
    upgrade to 3 must record an absolute location (§2)."""
    legacy = Log()
    assert legacy.send(upgrade(2, (), {LOCATION_PROPERTY: location})).outcome is Outcome.ACCEPTED
    assert legacy.state.location == location
    fresh = Log()
    verdict = fresh.send(upgrade(3, LIFECYCLE, {LOCATION_PROPERTY: location}))
    assert verdict.outcome is Outcome.INVALID and LOCATION_PROPERTY in verdict.detail
    assert fresh.state.protocol == Protocol(1, ())


# ---------------------------------------------------------------------------- features below their version


def test_lifecycle_named_at_protocol_1_is_accepted_and_inert() -> None:
    """Issue 20, item 9, decided as §3b writes it: the verdict stays (protocol 1 judged it so), the
    feature means nothing below version 2, writers refuse to send it (test_protocol_kafka)."""
    log = Log()
    assert log.send(upgrade(1, LIFECYCLE, {})).outcome is Outcome.ACCEPTED
    assert log.state.protocol == Protocol(1, LIFECYCLE)
    assert versions.inert_features(log.state.protocol) == LIFECYCLE
    assert not versions.has_lifecycle(log.state.protocol)
    verdict = log.send(intent())
    assert verdict.outcome is Outcome.INVALID and "need the table's protocol feature" in verdict.detail
    log.accept(set_props({DROPPED_PROPERTY: "1"}))  # plain text: the feature is inert
    assert not log.state.dropped
    log.accept(append(seg("a")))
    assert log.send(upgrade(2, (), {LOCATION_PROPERTY: ROOT})).outcome is Outcome.INVALID  # features stay
    # to 3 with the feature active: the plain-text drop must go first
    refused = log.send(upgrade(3, LIFECYCLE, {LOCATION_PROPERTY: ROOT}))
    assert refused.outcome is Outcome.INVALID and DROPPED_PROPERTY in refused.detail
    log.accept(set_props({DROPPED_PROPERTY: None}))
    log.accept(upgrade(3, LIFECYCLE, {LOCATION_PROPERTY: ROOT}))
    assert versions.inert_features(log.state.protocol) == ()
    assert log.send(intent()).outcome is Outcome.NOTED


# ---------------------------------------------------------------------------- reserved keys set as text


@pytest.mark.parametrize(("key", "value"), [(DROPPED_PROPERTY, "1000"), (LOG_START_PROPERTY, "5")])
def test_reserved_keys_set_as_plain_text_block_an_upgrade_to_3_that_brings_the_feature(
    key: str, value: str
) -> None:
    log = log_at(2)
    log.accept(set_props({key: value}))
    verdict = log.send(upgrade(3, LIFECYCLE, {}))
    assert verdict.outcome is Outcome.INVALID and key in verdict.detail
    assert log.send(upgrade(3, (), {})).outcome is Outcome.ACCEPTED  # without the feature: no meaning yet
    assert log.send(upgrade(3, LIFECYCLE, {})).outcome is Outcome.INVALID
    log.accept(set_props({key: None}))
    log.accept(upgrade(3, LIFECYCLE, {}))
    assert not log.state.dropped and log.state.log_start == 0


def test_a_protocol_2_log_that_brought_the_feature_over_plain_text_keeps_its_verdicts() -> None:
    """§3b, protocol 2: the keys count as present (a drop cannot be set again, the log start is
    the text's), but rule 7 rejects nothing: it needs the version of a drop judged under the feature."""
    log = log_at(2)
    log.accept(set_props({DROPPED_PROPERTY: "1000", LOG_START_PROPERTY: "2"}))
    log.accept(upgrade(2, LIFECYCLE, {}))
    assert log.state.dropped and log.state.dropped_version == -1 and log.state.log_start == 2
    log.accept(append(seg("a")))  # no rule 7
    again = log.send(set_props({DROPPED_PROPERTY: "2000"}))
    assert again.outcome is Outcome.INVALID and "already dropped" in again.detail
    assert log.send(set_props({LOG_START_PROPERTY: "2"})).outcome is Outcome.INVALID  # forward only
    log.accept(set_props({DROPPED_PROPERTY: None}))  # the "undrop" clears it
    dropped_at = log.accept(set_props({DROPPED_PROPERTY: "3000"}))
    assert log.state.dropped_version == dropped_at
    assert log.send(append(seg("b"))).rule is Rule.TABLE_DROPPED


def test_a_protocol_2_upgrade_bringing_the_feature_may_carry_a_drop() -> None:
    """§3b, protocol 2: an upgrade's table properties go unchecked by §3c when the feature arrives
    with it, so it may drop the table at once (kept); an upgrade to 3 carries none."""
    log = log_at(2)
    at = log.accept(upgrade(2, LIFECYCLE, {DROPPED_PROPERTY: "1000"}))
    assert log.state.dropped and log.state.dropped_version == at


# ---------------------------------------------------------------------------- decisions of §4


def test_rules_4b_4c_4d_go_segment_by_segment_against_the_image() -> None:
    """§4 step 11: for each added segment in commit order, 4b, then 4c, then 4d; the first failure
    decides. Segment 1's type change is reported before segment 2's live path."""
    log = log_at(3)
    log.accept(append(seg("a", path="data/a.parquet")))
    log.accept(commit(Operation.COMPACT, log.head, drops=("a",), adds=(seg("a2", path="data/a2.parquet"),)))
    text = (ColumnStats("id", ColumnType.STRING, "x", "y", 0),)
    type_change = seg("n1", stats=text)
    live_path = seg("n2", path="data/a2.parquet", stats=())  # (adds agree on types: step 4)
    verdict = log.send(append(type_change, live_path))
    assert verdict.rule is Rule.COLUMN_TYPE_CHANGE
    verdict = log.send(append(live_path, type_change))
    assert verdict.rule is Rule.DUPLICATE_PATH
    returning = seg("a", path="data/new-a.parquet", stats=text)  # 4c before 4d in one segment
    assert log.send(append(returning)).rule is Rule.SEGMENT_ID_REUSED


@pytest.mark.parametrize("version", [1, 2, 3])
def test_an_other_stats_entry_fixes_the_column_type(version: int) -> None:
    """§2, decided: OTHER is a type like any other; the first accepted stats for a column fix it."""
    log = Log() if version == 1 else log_at(version)
    other = (ColumnStats("id", ColumnType.OTHER, None, None, 0),)
    fixed_at = log.accept(append(seg("a", stats=other)))
    assert log.state.column_types["id"] == (ColumnType.OTHER, fixed_at)
    verdict = log.send(append(seg("b")))  # INT stats for "id"
    if version == 1:
        assert verdict.outcome is Outcome.ACCEPTED  # protocol 1 records the type, does not judge by it
    else:
        assert verdict.rule is Rule.COLUMN_TYPE_CHANGE and verdict.conflicting_version == fixed_at


def test_nan_count_with_an_unknown_null_count_is_bounded_by_the_row_count() -> None:
    """§4, decided: a null ``null_count`` counts as 0 in the bound nan_count ≤ row_count − null_count."""
    log = log_at(3)
    rows = 10

    def floats(nan_count: int, null_count: int | None) -> Commit:
        stats = (ColumnStats("d", ColumnType.FLOAT, 0.5, 2.5, null_count, nan_count),)
        return append(seg(str(uuid.uuid4()), rows=rows, stats=stats))

    assert log.send(floats(rows, None)).outcome is Outcome.ACCEPTED
    assert log.send(floats(rows + 1, None)).outcome is Outcome.INVALID
    assert log.send(floats(rows - 3, 3)).outcome is Outcome.ACCEPTED
    assert log.send(floats(rows - 2, 3)).outcome is Outcome.INVALID


def test_an_intent_on_a_dropped_table_is_rejected_by_rule_7_and_the_drop_rules_precede_it() -> None:
    """§3c, decided: an INTENT counts as a commit for rule 7; §3c's property rules are step-6 rules,
    so a second drop on a dropped table is INVALID, not REJECTED."""
    log = log_at(3, LIFECYCLE)
    dropped_at = log.accept(set_props({DROPPED_PROPERTY: "1700000000000"}))
    verdict = log.send(intent())
    assert verdict.outcome is Outcome.REJECTED and verdict.rule is Rule.TABLE_DROPPED
    assert verdict.conflicting_version == dropped_at and log.state.rejected == 1
    again = log.send(set_props({DROPPED_PROPERTY: "1700000000001"}))
    assert again.outcome is Outcome.INVALID and again.rule is Rule.MALFORMED


def test_same_file_added_twice_is_what_writers_check_on_every_protocol() -> None:
    adds = (seg("a", path="data/e1.parquet"), seg("b", path=f"{ROOT}/data/e1.parquet"))
    assert rules.same_file_added_twice(adds, ROOT) is not None
    assert rules.same_file_added_twice(adds[:1], ROOT) is None
    assert rules.same_file_added_twice((seg("a"), seg("b")), ROOT) is None
