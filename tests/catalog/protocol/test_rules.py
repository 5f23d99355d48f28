"""Example-based tests of docs/PROTOCOL.md §4, one rule at a time (plus the malformation checks).

Every commit goes through the full record path (Avro encoding, ``apply_record``) at
offsets with gaps, as a consumer of the table's topic would see it.
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import pytest

from segcat.catalog.protocol import codec
from segcat.catalog.protocol import state as state_module
from segcat.catalog.protocol.model import (
    BloomFilter,
    ColumnStats,
    ColumnType,
    Commit,
    Isolation,
    LogRecord,
    Operation,
    Segment,
    Tombstone,
)
from segcat.catalog.protocol.replay import replay
from segcat.catalog.protocol.rules import Outcome, Rule, Verdict, apply, apply_record, judge, malformation
from segcat.catalog.protocol.state import DEDUP_WINDOW, TableState

TABLE = "ns.t"
P1, P2 = "2024-01", "2024-02"
BROKER_T0 = 1_700_000_000_000


def seg(segment_id: str, partition: str | None = P1, rows: int = 10, **changes: Any) -> Segment:
    segment = Segment(
        segment_id=segment_id,
        path=f"data/{partition or 'all'}/{segment_id}.parquet",
        size_bytes=rows * 100,
        row_count=rows,
        partition=partition,
        stats=(ColumnStats("id", ColumnType.INT, 0, rows, 0),),
    )
    return replace(segment, **changes)


_ids = iter(range(1, 10**9))


def new_id() -> str:
    return str(uuid.UUID(int=next(_ids)))


def commit(operation: Operation, base_version: int = -1, **fields: Any) -> Commit:
    values: dict[str, Any] = {
        "commit_id": new_id(),
        "table": TABLE,
        "operation": operation,
        "base_version": base_version,
        "writer_id": "writer-1",
        "timestamp_ms": 1_690_000_000_000,
    }
    values.update(fields)
    return Commit(**values)


def append(*segments: Segment, base: int = -1, **fields: Any) -> Commit:
    return commit(Operation.APPEND, base, adds=segments, **fields)


def compact(drops: tuple[str, ...], adds: tuple[Segment, ...] = (), base: int = -1) -> Commit:
    return commit(Operation.COMPACT, base, drops=drops, adds=adds)


def replace_commit(
    drops: tuple[str, ...],
    adds: tuple[Segment, ...],
    scope: tuple[str, ...],
    isolation: Isolation,
    base: int,
) -> Commit:
    return commit(Operation.REPLACE, base, drops=drops, adds=adds, replace_scope=scope, isolation=isolation)


def set_schema(schema: str, base: int) -> Commit:
    return commit(Operation.SET_SCHEMA, base, schema=schema)


class Log:
    """One table's topic, in memory: every record goes through ``apply_record``."""

    def __init__(self, table: str = TABLE, first_offset: int = 0, gap: int = 3) -> None:
        self.state = TableState(table)
        self.next_offset = first_offset
        self.gap = gap
        self.verdicts: list[Verdict] = []

    def raw(self, key: bytes | None, value: bytes | None) -> Verdict:
        offset = self.next_offset
        self.next_offset += self.gap  # offsets are not dense
        record = LogRecord(offset, BROKER_T0 + offset, key, value)
        verdict = apply_record(self.state, record).verdict
        assert verdict.offset == offset
        assert self.state.version == offset
        self.verdicts.append(verdict)
        return verdict

    def send(self, c: Commit) -> Verdict:
        return self.raw(c.commit_id.encode(), codec.encode_commit(c))

    def accept(self, c: Commit) -> int:
        verdict = self.send(c)
        assert verdict.outcome is Outcome.ACCEPTED, verdict
        return verdict.offset

    @property
    def head(self) -> int:
        return self.state.version


def assert_unchanged(before: TableState, after: TableState) -> None:
    """Nothing but the version and the outcome counters moved."""
    assert after.fingerprint() == before.fingerprint()
    assert without_bookkeeping(after) == without_bookkeeping(before)


def without_bookkeeping(state: TableState) -> TableState:
    return replace(state, version=0, accepted=0, rejected=0, invalid=0, duplicates=0)


# ---------------------------------------------------------------------------- rule 1: duplicates


def test_rule1_resend_is_duplicate_and_names_the_original_version() -> None:
    log = Log()
    first = append(seg("a"))
    original = log.accept(first)
    log.accept(append(seg("b"), base=log.head))
    before = log.state.copy()

    verdict = log.send(first)  # the writer's retry, same commit_id, same bytes

    assert verdict.outcome is Outcome.DUPLICATE
    assert verdict.rule is Rule.DUPLICATE_COMMIT
    assert verdict.original_version == original == verdict.conflicting_version
    assert verdict.commit_id == first.commit_id
    assert_unchanged(before, log.state)
    assert log.state.duplicates == 1 and log.state.accepted == 2


