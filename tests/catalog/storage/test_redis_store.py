"""RedisStore against a real Redis: the monotone writes the materializer relies on, and the
reads (with gap and corruption detection) that readers rely on."""

from __future__ import annotations

import random
import threading
import time
import zlib
from collections.abc import Iterator
from unittest import mock

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from segcat.catalog.config import Config
from segcat.catalog.errors import CorruptKeyFrame, InvalidTableName, ServiceUnavailable
from segcat.catalog.protocol.version_change import VersionChange
from segcat.catalog.storage.redis import (
    Head,
    RecordBatch,
    RedisStore,
    StreamEntry,
    chain_is_complete,
    keys,
)
from segcat.catalog.storage.redis.store import keyframe_digest
from segcat.local_stack.private import free_port
from tests.keyframe_support import sha256_digest

pytestmark = pytest.mark.redis


@pytest.fixture
def store(config: Config) -> Iterator[RedisStore]:
    s = RedisStore.from_config(config)
    yield s
    s.close()


@pytest.fixture
def table(store: RedisStore, table_name: str) -> Iterator[str]:
    """A fresh table name whose keys are deleted afterwards (the server is shared)."""
    yield table_name
    store.client.delete(keys.head_key(table_name), keys.deltas_key(table_name), keys.keyframe_key(table_name))
    store.client.srem(keys.TABLES_KEY, table_name)


def head_at(offset: int, version: int | None = None, *, keyframe_version: int = -1) -> Head:
    v = offset if version is None else version
    return Head(
        version=v,
        commit_id=f"c{v}",
        timestamp_ms=1_700_000_000_000 + v,
        live_count=v,
        live_bytes=10 * v,
        live_rows=100 * v,
        keyframe_version=keyframe_version,
        offset=offset,
    )


def event_for(table: str, version: int, prev: int) -> VersionChange:
    return VersionChange(
        table=table,
        version=version,
        prev_version=prev,
        timestamp_ms=1_700_000_000_000 + version,
        commit_id=f"c{version}",
        operation="APPEND",
        added=(f"seg-{version}",),
        dropped=(),
        rows_delta=100,
        bytes_delta=10,
    )


def value_for(version: int) -> bytes:
    return b"\xc3\x01" + version.to_bytes(8, "little") + b"\x00body\xff"


def publish(store: RedisStore, table: str, version: int, prev: int, timestamp_ms: int | None = None) -> bool:
    """What the materializer writes for one accepted commit (head, stream entry; no event)."""
    head = head_at(version)
    if timestamp_ms is not None:
        head = Head(version, head.commit_id, timestamp_ms, version, 10 * version, 100 * version, -1, version)
    return store.publish_commit(table, head, prev_version=prev, value=value_for(version), event=None)


# ----------------------------------------------------------------------------- head


def test_head_cas_never_moves_back(store: RedisStore, table: str) -> None:
    assert store.head(table) is None
    assert store.advance_head(table, head_at(10))
    assert not store.advance_head(table, head_at(7))
    assert not store.advance_head(table, head_at(10))  # equal is not newer
    assert store.head(table) == head_at(10)
    # A rejected commit moves the offset past the accepted version.
    assert store.advance_head(table, head_at(12, version=10))
    got = store.head(table)
    assert got is not None and (got.version, got.offset) == (10, 12)


def test_head_cas_concurrent_writers_end_at_max(store: RedisStore, table: str) -> None:
    offsets = list(range(2_000))
    rng = random.Random(7)
    lanes = [offsets[0::2], offsets[1::2]]
    for lane in lanes:
        rng.shuffle(lane)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def run(lane: list[int]) -> None:
        try:
            barrier.wait()
            for off in lane:
                store.advance_head(table, head_at(off))
        except BaseException as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(lane,)) for lane in lanes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    # Every field comes from the same (max) write: the CAS is one atomic script.
    assert store.head(table) == head_at(1_999)


def test_head_keyframe_version_never_regresses(store: RedisStore, table: str) -> None:
    assert store.advance_head(table, head_at(5))
    assert store.put_keyframe(table, 5, b"frame")
    head = store.head(table)
    assert head is not None and head.keyframe_version == 5
    # A materializer that did not see the key frame yet still reports the older one.
    assert store.advance_head(table, head_at(6, keyframe_version=-1))
    head = store.head(table)
    assert head is not None and (head.offset, head.keyframe_version) == (6, 5)


def test_head_rejects_offset_below_version() -> None:
    with pytest.raises(ValueError):
        head_at(3, version=4)


# ----------------------------------------------------------------------------- deltas


