"""TableFiles: key frames, ``_latest`` and commit archives, on a directory and on a real S3 API (S3Proxy).

The states are real: a small log (with a rejected commit, so versions are not dense) is
folded through ``segcat.catalog.protocol.rules``, and every version is rebuilt from key frames + archives
alone and compared with the replay from offset 0.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from segcat.catalog.errors import ArchiveGap, CorruptArchive, CorruptKeyFrame
from segcat.catalog.protocol import codec, rules
from segcat.catalog.protocol.model import Commit, Operation, Tombstone
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.state import TableState
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.archive import (
    HEADS_CHECKSUM_KEY,
    ArchivedCommit,
    ArchivedRecord,
    CommitHead,
    decode_archive,
    decode_heads,
    encode_archive,
)
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.table_files import TableFiles
from tests.catalog.storage.test_objectstore import open_store
from tests.factories import segment
from tests.s3_server import s3_server

NAME = TableName("ns", "t")
KEYFRAMES = (3, 7, 11)
ARCHIVES = ((0, 3), (4, 7), (8, 11))


@dataclass(frozen=True)
class History:
    states: dict[int, TableState]
    """The state after every offset 0..11 (replayed from offset 0)."""
    accepted: list[ArchivedCommit]


def _commit(op: Operation, base: int, **fields: object) -> Commit:
    return Commit(Commit.new_id(), NAME.qualified, op, base, "writer-1", 0, **fields)  # type: ignore[arg-type]


def _build_history() -> History:
    log = [
        _commit(Operation.APPEND, -1, adds=(segment("a"), segment("b"))),
        _commit(Operation.APPEND, 0, adds=(segment("c", "2020-02"),)),
        _commit(Operation.COMPACT, 1, drops=("a", "b"), adds=(segment("ab"),)),
        _commit(Operation.COMPACT, 1, drops=("a",), adds=(segment("x"),)),  # REJECTED: a is gone
        _commit(Operation.APPEND, 3, adds=(segment("d", "p2"),)),
        _commit(Operation.DELETE, 4, tombstones=(Tombstone("id = 3"),)),
        _commit(Operation.SET_PROPERTIES, 5, table_properties={"owner": "etl"}),
        _commit(Operation.APPEND, 6, adds=(segment("e"),)),
        _commit(Operation.SET_SCHEMA, 7, schema='{"fields": ["id"]}'),
        _commit(Operation.COMPACT, 8, drops=("c", "d"), adds=(segment("cd"),)),
        _commit(Operation.APPEND, 9, adds=(segment("g", None),)),
        _commit(Operation.APPEND, 10, adds=(segment("h"),)),
    ]
    state = TableState(NAME.qualified)
    states: dict[int, TableState] = {}
    accepted: list[ArchivedCommit] = []
    for offset, commit in enumerate(log):
        timestamp = 1_700_000_000_000 + offset
        verdict = rules.apply(state, offset, timestamp, commit)
        assert verdict.accepted == (offset != 3), verdict
        if verdict.accepted:
            value = codec.encode_commit(commit)
            accepted.append(
                ArchivedCommit(offset, timestamp, commit.commit_id, commit.operation.value, value)
            )
        states[offset] = state.copy()
    return History(states, accepted)


HISTORY = _build_history()

__all__ = ["s3_server"]


def _in(low: int, high: int) -> list[ArchivedCommit]:
    return [c for c in HISTORY.accepted if low <= c.version <= high]


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    return open_store(request.param, request, tmp_path)


@pytest.fixture
def files(store: ObjectStore) -> TableFiles:
    return TableFiles(store, NAME)


def _write_keyframe(files: TableFiles, version: int) -> str:
    return files.write_keyframe(keyframe.build(HISTORY.states[version]), version)


def _damage(files: TableFiles, path: str, how: str) -> None:
    """Damage an object the way a disk or a bad upload would: on disk for a directory store."""
    store = files.store
    if how == "delete":
        store.delete(path)
        return
    data = bytearray(store.get(path))
    if how == "truncate":
        data = data[: len(data) // 2]
    elif how == "flip":
        for position in range(len(data) // 10, len(data) * 9 // 10, max(1, len(data) // 7)):
            data[position] ^= 0x5A
    elif how == "garbage":
        data = bytearray(b"not parquet at all")
    else:
        raise AssertionError(how)
    local_file = Path(store.root) / path
    if local_file.is_file():  # a directory store: damage the file in place, as a disk would
        with open(local_file, "r+b") as handle:
            handle.write(data)
            handle.truncate()
    else:
        store.put(path, bytes(data))


def _skips(caplog: pytest.LogCaptureFixture) -> list[tuple[str, int | None]]:
    return [
        (r.event, r.version)  # type: ignore[attr-defined]
        for r in caplog.records
        if r.name == "segcat.catalog.storage.table_files" and hasattr(r, "event")
    ]


# ---------------------------------------------------------------------------- key frames


def test_layout_and_round_trip(files: TableFiles) -> None:
    path = _write_keyframe(files, 7)
    assert path == "ns/t/_catalog/keyframes/00000000000000000007.parquet"
    assert files.store.list("ns/t/_catalog") == ["ns/t/_catalog/_latest", path]
    frame = files.read_keyframe(7)
    assert frame.version == 7
    assert frame.state() == HISTORY.states[7]
    latest = files.latest()
    assert latest is not None
    assert latest[:2] == (7, path)
    doc = json.loads(files.store.get(files.latest_path))
    assert doc["version"] == 7 and doc["path"] == path and doc["sha256"] == latest[2]


def test_latest_only_moves_forward_and_rewrites_are_harmless(files: TableFiles) -> None:
    assert files.latest() is None
    assert files.newest_valid_keyframe() is None
    for version in (3, 11, 7):  # a slow writer finishing an older key frame after a newer one
        _write_keyframe(files, version)
    assert files.keyframe_versions() == [3, 7, 11]
    latest = files.latest()
    assert latest is not None and latest[0] == 11
    before = files.store.get(files.latest_path)
    _write_keyframe(files, 3)
    _write_keyframe(files, 11)  # the same version twice: identical objects, pointer unchanged
    assert files.store.get(files.latest_path) == before
    frame = files.newest_valid_keyframe()
    assert frame is not None and frame.version == 11
    assert frame.state() == HISTORY.states[11]


def test_write_keyframe_refuses_a_mismatched_version(files: TableFiles) -> None:
    with pytest.raises(ValueError, match="holds version 7"):
        files.write_keyframe(keyframe.build(HISTORY.states[7]), 8)
    with pytest.raises(CorruptKeyFrame):
        files.write_keyframe(pa.table({"x": [1]}), 1)
    with pytest.raises(ValueError):
        files.keyframe_path(-1)
    assert files.store.list("ns") == []


@pytest.mark.parametrize("how", ["truncate", "flip", "garbage", "delete"])
def test_a_damaged_newest_key_frame_falls_back_to_the_older_one(
    files: TableFiles, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    for version in KEYFRAMES:
        _write_keyframe(files, version)
    _damage(files, files.keyframe_path(11), how)
    with caplog.at_level(logging.WARNING, logger="segcat.catalog.storage.table_files"):
        frame = files.newest_valid_keyframe()
    assert frame is not None and frame.version == 7
    assert frame.state() == HISTORY.states[7]
    events = _skips(caplog)
    assert ("keyframe_skipped", 11) in events or ("latest_mismatch", 11) in events
    if how != "delete":
        with pytest.raises(CorruptKeyFrame):
            files.read_keyframe(11)
    # a new key frame at the same version repairs it
    _write_keyframe(files, 11)
    repaired = files.newest_valid_keyframe()
    assert repaired is not None and repaired.version == 11


def test_at_most_bounds_the_version(files: TableFiles) -> None:
    for version in KEYFRAMES:
        _write_keyframe(files, version)
    found = {bound: files.newest_valid_keyframe(at_most=bound) for bound in (2, 3, 6, 7, 10, 11, 100)}
    assert {bound: (f.version if f else None) for bound, f in found.items()} == {
        2: None,
        3: 3,
        6: 3,
        7: 7,
        10: 7,
        11: 11,
        100: 11,
    }
    _damage(files, files.keyframe_path(7), "truncate")
    older = files.newest_valid_keyframe(at_most=10)
    assert older is not None and older.version == 3


def test_a_damaged_or_lying_latest_pointer_is_not_trusted(
    files: TableFiles, caplog: pytest.LogCaptureFixture
) -> None:
    for version in KEYFRAMES:
        _write_keyframe(files, version)
    files.store.put(files.latest_path, b'{"version": 11, "path": "ns/t/_catalog/keyf')  # torn JSON
    with caplog.at_level(logging.WARNING, logger="segcat.catalog.storage.table_files"):
        assert files.latest() is None
        frame = files.newest_valid_keyframe()
    assert frame is not None and frame.version == 11
    assert ("latest_unreadable", None) in _skips(caplog)
    # writing an older key frame must not point the unreadable pointer backwards ...
    _write_keyframe(files, 7)
    assert files.latest() is None
    # ... a newer (or the newest again) one repairs it
    _write_keyframe(files, 11)
    latest = files.latest()
    assert latest is not None and latest[0] == 11
    # a pointer edited to name another object (checksum no longer matches) is ignored
    doc = json.loads(files.store.get(files.latest_path))
    doc["version"] = 3
    files.store.put(files.latest_path, json.dumps(doc).encode())
    assert files.latest() is None


def test_an_object_holding_another_version_is_skipped(files: TableFiles) -> None:
    for version in (7, 11):
        _write_keyframe(files, version)
    files.store.put(files.keyframe_path(11), files.store.get(files.keyframe_path(7)))
    frame = files.newest_valid_keyframe()
    assert frame is not None and frame.version == 7
    with pytest.raises(CorruptKeyFrame, match="holds version 7"):
        files.read_keyframe(11)
    other = TableFiles(files.store, TableName("ns", "other"))
    other.store.put(other.keyframe_path(7), files.store.get(files.keyframe_path(7)))
    with pytest.raises(CorruptKeyFrame, match="belongs to table"):
        other.read_keyframe(7)
    assert other.newest_valid_keyframe() is None


# ---------------------------------------------------------------------------- archives (format)


def test_archive_round_trip_is_lossless() -> None:
    data = encode_archive(4, 7, _in(4, 7), table="ns.t")
    archive = decode_archive(data)
    assert (archive.from_version, archive.to_version, archive.table) == (4, 7, "ns.t")
    assert list(archive.commits) == _in(4, 7)
    assert [codec.decode_commit(c.value).commit_id for c in archive.commits] == [
        c.commit_id for c in _in(4, 7)
    ]
    empty = decode_archive(encode_archive(3, 3, []))  # a range of only rejected records still proves coverage
    assert (empty.from_version, empty.to_version, empty.commits, empty.table) == (3, 3, (), None)


@pytest.mark.parametrize(
    ("from_version", "to_version", "commits"),
    [
        (5, 7, _in(4, 7)),  # a commit before the range
        (4, 6, _in(4, 7)),  # a commit after the range
        (4, 7, list(reversed(_in(4, 7)))),
        (4, 7, _in(4, 7) + _in(7, 7)),
        (7, 4, []),
        (-1, 4, []),
    ],
)
def test_encode_archive_refuses_inconsistent_input(
    from_version: int, to_version: int, commits: list[ArchivedCommit]
) -> None:
    with pytest.raises(ValueError, match="cannot archive"):
        encode_archive(from_version, to_version, commits)


def test_archive_damage_is_detected_or_harmless_never_silently_different() -> None:
    data = encode_archive(0, 11, HISTORY.accepted, table="ns.t")
    expected = decode_archive(data)
    detected = 0
    positions = range(0, len(data), max(1, len(data) // 400))
    for position in positions:
        flipped = bytearray(data)
        flipped[position] ^= 0x40
        try:
            archive = decode_archive(bytes(flipped))
        except CorruptArchive:
            detected += 1
            continue
        assert archive == expected, f"byte {position} changed the content undetected"
    assert detected > len(positions) * 0.5
    for keep in (0.1, 0.5, 0.9, 0.999):
        with pytest.raises(CorruptArchive):
            decode_archive(data[: int(len(data) * keep)])


def test_archive_tampering_with_a_valid_encoding_fails_the_checksum() -> None:
    table = pq.read_table(pa.BufferReader(encode_archive(0, 3, _in(0, 3))))
    versions = table.column("version").to_pylist()
    versions[-1] += 1  # still inside the range and increasing: only the checksum can tell
    tampered = table.set_column(0, table.schema.field(0), pa.array(versions, pa.int64()))

    def write(t: pa.Table) -> bytes:
        sink = pa.BufferOutputStream()
        pq.write_table(t, sink)
        return bytes(sink.getvalue().to_pybytes())

    with pytest.raises(CorruptArchive, match="checksum"):
        decode_archive(write(tampered))
    with pytest.raises(CorruptArchive, match="not a segcat commit archive"):
        decode_archive(write(pa.table({"version": [1]})))


def _heads(commits: list[ArchivedCommit]) -> tuple[CommitHead, ...]:
    return tuple(CommitHead(c.version, c.timestamp_ms, c.commit_id, c.operation) for c in commits)


def test_archive_heads_are_the_commits_without_values_and_checked_alone() -> None:
    others = [ArchivedRecord(3, 9, b"k", b"junk", "REJECTED")]  # the one record not accepted
    data = encode_archive(0, 11, HISTORY.accepted, table="ns.t", others=others)
    heads = decode_heads(data)
    assert (heads.from_version, heads.to_version, heads.table) == (0, 11, "ns.t")
    assert heads.heads == _heads(HISTORY.accepted) and heads.commits == ()
    # damage: a heads read fails loudly or yields the same heads (value pages are never read)
    detected = 0
    positions = range(0, len(data), max(1, len(data) // 400))
    for position in positions:
        flipped = bytearray(data)
        flipped[position] ^= 0x40
        try:
            got = decode_heads(bytes(flipped))
        except CorruptArchive:
            detected += 1
            continue
        assert got == heads, f"byte {position} changed the heads undetected"
    assert detected > len(positions) * 0.3
    # an operation changed with a valid encoding: only the heads checksum can tell
    table = pq.read_table(pa.BufferReader(data))
    operations = table.column("operation").to_pylist()
    at = operations.index("APPEND")
    operations[at] = "COMPACT"
    tampered = table.set_column(
        table.schema.get_field_index("operation"), table.schema.field("operation"), pa.array(operations)
    )
    sink = pa.BufferOutputStream()
    pq.write_table(tampered, sink)
    with pytest.raises(CorruptArchive, match="checksum"):
        decode_heads(bytes(sink.getvalue().to_pybytes()))


def test_archive_heads_of_an_archive_without_a_heads_checksum_read_it_whole() -> None:
    data = encode_archive(4, 7, _in(4, 7), table="ns.t")
    table = pq.read_table(pa.BufferReader(data))
    metadata = dict(table.schema.metadata or {})
    del metadata[HEADS_CHECKSUM_KEY]  # as archives were written before it existed
    sink = pa.BufferOutputStream()
    pq.write_table(table.replace_schema_metadata(metadata), sink)
    older = bytes(sink.getvalue().to_pybytes())
    assert decode_archive(older).commits == tuple(_in(4, 7))
    assert decode_heads(older).heads == _heads(_in(4, 7))


# ---------------------------------------------------------------------------- archives (store)


def _write_archives(files: TableFiles, ranges: tuple[tuple[int, int], ...] = ARCHIVES) -> None:
    for low, high in ranges:
        files.write_archive(low, high, _in(low, high))


def test_archives_between_reads_across_archives_in_order(files: TableFiles) -> None:
    _write_archives(files)
    assert files.store.exists("ns/t/_catalog/commits/00000000000000000004-00000000000000000007.parquet")
    assert list(files.archives_between(-1, 11)) == HISTORY.accepted
    assert tuple(files.commit_heads_between(-1, 11)) == _heads(HISTORY.accepted)
    assert tuple(files.commit_heads_between(4, 9)) == _heads(_in(5, 9))
    assert list(files.archives_between(-1, None)) == HISTORY.accepted
    assert list(files.archives_between(2, 9)) == _in(3, 9)
    assert list(files.archives_between(5, 5)) == []
    assert list(files.archives_between(11, None)) == []
    assert list(files.archives_between(11, 11)) == []
    files.write_archive(4, 7, _in(4, 7))  # rewriting an archive is harmless
    assert list(files.archives_between(-1, None)) == HISTORY.accepted


def test_overlapping_archives_chain_without_duplicates(files: TableFiles) -> None:
    _write_archives(files, ((0, 3), (0, 7), (4, 7), (4, 11), (8, 11), (6, 9)))
    assert [ref.to_version for ref in files.archive_plan(-1, 11)] == [7, 11]
    assert list(files.archives_between(-1, 11)) == HISTORY.accepted
    assert list(files.archives_between(5, 10)) == _in(6, 10)


def test_a_gap_in_archive_coverage_is_reported_before_anything_is_yielded(files: TableFiles) -> None:
    _write_archives(files, ((0, 3), (8, 11)))
    assert list(files.archives_between(-1, 3)) == _in(0, 3)
    assert list(files.archives_between(7, 11)) == _in(8, 11)
    with pytest.raises(ArchiveGap) as gap:
        files.archives_between(-1, 11)
    assert (gap.value.covered_upto, gap.value.wanted_upto) == (3, 11)
    assert "next archive starts at 8" in str(gap.value)
    with pytest.raises(ArchiveGap):  # no bound: the archives go on after the gap
        files.archives_between(-1, None)
    with pytest.raises(ArchiveGap) as beyond:  # asked past the last archive
        files.archives_between(7, 20)
    assert beyond.value.covered_upto == 11
    with pytest.raises(ArchiveGap):
        TableFiles(files.store, TableName("ns", "empty")).archives_between(-1, 0)
    assert list(TableFiles(files.store, TableName("ns", "empty")).archives_between(-1, None)) == []


@pytest.mark.parametrize("how", ["truncate", "flip", "garbage", "delete"])
def test_a_damaged_archive_raises_a_typed_error(files: TableFiles, how: str) -> None:
    _write_archives(files)
    _damage(files, files.archive_path(4, 7), how)
    if how == "delete":
        with pytest.raises(ArchiveGap):
            files.archives_between(-1, 11)
        return
    commits = files.archives_between(-1, 11)
    received: list[ArchivedCommit] = []
    with pytest.raises(CorruptArchive):
        received.extend(commits)
    assert received == _in(0, 3)  # everything before the damage is right: resume from Kafka after it


def test_an_archive_under_the_wrong_name_or_table_is_refused(files: TableFiles) -> None:
    files.store.put(files.archive_path(0, 7), encode_archive(0, 3, _in(0, 3), table="ns.t"))
    with pytest.raises(CorruptArchive, match=r"holds the range 0\.\.3"):
        list(files.archives_between(-1, 7))
    files.store.put(files.archive_path(0, 7), encode_archive(0, 7, _in(0, 7), table="ns.other"))
    with pytest.raises(CorruptArchive, match="belongs to table"):
        list(files.archives_between(-1, 7))


# ---------------------------------------------------------------------------- together


def test_every_version_is_rebuilt_from_key_frames_and_archives_alone(files: TableFiles) -> None:
    """docs/PROTOCOL.md §6: key frames + commit archives rebuild every version, with no Kafka at all."""
    for version in KEYFRAMES:
        _write_keyframe(files, version)
    _write_archives(files)
    _damage(files, files.keyframe_path(7), "flip")  # and survive a damaged key frame on the way
    for version in range(12):
        frame = files.newest_valid_keyframe(at_most=version)
        state = frame.state() if frame else TableState(NAME.qualified)
        for archived in files.archives_between(state.version, version):
            commit = codec.decode_commit(archived.value)
            assert rules.apply(state, archived.version, archived.timestamp_ms, commit).accepted
        expected = HISTORY.states[version]
        assert state.segments == expected.segments, version
        assert state.fingerprint() == expected.fingerprint(), version
        assert state.last_accepted_version == expected.last_accepted_version
        assert state.recent_commits == expected.recent_commits
        # Counters of non-accepted records are not in the archives (only accepted commits are).
        assert replace(state, version=0, rejected=0) == replace(expected, version=0, rejected=0), version