def test_rule1_comes_before_every_other_rule() -> None:
    """Same commit_id, different (even malformed or conflicting) content: still DUPLICATE."""
    log = Log()
    first = append(seg("a"))
    original = log.accept(first)
    for retry in (
        replace(first, table="ns.other"),  # would be INVALID (rule 2)
        replace(first, adds=(), drops=("zzz",)),  # would be INVALID
        replace(first, operation=Operation.COMPACT, drops=("gone",), adds=()),  # would be REJECTED (3)
    ):
        verdict = log.send(retry)
        assert (verdict.outcome, verdict.original_version) == (Outcome.DUPLICATE, original)
    assert log.state.live_ids() == {"a"}


def test_rule1_remembers_only_accepted_commit_ids() -> None:
    """A REJECTED commit re-sent later is judged afresh (and may then be accepted)."""
    log = Log()
    early = compact(drops=("a",), adds=(seg("a2"),))
    assert log.send(early).outcome is Outcome.REJECTED  # "a" does not exist yet
    log.accept(append(seg("a")))
    verdict = log.send(early)
    assert verdict.outcome is Outcome.ACCEPTED
    assert log.state.live_ids() == {"a2"}


def test_dedup_window_eviction_makes_a_late_resend_a_new_commit() -> None:
    """What happens past DEDUP_WINDOW (documented in docs/PROTOCOL.md §4, "the dedup window").

    The window holds the last DEDUP_WINDOW *accepted* commit ids. A re-send of a commit
    whose id fell out of it is judged afresh: an APPEND whose segments are still live is
    REJECTED by rule 4, and an APPEND whose segments were compacted away in the meantime
    is ACCEPTED a second time, so its rows are live twice (in the compacted segment and
    in the resurrected one). Writers must retry well within the window.
    """
    state = TableState(TABLE)
    offset = 0
    a = append(seg("a"))
    b = append(seg("b"))
    compaction = compact(drops=("b",), adds=(seg("b-compacted"),))
    for c in (a, b, compaction):
        assert apply(state, offset, BROKER_T0, c).accepted
        offset += 2
    # Fill the window so that exactly the first accepted id (a) has fallen out.
    for n in range(DEDUP_WINDOW - 2):
        filler_id = str(uuid.UUID(int=2**64 + n))
        filler = Commit(filler_id, TABLE, Operation.APPEND, -1, "w", 0, adds=(seg(f"f{n}"),))
        assert apply(state, offset, BROKER_T0, filler).accepted
        offset += 1
    assert len(state.recent_commits) == DEDUP_WINDOW
    assert a.commit_id not in state.recent_commits
    assert next(iter(state.recent_commits)) == b.commit_id

    late_a = apply(state, offset, BROKER_T0, a)
    assert (late_a.outcome, late_a.rule) == (Outcome.REJECTED, Rule.DUPLICATE_SEGMENT)
    assert late_a.conflicting_version == 0

    still_in_window = apply(state, offset + 1, BROKER_T0, b)
    assert (still_in_window.outcome, still_in_window.original_version) == (Outcome.DUPLICATE, 2)

    # One more accepted commit evicts b; its re-send now resurrects the compacted segment.
    assert apply(state, offset + 2, BROKER_T0, append(seg("one-more"))).accepted
    assert b.commit_id not in state.recent_commits
    late_b = apply(state, offset + 3, BROKER_T0, b)
    assert late_b.outcome is Outcome.ACCEPTED
    assert {"b", "b-compacted"} <= state.live_ids()


# ---------------------------------------------------------------------------- rule 2: malformed

OFFSET = 10
VALID_APPEND = append(seg("s1"), seg("s2", partition=P2))


def _seg(**changes: Any) -> Commit:
    return replace(VALID_APPEND, adds=(replace(seg("s1"), **changes),))


def _stats(*stats: ColumnStats, rows: int = 10) -> Commit:
    return _seg(stats=stats, row_count=rows)


