"""Writers and replay readers on a real broker: verdicts, idempotency, limits, bad records."""

from __future__ import annotations

import os
import random
import time

import pytest

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import CommitConflict, CommitTooLarge, InvalidCommit, MalformedCommit
from segcat.catalog.log.reader import LogReader
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.model import Commit, Isolation, Operation
from segcat.catalog.protocol.rules import Outcome, Rule
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.table_files import TableFiles
from segcat.catalog.write.writer import Writer
from tests.factories import produce_raw, segment
from tests.handles import reader_of, writer_of

pytestmark = pytest.mark.kafka


def _high(config: Config, table: Table) -> int:
    with LogReader(config, table.name) as reader:
        return reader.watermarks()[1]


def test_append_compact_and_read_back(config: Config, table: Table) -> None:
    with load_catalog(config).load_table(table.name) as writer:
        v1 = writer.append([segment("a"), segment("b")])
        v2 = writer.append([segment("c", "2020-02")])
        v3 = writer.compact(["a", "b"], [segment("ab")])
    assert v1 < v2 < v3
    snap = table.snapshot()
    assert snap.version == v3
    assert sorted(snap.segments.column("segment_id").to_pylist()) == ["ab", "c"]
    assert snap.segments.column("min:id").to_pylist() == [0, 0]
    assert sorted(s.segment_id for s in table.snapshot(v2).segment_list()) == ["a", "b", "c"]
    assert table.snapshot(v1).live_count == 2
    assert table.snapshot(-1).live_count == 0
    diff = table.diff(v2, v3)
    assert [s.segment_id for s in diff.added] == ["ab"]
    assert sorted(s.segment_id for s in diff.removed) == ["a", "b"]
    history = table.history()
    assert [h.version for h in history] == [0, v1, v2, v3]
    assert history[0].commit.operation is Operation.UPGRADE_PROTOCOL  # the table's creation
    assert all(f.startswith(table.location() + "/data/") for f in snap.files())


def test_losing_compaction_raises_commit_conflict(config: Config, table: Table) -> None:
    with (
        load_catalog(config).load_table(table.name) as first,
        load_catalog(config).load_table(table.name) as second,
    ):
        first.append([segment("a"), segment("b")])
        second.refresh()
        won = first.compact(["a", "b"], [segment("ab1")])
        with pytest.raises(CommitConflict) as info:
            second.compact(["a", "b"], [segment("ab2")])  # planned on a stale image
    assert info.value.rule == Rule.CONCURRENT_DROP
    assert info.value.conflicting_version == won
    assert [s.segment_id for s in table.snapshot().segment_list()] == ["ab1"]


def test_commit_with_retry_replans_on_the_newest_state(config: Config, table: Table) -> None:
    with (
        load_catalog(config).load_table(table.name) as first,
        load_catalog(config).load_table(table.name) as second,
    ):
        first.append([segment(f"s{i}") for i in range(4)])
        second.refresh()
        first.compact(["s0", "s1"], [segment("c01")])
        attempts: list[int] = []

        def plan(state):  # type: ignore[no-untyped-def]
            attempts.append(state.version)
            if len(attempts) == 1:  # a plan that still names s0, which `first` already compacted
                return second.new_commit(Operation.COMPACT, drops=["s0", "s2"], adds=[segment("x")])
            live = sorted(s for s in state.segments if s.startswith("s"))[:2]
            return second.new_commit(Operation.COMPACT, drops=live, adds=[segment("y")])

        second_version = second.commit_with_retry(plan)
    assert len(attempts) == 2
    live = {s.segment_id for s in table.snapshot().segment_list()}
    assert second_version == table.snapshot().version
    assert live == {"c01", "y"}


