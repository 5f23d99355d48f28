"""Catching up and the background key-frame writer (issue 12, item 5).

A backlog found on assignment is applied without Redis writes or periodic key frames and
ends in one key frame; key frames and archives are written by a thread of their own, so a
slow object store never holds back a notification, and a crash between an archive and the
key frame relying on it recovers from the archive.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pyarrow as pa
import pytest

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.protocol import rules
from segcat.catalog.protocol.model import LogRecord
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.state import TableState
from segcat.catalog.protocol.version_change import VersionChange
from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.table_files import TableFiles
from segcat.materializer import table_materializer
from segcat.materializer.frame_writer import FrameWriter
from tests.factories import segment
from tests.handles import reader_of
from tests.materializer_support import (
    PrivateRedis,
    assert_outputs_match_clean_replay,
    bound_files,
    head_offset,
    materializer_config,
    namespace,
    replay_states,
    running_materializer,
    wait_for_head,
    wait_until_following,
    write_load,
)

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


@pytest.fixture
def mconfig(config: Config, private_redis: PrivateRedis, tmp_path: Path) -> Config:
    """Key frames every 5 accepted commits (never by time, bytes or segments)."""
    return replace(
        materializer_config(config, private_redis.url, tmp_path / "warehouse", every=5),
        keyframe_every_bytes=1 << 40,
        keyframe_every_segments=1 << 30,
    )


def _wait(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _files(config: Config, table: str) -> TableFiles:
    return bound_files(config, table)


def _backlog(config: Config, table: str, commits: int, seed: int) -> int:
    """A mixed load ending in an accepted append; the offset of that last record."""
    write_load(config, table, commits, seed)
    with load_catalog(config).load_table(table, writer_id="last") as writer:
        writer.append([segment(f"last-{seed}", "p0")])
    return head_offset(config, table)


def _accepted(table: Table, after: int) -> list[int]:
    return [h.version for h in table.history() if h.version > after]


def _collect(
    table: Table, from_version: int, out: list[VersionChange], stop: threading.Event
) -> threading.Thread:
    def run() -> None:
        with table.watch(from_version, poll_s=0.1) as watcher:
            for change in watcher:
                out.append(change)
                if stop.is_set():
                    return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_a_backlog_is_caught_up_into_one_key_frame_equal_to_a_replay(mconfig: Config) -> None:
    ns, pattern = namespace()
    name = f"{ns}.t"
    Catalog(mconfig).create_table(name)
    last = _backlog(mconfig, name, 40, 1)  # K = 5: the live path would cut ~6 frames
    store = RedisStore.from_config(mconfig)
    with running_materializer(mconfig, pattern) as service:
        wait_for_head(store, name, last)
        assert service.writer is not None
        _wait(
            "the key-frame writer", lambda: service.writer is not None and service.writer.drain(timeout_s=0)
        )
        files = _files(mconfig, name)
        assert files.keyframe_versions() == [last]
        assert [(a.from_version, a.to_version) for a in files.archives()] == [(0, last)]
        assert store.keyframe_version(name) == last
        assert_outputs_match_clean_replay(mconfig, name)
        # live from here on: the periodic key frames are back
        with load_catalog(mconfig).load_table(name, writer_id="live") as writer:
            for k in range(5):
                writer.append([segment(f"live-{k}", "p1")])
        wait_for_head(store, name, head_offset(mconfig, name))
        _wait("a live key frame", lambda: len(files.keyframe_versions()) == 2)
    assert_outputs_match_clean_replay(mconfig, name)


def test_readers_during_a_catch_up_get_exactly_the_version_they_name(
    mconfig: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns, pattern = namespace()
    name = f"{ns}.t"
    catalog = Catalog(mconfig)
    catalog.create_table(name)
    # an earlier materializer left Redis and object storage at some version ...
    write_load(mconfig, name, 12, 2)
    store = RedisStore.from_config(mconfig)
    with running_materializer(mconfig, pattern):
        wait_for_head(store, name, head_offset(mconfig, name))
    before = store.head(name)
    assert before is not None
    # ... then a backlog piled up, and a new materializer stops half-way through it
    last = _backlog(mconfig, name, 30, 3)
    halfway = (before.offset + last) // 2
    held, release = threading.Event(), threading.Event()

    def apply_record(state: TableState, record: LogRecord) -> rules.Applied:
        if state.table == name and record.offset == halfway:
            held.set()
            release.wait(60)
        return rules.apply_record(state, record)

    monkeypatch.setattr(table_materializer, "rules", SimpleNamespace(apply_record=apply_record))
    table = catalog.load_table(name)
    final, _ = replay_states(mconfig, name)
    probe = sorted(
        {-1, 0, before.version, before.offset, halfway - 1, halfway, last, final.last_accepted_version}
    )
    with running_materializer(mconfig, pattern, group=f"other-{ns}"):
        _wait("the catch-up to reach half-way", held.is_set)
        try:
            head = store.head(name)
            assert head is not None and head.offset == before.offset, "Redis moved during the catch-up"
            for version in [*probe, None]:
                expected = reader_of(table).snapshot(version, sources=("kafka",))
                got = table.snapshot(version)
                assert got.version == expected.version, version
                assert got.segment_list() == expected.segment_list(), version
        finally:
            release.set()
        wait_for_head(store, name, last)
    assert_outputs_match_clean_replay(mconfig, name)


def test_watch_sees_every_version_once_across_a_catch_up(mconfig: Config) -> None:
    ns, pattern = namespace()
    name = f"{ns}.t"
    table = Catalog(mconfig).create_table(name)
    got: list[VersionChange] = []
    stop = threading.Event()
    watcher = _collect(table, -1, got, stop)
    _backlog(mconfig, name, 30, 4)
    store = RedisStore.from_config(mconfig)
    with running_materializer(mconfig, pattern):
        wait_for_head(store, name, head_offset(mconfig, name))
        write_load(mconfig, name, 20, 5, pause_s=0.01)  # live, after the catch-up
        expected = _accepted(table, -1)
        _wait("every version", lambda: bool(got) and got[-1].version >= expected[-1], timeout_s=60)
        stop.set()
    watcher.join(5)
    assert [c.version for c in got] == expected
    assert all(b.prev_version == a.version for a, b in itertools.pairwise(got))


def test_a_notification_does_not_wait_for_a_slow_key_frame_write(
    mconfig: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns, pattern = namespace()
    name = f"{ns}.t"
    table = Catalog(mconfig).create_table(name)
    entered, release = threading.Event(), threading.Event()
    original = TableFiles.write_keyframe
    slow: list[int] = []

    def slow_write_keyframe(self: TableFiles, frame: pa.Table, version: int) -> str:
        if self.name.qualified == name:
            slow.append(version)
            entered.set()
            release.wait(60)  # an object store that takes its time
        return original(self, frame, version)

    monkeypatch.setattr(TableFiles, "write_keyframe", slow_write_keyframe)
    got: list[VersionChange] = []
    stop = threading.Event()
    store = RedisStore.from_config(mconfig)
    try:
        with running_materializer(mconfig, pattern):
            wait_for_head(store, name, 0)
            watcher = _collect(table, 0, got, stop)
            with load_catalog(mconfig).load_table(name, writer_id="w") as writer:
                versions = [writer.append([segment(f"s{k}", "p0")]) for k in range(5)]  # K = 5
                _wait("the key-frame write to start", entered.is_set)
                later = [writer.append([segment(f"t{k}", "p0")]) for k in range(3)]
            _wait("the later commits' notifications", lambda: bool(got) and got[-1].version >= later[-1])
            assert not release.is_set()
            assert _files(mconfig, name).keyframe_versions() == []  # still being written
            assert [c.version for c in got] == [*versions, *later]
            assert {c.source for c in got if c.version in later} == {"pubsub"}
            release.set()
            assert slow[0] in versions
            _wait("the key frame", lambda: slow[0] in _files(mconfig, name).keyframe_versions())
            stop.set()
            wait_for_head(store, name, head_offset(mconfig, name))
    finally:
        release.set()
    watcher.join(5)
    assert_outputs_match_clean_replay(mconfig, name)


def test_a_crash_between_an_archive_and_its_key_frame_recovers_from_the_archive(
    mconfig: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns, pattern = namespace()
    name = f"{ns}.t"
    Catalog(mconfig).create_table(name)
    entered, crash = threading.Event(), threading.Event()
    original = TableFiles.write_keyframe
    doomed: list[int] = []

    def crashing_write_keyframe(self: TableFiles, frame: pa.Table, version: int) -> str:
        if self.name.qualified == name and (doomed or version > 10):
            doomed.append(version)
            entered.set()
            crash.wait(60)
            raise SystemError("the process died here (injected)")  # nothing after the archive
        return original(self, frame, version)

    monkeypatch.setattr(TableFiles, "write_keyframe", crashing_write_keyframe)
    files = _files(mconfig, name)
    store = RedisStore.from_config(mconfig)
    try:
        with running_materializer(mconfig, pattern) as service:
            # live commits (frames at 5 and 10 before the doomed one), not a backlog found on
            # assignment, whose one frame at its end would be the doomed one
            wait_until_following(service, name)
            write_load(mconfig, name, 25, 6)
            _wait("a key frame write after an archive", entered.is_set)
            archived = max(a.to_version for a in files.archives())
            assert archived == doomed[0]
            assert max(files.keyframe_versions()) < archived
            crash.set()
    finally:
        crash.set()
    monkeypatch.setattr(TableFiles, "write_keyframe", original)
    recovered = table_materializer.TableMaterializer(TableName.parse(name), mconfig, None, files)
    assert recovered.recover() == archived + 1  # the older frame, then the archive
    _, at = replay_states(mconfig, name, {archived})
    assert recovered.state == at[archived]
    with running_materializer(mconfig, pattern, group=f"again-{ns}"):
        wait_for_head(store, name, head_offset(mconfig, name))
    assert_outputs_match_clean_replay(mconfig, name)


def test_the_writer_runs_jobs_in_order_and_drains_per_table() -> None:
    writer = FrameWriter()
    gate = threading.Event()
    ran: list[tuple[str, int]] = []

    def job(table: str, k: int, wait: bool = False) -> Callable[[], None]:
        def run() -> None:
            if wait:
                gate.wait(30)
            ran.append((table, k))

        return run

    try:
        writer.submit("a", job("a", 0, wait=True))
        writer.submit("b", job("b", 0))
        writer.submit("a", job("a", 1))
        assert writer.pending("a") == 2 and writer.pending("b") == 1
        assert not writer.drain("b", timeout_s=0.05)  # queued behind a's first job
        gate.set()
        assert writer.drain("a", timeout_s=30)
        assert writer.drain(timeout_s=30)
        assert ran == [("a", 0), ("b", 0), ("a", 1)]

        def boom() -> None:
            raise RuntimeError("a job's own error")

        writer.submit("c", boom)  # logged; the thread goes on
        writer.submit("c", job("c", 0))
        assert writer.drain(timeout_s=30)
        assert ran[-1] == ("c", 0)
    finally:
        writer.close(5)
    with pytest.raises(RuntimeError):
        writer.submit("a", job("a", 2))