INT = ColumnType.INT
MALFORMED: dict[str, tuple[Commit, str]] = {
    "wrong table": (replace(VALID_APPEND, table="ns.other"), "commit is for table 'ns.other', not 'ns.t'"),
    "table differs in case": (replace(VALID_APPEND, table="NS.t"), "commit is for table"),
    "commit_id not a uuid": (replace(VALID_APPEND, commit_id="commit-1"), "is not a UUID"),
    "commit_id empty": (replace(VALID_APPEND, commit_id=""), "is not a UUID"),
    "unknown operation": (replace(VALID_APPEND, operation=Operation.UNKNOWN), "unknown operation"),
    "base_version = offset": (
        replace(VALID_APPEND, base_version=OFFSET),
        "base_version 10 is not in [-1, 10)",
    ),
    "base_version > offset": (replace(VALID_APPEND, base_version=OFFSET + 1), "is not in [-1, 10)"),
    "base_version < -1": (replace(VALID_APPEND, base_version=-2), "is not in [-1, 10)"),
    "writer_id empty": (replace(VALID_APPEND, writer_id=""), "writer_id is empty"),
    "writer_id too long": (replace(VALID_APPEND, writer_id="w" * 513), "writer_id is longer than 512"),
    "writer_id NUL": (replace(VALID_APPEND, writer_id="w\x00"), "writer_id contains control characters"),
    "writer_id DEL": (replace(VALID_APPEND, writer_id="w\x7f"), "writer_id contains control characters"),
    "segment added twice": (append(seg("s1"), seg("s1")), "the same segment_id is added twice"),
    "segment dropped twice": (compact(drops=("x", "x")), "the same segment_id is dropped twice"),
    "added and dropped": (compact(drops=("x",), adds=(seg("x"),)), "both added and dropped"),
    "segment_id empty": (_seg(segment_id=""), "segment_id is empty"),
    "segment_id too long": (_seg(segment_id="s" * 513), "segment_id is longer than 512"),
    "segment_id newline": (_seg(segment_id="s\n1"), "segment_id contains control characters"),
    "path empty": (_seg(path=""), "segment path is empty"),
    "path too long": (_seg(path="d/" * 2048 + "x"), "segment path is longer than 4096"),
    "path control": (_seg(path="data/x\r.parquet"), "segment path contains control characters"),
    "path absolute": (_seg(path="/data/x.parquet"), "must be relative to the table root"),
    "path backslash": (_seg(path="data\\x.parquet"), "must be relative to the table root"),
    "path traversal": (_seg(path="data/../../etc/passwd"), "has empty, '.' or '..' components"),
    "path dot": (_seg(path="./x.parquet"), "has empty, '.' or '..' components"),
    "path empty component": (_seg(path="data//x.parquet"), "has empty, '.' or '..' components"),
    "path trailing slash": (_seg(path="data/x/"), "has empty, '.' or '..' components"),
    "path scheme-less uri": (_seg(path="//host/x"), "must be relative"),
    "partition empty": (_seg(partition=""), "partition is empty"),
    "partition tab": (_seg(partition="2024\t01"), "partition contains control characters"),
    "negative size": (_seg(size_bytes=-1), "negative size_bytes or row_count"),
    "negative rows": (_stats(rows=-1), "negative size_bytes or row_count"),
    "duplicate stats column": (
        _stats(ColumnStats("id", INT, 0, 1, 0), ColumnStats("id", INT, 0, 1, 0)),
        "duplicate stats for column 'id'",
    ),
    "null_count negative": (_stats(ColumnStats("id", INT, 0, 1, -1)), "null_count of 'id' out of range"),
    "null_count > rows": (
        _stats(ColumnStats("id", INT, 0, 1, 11), rows=10),
        "null_count of 'id' out of range",
    ),
    "min > max": (_stats(ColumnStats("id", INT, 5, 4, 0)), "min > max for column 'id'"),
    "min > max string": (_stats(ColumnStats("s", ColumnType.STRING, "b", "a", 0)), "min > max"),
    "min/max types differ": (_stats(ColumnStats("id", INT, "a", 1, 0)), "stats of 'id' hold a str, not INT"),
    "bloom without hashes": (_seg(bloom=BloomFilter("id", 0, b"\x01")), "empty Bloom filter"),
    "bloom without bits": (_seg(bloom=BloomFilter("id", 3, b"")), "empty Bloom filter"),
    "dropped id empty": (compact(drops=("",)), "dropped segment_id is empty"),
    "dropped id control": (compact(drops=("a\x1b",)), "dropped segment_id contains control characters"),
    "predicate empty": (
        commit(Operation.DELETE, tombstones=(Tombstone(""),)),
        "tombstone predicate is empty",
    ),
    "predicate too long": (
        commit(Operation.DELETE, tombstones=(Tombstone("x" * 16_385),)),
        "tombstone predicate is longer than 16384",
    ),
    "scope partition empty": (
        replace_commit((), (seg("n"),), ("",), Isolation.SNAPSHOT, -1),
        "replace_scope partition is empty",
    ),
    "schema not json": (replace(VALID_APPEND, schema="{'a': 1"), "schema is not valid JSON"),
    "APPEND with drops": (replace(VALID_APPEND, drops=("x",)), "APPEND may only add segments"),
    "APPEND with tombstones": (
        replace(VALID_APPEND, tombstones=(Tombstone("a = 1"),)),
        "APPEND may only add segments",
    ),
    "APPEND without adds": (replace(VALID_APPEND, adds=()), "APPEND adds no segment"),
    "COMPACT without drops": (
        replace(VALID_APPEND, operation=Operation.COMPACT),
        "COMPACT must drop segments",
    ),
    "COMPACT with tombstones": (
        replace(compact(drops=("x",)), tombstones=(Tombstone("a = 1"),)),
        "COMPACT must drop segments and carries no tombstones",
    ),
    "DELETE of nothing": (commit(Operation.DELETE, adds=(seg("n"),)), "DELETE must drop segments"),
    "SET_PROPERTIES with data": (
        commit(Operation.SET_PROPERTIES, table_properties={"k": "v"}, adds=(seg("n"),)),
        "SET_PROPERTIES changes table properties only",
    ),
    "SET_PROPERTIES without properties": (
        commit(Operation.SET_PROPERTIES, properties={"spark.app.id": "x"}),
        "SET_PROPERTIES changes table properties only",
    ),
    "SET_SCHEMA without schema": (commit(Operation.SET_SCHEMA), "SET_SCHEMA carries a schema"),
    "SET_SCHEMA with data": (
        commit(Operation.SET_SCHEMA, schema="{}", drops=("x",)),
        "SET_SCHEMA carries a schema and no data changes",
    ),
    "REPLACE adds outside scope": (
        replace_commit((), (seg("n", partition=P2),), (P1,), Isolation.SNAPSHOT, -1),
        "REPLACE adds segment 'n' outside its replace_scope",
    ),
    "REPLACE adds unpartitioned into a scope": (
        replace_commit((), (seg("n", partition=None),), (P1,), Isolation.SNAPSHOT, -1),
        "outside its replace_scope",
    ),
    "scope on APPEND": (replace(VALID_APPEND, replace_scope=(P1,)), "only meaningful for REPLACE"),
}


