"""``Snapshot.files_arrow()`` is ``files()`` in Arrow: the same absolute paths, the same refusals."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

from segcat.catalog.errors import UnsafeLocation
from segcat.catalog.protocol.state import LOCATION_PROPERTY, LiveSegment, TableState
from segcat.catalog.read.snapshot import Snapshot
from segcat.catalog.storage.frame_view import FrameView
from tests.factories import segment


def _state(*paths: str) -> TableState:
    state = TableState("ns.t")
    state.properties[LOCATION_PROPERTY] = "s3://bucket/t"
    for i, path in enumerate(paths):
        seg = dataclasses.replace(segment(f"s{i}"), path=path)
        state.segments[seg.segment_id] = LiveSegment(seg, i)
    return state


@pytest.mark.parametrize("lean", [False, True])
def test_relative_and_absolute_paths(lean: bool) -> None:
    paths = ("a/x.parquet", "s3://bucket/t/b/y.parquet", "ü/z.parquet")
    snap = Snapshot(FrameView.from_state(_state(*paths), lean=lean), "/fallback")
    listed = snap.files_arrow()
    assert isinstance(listed, pa.ChunkedArray) and listed.type == pa.string()
    assert listed.to_pylist() == snap.files()
    assert sorted(snap.files()) == sorted(
        ["s3://bucket/t/a/x.parquet", "s3://bucket/t/b/y.parquet", "s3://bucket/t/ü/z.parquet"]
    )


def test_a_path_outside_the_table_is_refused_by_both() -> None:
    snap = Snapshot(FrameView.from_state(_state("a.parquet", "s3://elsewhere/x.parquet"), lean=True), "/r")
    with pytest.raises(UnsafeLocation):
        snap.files_arrow()
    with pytest.raises(UnsafeLocation):
        snap.files()


def test_many_chunks_and_none() -> None:
    view = FrameView.from_state(_state("a.parquet", "b.parquet"), lean=True)
    chunked = dataclasses.replace(view, rows=pa.concat_tables([view.rows.slice(0, 1), view.rows.slice(1)]))
    snap = Snapshot(chunked, "/r")
    assert snap.files_arrow().num_chunks == 2
    assert sorted(snap.files()) == ["s3://bucket/t/a.parquet", "s3://bucket/t/b.parquet"]
    empty = Snapshot(FrameView.from_state(TableState("ns.t"), lean=True), "/r")
    assert empty.files() == [] and len(empty.files_arrow()) == 0