def test_same_commit_twice_is_one_version(config: Config, table: Table) -> None:
    with load_catalog(config).load_table(table.name) as writer:
        commit = writer.new_commit(Operation.APPEND, adds=[segment("once")])
        v1 = writer.commit(commit)
        assert writer.commit(commit) == v1  # known to the writer's image: not even re-sent
    assert _high(config, table) == v1 + 1
    # a new writer process retrying after a timeout reads the log first: the commit is there
    with load_catalog(config).load_table(table.name) as retrying:
        assert retrying.commit(commit) == v1
    assert _high(config, table) == v1 + 1
    # the very same record re-sent anyway (a writer that did not read first) is a DUPLICATE
    produce_raw(config, table.name.topic, [(commit.commit_id.encode(), codec.encode_commit(commit))])
    records = list(table.records(1))
    assert [r.verdict.outcome for r in records] == [Outcome.ACCEPTED, Outcome.DUPLICATE]
    assert records[1].verdict.original_version == v1
    assert [h.version for h in table.history()] == [0, v1]


def test_retry_after_a_lost_acknowledgement_returns_the_original_version(
    config: Config, table: Table
) -> None:
    with load_catalog(config).load_table(table.name) as writer:
        commit = writer.new_commit(Operation.APPEND, adds=[segment("lost-ack")])
        # the first attempt reached the log, but the writer never heard back
        (offset,) = produce_raw(
            config, table.name.topic, [(commit.commit_id.encode(), codec.encode_commit(commit))]
        )
        assert writer.commit(commit) == offset
    assert table.snapshot().live_count == 1


def test_malformed_commit_is_refused_before_sending(config: Config, table: Table) -> None:
    with load_catalog(config).load_table(table.name) as writer:
        with pytest.raises(MalformedCommit, match="APPEND may not carry drops"):
            writer.commit(writer.new_commit(Operation.APPEND, adds=[segment("a")], drops=["zzz"]))
        with pytest.raises(MalformedCommit, match="relative to the table root"):
            bad = segment("b")
            writer.append(
                [type(bad)(**{**{f: getattr(bad, f) for f in bad.__slots__}, "path": "/etc/passwd"})]
            )
    assert _high(config, table) == 1  # the table's protocol record only


def test_commit_larger_than_the_topic_limit_is_refused(
    catalog: Catalog, config: Config, table_name: str
) -> None:
    table = catalog.create_table(table_name, max_message_bytes=64 * 1024)
    with load_catalog(config).load_table(table.name) as writer:
        with pytest.raises(CommitTooLarge, match=r"max\.message\.bytes"):
            writer.append([segment(f"big-{i}") for i in range(2_000)])
        assert writer.append([segment("small")]) == 1
    assert _high(config, table) == 2


def test_invalid_record_reaching_the_log_raises_invalid_commit(config: Config, table: Table) -> None:
    with load_catalog(config).load_table(table.name) as writer:
        commit = writer.new_commit(Operation.APPEND, adds=[segment("a")])
        wrong_key = codec.encode_commit(commit)
        produce_raw(config, table.name.topic, [(b"not-the-commit-id", wrong_key)])
        writer.refresh()
        assert writer_of(writer).state.invalid == 1
        other = Commit(**{**{f: getattr(commit, f) for f in commit.__slots__}, "table": "other.table"})
        produce_raw(config, table.name.topic, [(other.commit_id.encode(), codec.encode_commit(other))])
        writer.refresh()
        assert writer_of(writer).state.invalid == 2 and writer_of(writer).state.live_count == 0
        # Everything a writer can check is checked before sending; what only the log's order
        # can decide reaches it: here another writer sets the same property first, so ours
        # changes nothing at its offset (INVALID under protocol 2).
        mine = writer.new_commit(Operation.SET_PROPERTIES, table_properties={"owner": "ann"})
        with load_catalog(config).load_table(table.name) as other_writer:
            other_writer.set_properties({"owner": "ann"})
        with pytest.raises(InvalidCommit, match="changes nothing"):
            writer.commit(mine)


def test_base_version_beyond_the_head_is_refused_before_sending(config: Config, table: Table) -> None:
    """Regression: such a commit used to be sent and land in the log as an INVALID record."""
    with load_catalog(config).load_table(table.name) as writer:
        before = _high(config, table)
        with pytest.raises(MalformedCommit, match="beyond the head"):
            writer.commit(writer.new_commit(Operation.APPEND, adds=[segment("c")], base_version=10_000))
    assert _high(config, table) == before