@pytest.mark.parametrize(("bad", "reason"), MALFORMED.values(), ids=list(MALFORMED))
def test_rule2_malformed_commit_is_invalid_and_changes_nothing(bad: Commit, reason: str) -> None:
    problem = malformation(bad, OFFSET, TABLE)
    assert problem is not None and reason in problem

    state = TableState(TABLE, version=OFFSET - 1)
    before = state.copy()
    verdict = apply(state, OFFSET, BROKER_T0, bad)
    assert (verdict.outcome, verdict.rule) == (Outcome.INVALID, Rule.MALFORMED)
    assert reason in verdict.detail
    assert_unchanged(before, state)
    assert (state.invalid, state.accepted, state.version) == (1, 0, OFFSET)


VALID: dict[str, Commit] = {
    "APPEND": VALID_APPEND,
    "APPEND with schema": replace(VALID_APPEND, schema='{"fields": []}'),
    "APPEND base = offset - 1": replace(VALID_APPEND, base_version=OFFSET - 1),
    "COMPACT without outputs": compact(drops=("x", "y")),
    "COMPACT": compact(drops=("x", "y"), adds=(seg("xy"),)),
    "DELETE by tombstone": commit(Operation.DELETE, tombstones=(Tombstone("id = 3"),)),
    "DELETE by drop, rewriting": commit(Operation.DELETE, drops=("x",), adds=(seg("x-rewritten"),)),
    "REPLACE of the whole table": replace_commit(
        ("x",), (seg("n", partition=None),), (), Isolation.SNAPSHOT, 3
    ),
    "REPLACE in scope": replace_commit(
        ("x",), (seg("n", partition=P1),), (P1, P2), Isolation.SERIALIZABLE, 3
    ),
    "SET_PROPERTIES": commit(Operation.SET_PROPERTIES, table_properties={"owner": "me", "old": None}),
    "SET_SCHEMA": set_schema('{"type": "struct", "fields": []}', 9),
    "absolute URI path": _seg(path="s3://bucket/warehouse/ns/t/data/x.parquet"),
    "path at the length limit": _seg(path="d/" * 2047 + "xx"),
    "unicode path and ids": _seg(path="data/zürich/ü.parquet", segment_id="ü-1", partition="städte"),
    "null_count = rows": _stats(ColumnStats("id", INT, 0, 1, 10), rows=10),
    "min = max, null stats": _stats(ColumnStats("id", INT, 3, 3, None), ColumnStats("x", INT, None, 7, 0)),
    "int min, float max": _stats(ColumnStats("f", ColumnType.FLOAT, 1, 2.5, 0)),
    "ids at the length limit": replace(VALID_APPEND, writer_id="w" * 512),
}


@pytest.mark.parametrize("good", VALID.values(), ids=list(VALID))
def test_rule2_well_formed_commits_pass(good: Commit) -> None:
    assert malformation(good, OFFSET, TABLE) is None
    assert judge(TableState(TABLE, version=OFFSET - 1), OFFSET, good).outcome is not Outcome.INVALID


@pytest.mark.parametrize(
    "commit_id",
    [
        "12345678-1234-5678-1234-56781234567\n",  # newline (a control character) in the id and the key
        " 2345678-1234-5678-1234-567812345678",
        "1234_678-1234-5678-1234-567812345678",
        "+2345678-1234-5678-1234-567812345678",
    ],
)
def test_rule2_commit_id_must_really_be_a_uuid(commit_id: str) -> None:
    uuid.UUID(commit_id)  # the standard library parses it...
    # ...but it is not a UUID in any of RFC 9562's spellings.
    assert malformation(replace(VALID_APPEND, commit_id=commit_id), OFFSET, TABLE) is not None


