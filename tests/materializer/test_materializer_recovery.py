"""TableMaterializer.recover on object storage alone (no Kafka, no Redis): which key frames it
calls unreadable, older key-frame layouts, and the temp files a killed writer leaves behind."""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from segcat.catalog.config import Config
from segcat.catalog.protocol import codec, rules
from segcat.catalog.protocol.model import Commit, LogRecord, Operation
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.state import TableState
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.objectstore import TEMP_MARKER, ObjectStore
from segcat.catalog.storage.table_files import TableFiles
from segcat.materializer.keyframe_publisher import TEMP_GRACE_S
from segcat.materializer.table_materializer import TableMaterializer
from tests.factories import segment

NAME = TableName("ns", "t")
FORMAT1 = Path(__file__).resolve().parents[1] / "data" / "keyframe-format1.parquet"
"""A key frame written by segcat before protocol versioning (segments in the older Avro layout)."""


@pytest.fixture
def config(tmp_path: Path) -> Config:
    base = Config.load(env={"SEGCAT_HOME": str(tmp_path / "home")})
    return replace(base, warehouse=str(tmp_path / "warehouse"), keyframe_every_commits=1_000)


@pytest.fixture
def files(config: Config) -> TableFiles:
    return TableFiles(ObjectStore.from_config(config), NAME)


def _record(offset: int, commit: Commit) -> LogRecord:
    return LogRecord(
        offset, 1_700_000_000_000 + offset, commit.commit_id.encode(), codec.encode_commit(commit)
    )


def _append(base: int, segment_id: str) -> Commit:
    return Commit(
        Commit.new_id(), NAME.qualified, Operation.APPEND, base, "w", 0, adds=(segment(segment_id),)
    )


LOG = [_append(offset - 1, f"s{offset}") for offset in range(9)]
"""Nine appends, all accepted: versions 0..8."""


def _states() -> dict[int, TableState]:
    """The state after each version of ``LOG``."""
    state = TableState(NAME.qualified)
    states = {}
    for offset, commit in enumerate(LOG):
        assert rules.apply(state, offset, _record(offset, commit).timestamp_ms, commit).accepted
        states[offset] = state.copy()
    return states


def _warned_versions(caplog: pytest.LogCaptureFixture) -> list[list[int]]:
    return [
        list(getattr(r, "versions", []))
        for r in caplog.records
        if r.getMessage() == "unreadable key frames will be rewritten"
    ]


# ---------------------------------------------------------------------- which frames failed


def test_frames_newer_than_a_valid_latest_are_not_called_unreadable(
    config: Config, files: TableFiles, caplog: pytest.LogCaptureFixture
) -> None:
    """A kill between writing key frame 5 and moving ``_latest`` leaves ``_latest`` at 2:
    recovery loads 2 and never tries 5, so 5 is no unreadable frame to rewrite."""
    states = _states()
    files.write_keyframe(keyframe.build(states[2]), 2)
    latest = files.store.get(files.latest_path)
    files.write_keyframe(keyframe.build(states[5]), 5)
    files.store.put(files.latest_path, latest)  # _latest back at 2, as after the kill
    caplog.set_level(logging.INFO)
    table = TableMaterializer(NAME, config, None, files)
    assert table.recover() == 3
    assert files.find_newest_valid_keyframe().failed == ()
    assert _warned_versions(caplog) == []
    assert table.keyframes._repair == []


def test_exactly_the_frames_that_failed_are_rewritten(
    config: Config, files: TableFiles, caplog: pytest.LogCaptureFixture
) -> None:
    states = _states()
    for version in (2, 5, 8):
        files.write_keyframe(keyframe.build(states[version]), version)
    for version in (5, 8):  # both damaged; 8 is also the one _latest names
        path = Path(config.warehouse) / files.keyframe_path(version)
        path.write_bytes(path.read_bytes()[:100])
    caplog.set_level(logging.INFO)
    search = files.find_newest_valid_keyframe()
    assert search.frame is not None and search.frame.version == 2
    assert search.failed == (5, 8)
    table = TableMaterializer(NAME, config, None, files)
    assert table.recover() == 3
    assert _warned_versions(caplog) == [[5, 8]]
    # replaying past them rewrites them, valid again
    for offset in range(3, 9):
        table.apply(_record(offset, LOG[offset]))
    assert [files.read_keyframe(v).state() for v in (5, 8)] == [states[5], states[8]]


# ---------------------------------------------------------------------- older layouts


def test_recovering_from_an_older_layout_frame_writes_frames_in_the_current_layout(
    config: Config, files: TableFiles
) -> None:
    old = keyframe.from_parquet(FORMAT1.read_bytes())
    assert old.layout != codec.current_fingerprint() and old.meta["table"] == NAME.qualified
    files.store.put(files.keyframe_path(old.version), FORMAT1.read_bytes())
    table = TableMaterializer(NAME, config, None, files)
    assert table.recover() == old.version + 1
    expected = old.state()
    commit = _append(old.version, "s3")
    assert rules.apply(expected, old.version + 1, 1_700_000_000_000 + old.version + 1, commit).accepted
    table.apply(_record(old.version + 1, commit))
    table.write_keyframe()
    frame = files.read_keyframe(old.version + 1)
    assert frame.layout == codec.current_fingerprint()
    assert frame.state() == expected
    assert sorted(frame.table.column("segment_id").to_pylist()) == ["s1", "s2", "s3"]


# ---------------------------------------------------------------------- temp files


def _temp(directory: Path, name: str, age_s: float) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f".{name}{TEMP_MARKER}{os.urandom(4).hex()}"
    path.write_bytes(b"half written")
    then = time.time() - age_s
    os.utime(path, (then, then))
    return path


def test_recovery_removes_stale_temp_files_of_its_own_table_only(config: Config, files: TableFiles) -> None:
    root = Path(config.warehouse)
    catalog_dir = root / "ns" / "t" / "_catalog"
    stale = [
        _temp(catalog_dir, "_latest", 3600),
        _temp(catalog_dir / "keyframes", "00000000000000000007.parquet", 3600),
        _temp(catalog_dir / "commits", "00000000000000000000-00000000000000000007.parquet", 3600),
    ]
    fresh = _temp(catalog_dir / "keyframes", "00000000000000000009.parquet", 0)  # a write in flight
    other_table = _temp(root / "ns" / "other" / "_catalog", "_latest", 3600)
    data_dir = _temp(root / "ns" / "t" / "data", "part-0.parquet", 3600)  # not the catalog's to judge
    TableMaterializer(NAME, config, None, files).recover()
    assert [p.exists() for p in stale] == [False, False, False]
    assert fresh.exists() and other_table.exists() and data_dir.exists()
    assert TEMP_GRACE_S < 3600


def test_temp_file_sweep_on_a_directory_and_on_single_upload_stores(tmp_path: Path) -> None:
    store = ObjectStore.from_uri(str(tmp_path))
    assert store.uses_temp_files
    name = _temp(tmp_path / "a", "x", 3600).name
    assert store.remove_stale_temp_files("a", 60) == [f"a/{name}"]
    assert store.remove_stale_temp_files("a", 60) == []
    assert store.remove_stale_temp_files("missing", 60) == []
    # S3 makes one upload visible whole: no temp files, so nothing to list (no request made)
    s3 = ObjectStore(pafs.S3FileSystem(anonymous=True, region="us-east-1"), "bucket/prefix")
    assert not s3.uses_temp_files
    assert s3.remove_stale_temp_files("ns/t/_catalog", 60) == []