def _garbage(rng: random.Random, i: int) -> tuple[bytes | None, bytes | None]:
    kind = i % 5
    if kind == 0:
        return os.urandom(8), rng.randbytes(rng.randint(1, 300))
    if kind == 1:  # right magic, unknown schema fingerprint
        return b"k", codec.MAGIC + rng.randbytes(8) + rng.randbytes(40)
    if kind == 2:  # the current fingerprint, body of garbage
        return b"k", codec.MAGIC + codec.current_fingerprint() + rng.randbytes(rng.randint(0, 64))
    if kind == 3:  # empty value with a key that is no commit id
        return b"not-a-commit", b""
    valid = Commit(Commit.new_id(), "other.ns", Operation.APPEND, -1, "w", 0, adds=(segment(f"g{i}"),))
    return valid.commit_id.encode(), codec.encode_commit(valid)  # a commit for another table


def test_garbage_records_are_invalid_and_change_nothing(config: Config, table: Table) -> None:
    rng = random.Random(7)
    with load_catalog(config).load_table(table.name) as writer:
        writer.append([segment("before")])
        produce_raw(config, table.name.topic, [_garbage(rng, i) for i in range(100)])
        version = writer.append([segment("after")])
        writer.compact(["before", "after"], [segment("both")])
        assert writer_of(writer).state.invalid == 100
    records = list(table.records(1))
    assert len(records) == 103
    assert [r.verdict.outcome for r in records[1:101]] == [Outcome.INVALID] * 100
    assert version == 102
    snap = table.snapshot()
    assert [s.segment_id for s in snap.segment_list()] == ["both"]
    counted = reader_of(table).state()
    assert counted.accepted == 4 and counted.invalid == 100  # with the table's protocol record


def test_serializable_replace_loses_to_a_concurrent_append(config: Config, table: Table) -> None:
    with (
        load_catalog(config).load_table(table.name) as replacer,
        load_catalog(config).load_table(table.name) as appender,
    ):
        replacer.append([segment("old", "p1")])
        replacer.refresh()
        appender.refresh()
        appender.append([segment("late", "p1")])
        with pytest.raises(CommitConflict) as info:
            replacer.replace([segment("new", "p1")], scope=["p1"], isolation=Isolation.SERIALIZABLE)
        assert info.value.rule == Rule.CONCURRENT_APPEND
        replacer.replace([segment("new", "p1")], scope=["p1"], drops=["old"])  # SNAPSHOT: append survives
    assert sorted(s.segment_id for s in table.snapshot().segment_list()) == ["late", "new"]


def test_time_travel_by_broker_timestamp(config: Config, table: Table) -> None:
    with load_catalog(config).load_table(table.name) as writer:
        v1 = writer.append([segment("a")])
        time.sleep(0.05)
        ts_after_v1 = table.snapshot(v1).timestamp_ms
        time.sleep(0.05)
        writer.append([segment("b")])
    assert table.snapshot(as_of=ts_after_v1).version == v1
    assert table.snapshot(as_of=ts_after_v1 - 10_000).version == -1
    assert table.snapshot(as_of=int(time.time() * 1000) + 1000).live_count == 2


def test_a_new_writer_starts_from_the_newest_key_frame(config: Config, table: Table) -> None:
    with load_catalog(config).load_table(table.name) as writer:
        for i in range(12):
            writer.append([segment(f"k{i}")])
    state = reader_of(table).state()
    files = TableFiles(ObjectStore.from_config(config), table.name, reader_of(table).log_id)
    files.write_keyframe(keyframe.build(state, log_id=reader_of(table).log_id), state.version)
    with load_catalog(config).load_table(table.name) as writer:
        produce_raw(config, table.name.topic, [(b"junk", b"not a commit")])
        assert writer_of(writer).state.version == state.version  # loaded, not replayed
        assert writer_of(writer).state == state
        version = writer.compact(["k0", "k1"], [segment("k01")])
        assert (
            writer_of(writer).state == reader_of(table).state()
        )  # then it judges exactly as a full replay does
        assert version == reader_of(table).snapshot(sources=("kafka",)).version
    with Writer(config, table.name, from_keyframe=False) as cold:  # the writer itself: no key frame
        assert cold.state.version == -1
        assert cold.refresh() == reader_of(table).state()
