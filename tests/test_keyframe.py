"""Key frames: lossless round trips and detection of every kind of damage."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from catalog import keyframe, rules
from catalog.errors import CorruptKeyFrame
from catalog.model import BloomFilter, ColumnStats, ColumnType, Commit, Operation, Segment
from catalog.state import TableState
from tests.factories import segment


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
        Commit(Commit.new_id(), "ns.t", Operation.DELETE, 1, "w", 0, tombstones=(rules.Tombstone("x = 1"),)),
        Commit(Commit.new_id(), "ns.t", Operation.SET_PROPERTIES, 2, "w", 0, table_properties={"k": "v"}),
        Commit(Commit.new_id(), "ns.t", Operation.SET_SCHEMA, 3, "w", 0, schema='{"a": 1}'),
    ]
    for offset, commit in enumerate(commits):
        assert rules.apply(state, offset * 2, 1_000 + offset, commit).accepted
    rules.apply(state, 11, 2_000, commits[0])  # a duplicate: counted, remembered
    return state


def test_parquet_and_ipc_round_trips_are_lossless() -> None:
    state = _state()
    table = keyframe.build(state)
    for data, load in (
        (keyframe.to_parquet(table), keyframe.from_parquet),
        (keyframe.to_ipc(table), keyframe.from_ipc),
    ):
        frame = load(data)
        assert frame.version == 11
        assert frame.state() == state
        assert frame.table.column("segment_id").to_pylist() == ["b", "c", "rich"]


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
        (keyframe.to_ipc(table), keyframe.from_ipc),
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
        keyframe.from_ipc(keyframe.to_ipc(tampered.replace_schema_metadata(table.schema.metadata)))
    with pytest.raises(CorruptKeyFrame, match="not a segcat key frame"):
        keyframe.from_ipc(keyframe.to_ipc(pa.table({"x": [1]})))