def test_deltas_idempotent_and_ordered(store: RedisStore, table: str) -> None:
    chain = [(0, -1), (3, 0), (4, 3), (9, 4)]
    for version, prev in chain:
        assert publish(store, table, version, prev, 1_000 + version)
    assert not publish(store, table, 4, 3, 1_004)  # same version again: the head does not move
    assert not publish(store, table, 2, 0, 1_002)  # older than the head
    got = store.deltas(table, after_version=-1)
    assert got == [StreamEntry(v, p, 1_000 + v, value_for(v)) for v, p in chain]
    assert [d.version for d in store.deltas(table, after_version=3)] == [4, 9]
    assert [d.version for d in store.deltas(table, after_version=0, upto=4)] == [3, 4]
    assert [d.version for d in store.deltas(table, after_version=1, upto=8)] == [3, 4]
    assert store.deltas(table, after_version=9) == []
    assert store.deltas(table, after_version=4, upto=4) == []
    with pytest.raises(ValueError):
        publish(store, table, 10, 10)


def test_chain_is_complete() -> None:
    def d(version: int, prev: int) -> StreamEntry:
        return StreamEntry(version, prev, 0, b"")

    assert chain_is_complete(-1, [])
    assert chain_is_complete(-1, [d(0, -1), d(2, 0), d(5, 2)])
    assert chain_is_complete(-1, [d(0, -1), d(2, 0), d(5, 2)], end_version=5)
    assert not chain_is_complete(-1, [d(0, -1), d(2, 0)], end_version=5)  # head is further
    assert not chain_is_complete(-1, [d(0, -1), d(5, 3)])  # version 3 is missing
    assert not chain_is_complete(2, [d(7, 5)])  # version 5 is missing after the key frame
    # A key frame at a non-accepted offset (4, state of version 2) continues with 7 <- 2.
    assert chain_is_complete(4, [d(7, 2)], end_version=7)
    assert not chain_is_complete(4, [d(4, 2)])  # not after the start
    assert chain_is_complete(5, [], end_version=5)
    assert not chain_is_complete(5, [], end_version=6)


def test_gap_detected_from_redis(store: RedisStore, table: str) -> None:
    publish(store, table, 0, -1)
    publish(store, table, 4, 2)  # version 2 never arrived
    assert not chain_is_complete(-1, store.deltas(table, after_version=-1))
    assert chain_is_complete(2, store.deltas(table, after_version=2))


# ----------------------------------------------------------------------------- publish_commit / load


def test_publish_commit_is_atomic_and_replay_safe(store: RedisStore, table: str) -> None:
    prev = -1
    for version in (0, 2, 5):
        moved = store.publish_commit(
            table,
            head_at(version),
            prev_version=prev,
            value=value_for(version),
            event=event_for(table, version, prev),
        )
        assert moved
        prev = version
    # A second materializer replaying an older commit changes nothing.
    assert not store.publish_commit(
        table, head_at(2), prev_version=0, value=value_for(2), event=event_for(table, 2, 0)
    )
    state = store.load(table)
    assert state.head == head_at(5)
    assert state.keyframe is None and state.keyframe_version == -1
    assert [(d.version, d.prev_version) for d in state.deltas] == [(0, -1), (2, 0), (5, 2)]
    assert state.complete


def test_a_record_batch_is_one_round_trip_and_survives_a_script_flush(store: RedisStore, table: str) -> None:
    """A batch of records is one pipeline of EVALSHA (no SCRIPT EXISTS before it: that was a
    second round trip per batch), and a server that lost the script gets it loaded again."""
    sent: list[str] = []
    real = redis.connection.Connection.send_packed_command

    def counting(self: redis.connection.Connection, command: object, check_health: bool = True) -> None:
        if b"EVALSHA" in repr(command).encode() or b"SCRIPT" in repr(command).encode():
            sent.append(repr(command)[:60])
        real(self, command, check_health)

    prev = -1
    for round_, versions in enumerate(((0, 1), (2, 4), (5, 6))):  # the first warms the connection up
        if round_ == 2:
            store.client.script_flush()  # as a restarted or flushed server has forgotten it
        batch = RecordBatch(store)
        for version in versions:
            batch.publish_commit(
                table,
                head_at(version),
                prev_version=prev,
                value=value_for(version),
                event=event_for(table, version, prev),
            )
            prev = version
        sent.clear()
        with mock.patch.object(redis.connection.Connection, "send_packed_command", counting):
            batch.flush()
        if round_:
            assert len(sent) == (1 if round_ == 1 else 3), sent  # after the flush: EVALSHA, LOAD, EVALSHA
    state = store.load(table)
    assert state.head == head_at(6)
    assert [d.version for d in state.deltas] == [0, 1, 2, 4, 5, 6]


