"""The materializer under faults, on real Kafka and a real (private) Redis.

Every output is compared with a clean replay of the log from offset 0: contents, not
counts. Each test uses a namespace of its own and a materializer that follows only it.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import redis

from catalog.config import Config
from catalog.names import TableName
from catalog.objectstore import ObjectStore
from catalog.redis_store import RedisStore
from catalog.table import Catalog
from catalog.table_files import TableFiles
from tests.materializer_support import (
    PrivateRedis,
    head_offset,
    materializer_config,
    namespace,
    replay_states,
    running_materializer,
    wait_for_head,
    write_load,
)

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]



@pytest.fixture
def mconfig(config: Config, private_redis: PrivateRedis, tmp_path: Path) -> Config:
    return materializer_config(config, private_redis.url, tmp_path / "warehouse")


def assert_outputs_match_clean_replay(config: Config, table: str) -> None:
    """Redis head, every key frame on object storage and snapshots from every source agree
    with a clean replay."""
    name = TableName.parse(table)
    files = TableFiles(ObjectStore.from_config(config), name)
    versions = files.keyframe_versions()
    assert versions, "no key frame was written"
    frames = {v: files.read_keyframe(v) for v in versions}
    final, at = replay_states(config, table, {f.meta["version"] for f in frames.values()})
    for version, frame in frames.items():
        assert frame.state() == at[frame.meta["version"]], f"key frame {version} differs from the replay"
    head = RedisStore.from_config(config).head(table)
    assert head is not None
    assert (head.version, head.commit_id, head.live_count, head.live_bytes, head.live_rows, head.offset) == (
        final.last_accepted_version,
        final.last_commit_id,
        final.live_count,
        final.live_bytes,
        final.live_rows,
        final.version,
    )
    table_ = Catalog(config).table(table)
    probe = sorted({-1, final.version, *versions, *random.Random(1).sample(range(final.version + 1), 8)})
    for version in probe:
        expected = table_.snapshot(version, sources=("kafka",))
        for sources in (("redis", "object-store", "kafka"), ("object-store", "kafka")):
            got = table_.snapshot(version, sources=sources)
            assert got.version == expected.version
            assert got.segment_list() == expected.segment_list(), f"{sources} at {version}"
            assert (got.live_rows, got.live_bytes) == (expected.live_rows, expected.live_bytes)


def _spawn(config: Config, pattern: str, group: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "SEGCAT_BOOTSTRAP_SERVERS": config.bootstrap_servers,
        "SEGCAT_REDIS_URL": config.redis_url,
        "SEGCAT_WAREHOUSE": config.warehouse,
        "SEGCAT_KEYFRAME_EVERY_COMMITS": str(config.keyframe_every_commits),
        "SEGCAT_KEYFRAME_EVERY_SECONDS": "3600",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "materializer", "--pattern", pattern, "--group", group, "--metrics-port", "0"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def test_kill_dash_nine_at_random_moments(mconfig: Config) -> None:
    ns, pattern = namespace()
    catalog = Catalog(mconfig)
    tables = [f"{ns}.orders", f"{ns}.clicks"]
    for t in tables:
        catalog.create_table(t)
    writers = [
        threading.Thread(target=write_load, args=(mconfig, t, 220, i, 0.02), daemon=True)
        for i, t in enumerate(tables)
    ]
    for w in writers:
        w.start()
    rng = random.Random(42)
    kills = 0
    while kills < 20 or any(w.is_alive() for w in writers):
        proc = _spawn(mconfig, pattern, f"kill-{ns}")
        time.sleep(rng.uniform(0.3, 1.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        kills += 1
    for w in writers:
        w.join(120)
    assert kills >= 20
    final = _spawn(mconfig, pattern, f"kill-{ns}")
    try:
        store = RedisStore.from_config(mconfig)
        for t in tables:
            wait_for_head(store, t, head_offset(mconfig, t), timeout_s=120)
    finally:
        final.send_signal(signal.SIGTERM)
        assert final.wait(30) == 0, "graceful shutdown on SIGTERM"
    for t in tables:
        assert_outputs_match_clean_replay(mconfig, t)


def test_two_materializers_at_once_never_move_the_head_back(mconfig: Config) -> None:
    ns, pattern = namespace()
    table = f"{ns}.events"
    Catalog(mconfig).create_table(table)
    store = RedisStore.from_config(mconfig)
    seen: list[int] = []
    done = threading.Event()

    def monitor() -> None:
        while not done.is_set():
            head = store.head(table)
            if head is not None:
                seen.append(head.offset)
            time.sleep(0.002)

    watcher = threading.Thread(target=monitor, daemon=True)
    watcher.start()
    with running_materializer(mconfig, pattern, f"a-{ns}"), running_materializer(mconfig, pattern, f"b-{ns}"):
        write_load(mconfig, table, 150, 7)
        wait_for_head(store, table, head_offset(mconfig, table))
        time.sleep(0.5)
    done.set()
    watcher.join(5)
    assert len(seen) > 50
    assert all(a <= b for a, b in itertools.pairwise(seen)), "the head moved back"
    assert_outputs_match_clean_replay(mconfig, table)


def test_flushall_mid_run_readers_stay_correct_and_redis_is_rebuilt(
    mconfig: Config, private_redis: PrivateRedis
) -> None:
    ns, pattern = namespace()
    table = f"{ns}.events"
    catalog = Catalog(mconfig)
    handle = catalog.create_table(table)
    store = RedisStore.from_config(mconfig)
    with running_materializer(mconfig, pattern):
        write_load(mconfig, table, 60, 3)
        wait_for_head(store, table, head_offset(mconfig, table))
        client = redis.Redis.from_url(private_redis.url)
        client.flushall()
        during = handle.snapshot()  # right away: whatever answers must be right
        expected = handle.snapshot(sources=("kafka",))
        assert during.segment_list() == expected.segment_list()
        assert during.version == expected.version
        # with no new commit at all, the materializer notices and rebuilds Redis
        wait_for_head(store, table, head_offset(mconfig, table), timeout_s=30)
        assert handle.snapshot(sources=("redis",)).segment_list() == expected.segment_list()
        write_load(mconfig, table, 30, 4)
        wait_for_head(store, table, head_offset(mconfig, table), timeout_s=30)
        rebuilt = handle.snapshot()
        assert rebuilt.origin == "redis"
        assert rebuilt.segment_list() == handle.snapshot(sources=("kafka",)).segment_list()
    assert_outputs_match_clean_replay(mconfig, table)


def test_corrupt_key_frame_is_detected_skipped_and_rewritten(mconfig: Config) -> None:
    ns, pattern = namespace()
    table = f"{ns}.events"
    handle = Catalog(mconfig).create_table(table)
    store = RedisStore.from_config(mconfig)
    with running_materializer(mconfig, pattern, f"c1-{ns}"):
        write_load(mconfig, table, 50, 5)
        wait_for_head(store, table, head_offset(mconfig, table))
    files = TableFiles(ObjectStore.from_config(mconfig), TableName.parse(table))
    newest = files.keyframe_versions()[-1]
    path = Path(mconfig.warehouse) / files.keyframe_path(newest)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated
    expected = handle.snapshot(newest, sources=("kafka",))
    got = handle.snapshot(newest, sources=("object-store", "kafka"))
    assert got.segment_list() == expected.segment_list()
    assert files.newest_valid_keyframe().version < newest  # detected, an older one is used
    with running_materializer(mconfig, pattern, f"c2-{ns}"):  # recovers from the older one
        wait_for_head(store, table, head_offset(mconfig, table))
        deadline = time.monotonic() + 30
        while path.read_bytes() == data[: len(data) // 2] and time.monotonic() < deadline:
            time.sleep(0.1)
    assert files.read_keyframe(newest).version == newest  # rewritten, valid again
    assert_outputs_match_clean_replay(mconfig, table)


def test_readers_are_correct_with_redis_stopped(mconfig: Config, private_redis: PrivateRedis) -> None:
    ns, pattern = namespace()
    table = f"{ns}.events"
    handle = Catalog(mconfig).create_table(table)
    store = RedisStore.from_config(mconfig)
    with running_materializer(mconfig, pattern):
        write_load(mconfig, table, 40, 6)
        wait_for_head(store, table, head_offset(mconfig, table))
        private_redis.stop()
        write_load(mconfig, table, 25, 8)  # the materializer keeps writing key frames meanwhile
        last = head_offset(mconfig, table)
        for version in (None, 5, 20, last):
            expected = handle.snapshot(version, sources=("kafka",))
            got = handle.snapshot(version)
            assert got.origin in ("object-store", "kafka")
            assert got.segment_list() == expected.segment_list()
            assert got.version == expected.version
        changes = []
        with handle.watch(from_version=10) as watcher:
            for change in watcher:
                changes.append(change)
                if change.version >= expected.version:
                    break
        assert [c.source for c in changes] == ["kafka"] * len(changes)
        history = [h.version for h in handle.history() if 10 < h.version <= expected.version]
        assert [c.version for c in changes] == history
        private_redis.start()  # an empty Redis comes back: the materializer rebuilds it
        head = wait_for_head(store, table, last, timeout_s=30)
        assert head.offset == last
        assert handle.snapshot().origin == "redis"