def test_rule2_set_properties_may_not_change_the_schema() -> None:
    sneaky = commit(Operation.SET_PROPERTIES, table_properties={"owner": "x"}, schema='{"fields": []}')
    assert malformation(sneaky, OFFSET, TABLE) is not None


def test_rule2_undecodable_values_and_bad_keys_are_invalid_and_counted() -> None:
    log = Log()
    log.accept(append(seg("a")))
    good = append(seg("b"), base=log.head)
    value = codec.encode_commit(good)
    before = log.state.copy()
    cases: list[tuple[bytes | None, bytes, str]] = [
        (good.commit_id.encode(), b"garbage", "bad magic"),
        (good.commit_id.encode(), b"", "bad magic"),
        (good.commit_id.encode(), b"\xc3\x01" + b"\xff" * 8 + value[10:], "unknown schema fingerprint"),
        (good.commit_id.encode(), value[:-3], "undecodable commit body"),
        (good.commit_id.encode(), value + b"\x00", "trailing bytes"),
        (new_id().encode(), value, "record key is not the commit_id"),
        (None, value, "record key is not the commit_id"),
        (b"\xff\xfe", value, "record key is not the commit_id"),
    ]
    for key, raw, reason in cases:
        verdict = log.raw(key, raw)
        assert (verdict.outcome, verdict.rule) == (Outcome.INVALID, Rule.MALFORMED), reason
        assert reason in verdict.detail
    assert_unchanged(before, log.state)
    assert log.state.invalid == len(cases)
    # The materializer keeps going: the good record is still accepted afterwards.
    assert log.send(good).outcome is Outcome.ACCEPTED


# ---------------------------------------------------------------------------- rule 3: concurrent drop


def test_rule3_two_compactions_of_the_same_segments_the_later_loses() -> None:
    log = Log()
    base = log.accept(append(seg("a"), seg("b")))
    winner = log.accept(compact(drops=("a", "b"), adds=(seg("ab-1"),), base=base))
    before = log.state.copy()

    verdict = log.send(compact(drops=("a", "b"), adds=(seg("ab-2"),), base=base))

    assert (verdict.outcome, verdict.rule) == (Outcome.REJECTED, Rule.CONCURRENT_DROP)
    assert verdict.conflicting_version == winner
    assert "'a'" in verdict.detail and f"already dropped at version {winner}" in verdict.detail
    assert_unchanged(before, log.state)
    assert log.state.live_ids() == {"ab-1"}


def test_rule3_partial_overlap_is_enough() -> None:
    log = Log()
    base = log.accept(append(seg("a"), seg("b"), seg("c")))
    first = log.accept(compact(drops=("b", "c"), adds=(seg("bc"),), base=base))
    verdict = log.send(compact(drops=("a", "b"), adds=(seg("ab"),), base=base))
    assert (verdict.rule, verdict.conflicting_version) == (Rule.CONCURRENT_DROP, first)
    assert log.state.live_ids() == {"a", "bc"}


def test_rule3_dropping_a_segment_that_never_existed_names_no_version() -> None:
    log = Log()
    log.accept(append(seg("a")))
    verdict = log.send(commit(Operation.DELETE, log.head, drops=("ghost",)))
    assert (verdict.outcome, verdict.rule) == (Outcome.REJECTED, Rule.CONCURRENT_DROP)
    assert verdict.conflicting_version is None
    assert "not live" in verdict.detail


def test_rule3_names_the_latest_drop_of_a_re_added_segment() -> None:
    log = Log()
    log.accept(append(seg("a")))
    log.accept(compact(drops=("a",)))
    log.accept(append(seg("a")))  # the id is free again (rule 4 is about live ids only)
    last_drop = log.accept(compact(drops=("a",)))
    verdict = log.send(compact(drops=("a",)))
    assert verdict.conflicting_version == last_drop


def test_rule3_drop_memory_keeps_the_most_recently_dropped_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(state_module, "DROP_MEMORY", 2)
    log = Log()
    log.accept(append(seg("x"), seg("y"), seg("z")))
    log.accept(compact(drops=("x",)))
    log.accept(compact(drops=("y",)))
    log.accept(append(seg("x")))
    x_dropped_again = log.accept(compact(drops=("x",)))
    log.accept(compact(drops=("z",)))
    # The last two drops were x (again) and z: both must still name their version.
    verdict = log.send(compact(drops=("x",)))
    assert verdict.conflicting_version == x_dropped_again


# ---------------------------------------------------------------------------- rule 4: duplicate segment