def test_load_after_keyframe_with_trim(store: RedisStore, table: str) -> None:
    prev = -1
    for version in range(6):
        store.publish_commit(
            table,
            head_at(version),
            prev_version=prev,
            value=value_for(version),
            event=event_for(table, version, prev),
        )
        prev = version
    assert store.put_keyframe(table, 3, b"frame-3", trim=True)
    assert [d.version for d in store.deltas(table, after_version=-1)] == [4, 5]
    state = store.load(table)
    assert (state.keyframe_version, state.keyframe) == (3, b"frame-3")
    assert [d.version for d in state.deltas] == [4, 5]
    assert state.complete and state.head is not None and state.head.keyframe_version == 3
    # Entries lost beyond the key frame (an eviction, say) leave a gap the reader sees.
    store.client.xtrim(keys.deltas_key(table), minid=keys.stream_id(5), approximate=False)
    assert not store.load(table).complete


def test_a_record_that_changed_nothing_moves_the_offset_only(store: RedisStore, table: str) -> None:
    store.publish_commit(
        table, head_at(3), prev_version=-1, value=value_for(3), event=event_for(table, 3, -1)
    )
    assert store.advance_head(table, head_at(4, version=3))  # a REJECTED record at offset 4
    head = store.head(table)
    assert head is not None and (head.version, head.offset) == (3, 4)
    assert [d.version for d in store.deltas(table, after_version=-1)] == [3]


# ----------------------------------------------------------------------------- key frames


def test_keyframe_cas_and_checksum(store: RedisStore, table: str) -> None:
    assert store.keyframe(table) is None
    frame = bytes(range(256)) * 100
    assert store.put_keyframe(table, 10, frame)
    assert not store.put_keyframe(table, 5, b"older")
    assert not store.put_keyframe(table, 10, b"same version")
    assert store.keyframe(table) == (10, frame)
    assert store.put_keyframe(table, 11, frame + b"!")
    assert store.keyframe(table) == (11, frame + b"!")

    assert store.client.hget(keys.keyframe_key(table), "sha256").startswith(b"crc32:")
    store.client.hset(keys.keyframe_key(table), "data", b"tampered" + frame)
    with pytest.raises(CorruptKeyFrame, match="checksum"):
        store.keyframe(table)
    with pytest.raises(CorruptKeyFrame):
        store.load(table)
    store.client.hdel(keys.keyframe_key(table), "sha256")
    with pytest.raises(CorruptKeyFrame, match="incomplete"):
        store.keyframe(table)


def test_a_format1_value_with_its_sha256_still_verifies(store: RedisStore, table: str) -> None:
    """Values written before Redis key-frame format 2 carry a SHA-256: still read, still checked."""
    frame = bytes(range(256)) * 40
    store.client.hset(
        keys.keyframe_key(table), mapping={"version": 7, "sha256": sha256_digest(frame), "data": frame}
    )
    assert store.keyframe(table) == (7, frame)
    store.client.hset(keys.keyframe_key(table), "data", frame[:-1] + bytes([frame[-1] ^ 1]))
    with pytest.raises(CorruptKeyFrame, match="checksum"):
        store.keyframe(table)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_torn_or_flipped_bytes_fail_the_crc(store: RedisStore, table: str, damage: str) -> None:
    frame = random.Random(3).randbytes(50_000)
    assert store.put_keyframe(table, 3, frame)
    rng = random.Random(damage)
    for _ in range(50):
        at = rng.randrange(len(frame))
        bad = (
            frame[:at]
            if damage == "truncate"
            else frame[:at] + bytes([frame[at] ^ (1 << rng.randrange(8))]) + frame[at + 1 :]
        )
        store.client.hset(keys.keyframe_key(table), "data", bad)
        with pytest.raises(CorruptKeyFrame):
            store.keyframe(table)


# ----------------------------------------------------------------------------- pub/sub


def test_pubsub_delivers_on_both_channels_in_order(store: RedisStore, table: str) -> None:
    with store.subscribe(table) as per_table, store.subscribe(None) as everything:
        prev = -1
        versions = list(range(0, 40, 3))
        for version in versions:
            store.publish_commit(
                table,
                head_at(version),
                prev_version=prev,
                value=value_for(version),
                event=event_for(table, version, prev),
            )
            prev = version
        # A replay publishes nothing.
        store.publish_commit(
            table, head_at(3), prev_version=0, value=value_for(3), event=event_for(table, 3, 0)
        )

        expected = versions
        got_table = [per_table.get(timeout=2.0) for _ in expected]
        assert [e.version if e else None for e in got_table] == expected
        assert got_table[1] == event_for(table, 3, 0)
        assert per_table.get(timeout=0.2) is None

        got_global: list[int] = []
        deadline = time.monotonic() + 5
        while len(got_global) < len(expected) and time.monotonic() < deadline:
            event = everything.get(timeout=0.5)
            if event is not None and event.table == table:  # other tests publish globally too
                got_global.append(event.version)
        assert got_global == expected


