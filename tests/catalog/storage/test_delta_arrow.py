"""Record bytes straight into Arrow (``delta_arrow``, lean ``FrameView``) equal the exact path:
``codec.decode_commit`` → ``Segment`` objects → ``FrameView.apply`` / ``segments_table``."""

from __future__ import annotations

import dataclasses
import datetime as dt
import io
from collections.abc import Callable
from unittest import mock

import fastavro
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segcat.catalog.errors import DecodeError, UnsafeLocation
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.model import ColumnStats, ColumnType, Commit, Operation, Segment
from segcat.catalog.protocol.state import LiveSegment, TableState
from segcat.catalog.read.snapshot import Snapshot
from segcat.catalog.storage import add_columns, delta_arrow, frame_view, keyframe
from segcat.catalog.storage.delta_arrow import EncodedCommit
from segcat.catalog.storage.frame_view import FrameView
from segcat.catalog.storage.segments_arrow import segments_table
from tests.factories import segment
from tests.strategies import commits

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _encoded(batch: list[Commit], first: int = 0) -> list[EncodedCommit]:
    return [EncodedCommit(first + 2 * i, 1_000 + i, codec.encode_commit(c)) for i, c in enumerate(batch)]


def _exact(encoded: list[EncodedCommit]) -> list[CommitDelta]:
    return [CommitDelta(c.version, c.timestamp_ms, codec.decode_commit(c.value)) for c in encoded]


def _same_view(lean: FrameView, full: FrameView) -> None:
    expected = full.rows.drop_columns(["segment_avro"])
    assert lean.rows.schema == expected.schema
    assert lean.rows.equals(expected), "rows differ"
    for name in (
        "offset",
        "version",
        "timestamp_ms",
        "tombstones",
        "schema",
        "properties",
        "live_rows",
        "live_bytes",
        "protocol",
        "column_types",
    ):
        assert getattr(lean, name) == getattr(full, name), name


@SETTINGS
@given(st.lists(commits(), max_size=4), st.dictionaries(st.text(max_size=6), st.sampled_from(ColumnType)))
def test_rows_equal_segments_table(batch: list[Commit], column_types: dict[str, ColumnType]) -> None:
    encoded = _encoded(batch)
    decoded = [delta_arrow.decode(c) for c in encoded]
    for commit, exact in zip(decoded, _exact(encoded), strict=True):
        assert commit.delta.commit == dataclasses.replace(exact.commit, adds=())
        assert commit.delta.tombstones == exact.tombstones
        assert commit.delta.protocol == exact.protocol
    for commit in decoded:
        delta_arrow.note_column_types(commit.adds, column_types)
    pending = {sid: (ci, row) for ci, c in enumerate(decoded) for row, sid in enumerate(c.adds.ids)}
    live = {s.segment_id: LiveSegment(s, d.version) for d in _exact(encoded) for s in d.added}
    adds = [(c.adds, c.version) for c in decoded]
    want = segments_table(live.values(), column_types)
    selections: list[list[tuple[int, int]] | None] = [sorted(pending.values())]
    if len(pending) == sum(len(c.adds) for c in decoded):
        selections.append(None)  # every row: the fast path
    for selected in selections:
        got = delta_arrow.rows(adds, selected, column_types)
        assert got.schema == want.schema
        assert got.equals(want)


def test_the_hand_parser_knows_the_current_layout() -> None:
    assert add_columns.current_layout_parses()


@SETTINGS
@given(st.lists(commits(), min_size=1, max_size=3))
def test_the_hand_parser_equals_fastavro(batch: list[Commit]) -> None:
    for commit in batch:
        value = codec.encode_commit(commit)
        exact = codec.decode_commit(value)
        body = value[codec.HEADER_SIZE :]
        raw = fastavro.schemaless_reader(io.BytesIO(body), codec._schemas()[0].parsed, None)
        assert isinstance(raw, dict)
        parsed = delta_arrow.decode(EncodedCommit(0, 0, value)).adds
        assert dataclasses.replace(parsed, avro=[]) == add_columns.from_dicts(raw["adds"])
        assert len(add_columns.from_dicts(raw["adds"])) == len(exact.adds)
        # each segment's bytes as cut from the record are that segment in the segment schema
        assert parsed.avro == [keyframe.encode_segment(s) for s in exact.adds]
        cut = delta_arrow.segment_bytes(value)
        assert cut is not None and cut.avro == parsed.avro and cut.ids == parsed.ids


@SETTINGS
@given(st.lists(commits(), max_size=4), st.lists(commits(), max_size=4))
def test_a_full_view_cutting_segment_avro_from_records_equals_encoding_it(
    first: list[Commit], second: list[Commit]
) -> None:
    """The materializer's key frames: the same rows (``segment_avro`` included) whether each
    segment's Avro is cut from its record's bytes or encoded again from the ``Segment``."""
    cut = encoded_again = FrameView.from_state(TableState("ns.t"))
    with mock.patch.object(frame_view, "SLICE_FROM", 0):  # cut every commit, however small
        for batch, base in ((first, 0), (second, 100)):
            encoded = _encoded(batch, base)
            encoded_again = encoded_again.apply(_exact(encoded), offset=base + 50)
            cut = cut.apply(_exact(encoded), offset=base + 50, values={c.version: c.value for c in encoded})
            assert cut.rows.equals(encoded_again.rows)
    assert dataclasses.replace(cut, rows=encoded_again.rows) == encoded_again


