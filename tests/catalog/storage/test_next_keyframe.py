"""Time travel from the next key frame (``lookup.from_next_keyframe``) equals a replay, on key
frames and archives written directly (no materializer deciding where frames fall)."""

from __future__ import annotations

from pathlib import Path

import pytest

from segcat.catalog.protocol import codec, rules, versions
from segcat.catalog.protocol.model import Commit, Operation
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.state import LOCATION_PROPERTY, TableState
from segcat.catalog.read import lookup
from segcat.catalog.read.snapshot import Snapshot
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.archive import ArchivedCommit
from segcat.catalog.storage.frame_view import FrameView
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.table_files import TableFiles
from tests.factories import segment

NAME = TableName.parse("ns.t")


def _log(with_compact: bool) -> list[Commit]:
    create = Commit(
        Commit.new_id(),
        NAME.qualified,
        Operation.UPGRADE_PROTOCOL,
        -1,
        "w",
        0,
        table_properties={LOCATION_PROPERTY: "/data/ns/t"},
        protocol=versions.new_table_protocol(),
    )
    out = [create]
    for k in range(1, 9):
        if with_compact and k == 6:
            out.append(
                Commit(Commit.new_id(), NAME.qualified, Operation.COMPACT, k - 1, "w", 0, drops=("s1",))
            )
        else:
            adds = (segment(f"s{k}", "p0"), segment(f"t{k}", None))
            out.append(Commit(Commit.new_id(), NAME.qualified, Operation.APPEND, k - 1, "w", 0, adds=adds))
    return out


def _write(
    tmp_path: Path, log: list[Commit], frames: tuple[int, ...]
) -> tuple[TableFiles, dict[int, TableState]]:
    files = TableFiles(ObjectStore.from_uri(str(tmp_path)), NAME)
    state = TableState(NAME.qualified)
    at: dict[int, TableState] = {}
    archived: list[ArchivedCommit] = []
    previous = -1
    for offset, commit in enumerate(log):
        _, delta = rules.apply_commit(state, offset, 1_000 + offset, commit)
        assert delta is not None
        archived.append(
            ArchivedCommit(
                offset, 1_000 + offset, commit.commit_id, commit.operation.value, codec.encode_commit(commit)
            )
        )
        at[offset] = state.copy()
        if offset in frames:
            files.write_archive(previous + 1, offset, [a for a in archived if a.version > previous])
            files.write_keyframe(keyframe.build(state), offset)
            previous = offset
    return files, at


@pytest.mark.parametrize("with_compact", [False, True])
def test_versions_between_frames_equal_a_replay(tmp_path: Path, with_compact: bool) -> None:
    files, at = _write(tmp_path, _log(with_compact), frames=(2, 8))
    answered = []
    for version in range(3, 8):
        found = lookup.from_next_keyframe(files, version)
        if with_compact and version < 6:
            assert found is None, version  # a COMPACT lies between: the newest frame before answers
            continue
        assert found is not None and not found.exact_image
        answered.append(version)
        expected = FrameView.from_state(at[version], lean=True)
        got = found.frame
        assert (got.offset, got.version, got.timestamp_ms) == (
            version,
            expected.version,
            expected.timestamp_ms,
        )
        assert sorted(got.rows.column_names) == sorted(expected.rows.column_names)  # frames order them apart
        mine = got.rows.select(expected.rows.column_names).sort_by("segment_id")
        assert mine.equals(expected.rows.sort_by("segment_id"))
        assert (got.live_rows, got.live_bytes, got.column_types) == (
            expected.live_rows,
            expected.live_bytes,
            expected.column_types,
        )
        assert (got.tombstones, dict(got.properties), got.protocol) == (
            expected.tombstones,
            dict(expected.properties),
            expected.protocol,
        )
        full = lookup.full_view(found, (), files, version)
        assert full is not None and not full.lean
        assert Snapshot(full, "/r").segment_list() == Snapshot(at[version], "/r").segment_list()
        with pytest.raises(ValueError, match="later key frame"):
            lookup.judging_image(found, NAME.qualified)
    assert answered == ([6, 7] if with_compact else [3, 4, 5, 6, 7])
    assert lookup.from_next_keyframe(files, 8) is None  # no frame after the last


def test_a_protocol_1_table_is_not_cut_back(tmp_path: Path) -> None:
    log = [
        Commit(Commit.new_id(), NAME.qualified, Operation.APPEND, k - 1, "w", 0, adds=(segment(f"s{k}"),))
        for k in range(8)
    ]
    files, _ = _write(tmp_path, log, frames=(1, 6))
    assert lookup.from_next_keyframe(files, 3) is None  # protocol 1 let APPENDs carry properties
