"""The materializer under faults, on real Kafka and a real (private) Redis.

Every output is compared with a clean replay of the log from offset 0: contents, not
counts. Each test uses a namespace of its own and a materializer that follows only it.
"""

from __future__ import annotations

import itertools
import random
import signal
import threading
import time
from pathlib import Path

import pytest
import redis

from segcat import Catalog, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.protocol.model import Operation
from segcat.catalog.storage.redis import RedisStore
from tests.factories import segment
from tests.handles import reader_of
from tests.materializer_support import (
    PrivateRedis,
    assert_outputs_match_clean_replay,
    bound_files,
    free_port,
    get_json,
    head_offset,
    json_lines,
    namespace,
    running_materializer,
    spawn_materializer,
    wait_for_head,
    write_load,
)

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]


def _health(port: int) -> tuple[int, list[str]] | None:
    try:
        status, doc = get_json(f"http://127.0.0.1:{port}/healthz")
    except OSError:  # not listening yet
        return None
    return status, list(doc["tables_assigned"])


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
        proc = spawn_materializer(mconfig, pattern, f"kill-{ns}", f"kill-{ns}")  # one instance, restarted
        time.sleep(rng.uniform(0.3, 1.6))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        kills += 1
    for w in writers:
        w.join(120)
    assert kills >= 20
    port = free_port()
    final = spawn_materializer(mconfig, pattern, f"kill-{ns}", f"kill-{ns}", metrics_port=port)
    try:
        store = RedisStore.from_config(mconfig)
        for t in tables:
            wait_for_head(store, t, head_offset(mconfig, t), timeout_s=120)
        # the heads may be there before the last instance even started: wait for it to serve
        deadline = time.monotonic() + 60
        while _health(port) != (200, sorted(tables)):
            assert time.monotonic() < deadline, _health(port)
            time.sleep(0.1)
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
        expected = reader_of(handle).snapshot(sources=("kafka",))
        assert during.segment_list() == expected.segment_list()
        assert during.version == expected.version
        # with no new commit at all, the materializer notices and rebuilds Redis
        wait_for_head(store, table, head_offset(mconfig, table), timeout_s=30)
        assert reader_of(handle).snapshot(sources=("redis",)).segment_list() == expected.segment_list()
        write_load(mconfig, table, 30, 4)
        wait_for_head(store, table, head_offset(mconfig, table), timeout_s=30)
        rebuilt = handle.snapshot()
        assert rebuilt.origin == "redis"
        assert rebuilt.segment_list() == reader_of(handle).snapshot(sources=("kafka",)).segment_list()
    assert_outputs_match_clean_replay(mconfig, table)


def test_corrupt_key_frame_is_detected_skipped_and_rewritten(mconfig: Config) -> None:
    ns, pattern = namespace()
    table = f"{ns}.events"
    handle = Catalog(mconfig).create_table(table)
    store = RedisStore.from_config(mconfig)
    with running_materializer(mconfig, pattern, f"c1-{ns}"):
        write_load(mconfig, table, 50, 5)
        wait_for_head(store, table, head_offset(mconfig, table))
        with load_catalog(mconfig).load_table(
            table, writer_id="live"
        ) as writer:  # K = 7 live: one more frame
            for k in range(mconfig.keyframe_every_commits):
                writer.append([segment(f"live-{k}", "p0")])
        wait_for_head(store, table, head_offset(mconfig, table))
    files = bound_files(mconfig, table)
    newest = files.keyframe_versions()[-1]
    path = Path(mconfig.warehouse) / files.keyframe_path(newest)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])  # truncated
    expected = reader_of(handle).snapshot(newest, sources=("kafka",))
    got = reader_of(handle).snapshot(newest, sources=("object-store", "kafka"))
    assert got.segment_list() == expected.segment_list()
    older = files.newest_valid_keyframe()
    assert older is not None and older.version < newest  # detected, an older one is used
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
            expected = reader_of(handle).snapshot(version, sources=("kafka",))
            got = handle.snapshot(version)
            assert got.origin.split("+")[0] in ("object-store", "kafka")  # e.g. "object-store+kafka"
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


def test_a_killed_instance_restarted_under_its_id_gets_its_tables_back_in_seconds(mconfig: Config) -> None:
    """kill -9, then a commit, then the same instance again: the head must move within
    seconds. Without static membership the dead member kept the partition for the broker's
    session timeout (45 s by default) and every reader's head stood still meanwhile."""
    ns, pattern = namespace()
    table = f"{ns}.events"
    handle = Catalog(mconfig).create_table(table)
    store = RedisStore.from_config(mconfig)
    group, instance = f"restart-{ns}", f"restart-{ns}-a"
    proc = spawn_materializer(mconfig, pattern, group, instance)
    try:
        write_load(mconfig, table, 12, 11)
        wait_for_head(store, table, head_offset(mconfig, table))
        with load_catalog(mconfig).load_table(table, writer_id="after-kill") as writer:
            proc.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            proc.wait(10)
            version = writer.commit(writer.new_commit(Operation.APPEND, adds=[segment("after-kill")]))
            proc = spawn_materializer(mconfig, pattern, group, instance)
            wait_for_head(store, table, version, timeout_s=60)
            seconds = time.monotonic() - killed
        print(f"\nkill -9 to a fresh Redis head (commit made after the kill): {seconds:.2f} s")
        assert seconds < 15, f"took {seconds:.1f} s: the restarted instance waited for the session timeout"
        assert reader_of(handle).snapshot(sources=("redis",)).version == version
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


def test_a_fenced_instance_says_so_and_exits(mconfig: Config, tmp_path: Path) -> None:
    """Two processes with one instance id in one group: Kafka fences the older one, which
    must stop with a clear error (not spin on a dead consumer); the newer one goes on."""
    ns, pattern = namespace()
    table = f"{ns}.events"
    Catalog(mconfig).create_table(table)
    store = RedisStore.from_config(mconfig)
    group, instance = f"fence-{ns}", f"fence-{ns}"
    older_err = tmp_path / "older.stderr"
    with open(older_err, "wb") as sink:
        older = spawn_materializer(mconfig, pattern, group, instance, stderr=sink)
    newer = None
    try:
        write_load(mconfig, table, 5, 12)
        wait_for_head(store, table, head_offset(mconfig, table))
        newer = spawn_materializer(mconfig, pattern, group, instance)
        assert older.wait(60) == 1
        stderr = older_err.read_text()
        assert "Traceback" not in stderr
        final = stderr.strip().splitlines()[-1]
        assert final.startswith("error: FatalConsumerError: another materializer joined group")
        assert "--instance-id" in final
        stopping = [
            line for line in json_lines(older_err) if line.get("msg", "").startswith("materializer stopping:")
        ]
        assert len(stopping) == 1 and stopping[0]["instance_id"] == instance
        assert len(stderr.splitlines()) < 40, "the fenced instance kept logging"
        write_load(mconfig, table, 5, 13)  # the newer one has the table
        wait_for_head(store, table, head_offset(mconfig, table), timeout_s=60)
        assert newer.poll() is None
    finally:
        for proc in (older, newer):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                proc.wait(30)
