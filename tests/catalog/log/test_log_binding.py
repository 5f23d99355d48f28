"""Every key frame, archive and Redis value is bound to the log it came from (issue 20, item 5).

The log is the table's topic as Kafka created it, named by its topic id (docs/PROTOCOL.md §6,
*Which log*). Object storage keeps each log's objects in a directory of its own, and each object
records its log; Redis' head and key frame record theirs, and a write for one log clears what
another left. Here on object storage and a real Redis, without Kafka.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Uuid

from segcat.catalog.config import Config
from segcat.catalog.errors import CorruptArchive, CorruptKeyFrame
from segcat.catalog.log import ownership
from segcat.catalog.log.topics import topic_id_text
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.model import Commit, LogRecord, Operation
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.replay import replay
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read import lookup
from segcat.catalog.storage import keyframe
from segcat.catalog.storage import table_files as table_files_module
from segcat.catalog.storage.archive import ArchivedCommit, decode_archive, decode_heads
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.redis import Head, RedisStore, keys
from segcat.catalog.storage.table_files import FlatClaim, TableFiles
from tests.factories import segment

NAME = TableName("ns", "t")
OLD = "AAAAAAAAAAEAAAAAAAAAAQ"
NEW = "f_-AAAAAAAEAAAAAAAAAAg"


def _records(count: int) -> list[LogRecord]:
    """``count`` appends (versions 0..count-1) as the log holds them."""
    records = []
    for offset in range(count):
        commit = Commit(
            Commit.new_id(),
            NAME.qualified,
            Operation.APPEND,
            offset - 1,
            "w",
            0,
            adds=(segment(f"s{offset}"),),
        )
        key, value = commit.commit_id.encode(), codec.encode_commit(commit)
        records.append(LogRecord(offset, 1_700_000_000_000 + offset, key, value))
    return records


def _state(count: int, records: list[LogRecord] | None = None) -> TableState:
    """The table after its first ``count`` appends."""
    state = TableState(NAME.qualified)
    replay((records or _records(count))[:count], state)
    return state


# ---------------------------------------------------------------------- the id


def test_topic_ids_are_kafkas_text_form() -> None:
    """URL-safe base64 of the 16 bytes without padding (what ``kafka-topics --describe`` prints;
    librdkafka's own ``str`` uses ``+`` and ``/``, which do not belong in a path)."""
    assert topic_id_text(Uuid(1, 1)) == OLD
    assert topic_id_text(Uuid(0, 0)) is None  # a broker without topic ids
    text = topic_id_text(Uuid(-1, -(2**62)))
    assert text is not None and "/" not in text and "+" not in text and len(text) == 22
    assert TableFiles(ObjectStore.from_uri("/tmp"), NAME, text).log_id == text


def test_a_log_id_that_is_no_topic_id_is_refused() -> None:
    for bad in ("", "../../etc", "A" * 21, "a/b" + "A" * 19, "A" * 23):
        with pytest.raises(ValueError):
            TableFiles(ObjectStore.from_uri("/tmp"), NAME, bad)


# ---------------------------------------------------------------------- object storage


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return ObjectStore.from_uri(str(tmp_path / "warehouse"))


def test_each_log_has_a_directory_of_its_own(store: ObjectStore) -> None:
    old, new = TableFiles(store, NAME, OLD), TableFiles(store, NAME, NEW)
    state = _state(9)
    old.write_keyframe(keyframe.build(state, log_id=OLD), 8)
    assert old.base == f"ns/t/_catalog/logs/{OLD}"
    assert old.newest_valid_keyframe() is not None
    assert new.newest_valid_keyframe() is None and new.keyframe_versions() == []
    assert new.latest() is None and new.archives() == []
    assert TableFiles(store, NAME).newest_valid_keyframe() is None  # nor the flat layout


def test_a_frame_or_archive_of_another_log_is_refused(store: ObjectStore) -> None:
    """Copied into a log's directory (by hand, by a tool): refused like a damaged object."""
    new = TableFiles(store, NAME, NEW)
    state = _state(3)
    frame = keyframe.to_parquet(keyframe.build(state, log_id=OLD))
    store.put(new.keyframe_path(2), frame)
    with pytest.raises(CorruptKeyFrame, match="belongs to log"):
        new.read_keyframe(2)
    assert new.newest_valid_keyframe() is None
    with pytest.raises(ValueError, match="of log"):
        new.write_keyframe(keyframe.build(state, log_id=OLD), 2)
    TableFiles(store, NAME, OLD).write_archive(0, 2, [ArchivedCommit(0, 1, "c", "APPEND", b"v")])
    store.put(
        new.archive_path(0, 2), store.get(f"ns/t/_catalog/logs/{OLD}/commits/{0:020d}-{2:020d}.parquet")
    )
    with pytest.raises(CorruptArchive, match="belongs to log"):
        list(new.archives_between(-1, 2))


def test_frames_and_archives_record_their_log(store: ObjectStore) -> None:
    state = _state(2)
    bound = keyframe.verify(keyframe.build(state, log_id=NEW))
    assert bound.log_id == NEW and bound.meta["log_id"] == NEW
    assert keyframe.from_ipc(keyframe.to_ipc(bound.table), verified_bytes=True).log_id == NEW
    unbound = keyframe.verify(keyframe.build(state))
    assert unbound.log_id is None and "log_id" not in unbound.meta  # byte-identical to before
    files = TableFiles(store, NAME, NEW)
    path = files.write_archive(0, 1, [ArchivedCommit(0, 1, "c", "APPEND", b"v")])
    assert decode_archive(store.get(path)).log_id == NEW
    assert decode_heads(store.get(path)).log_id == NEW


def _claim(files: TableFiles, log_id: str | None) -> None:
    files.write_claim(FlatClaim(log_id, "the test"))


def test_the_flat_layout_is_read_only_by_the_log_its_claim_names(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Objects from before the binding: unclaimed, nobody bound reads them; claimed, only the
    named log does; a claim that names none (found foreign) keeps everyone out."""
    flat = TableFiles(store, NAME)
    flat.write_keyframe(keyframe.build(_state(4)), 3)
    assert TableFiles(store, NAME, OLD).newest_valid_keyframe() is None  # unclaimed: not read
    _claim(flat, OLD)
    own = TableFiles(store, NAME, OLD)
    assert own.base == "ns/t/_catalog" and own.newest_valid_keyframe() is not None
    assert TableFiles(store, NAME, NEW).base == f"ns/t/_catalog/logs/{NEW}"
    _claim(flat, None)
    assert TableFiles(store, NAME, OLD).base == f"ns/t/_catalog/logs/{OLD}"


def test_a_handle_reads_an_absent_claim_again_and_a_present_one_never(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(table_files_module.time, "monotonic", lambda: clock[0])
    files = TableFiles(store, NAME, OLD)
    assert files.base.endswith(f"logs/{OLD}")
    _claim(TableFiles(store, NAME), OLD)  # a materializer adopts the flat layout meanwhile
    assert files.base.endswith(f"logs/{OLD}")  # trusted for a while
    clock[0] += table_files_module.CLAIM_RECHECK_S
    assert files.base == "ns/t/_catalog"
    store.delete(files.claim_path)
    clock[0] += 10 * table_files_module.CLAIM_RECHECK_S
    assert files.base == "ns/t/_catalog"  # a claim, once read, stands (it is never rewritten)


def test_a_damaged_claim_counts_as_none(store: ObjectStore) -> None:
    files = TableFiles(store, NAME, OLD)
    store.put(files.claim_path, json.dumps({"log_id": OLD, "reason": "x", "checksum": "0"}).encode())
    assert files.read_claim() is None
    assert files.base.endswith(f"logs/{OLD}")


# ---------------------------------------------------------------------- Redis


@pytest.fixture
def redis_store(config: Config) -> Iterator[RedisStore]:
    s = RedisStore.from_config(config)
    yield s
    s.close()


@pytest.fixture
def table(redis_store: RedisStore, table_name: str) -> Iterator[str]:
    yield table_name
    redis_store.client.delete(
        keys.head_key(table_name), keys.deltas_key(table_name), keys.keyframe_key(table_name)
    )


def _head(offset: int, log_id: str | None, keyframe_version: int = -1) -> Head:
    rows = 10 * (offset + 1)
    timestamp = 1_700_000_000_000 + offset
    return Head(
        offset, f"c{offset}", timestamp, offset + 1, 100 * rows, rows, keyframe_version, offset, log_id
    )


def _old_table_in_redis(store: RedisStore, table: str, log_id: str | None) -> None:
    """What a materializer of the table that had this name left: head at 8, key frame at 6, deltas."""
    records = _records(9)
    for record in records:
        prev, value = record.offset - 1, record.value
        assert value is not None
        store.publish_commit(table, _head(record.offset, log_id), prev_version=prev, value=value, event=None)
    frame = keyframe.build(_state(7, records), log_id=log_id)
    store.put_keyframe(table, 6, keyframe.to_ipc(frame), trim=True, log_id=log_id)


@pytest.mark.redis
@pytest.mark.parametrize("old_log", [OLD, None], ids=["another-log", "before-the-binding"])
def test_a_new_logs_head_replaces_the_old_logs_larger_one(
    redis_store: RedisStore, table: str, old_log: str | None
) -> None:
    """Before the binding the head's compare-and-set on offset kept a re-created table's head
    behind the old table's offset 8 for good, and its key frame behind version 6."""
    _old_table_in_redis(redis_store, table, old_log)
    assert redis_store.publish_commit(table, _head(0, NEW), prev_version=-1, value=b"new", event=None)
    head = redis_store.head(table)
    assert head is not None and (head.offset, head.log_id) == (0, NEW)
    assert redis_store.keyframe(table) is None  # the old frame is gone with it
    assert [e.value for e in redis_store.deltas(table, -1)] == [b"new"]
    frame = keyframe.build(_state(1), log_id=NEW)
    assert redis_store.put_keyframe(table, 0, keyframe.to_ipc(frame), trim=True, log_id=NEW)
    assert redis_store.keyframe_version(table, NEW) == 0
    loaded = redis_store.load(table)
    assert loaded.complete and loaded.belongs_to(NEW)


@pytest.mark.redis
def test_a_new_logs_key_frame_replaces_the_old_logs_newer_one(redis_store: RedisStore, table: str) -> None:
    _old_table_in_redis(redis_store, table, OLD)
    frame = keyframe.build(_state(1), log_id=NEW)
    assert redis_store.put_keyframe(table, 0, keyframe.to_ipc(frame), trim=True, log_id=NEW)
    assert redis_store.head(table) is None  # the old head went with the old frame
    assert redis_store.deltas(table, -1) == []
    assert redis_store.keyframe_version(table, NEW) == 0


@pytest.mark.redis
def test_the_same_log_keeps_its_compare_and_set(redis_store: RedisStore, table: str) -> None:
    _old_table_in_redis(redis_store, table, NEW)
    assert not redis_store.advance_head(table, _head(3, NEW))  # never back, within one log
    frame = keyframe.build(_state(1), log_id=NEW)
    assert not redis_store.put_keyframe(table, 0, keyframe.to_ipc(frame), log_id=NEW)
    assert redis_store.keyframe_version(table, NEW) == 6
    head = redis_store.head(table)
    assert head is not None and head.offset == 8


@pytest.mark.redis
def test_readers_never_take_another_logs_values(redis_store: RedisStore, table: str) -> None:
    _old_table_in_redis(redis_store, table, OLD)
    redis_store.advance_head(table, _head(8, OLD, keyframe_version=6))
    assert lookup.from_redis(redis_store, table, 7, log_id=OLD) is not None  # its own log reads it
    assert redis_store.keyframe_version(table, NEW) is None  # the probe: one HMGET says "not ours"
    for bound in (None, 5, 7, 8):
        assert lookup.from_redis(redis_store, table, bound, log_id=NEW) is None
        assert lookup.from_redis(redis_store, table, bound, probe=False, log_id=NEW) is None


# ---------------------------------------------------------------------- whose the flat layout is


class _Log:
    """A table's log as Kafka holds it now: the offsets from ``low``, some compacted away."""

    def __init__(self, records: list[LogRecord], low: int = 0, high: int | None = None) -> None:
        self._records = {r.offset: r for r in records if r.offset >= low}
        self._low = low
        self._high = (records[-1].offset + 1) if high is None else high

    def __enter__(self) -> _Log:
        return self

    def __exit__(self, *_: object) -> None:
        return None

    def watermarks(self) -> tuple[int, int]:
        return self._low, self._high

    def read(self, start: int, end: int) -> Iterator[LogRecord]:
        later = sorted(o for o in self._records if start <= o < self._high)
        if later and later[0] < end:
            yield self._records[later[0]]


def _flat_history(store: ObjectStore, records: list[LogRecord], frame_at: int) -> TableFiles:
    """Objects from before the binding: an archive of ``records`` and a key frame at ``frame_at``."""
    flat = TableFiles(store, NAME)
    commits = []
    for record in records:
        commit = codec.decode_commit(record.value or b"")
        assert record.value is not None
        commits.append(
            ArchivedCommit(record.offset, record.timestamp_ms, commit.commit_id, "APPEND", record.value)
        )
    flat.write_archive(0, records[-1].offset, commits)
    flat.write_keyframe(keyframe.build(_state(frame_at + 1, records)), frame_at)
    return flat


def _settle(
    store: ObjectStore, log: _Log, monkeypatch: pytest.MonkeyPatch, log_id: str = NEW
) -> FlatClaim | None:
    monkeypatch.setattr(ownership, "LogReader", lambda config, name: log)
    return ownership.settle_flat_layout(Config.load(env={}), TableFiles(store, NAME, log_id))


def test_flat_objects_of_the_same_log_are_adopted(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _records(6)
    _flat_history(store, records[:4], 3)
    claim = _settle(store, _Log(records), monkeypatch)
    assert claim is not None and claim.log_id == NEW and "offset 3" in claim.reason
    assert TableFiles(store, NAME, NEW).base == "ns/t/_catalog"
    assert TableFiles(store, NAME).read_claim() == claim  # written, for every later handle


def test_flat_objects_of_another_log_are_refused(store: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = _records(6), _records(6)
    _flat_history(store, old[:4], 3)
    claim = _settle(store, _Log(new), monkeypatch)  # same offsets, other commits
    assert claim is not None and claim.log_id is None
    assert TableFiles(store, NAME, NEW).base == f"ns/t/_catalog/logs/{NEW}"


def test_flat_objects_beyond_the_logs_end_are_another_logs(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    _flat_history(store, _records(9), 8)
    claim = _settle(store, _Log(_records(2)), monkeypatch)
    assert claim is not None and claim.log_id is None and "ends at offset 1" in claim.reason


def test_a_compacted_frame_record_falls_back_to_the_archived_ones(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _records(6)
    _flat_history(store, records[:4], 3)
    held = [r for r in records if r.offset != 3]  # the frame's record was compacted away
    claim = _settle(store, _Log(held), monkeypatch)
    assert claim is not None and claim.log_id == NEW and "archived" in claim.reason


def test_a_log_pruned_right_after_its_objects_is_the_same_log(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    records = _records(8)
    _flat_history(store, records[:4], 3)
    claim = _settle(store, _Log(records, low=4), monkeypatch)
    assert claim is not None and claim.log_id == NEW


def test_flat_objects_nothing_can_be_compared_with_stay_unread(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    records = _records(9)
    _flat_history(store, records[:4], 3)
    assert _settle(store, _Log(records, low=6), monkeypatch) is None  # a gap: 4 and 5 are nowhere
    assert TableFiles(store, NAME).read_claim() is None
    assert TableFiles(store, NAME, NEW).base == f"ns/t/_catalog/logs/{NEW}"
    assert any("cannot be checked against the log" in r.getMessage() for r in caplog.records)


def test_an_unbound_log_or_an_empty_flat_layout_decides_nothing(
    store: ObjectStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ownership, "LogReader", lambda config, name: pytest.fail("no log to read"))
    assert ownership.settle_flat_layout(Config.load(env={}), TableFiles(store, NAME, NEW)) is None
    _flat_history(store, _records(2), 1)
    assert ownership.settle_flat_layout(Config.load(env={}), TableFiles(store, NAME)) is None


_OWNERS = {"absent": None, "mine": NEW, "other": OLD, "unbound": ""}


def _plant(store: RedisStore, table: str, head: str, frame: str) -> None:
    """A head and a key frame of the given owners (``unbound``: written before the binding), and a
    stream entry of the head's owner."""
    client = store.client
    if head != "absent":
        fields = {"offset": 5, "version": 5, "commit_id": "c", "timestamp_ms": 1, "live_count": 1}
        fields |= {"live_bytes": 1, "live_rows": 1, "keyframe_version": 3}
        if head != "unbound":
            fields["log_id"] = _OWNERS[head]
        client.hset(keys.head_key(table), mapping=fields)
        client.xadd(
            keys.deltas_key(table), {"version": 5, "prev_version": 4, "ts": 1, "value": head}, id="6-0"
        )
    if frame != "absent":
        fields = {"version": 3, "sha256": "crc32:00000000", "data": b"x"}
        if frame != "unbound":
            fields["log_id"] = _OWNERS[frame]
        client.hset(keys.keyframe_key(table), mapping=fields)


@pytest.mark.redis
@pytest.mark.parametrize("write", ["record", "keyframe"])
@pytest.mark.parametrize("frame", list(_OWNERS))
@pytest.mark.parametrize("head", list(_OWNERS))
def test_after_a_write_for_a_log_redis_holds_nothing_of_another(
    redis_store: RedisStore, table: str, head: str, frame: str, write: str
) -> None:
    """Every mix of owners a head and a key frame can have: after one write for log NEW, what is
    left is NEW's (head, key frame, stream); what was NEW's alone is kept (its compare-and-sets)."""
    _plant(redis_store, table, head, frame)
    if write == "record":
        redis_store.advance_head(table, _head(1, NEW))
    else:
        ipc = keyframe.to_ipc(keyframe.build(_state(2), log_id=NEW))
        redis_store.put_keyframe(table, 1, ipc, log_id=NEW)
    client = redis_store.client
    owners = {client.hget(keys.head_key(table), "log_id"), client.hget(keys.keyframe_key(table), "log_id")}
    assert owners <= {None, NEW.encode()}
    entries = [fields[b"value"] for _, fields in client.xrange(keys.deltas_key(table))]
    assert set(entries) <= {b"mine"}
    ours = {head, frame} <= {"mine", "absent"} and {head, frame} != {"absent"}
    if ours:  # the same log: nothing was cleared, and nothing moved back
        assert client.hget(keys.head_key(table), "offset") == (
            b"5" if head == "mine" else b"1" if write == "record" else None
        )
        if frame == "mine":
            assert client.hget(keys.keyframe_key(table), "version") == b"3"