def test_segment_bytes_refuses_what_it_cannot_cut_as_it_is() -> None:
    good = codec.encode_commit(
        Commit(Commit.new_id(), "ns.t", Operation.APPEND, -1, "w", 0, adds=(segment("a"),))
    )
    assert delta_arrow.segment_bytes(good) is not None
    other_layout = good[:2] + b"\x00" * 8 + good[codec.HEADER_SIZE :]
    for bad in (b"", b"nope", other_layout, good[: codec.HEADER_SIZE + 3]):
        assert delta_arrow.segment_bytes(bad) is None


@SETTINGS
@given(st.lists(commits(), max_size=4), st.lists(commits(), max_size=4))
def test_a_lean_view_applies_record_bytes_exactly_as_the_full_view_applies_deltas(
    first: list[Commit], second: list[Commit]
) -> None:
    start = FrameView.from_state(TableState("ns.t"))
    lean, full = FrameView.from_state(TableState("ns.t"), lean=True), start
    assert lean.lean and not full.lean
    for batch, base in ((first, 0), (second, 100)):
        encoded = _encoded(batch, base)
        full = full.apply(_exact(encoded), offset=base + 50)
        lean = lean.apply_encoded(encoded, offset=base + 50)
        _same_view(lean, full)
    lean_snap, full_snap = Snapshot(lean, "/r"), Snapshot(full, "/r")
    assert _listing(lambda: lean_snap.files_arrow().to_pylist()) == _listing(lean_snap.files)
    assert _listing(lean_snap.files) == _listing(full_snap.files)


def _listing(list_files: Callable[[], list[str]]) -> list[str] | type[Exception]:
    """The listing, or the error it raised (arbitrary paths may lie outside the table)."""
    try:
        return list_files()
    except UnsafeLocation as exc:
        return type(exc)


def _typed_segment(i: int) -> Segment:
    base = segment(f"s{i:03d}", "p0", rows=i + 1)
    return dataclasses.replace(
        base,
        stats=(
            ColumnStats("d", ColumnType.DATE, min=None, max=None, null_count=1),
            ColumnStats("f", ColumnType.FLOAT, min=-1.5, max=float(i), null_count=0, nan_count=i % 3),
            ColumnStats("i", ColumnType.INT, min=-(2**63), max=2**63 - 1, null_count=None),
            ColumnStats("o", ColumnType.OTHER, null_count=4),
        ),
    )


def test_every_stats_type_and_the_int64_extremes() -> None:
    segments = [_typed_segment(i) for i in range(5)]
    segments[1] = dataclasses.replace(
        segments[1],
        stats=(
            ColumnStats("d", ColumnType.DATE, min=dt.date(1, 1, 1), max=dt.date(9999, 12, 31)),
            ColumnStats(
                "t",
                ColumnType.TIMESTAMP,
                min=dt.datetime(1, 1, 1, tzinfo=dt.UTC),
                max=dt.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.UTC),
            ),
            ColumnStats("i", ColumnType.STRING, min="wrong type: left out", max="z"),
        ),
    )
    batch = [
        Commit(Commit.new_id(), "ns.t", Operation.APPEND, -1, "w", 0, adds=tuple(segments)),
        Commit(Commit.new_id(), "ns.t", Operation.COMPACT, 0, "w", 0, drops=("s000", "x"), adds=()),
    ]
    encoded = _encoded(batch)
    full = FrameView.from_state(TableState("ns.t")).apply(_exact(encoded))
    lean = FrameView.from_state(TableState("ns.t"), lean=True).apply_encoded(encoded)
    _same_view(lean, full)
    assert lean.live_rows == sum(s.row_count for s in segments[1:])


def test_undecodable_records_are_refused_like_the_codec() -> None:
    good = codec.encode_commit(Commit(Commit.new_id(), "ns.t", Operation.APPEND, -1, "w", 0))
    for bad in (b"", b"nope", good[:-1] + b"", good + b"\x00", b"\xc3\x01" + b"\x00" * 8 + good[10:]):
        with pytest.raises(DecodeError):
            codec.decode_commit(bad)
        with pytest.raises(DecodeError):
            delta_arrow.decode(EncodedCommit(0, 0, bad))


def test_a_full_view_refuses_decoded_commits_and_keeps_the_exact_path() -> None:
    full = FrameView.from_state(TableState("ns.t"))
    with pytest.raises(ValueError, match="full view"):
        full.apply_decoded([])
    encoded = _encoded([Commit(Commit.new_id(), "ns.t", Operation.APPEND, -1, "w", 0, adds=(segment("a"),))])
    assert full.apply_encoded(encoded).rows.column_names[-1] == "segment_avro"
    assert pa.types.is_binary(full.apply_encoded(encoded).rows.schema.field("segment_avro").type)