def test_rule4_adding_a_live_segment_id_is_rejected() -> None:
    log = Log()
    added = log.accept(append(seg("a"), seg("b")))
    before = log.state.copy()
    verdict = log.send(append(seg("c"), seg("b", path="data/elsewhere/b.parquet"), base=log.head))
    assert (verdict.outcome, verdict.rule) == (Outcome.REJECTED, Rule.DUPLICATE_SEGMENT)
    assert verdict.conflicting_version == added
    assert "'b' is already live" in verdict.detail
    assert_unchanged(before, log.state)
    assert "c" not in log.state.live_ids()  # all or nothing


def test_rule4_a_dropped_segment_id_may_be_added_again() -> None:
    log = Log()
    log.accept(append(seg("a")))
    log.accept(compact(drops=("a",), adds=(seg("a2"),)))
    again = log.accept(append(seg("a")))
    assert log.state.segments["a"].added_version == again


def test_rule3_is_checked_before_rule4() -> None:
    log = Log()
    log.accept(append(seg("a")))
    verdict = log.send(compact(drops=("ghost",), adds=(seg("a"),)))
    assert verdict.rule is Rule.CONCURRENT_DROP


# ---------------------------------------------------------------------------- rule 5: replace scope


def _replace_race(
    isolation: Isolation, concurrent: Commit, scope: tuple[str, ...] = (P1,)
) -> tuple[Log, Verdict]:
    """p1 holds a1; a REPLACE of ``scope`` read version B; ``concurrent`` lands after B."""
    log = Log()
    base = log.accept(append(seg("a1", P1), seg("a2", P2), seg("keep", P1)))
    log.accept(concurrent)
    replacement = replace_commit(("a1",), (seg("r1", P1),), scope, isolation, base)
    return log, log.send(replacement)


@pytest.mark.parametrize(
    ("isolation", "outcome"),
    [(Isolation.SNAPSHOT, Outcome.ACCEPTED), (Isolation.SERIALIZABLE, Outcome.REJECTED)],
)
def test_rule5_replace_with_a_concurrent_append_into_its_scope(
    isolation: Isolation, outcome: Outcome
) -> None:
    appended = append(seg("new", P1), base=0)
    log, verdict = _replace_race(isolation, appended)
    assert verdict.outcome is outcome
    if isolation is Isolation.SNAPSHOT:
        # Druid semantics: the concurrent append survives the replace.
        assert log.state.live_ids() == {"new", "r1", "a2", "keep"}
    else:
        assert verdict.rule is Rule.CONCURRENT_APPEND
        assert verdict.conflicting_version == log.verdicts[1].offset
        assert log.state.live_ids() == {"new", "a1", "a2", "keep"}


def test_rule5_serializable_replace_ignores_appends_outside_its_scope() -> None:
    _, verdict = _replace_race(Isolation.SERIALIZABLE, append(seg("other", P2), base=0))
    assert verdict.outcome is Outcome.ACCEPTED


def test_rule5_serializable_replace_of_the_whole_table_conflicts_with_any_append() -> None:
    log, verdict = _replace_race(Isolation.SERIALIZABLE, append(seg("other", P2), base=0), scope=())
    assert (verdict.rule, verdict.conflicting_version) == (Rule.CONCURRENT_APPEND, log.verdicts[1].offset)


def test_rule5_a_concurrent_drop_in_the_scope_is_a_conflict() -> None:
    """A compaction in p1 of a segment the replace does not drop still touches the scope."""
    log, verdict = _replace_race(Isolation.SERIALIZABLE, compact(drops=("keep",), base=0))
    assert (verdict.rule, verdict.conflicting_version) == (Rule.CONCURRENT_APPEND, log.verdicts[1].offset)


def test_rule3b_a_rewrite_after_a_concurrent_tombstone_is_rejected_whatever_the_isolation() -> None:
    """Rewritten files would carry rows the tombstone deleted, at a version after it (resurrection)."""
    for isolation in Isolation:
        delete = commit(Operation.DELETE, 0, tombstones=(Tombstone("country = 'NZ'"),))
        log, verdict = _replace_race(isolation, delete)
        assert (verdict.rule, verdict.conflicting_version) == (Rule.CONCURRENT_DELETE, log.verdicts[1].offset)


def test_rule3b_a_compaction_racing_a_soft_delete_is_rejected_but_an_append_is_not() -> None:
    log = Log()
    log.accept(append(seg("a"), seg("b")))
    log.accept(commit(Operation.DELETE, 0, tombstones=(Tombstone("id = 1"),)))
    stale_compaction = log.send(compact(drops=("a", "b"), adds=(seg("ab"),), base=0))
    assert stale_compaction.rule is Rule.CONCURRENT_DELETE
    assert log.send(append(seg("c"), base=0)).outcome is Outcome.ACCEPTED
    assert log.send(compact(drops=("a", "b"), adds=(seg("ab"),), base=log.state.version)).accepted


