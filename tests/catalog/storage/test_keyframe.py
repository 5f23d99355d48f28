"""Key frames: lossless round trips and detection of every kind of damage."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
import pytest

from segcat.catalog.errors import CorruptKeyFrame
from segcat.catalog.protocol import codec, rules
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.model import (
    BloomFilter,
    ColumnStats,
    ColumnType,
    Commit,
    Operation,
    Protocol,
    Segment,
    Tombstone,
)
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read.snapshot import Snapshot
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.frame_view import FrameView
from tests.factories import segment
from tests.keyframe_support import ipc_format1


def _state() -> TableState:
    state = TableState("ns.t")
    rich = Segment(
        "rich",
        "s3://bucket/abs.parquet",
        10,
        5,
        None,
        stats=(
            ColumnStats("d", ColumnType.DATE, dt.date(2020, 1, 1), dt.date(2020, 2, 1), 0),
            ColumnStats(
                "t",
                ColumnType.TIMESTAMP,
                dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
                dt.datetime(2021, 1, 1, tzinfo=dt.UTC),
                1,
            ),
            ColumnStats("b", ColumnType.BINARY, b"\x00", b"\xff", None),
            ColumnStats("id", ColumnType.FLOAT, -1.5, 2.5, 0),  # a type that differs from other segments
        ),
        bloom=BloomFilter("id", 3, b"\x01\x02"),
        schema='{"fields": []}',
    )
    commits = [
        Commit(
            Commit.new_id(),
            "ns.t",
            Operation.APPEND,
            -1,
            "w",
            0,
            adds=(segment("a"), segment("b", "p2"), rich),
        ),
        Commit(Commit.new_id(), "ns.t", Operation.COMPACT, 0, "w", 0, drops=("a",), adds=(segment("c"),)),
        Commit(Commit.new_id(), "ns.t", Operation.DELETE, 1, "w", 0, tombstones=(Tombstone("x = 1"),)),
        Commit(Commit.new_id(), "ns.t", Operation.SET_PROPERTIES, 2, "w", 0, table_properties={"k": "v"}),
        Commit(Commit.new_id(), "ns.t", Operation.SET_SCHEMA, 3, "w", 0, schema='{"a": 1}'),
    ]
    for offset, commit in enumerate(commits):
        assert rules.apply(state, offset * 2, 1_000 + offset, commit).accepted
    rules.apply(state, 11, 2_000, commits[0])  # a duplicate: counted, remembered
    return state


def test_parquet_and_format1_ipc_round_trips_are_lossless() -> None:
    state = _state()
    table = keyframe.build(state)
    for data, load in (
        (keyframe.to_parquet(table), keyframe.from_parquet),
        (ipc_format1(table), keyframe.from_ipc),
    ):
        frame = load(data)
        assert frame.version == 11
        assert frame.state() == state
        assert frame.table.column("segment_id").to_pylist() == ["b", "c", "rich"]


def test_the_redis_copy_is_lean_and_carries_what_readers_use() -> None:
    state = _state()
    table = keyframe.build(state)
    data = keyframe.to_ipc(table)
    assert len(data) < len(ipc_format1(table))
    frame = keyframe.from_ipc(data, verified_bytes=True)
    assert frame.lean and "segment_avro" not in frame.table.column_names
    assert frame.table.schema.metadata[keyframe.REDIS_FORMAT_KEY] == b"2"
    assert frame.table.replace_schema_metadata(None) == table.drop_columns(
        ["segment_avro"]
    ).replace_schema_metadata(None)
    assert frame.meta == keyframe.from_parquet(keyframe.to_parquet(table)).meta
    assert keyframe.light_state(frame) == keyframe.light_state(keyframe.verify(table))
    with pytest.raises(ValueError, match="lean"):
        frame.state()
    with pytest.raises(CorruptKeyFrame, match="verified"):
        keyframe.from_ipc(data)  # no content checksum of its own: only with the store's check


def test_an_unknown_redis_format_is_refused() -> None:
    table = keyframe.build(_state())
    lean = keyframe.from_ipc(keyframe.to_ipc(table), verified_bytes=True).table
    future = lean.replace_schema_metadata({**lean.schema.metadata, keyframe.REDIS_FORMAT_KEY: b"3"})
    with pytest.raises(CorruptKeyFrame, match="format"):
        keyframe.from_ipc(ipc_format1(future), verified_bytes=True)


def test_a_replay_from_a_key_frame_decides_like_a_replay_from_zero() -> None:
    state = _state()
    restored = keyframe.from_parquet(keyframe.to_parquet(keyframe.build(state))).state()
    retry = Commit(
        next(iter(state.recent_commits)), "ns.t", Operation.APPEND, -1, "w", 0, adds=(segment("zz"),)
    )
    late = Commit(Commit.new_id(), "ns.t", Operation.SET_SCHEMA, 5, "w", 0, schema='{"b": 2}')
    for commit in (retry, late):
        assert rules.judge(restored, 20, commit) == rules.judge(state, 20, commit)
    assert rules.judge(state, 20, retry).outcome is rules.Outcome.DUPLICATE
    assert rules.judge(state, 20, late).outcome is rules.Outcome.REJECTED


def test_damage_is_detected_or_harmless_never_silently_different() -> None:
    """Flip bytes all over the file: each load either fails loudly or yields the same content.

    (A flip inside Parquet metadata that no decoded value depends on is harmless.)
    """
    state = _state()
    data = keyframe.to_parquet(keyframe.build(state))
    detected = 0
    positions = range(0, len(data), max(1, len(data) // 400))
    for position in positions:
        flipped = bytearray(data)
        flipped[position] ^= 0x40
        try:
            frame = keyframe.from_parquet(bytes(flipped))
        except CorruptKeyFrame:
            detected += 1
            continue
        assert frame.state() == state, f"byte {position} changed the content undetected"
    assert detected > len(positions) * 0.5


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9, 0.999])
def test_truncated_key_frames_are_detected(keep: float) -> None:
    table = keyframe.build(_state())
    for data, load in (
        (keyframe.to_parquet(table), keyframe.from_parquet),
        (ipc_format1(table), keyframe.from_ipc),
    ):
        with pytest.raises(CorruptKeyFrame):
            load(data[: int(len(data) * keep)])


def test_tampered_content_with_valid_encoding_fails_the_checksum() -> None:
    table = keyframe.build(_state())
    column = table.column("segment_avro").to_pylist()
    column[0] = column[0][:-1] + bytes([column[0][-1] ^ 1])
    tampered = table.set_column(
        table.schema.get_field_index("segment_avro"), "segment_avro", pa.array(column)
    )
    with pytest.raises(CorruptKeyFrame, match="checksum"):
        keyframe.from_ipc(ipc_format1(tampered.replace_schema_metadata(table.schema.metadata)))
    with pytest.raises(CorruptKeyFrame, match="not a segcat key frame"):
        keyframe.from_ipc(ipc_format1(pa.table({"x": [1]})))


# ---------------------------------------------------------------------- older formats

FORMAT1 = Path(__file__).resolve().parents[2] / "data" / "keyframe-format1.parquet"
"""A key frame written by segcat before protocol versioning (format 1, segments in layout v2),
made with that code from the state in its metadata: a real older artifact, not a fake."""


def test_a_format_1_key_frame_still_loads_as_a_protocol_1_table() -> None:
    frame = keyframe.from_parquet(FORMAT1.read_bytes())
    assert frame.meta["format_version"] == 1
    state = frame.state()
    assert state.protocol == Protocol(1, ())
    assert state.column_types == {"x": (ColumnType.INT, -1), "d": (ColumnType.FLOAT, -1)}
    s1 = state.segments["s1"].segment
    assert s1.stats == (
        ColumnStats("x", ColumnType.INT, 1, 5, 0, nan_count=None),
        ColumnStats("d", ColumnType.FLOAT, 0.5, 2.5, 1, nan_count=None),
    )
    assert state.segments["s2"].segment.bloom == BloomFilter("x", 3, b"\x01\x02\x03\x04\x05\x06\x07\x08")
    assert state.paths == {"data/a/s1.parquet": ["s1"], "data/b/s2.parquet": ["s2"]}
    light = keyframe.light_state(frame)
    assert light.protocol == state.protocol and light.column_types == state.column_types
    # a reader's view from it applies new commits (in the current layout) next to old rows
    view = FrameView.from_keyframe(frame)
    assert view.layout != codec.current_fingerprint()
    stats = (ColumnStats("d", ColumnType.FLOAT, 1.0, 1.0, 0, 0),)
    added = Segment("s3", "data/s3.parquet", 1, 1, stats=stats)
    appended = Commit(Commit.new_id(), "ns.t", Operation.APPEND, 2, "w", 0, adds=(added,))
    later = view.apply([CommitDelta(5, 5, appended)])
    assert [s.segment_id for s in Snapshot(later, "/root").segment_list()] == ["s1", "s2", "s3"]
    assert later.rows.column("nans:d").to_pylist()[-1] == 0


def test_a_key_frame_keeps_protocol_and_column_types() -> None:
    state = _state()
    state.protocol = Protocol(2, ())
    loaded = keyframe.from_parquet(keyframe.to_parquet(keyframe.build(state))).state()
    assert loaded.protocol == Protocol(2, ())
    assert loaded.column_types == state.column_types
    assert loaded == state


# ---------------------------------------------------------------------- lean Parquet reads


def test_a_lean_read_is_the_frame_without_segment_avro() -> None:
    state = _state()
    full = keyframe.from_parquet(keyframe.to_parquet(keyframe.build(state)))
    lean = keyframe.from_parquet(keyframe.to_parquet(keyframe.build(state)), lean=True)
    assert lean.lean and not full.lean
    assert lean.meta == full.meta
    assert lean.table.equals(full.table.drop_columns(["segment_avro"]))
    assert keyframe.light_state(lean) == keyframe.light_state(full)
    assert FrameView.from_keyframe(lean, lean=True) == FrameView.from_keyframe(full, lean=True)


def test_a_lean_read_of_a_frame_without_a_metadata_checksum_reads_it_whole() -> None:
    """Frames written before ``segcat.meta_checksum`` (format 1 here) load lean all the same."""
    frame = keyframe.from_parquet(FORMAT1.read_bytes(), lean=True)
    whole = keyframe.from_parquet(FORMAT1.read_bytes())
    assert keyframe.META_CHECKSUM_KEY not in (whole.table.schema.metadata or {})
    assert frame.lean and frame.table.equals(whole.table.drop_columns(["segment_avro"]))


def test_a_lean_read_checks_the_metadata_and_the_pages_it_reads() -> None:
    table = keyframe.build(_state())
    metadata = dict(table.schema.metadata or {})
    changed = metadata[keyframe.META_KEY].replace(b'"version":', b'"version": ', 1)
    assert changed != metadata[keyframe.META_KEY]
    tampered = table.replace_schema_metadata({**metadata, keyframe.META_KEY: changed})
    with pytest.raises(CorruptKeyFrame, match="metadata checksum"):
        keyframe.from_parquet(keyframe.to_parquet(tampered), lean=True)
    renamed = table.rename_columns([*table.column_names[:-2], "max:other", "segment_avro"])
    with pytest.raises(CorruptKeyFrame, match="metadata checksum"):
        keyframe.from_parquet(keyframe.to_parquet(renamed.replace_schema_metadata(metadata)), lean=True)
    # flipped bytes: every lean load fails loudly or yields the same frame
    data = keyframe.to_parquet(table)
    want = keyframe.from_parquet(data, lean=True)
    detected = 0
    positions = range(0, len(data), max(1, len(data) // 400))
    for position in positions:
        flipped = bytearray(data)
        flipped[position] ^= 0x40
        try:
            frame = keyframe.from_parquet(bytes(flipped), lean=True)
        except CorruptKeyFrame:
            detected += 1
            continue
        assert frame.meta == want.meta and frame.table.equals(want.table), f"byte {position} undetected"
    assert detected > len(positions) * 0.3