def test_version_change_json_round_trip() -> None:
    event = event_for("ns.t", 7, 3)
    assert VersionChange.from_json(event.to_json()) == event
    assert VersionChange.from_json(event.to_json().encode()) == event
    with pytest.raises(ValueError):
        VersionChange.from_json(b"{}")
    with pytest.raises(ValueError):
        VersionChange.from_json(b"not json")


# ----------------------------------------------------------------------------- registry, names, outages


def test_heads_of_many_tables_take_one_round_trip(store: RedisStore, table: str) -> None:
    """A page of the server's overview reads its heads in one pipelined round trip; a missing head
    is None and a malformed one is left out (that table is read from the log), not an error."""
    others = [f"{table}x{i}" for i in range(40)]
    broken = f"{table}broken"
    try:
        for i, name in enumerate(others[:30]):
            assert store.advance_head(name, head_at(i + 1))
        store.client.hset(keys.head_key(broken), mapping={"version": "x"})
        sent = 0
        real = redis.connection.Connection.send_packed_command

        def counting(self: redis.connection.Connection, command: object, check_health: bool = True) -> None:
            nonlocal sent
            sent += 1
            real(self, command, check_health)

        with mock.patch.object(redis.connection.Connection, "send_packed_command", counting):
            found = store.heads([*others, broken])
        assert sent == 1
        assert broken not in found
        assert [found[name] for name in others[:30]] == [head_at(i + 1) for i in range(30)]
        assert all(found[name] is None for name in others[30:])
        assert store.heads([]) == {}
    finally:
        store.client.delete(*(keys.head_key(name) for name in [*others, broken]))


def test_register_table(store: RedisStore, table: str) -> None:
    store.register_table(table)
    store.register_table(table)
    assert store.tables().count(table) == 1


def test_keys_share_one_hash_tag(store: RedisStore, table: str) -> None:
    tag = f"{{{table}}}"
    names = [keys.head_key(table), keys.deltas_key(table), keys.keyframe_key(table), keys.channel(table)]
    assert all(k.startswith(f"segcat:{tag}:") for k in names)
    assert keys.channel(None) == "segcat:versions"


@pytest.mark.parametrize("bad", ["no_namespace", "ns.t}x", "ns.t:*", "../etc.passwd", "ns.t.u", ""])
def test_bad_table_names_refused_before_io(store: RedisStore, bad: str) -> None:
    with pytest.raises(InvalidTableName):
        store.head(bad)
    with pytest.raises(InvalidTableName):
        store.advance_head(bad, head_at(1))


def test_service_unavailable_on_closed_port(config: Config) -> None:
    dead = RedisStore.from_config(
        config.with_services(config.bootstrap_servers, f"redis://127.0.0.1:{free_port()}/0")
    )
    calls = [
        lambda: dead.head("ns.t"),
        lambda: dead.advance_head("ns.t", head_at(1)),
        lambda: dead.publish_commit(
            "ns.t", head_at(1), prev_version=-1, value=b"", event=event_for("ns.t", 1, -1)
        ),
        lambda: dead.deltas("ns.t", -1),
        lambda: dead.keyframe("ns.t"),
        lambda: dead.put_keyframe("ns.t", 1, b""),
        lambda: dead.load("ns.t"),
        lambda: dead.subscribe("ns.t"),
        lambda: dead.register_table("ns.t"),
        dead.tables,
    ]
    started = time.monotonic()
    for call in calls:
        with pytest.raises(ServiceUnavailable, match=r"127\.0\.0\.1"):
            call()
    assert time.monotonic() - started < 10, "a dead Redis must fail fast so readers can fall back"
    dead.close()


def test_publish_commit_without_event_is_quiet(store: RedisStore, table: str) -> None:
    with store.subscribe(table) as sub:
        assert store.publish_commit(table, head_at(0), prev_version=-1, value=value_for(0), event=None)
        assert sub.get(timeout=0.2) is None
    assert [d.version for d in store.deltas(table, after_version=-1)] == [0]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=70_000))
def test_keyframe_digest_is_zlibs_crc32(data: bytes) -> None:
    """Redis key-frame format 2 stores zlib's CRC-32 (``crc32:<8 hex>``): whichever library
    computes it (ISA-L), a value written by an older segcat still verifies, and the reverse."""
    assert keyframe_digest(data) == f"crc32:{zlib.crc32(data):08x}"


def test_keyframe_digest_of_a_big_frame_is_zlibs_crc32() -> None:
    data = random.Random(7).randbytes(9_000_001)  # long buffers take the library's SIMD path
    assert keyframe_digest(data) == f"crc32:{zlib.crc32(data):08x}"
    assert keyframe_digest(data[1:]) != keyframe_digest(data)