def test_rule5_a_concurrent_tombstone_conflicts_with_a_serializable_replace_that_only_adds() -> None:
    log = Log()
    log.accept(append(seg("keep", P1)))
    log.accept(commit(Operation.DELETE, 0, tombstones=(Tombstone("country = 'NZ'"),)))
    verdict = log.send(replace_commit((), (seg("n", partition=P1),), (P1,), Isolation.SERIALIZABLE, 0))
    assert (verdict.rule, verdict.conflicting_version) == (Rule.CONCURRENT_APPEND, log.verdicts[1].offset)


def test_replace_may_not_drop_outside_its_scope() -> None:
    log = Log()
    log.accept(append(seg("p1seg", P1), seg("p2seg", P2)))
    verdict = log.send(replace_commit(("p2seg",), (seg("n", partition=P1),), (P1,), Isolation.SNAPSHOT, 0))
    assert verdict.outcome is Outcome.INVALID and "outside its replace_scope" in verdict.detail


@pytest.mark.parametrize(
    "concurrent",
    [
        commit(Operation.SET_PROPERTIES, 0, table_properties={"owner": "x"}),
        set_schema('{"fields": []}', 0),
    ],
    ids=["SET_PROPERTIES", "SET_SCHEMA"],
)
def test_rule5_commits_without_data_do_not_touch_the_scope(concurrent: Commit) -> None:
    _, verdict = _replace_race(Isolation.SERIALIZABLE, concurrent)
    assert verdict.outcome is Outcome.ACCEPTED


def test_rule5_an_append_before_base_version_is_not_concurrent() -> None:
    log = Log()
    log.accept(append(seg("a1", P1)))
    seen = log.accept(append(seg("a2", P1)))
    log.accept(commit(Operation.SET_PROPERTIES, seen, table_properties={"k": "v"}))
    verdict = log.send(replace_commit(("a1", "a2"), (seg("r", P1),), (P1,), Isolation.SERIALIZABLE, seen))
    assert verdict.outcome is Outcome.ACCEPTED
    assert log.state.live_ids() == {"r"}


def test_rule5_a_rejected_append_does_not_count() -> None:
    log = Log()
    base = log.accept(append(seg("a1", P1)))
    assert log.send(append(seg("a1", P1), base=base)).outcome is Outcome.REJECTED  # rule 4
    verdict = log.send(replace_commit(("a1",), (seg("r", P1),), (P1,), Isolation.SERIALIZABLE, base))
    assert verdict.outcome is Outcome.ACCEPTED


def test_rule5_snapshot_replace_still_loses_a_drop_race() -> None:
    """SNAPSHOT lets appends survive, but a segment it drops must still be live (rule 3)."""
    log, verdict = _replace_race(Isolation.SNAPSHOT, compact(drops=("a1",), adds=(seg("c", P1),), base=0))
    assert (verdict.rule, verdict.conflicting_version) == (Rule.CONCURRENT_DROP, log.verdicts[1].offset)


def test_rule5_isolation_only_matters_for_replace() -> None:
    log = Log()
    base = log.accept(append(seg("a", P1)))
    log.accept(append(seg("b", P1), base=base))
    verdict = log.send(append(seg("c", P1), base=base, isolation=Isolation.SERIALIZABLE))
    assert verdict.outcome is Outcome.ACCEPTED


# ---------------------------------------------------------------------------- rule 6: schema changes


def test_rule6_two_concurrent_schema_changes_the_later_is_rejected() -> None:
    log = Log()
    base = log.accept(append(seg("a")))
    first = log.accept(set_schema('{"fields": ["a"]}', base))
    before = log.state.copy()
    verdict = log.send(set_schema('{"fields": ["b"]}', base))
    assert (verdict.outcome, verdict.rule) == (Outcome.REJECTED, Rule.CONCURRENT_SCHEMA_CHANGE)
    assert verdict.conflicting_version == first
    assert_unchanged(before, log.state)
    assert (log.state.schema, log.state.schema_version) == ('{"fields": ["a"]}', first)


def test_rule6_a_schema_change_that_saw_the_previous_one_is_accepted() -> None:
    log = Log()
    first = log.accept(set_schema('{"v": 1}', -1))
    second = log.accept(set_schema('{"v": 2}', first))
    assert (log.state.schema, log.state.schema_version) == ('{"v": 2}', second)


def test_rule6_applies_to_data_commits_that_carry_a_schema() -> None:
    log = Log()
    base = log.accept(append(seg("a")))
    changed = log.accept(set_schema('{"v": 1}', base))
    evolving = log.send(append(seg("b"), base=base, schema='{"v": 2}'))
    assert (evolving.rule, evolving.conflicting_version) == (Rule.CONCURRENT_SCHEMA_CHANGE, changed)
    plain = log.send(append(seg("c"), base=base))  # no schema: appends never conflict
    assert plain.outcome is Outcome.ACCEPTED


def test_rule6_a_rejected_schema_change_is_not_a_change() -> None:
    log = Log()
    first = log.accept(set_schema('{"v": 1}', -1))
    assert log.send(set_schema('{"v": 2}', -1)).outcome is Outcome.REJECTED
    assert log.send(set_schema('{"v": 3}', first)).outcome is Outcome.ACCEPTED


