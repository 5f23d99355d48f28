"""Protocol versioning and the rules protocol 2 adds (docs/PROTOCOL.md §3a, §4).

Each case runs the same log twice: at protocol 1 (today's verdicts, kept for old logs, so
the v1 outcome shows what the code did before this change) and after an UPGRADE_PROTOCOL
to 2 (the stricter rules). Everything goes through the full record path (Avro + rules).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from segcat.catalog.errors import UnsupportedProtocol
from segcat.catalog.protocol import codec, rules, versions
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.model import (
    BloomFilter,
    ColumnStats,
    ColumnType,
    Commit,
    Isolation,
    Operation,
    Protocol,
    Tombstone,
)
from segcat.catalog.protocol.rules import Outcome, Rule
from segcat.catalog.protocol.state import ALLOWED_LOCATIONS_PROPERTY, LOCATION_PROPERTY, TableState
from tests.catalog.protocol.test_rules import TABLE, Log, append, commit, compact, seg

ROOT = "s3://lake/warehouse/ns/t"


def upgrade(
    location: str | None = ROOT, version: int = 2, features: tuple[str, ...] = (), base: int = -1
) -> Commit:
    props = {} if location is None else {LOCATION_PROPERTY: location}
    return commit(
        Operation.UPGRADE_PROTOCOL, base, protocol=Protocol(version, features), table_properties=props
    )


def v2_log() -> Log:
    log = Log()
    log.accept(upgrade())
    assert log.state.protocol == Protocol(2, ())
    assert log.state.location == ROOT
    return log


def both(*commits: Commit) -> tuple[list[rules.Verdict], list[rules.Verdict]]:
    """The verdicts of ``commits`` on a protocol-1 log and on a protocol-2 log."""
    out = []
    for log in (Log(), v2_log()):
        out.append([log.send(c) for c in commits])
    return out[0], out[1]


def with_base(c: Commit, base: int) -> Commit:
    return replace(c, base_version=base)


# ---------------------------------------------------------------------------- protocol steps


def test_a_log_without_an_upgrade_is_protocol_1() -> None:
    assert TableState(TABLE).protocol == Protocol(1, ())
    log = Log()
    log.accept(append(seg("a")))
    assert log.state.protocol.version == versions.LEGACY_VERSION


def test_upgrade_to_2_needs_the_table_location() -> None:
    log = Log()
    verdict = log.send(upgrade(location=None))
    assert verdict.outcome is Outcome.INVALID and "location" in verdict.detail
    log.accept(upgrade(base=log.head))
    assert log.state.protocol == Protocol(2, ())


@pytest.mark.parametrize(
    ("second", "why"),
    [
        (dict(version=1), "only go up"),
        (dict(version=2), "already is at protocol 2"),
        (dict(version=2, location="s3://elsewhere/t"), "already"),
    ],
)
def test_protocol_versions_only_go_up_and_the_location_is_fixed(second: dict[str, Any], why: str) -> None:
    log = v2_log()
    before = log.state.copy()
    verdict = log.send(upgrade(base=log.head, **{"location": None, **second}))
    assert verdict.outcome is Outcome.INVALID and why in verdict.detail, verdict
    assert log.state.fingerprint() == before.fingerprint()


def test_the_location_cannot_be_changed_by_set_properties() -> None:
    log = v2_log()
    verdict = log.send(commit(Operation.SET_PROPERTIES, log.head, table_properties={LOCATION_PROPERTY: "/x"}))
    assert verdict.outcome is Outcome.INVALID and "fixed" in verdict.detail
    removal = log.send(commit(Operation.SET_PROPERTIES, log.head, table_properties={LOCATION_PROPERTY: None}))
    assert removal.outcome is Outcome.INVALID


@pytest.mark.parametrize(
    "wanted", [Protocol(4, ()), Protocol(2, ("deletion-vectors",)), Protocol(99, ("x", "y"))]
)
def test_an_upgrade_this_code_does_not_know_stops_the_replay_and_changes_nothing(wanted: Protocol) -> None:
    log = v2_log()
    log.accept(append(seg("a"), base=log.head))
    before = log.state.copy()
    record = upgrade(location=None, version=wanted.version, features=wanted.features, base=log.head)
    with pytest.raises(UnsupportedProtocol, match="upgrade segcat"):
        log.send(record)
    assert log.state == before  # not even the version moved: nothing after it is judged


def test_a_malformed_upgrade_is_just_invalid_not_a_reason_to_stop() -> None:
    log = v2_log()
    bad = replace(upgrade(location=None, version=99, base=log.head), commit_id="not-a-uuid")
    verdict = log.raw(bad.commit_id.encode(), codec.encode_commit(bad))
    assert verdict.outcome is Outcome.INVALID


def test_a_state_at_an_unknown_protocol_is_refused_by_judge() -> None:
    state = TableState(TABLE, protocol=Protocol(7, ()))
    with pytest.raises(UnsupportedProtocol):
        rules.judge(state, 0, append(seg("a")))


def test_features_can_only_be_added(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(versions, "KNOWN_FEATURES", frozenset({"f1", "f2"}))
    log = v2_log()
    log.accept(upgrade(location=None, features=("f1",), base=log.head))
    assert log.state.protocol == Protocol(2, ("f1",))
    dropped = log.send(upgrade(location=None, features=("f2",), base=log.head))
    assert dropped.outcome is Outcome.INVALID and "keeps every feature" in dropped.detail
    log.accept(upgrade(location=None, features=("f2", "f1"), base=log.head))
    assert log.state.protocol == Protocol(2, ("f1", "f2"))  # stored sorted


def test_protocol_field_only_on_upgrade_and_upgrade_changes_nothing_else() -> None:
    v1, v2 = both(
        commit(Operation.APPEND, adds=(seg("a"),), protocol=Protocol(2, ())),
        commit(Operation.UPGRADE_PROTOCOL, adds=(seg("b"),), protocol=Protocol(2, ())),
        commit(Operation.UPGRADE_PROTOCOL),
    )
    assert all(v.outcome is Outcome.INVALID for v in v1 + v2)


# ---------------------------------------------------------------------------- item 5: fields per operation


@pytest.mark.parametrize(
    ("bad", "field"),
    [
        (append(seg("a"), table_properties={"owner": "x"}), "table_properties"),
        (append(seg("a"), schema='{"type":"struct"}'), "schema"),
        (commit(Operation.COMPACT, drops=("zz",), adds=(seg("b"),), schema="{}"), "schema"),
        (
            commit(Operation.DELETE, tombstones=(Tombstone("id = 1"),), table_properties={"k": "v"}),
            "table_properties",
        ),
        (commit(Operation.REPLACE, adds=(seg("c"),), tombstones=(Tombstone("id = 1"),)), "tombstones"),
        (commit(Operation.SET_SCHEMA, schema="{}", table_properties={"k": "v"}), "table_properties"),
        (commit(Operation.APPEND, adds=(seg("d"),), isolation=Isolation.SERIALIZABLE), "SERIALIZABLE"),
    ],
)
def test_v2_operations_carry_only_their_fields(bad: Commit, field: str) -> None:
    log = v2_log()
    if bad.drops:
        log.accept(append(seg("zz"), base=log.head))
    verdict = log.send(with_base(bad, log.head))
    assert verdict.outcome is Outcome.INVALID and field in verdict.detail, verdict


def test_v1_still_accepts_an_append_with_properties_and_a_schema() -> None:
    """The finding of item 5, kept for protocol-1 logs (their meaning never changes)."""
    log = Log()
    log.accept(append(seg("a"), table_properties={"owner": "x"}, schema="{}"))
    assert log.state.properties == {"owner": "x"} and log.state.schema == "{}"


def test_v2_replace_that_changes_nothing_is_invalid() -> None:
    log = v2_log()
    verdict = log.send(commit(Operation.REPLACE, log.head, replace_scope=("2024-01",)))
    assert verdict.outcome is Outcome.INVALID


# ---------------------------------------------------------------------------- item 6: verdict details


def test_v2_control_characters_are_unicode_cc_zl_zp() -> None:
    for char in ("\u0085", "\u009f", "\u2028", "\u2029"):
        v1, v2 = both(append(seg("a"), writer_id=f"w{char}"))
        assert v1[0].outcome is Outcome.ACCEPTED  # protocol 1 only knew C0 and DEL
        assert v2[0].outcome is Outcome.INVALID and "control" in v2[0].detail
    v1, v2 = both(append(seg("a"), writer_id="w\u007f"))
    assert v1[0].outcome is v2[0].outcome is Outcome.INVALID


def test_v2_set_properties_that_changes_nothing_is_invalid() -> None:
    log = v2_log()
    log.accept(commit(Operation.SET_PROPERTIES, log.head, table_properties={"owner": "ann"}))
    verdict = log.send(commit(Operation.SET_PROPERTIES, log.head, table_properties={"owner": "ann"}))
    assert verdict.outcome is Outcome.INVALID and "changes nothing" in verdict.detail
    gone = log.send(commit(Operation.SET_PROPERTIES, log.head, table_properties={"nobody": None}))
    assert gone.outcome is Outcome.INVALID
    v1 = Log()
    v1.accept(commit(Operation.SET_PROPERTIES, table_properties={"owner": "ann"}))
    v1.accept(commit(Operation.SET_PROPERTIES, v1.head, table_properties={"owner": "ann"}))


def test_v2_set_schema_to_the_same_schema_is_invalid() -> None:
    log = v2_log()
    log.accept(commit(Operation.SET_SCHEMA, log.head, schema='{"a":1}'))
    assert log.send(commit(Operation.SET_SCHEMA, log.head, schema='{"a":1}')).outcome is Outcome.INVALID


@pytest.mark.parametrize(
    ("segment_changes", "v1_outcome"),
    [
        (dict(bloom=BloomFilter("id", 0, b"\x01")), Outcome.INVALID),
        (dict(bloom=BloomFilter("id", 65, b"\x01")), Outcome.ACCEPTED),
        (dict(stats=(ColumnStats("o", ColumnType.OTHER, 5, 3, 0),)), Outcome.INVALID),
        (dict(stats=(ColumnStats("o", ColumnType.OTHER, 1, 3, 0),)), Outcome.ACCEPTED),
        (dict(path="data\\x.parquet"), Outcome.INVALID),
        (dict(path="s3://lake/warehouse/ns/t/data\\x.parquet"), Outcome.ACCEPTED),
        (dict(schema="not json"), Outcome.ACCEPTED),
        (dict(format=""), Outcome.ACCEPTED),
        (dict(stats=(ColumnStats("d", ColumnType.FLOAT, float("nan"), 1.0, 0),)), Outcome.ACCEPTED),
        (dict(stats=(ColumnStats("d", ColumnType.FLOAT, 0.0, 1.0, 0, nan_count=11),)), Outcome.ACCEPTED),
        (dict(stats=(ColumnStats("i", ColumnType.INT, 0, 1, 0, nan_count=0),)), Outcome.ACCEPTED),
        (dict(path="file:/etc/passwd"), Outcome.ACCEPTED),
    ],
)
def test_v2_segment_field_rules(segment_changes: dict[str, Any], v1_outcome: Outcome) -> None:
    bad = append(seg("a", **segment_changes))
    v1, v2 = both(bad)
    assert v1[0].outcome is v1_outcome, v1
    assert v2[0].outcome is Outcome.INVALID, v2


def test_trailing_bytes_after_the_avro_body_are_invalid() -> None:
    c = append(seg("a"))
    log = v2_log()
    verdict = log.raw(c.commit_id.encode(), codec.encode_commit(c) + b"\x00")
    assert verdict.outcome is Outcome.INVALID and "trailing" in verdict.detail


def test_rule5_names_the_tombstone_when_a_tombstone_and_a_touching_commit_are_concurrent() -> None:
    log = v2_log()
    base = log.accept(append(seg("a", "2024-01"), base=log.head))
    log.accept(commit(Operation.DELETE, log.head, tombstones=(Tombstone("id = 3"),)))
    touching = log.accept(append(seg("b", "2024-01"), base=log.head))
    verdict = log.send(
        commit(
            Operation.REPLACE,
            base,
            adds=(seg("c", "2024-01"),),
            replace_scope=("2024-01",),
            isolation=Isolation.SERIALIZABLE,
        )
    )
    assert verdict.rule is Rule.CONCURRENT_APPEND
    assert verdict.conflicting_version == touching - 3  # the tombstone's version, as documented
    assert verdict.conflicting_version != touching


# ---------------------------------------------------------------------------- item 9: locations


@pytest.mark.parametrize(
    "path",
    [
        "file:///etc/passwd",
        "s3://other-bucket/x.parquet",
        "x://../../etc/passwd",
        "s3://lake/warehouse/ns/t/../../secrets/x.parquet",
        "s3://lake/warehouse/ns/t/data/%2e%2e/%2e%2e/x.parquet",
        "s3://lake/warehouse/ns/t-other/data/x.parquet",
        "s3://lake/warehouse/ns/t",
    ],
)
def test_v2_absolute_paths_outside_the_table_are_invalid(path: str) -> None:
    v1, v2 = both(append(seg("a", path=path)))
    assert v2[0].outcome is Outcome.INVALID, v2
    if path.startswith(("file:", "s3://other", "x:")):
        assert v1[0].outcome is Outcome.ACCEPTED  # the finding: protocol 1 accepted them


def test_v2_absolute_paths_under_the_root_or_an_allowed_location_are_accepted() -> None:
    log = v2_log()
    log.accept(append(seg("a", path=f"{ROOT}/data/a.parquet"), base=log.head))
    log.accept(append(seg("b", path="s3a://lake/warehouse/ns/t/data/b.parquet"), base=log.head))
    outside = append(seg("c", path="s3://shared/lake/c.parquet"), base=log.head)
    assert log.send(outside).outcome is Outcome.INVALID
    allow = commit(
        Operation.SET_PROPERTIES,
        log.head,
        table_properties={ALLOWED_LOCATIONS_PROPERTY: '["s3://shared/lake"]'},
    )
    log.accept(allow)
    log.accept(with_base(replace(outside, commit_id=commit(Operation.APPEND).commit_id), log.head))


@pytest.mark.parametrize("value", ["s3://shared", '["relative/dir"]', '["s3://b/../x"]', "[1]", '{"a": 1}'])
def test_v2_allowed_locations_must_be_a_json_array_of_absolute_locations(value: str) -> None:
    log = v2_log()
    change = {ALLOWED_LOCATIONS_PROPERTY: value}
    verdict = log.send(commit(Operation.SET_PROPERTIES, log.head, table_properties=change))
    assert verdict.outcome is Outcome.INVALID


# ---------------------------------------------------------------------------- item 14: predicates


@pytest.mark.parametrize("predicate", ["1=1; DROP TABLE x", "user = ", "lower(user) = 'x'", "x = NULL"])
def test_v2_tombstone_predicates_must_parse(predicate: str) -> None:
    v1, v2 = both(commit(Operation.DELETE, tombstones=(Tombstone(predicate),)))
    assert v1[0].outcome is Outcome.ACCEPTED  # protocol 1 took free text, Spark failed later
    assert v2[0].outcome is Outcome.INVALID and "tombstones[0]" in v2[0].detail


def test_v2_tombstone_in_the_grammar_is_accepted() -> None:
    log = v2_log()
    predicate = Tombstone("user = 'u1' AND day >= DATE '2024-01-01'")
    log.accept(commit(Operation.DELETE, log.head, tombstones=(predicate,)))


# ---------------------------------------------------------------------------- item 15: duplicate data


def test_v2_a_live_path_cannot_be_added_twice() -> None:
    v1, v2 = both(append(seg("a")), append(seg("b", path="data/2024-01/a.parquet"), base=0))
    assert [v.outcome for v in v1] == [Outcome.ACCEPTED, Outcome.ACCEPTED]  # the finding
    assert v2[1].outcome is Outcome.REJECTED and v2[1].rule is Rule.DUPLICATE_PATH
    assert v2[1].conflicting_version == v2[0].offset


def test_v2_the_same_file_spelled_relative_and_absolute_is_one_path() -> None:
    log = v2_log()
    first = log.accept(append(seg("a", path="data/a.parquet"), base=log.head))
    verdict = log.send(append(seg("b", path=f"{ROOT}/data/a.parquet"), base=log.head))
    assert verdict.rule is Rule.DUPLICATE_PATH and verdict.conflicting_version == first


def test_v2_two_adds_with_one_path_are_invalid_and_a_rewrite_may_reuse_a_dropped_path() -> None:
    log = v2_log()
    same = append(seg("a", path="data/x.parquet"), seg("b", path="data/x.parquet"), base=log.head)
    assert log.send(same).outcome is Outcome.INVALID
    log.accept(append(seg("a", path="data/x.parquet"), base=log.head))
    # re-registering the same file (new stats) in the commit that drops its old entry is fine
    log.accept(compact(("a",), (seg("a2", path="data/x.parquet"),), base=log.head))


def test_v2_a_dropped_segment_id_never_returns() -> None:
    first = append(seg("a"))
    gone = compact(("a",), (seg("ab"),), base=0)
    again = append(seg("a", path="data/2024-01/a-again.parquet"), base=0)
    v1_log, v2_log_ = Log(), v2_log()
    for log in (v1_log, v2_log_):
        log.accept(with_base(first, log.head))
        log.accept(with_base(gone, log.head))
    assert v1_log.send(with_base(again, v1_log.head)).outcome is Outcome.ACCEPTED  # the finding
    verdict = v2_log_.send(with_base(again, v2_log_.head))
    assert verdict.outcome is Outcome.REJECTED and verdict.rule is Rule.SEGMENT_ID_REUSED
    assert verdict.conflicting_version == v2_log_.head - 3


# ---------------------------------------------------------------------------- item 7: stats types


def test_v2_a_column_keeps_the_stats_type_its_first_segment_gave_it() -> None:
    int_x = seg("a", stats=(ColumnStats("x", ColumnType.INT, 1, 2, 0),))
    str_x = seg("b", stats=(ColumnStats("x", ColumnType.STRING, "a", "b", 0),))
    v1, v2 = both(append(int_x), append(str_x, base=0))
    assert [v.outcome for v in v1] == [Outcome.ACCEPTED, Outcome.ACCEPTED]  # the poison pair
    assert v2[1].outcome is Outcome.REJECTED and v2[1].rule is Rule.COLUMN_TYPE_CHANGE
    assert v2[1].conflicting_version == v2[0].offset
    mixed = append(int_x, replace(str_x, path="data/b.parquet"))
    assert both(mixed)[1][0].outcome is Outcome.INVALID


def test_column_types_are_fixed_in_v1_too_so_views_never_disagree() -> None:
    log = Log()
    log.accept(append(seg("a", stats=(ColumnStats("x", ColumnType.INT, 1, 2, 0),))))
    log.accept(append(seg("b", stats=(ColumnStats("x", ColumnType.STRING, "a", "b", 0),)), base=log.head))
    assert log.state.column_types["x"] == (ColumnType.INT, 0)


# ---------------------------------------------------------------------------- folding accepted commits


def test_applying_accepted_deltas_gives_the_image_a_replay_gives() -> None:
    """Readers judge the log past Redis' head on key frame + accepted deltas: must equal a replay."""
    full = TableState(TABLE)
    planned = [
        upgrade(),
        append(seg("a"), seg("b"), base=0),
        append(seg("a"), base=1),  # REJECTED: changes nothing the rules look at
        compact(("a",), (seg("c"),), base=2),
        commit(Operation.DELETE, 3, tombstones=(Tombstone("id = 1"),)),
        commit(Operation.SET_PROPERTIES, 4, table_properties={"k": "v"}),
    ]
    folded = TableState(TABLE)
    for offset, c in enumerate(planned):
        verdict = rules.apply(full, offset, 1_000 + offset, c)
        if verdict.accepted:
            folded.apply(CommitDelta(offset, 1_000 + offset, c))
    assert [rules.judge(full, 9, c).outcome for c in planned[1:3]] == [Outcome.DUPLICATE, Outcome.REJECTED]
    folded.version = full.version
    assert folded.fingerprint() == full.fingerprint()
    probe = [compact(("b",), (), base=5), append(seg("b"), base=5), append(seg("a", path="data/x"), base=5)]
    for c in probe:
        assert rules.judge(folded, 6, c) == rules.judge(full, 6, c)


def test_a_deeply_nested_json_schema_is_invalid_not_a_crash() -> None:
    deep = "[" * 100_000 + "]" * 100_000
    v1, v2 = both(append(seg("a", schema=deep)), commit(Operation.SET_SCHEMA, 0, schema=deep))
    assert v2[0].outcome is Outcome.INVALID and "too deeply" in v2[0].detail
    assert v1[1].outcome is v2[1].outcome is Outcome.INVALID


def test_paths_a_protocol_1_past_left_twice_stay_indexed_after_an_upgrade() -> None:
    """Regression (found by the property tests): the path index lost a file two live segments
    named once one of them was dropped, so a copy of the image differed from the image."""
    log = Log()
    first = log.accept(append(seg("a", path="data/x.parquet")))
    log.accept(append(seg("b", path="data/x.parquet"), base=log.head))  # protocol 1 allowed it
    log.accept(compact(("b",), (), base=log.head))
    assert log.state.copy() == log.state and log.state.paths == {"data/x.parquet": ["a"]}
    log.accept(upgrade(location=ROOT, base=log.head))
    verdict = log.send(append(seg("c", path="data/x.parquet"), base=log.head))
    assert verdict.rule is Rule.DUPLICATE_PATH and verdict.conflicting_version == first