# ---------------------------------------------------------------------------- rule 7: accepted


def test_rule7_accepted_commit_is_folded_into_the_state() -> None:
    log = Log(first_offset=100, gap=5)
    v1 = log.accept(append(seg("a", rows=10), seg("b", P2, rows=20)))
    props = commit(Operation.SET_PROPERTIES, v1, table_properties={"owner": "etl", "tier": "gold"})
    log.accept(props)
    delete = commit(
        Operation.DELETE,
        log.head,
        drops=("a",),
        adds=(seg("a-rewritten", rows=7),),
        tombstones=(Tombstone("id = 3"),),
        table_properties={"tier": None},
        schema='{"fields": ["id"]}',
    )
    v3 = log.accept(delete)
    state = log.state

    assert state.live_ids() == {"b", "a-rewritten"}
    assert state.segments["b"].added_version == v1
    assert state.segments["a-rewritten"].added_version == v3
    assert (state.live_rows, state.live_bytes) == (27, 2_700)
    assert state.tombstones == [Tombstone("id = 3", v3)]
    assert state.properties == {"owner": "etl"}
    assert (state.schema, state.schema_version) == ('{"fields": ["id"]}', v3)
    assert (state.version, state.last_accepted_version) == (v3, v3)
    assert state.last_accepted_timestamp_ms == BROKER_T0 + v3  # the broker's time, not the client's
    assert state.last_commit_id == delete.commit_id
    assert (state.accepted, state.rejected, state.invalid, state.duplicates) == (3, 0, 0, 0)
    assert state.recent_commits[delete.commit_id] == v3


def test_judge_is_pure() -> None:
    log = Log()
    log.accept(append(seg("a")))
    before = log.state.copy()
    for c in (append(seg("b")), compact(drops=("a",)), set_schema("{}", 0), append(seg("a"))):
        judge(log.state, log.next_offset, c)
    assert log.state == before


def test_fingerprint_ignores_bookkeeping_but_not_content() -> None:
    log = Log()
    log.accept(append(seg("a")))
    empty = TableState(TABLE)
    assert log.state.fingerprint() != empty.fingerprint()
    moved = replace(log.state, version=999, accepted=5, invalid=3)
    assert moved.fingerprint() == log.state.fingerprint()


def test_different_property_maps_never_share_a_fingerprint() -> None:
    states = []
    for changes in ({"a\x00b": "c"}, {"a": "b\x00c"}):
        log = Log()
        verdict = log.send(commit(Operation.SET_PROPERTIES, table_properties=changes))
        states.append((verdict.outcome, log.state))
    (outcome_1, state_1), (outcome_2, state_2) = states
    assert state_1.properties != state_2.properties or Outcome.INVALID in (outcome_1, outcome_2)
    assert Outcome.INVALID in (outcome_1, outcome_2) or state_1.fingerprint() != state_2.fingerprint()


# ---------------------------------------------------------------------------- pruned records, replay


def test_pruned_record_changes_nothing_but_the_version() -> None:
    log = Log()
    first = append(seg("a"))
    log.accept(first)
    before = log.state.copy()

    pruned = log.raw(first.commit_id.encode(), None)
    anonymous = log.raw(None, None)

    assert (pruned.outcome, pruned.commit_id, pruned.rule) == (Outcome.PRUNED, first.commit_id, None)
    assert (anonymous.outcome, anonymous.commit_id) == (Outcome.PRUNED, None)
    assert log.state == replace(before, version=anonymous.offset)  # not even a counter moved
    # The dedup window lives in the state, not in the log: a retry is still a DUPLICATE.
    assert log.send(first).outcome is Outcome.DUPLICATE


def test_records_must_come_in_offset_order() -> None:
    log = Log()
    log.accept(append(seg("a")))
    late = LogRecord(log.head, 0, b"k", None)
    with pytest.raises(ValueError, match="not after the state's version"):
        apply_record(log.state, late)
    with pytest.raises(ValueError, match="not after the state's version"):
        apply(log.state, log.head, 0, append(seg("b")))


def test_replay_skips_what_the_state_already_holds_and_stops_at_upto() -> None:
    commits = [append(seg("a")), append(seg("b")), compact(drops=("a",)), append(seg("c"))]
    records = [
        LogRecord(o, BROKER_T0, c.commit_id.encode(), codec.encode_commit(c))
        for o, c in zip((0, 4, 5, 9), commits, strict=True)
    ]
    full = replay(records, TableState(TABLE))
    assert full.live_ids() == {"b", "c"}

    at_5 = replay(records, TableState(TABLE), upto=7)  # a version between two records
    assert (at_5.version, at_5.live_ids()) == (5, frozenset({"b"}))
    assert replay(records, at_5.copy()) == full  # overlapping records are skipped, not re-judged
    assert replay(records, at_5) == full
