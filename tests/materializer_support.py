"""Helpers for the materializer's fault tests: a materializer in a thread or a process, writers in
the background, and the clean replay every output is compared with. ``PrivateRedis`` and
``free_port`` (``segcat.local_stack.private``, shared with bench/) are re-exported for the tests
that annotate their fixtures with them."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

from segcat import Catalog, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import CommitConflict
from segcat.catalog.log.reader import LogReader
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol.model import Operation
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.replay import Applied, replay
from segcat.catalog.protocol.state import TableState
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.redis import Head, RedisStore
from segcat.catalog.storage.table_files import TableFiles
from segcat.local_stack.private import PrivateRedis as PrivateRedis
from segcat.local_stack.private import free_port as free_port
from segcat.materializer.publisher import PublisherFactory
from segcat.materializer.service import Materializer
from tests.factories import segment
from tests.handles import reader_of, writer_of


def materializer_config(config: Config, redis_url: str, warehouse: Path, every: int = 7) -> Config:
    return replace(
        config.with_services(config.bootstrap_servers, redis_url),
        warehouse=str(warehouse),
        keyframe_every_commits=every,
        keyframe_every_seconds=3600.0,
        metrics_port=0,
    )


def wait_until_following(service: Materializer, table: str, timeout_s: float = 60.0) -> None:
    """Until ``service`` has ``table`` assigned: commits written after it are applied live, one by one
    (a backlog found on assignment is caught up with one key frame at its end)."""
    topic = TableName.parse(table).topic
    deadline = time.monotonic() + timeout_s
    while topic not in service.tables:
        assert time.monotonic() < deadline, f"the materializer was not assigned {table}"
        time.sleep(0.05)


_RUNNING: set[Materializer] = set()
"""Materializers running in this process: ``wait_for_head`` waits for their key-frame writers."""


@contextmanager
def running_materializer(
    config: Config,
    pattern: str,
    group: str | None = None,
    instance_id: str | None = None,
    publishers: Sequence[PublisherFactory] = (),
    group_protocol: str = "classic",
) -> Iterator[Materializer]:
    """A materializer in a thread. Every one gets its own static member id unless told (two
    instances of one group with the same id fence each other)."""
    service = Materializer(
        config,
        group_id=group or f"test-{uuid.uuid4().hex[:8]}",
        pattern=pattern,
        instance_id=instance_id or f"test-{uuid.uuid4().hex[:12]}",
        publishers=publishers,
        group_protocol=group_protocol,
    )
    started = threading.Event()
    thread = threading.Thread(target=service.run, kwargs={"ready": started.set}, daemon=True)
    thread.start()
    assert started.wait(30)
    _RUNNING.add(service)
    try:
        yield service
        assert thread.is_alive(), "the materializer stopped on its own"
    finally:
        _RUNNING.discard(service)
        service.stop.set()
        thread.join(30)


def spawn_materializer(
    config: Config,
    pattern: str,
    group: str,
    instance_id: str,
    *,
    stderr: IO[bytes] | int = subprocess.DEVNULL,
    metrics_port: int = 0,
    session_timeout_ms: int | None = None,
) -> subprocess.Popen[bytes]:
    """``python -m segcat.materializer`` in a process of its own (to kill -9 it). ``instance_id`` is
    its static member id: reuse it for a restart of the same instance, never for two at once."""
    env = {
        **os.environ,
        "SEGCAT_BOOTSTRAP_SERVERS": config.bootstrap_servers,
        "SEGCAT_REDIS_URL": config.redis_url,
        "SEGCAT_WAREHOUSE": config.warehouse,
        "SEGCAT_KEYFRAME_EVERY_COMMITS": str(config.keyframe_every_commits),
        "SEGCAT_KEYFRAME_EVERY_SECONDS": "3600",
    }
    args = ["--pattern", pattern, "--group", group, "--instance-id", instance_id]
    args += ["--metrics-port", str(metrics_port)]
    if session_timeout_ms is not None:
        args += ["--session-timeout-ms", str(session_timeout_ms)]
    return subprocess.Popen(
        [sys.executable, "-m", "segcat.materializer", *args],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
    )


def get_json(url: str) -> tuple[int, dict[str, Any]]:
    """(HTTP status, JSON body) of a GET; 4xx/5xx answers are answers too."""
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def json_lines(path: Path) -> list[dict[str, Any]]:
    """The structured log lines a materializer process wrote (other lines skipped)."""
    found = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            parsed = json.loads(line)
        except ValueError:
            continue
        if isinstance(parsed, dict):
            found.append(parsed)
    return found


def bound_files(config: Config, table: str) -> TableFiles:
    """The table's objects as its materializer writes them: bound to the topic's log (its id)."""
    name = TableName.parse(table)
    return TableFiles(ObjectStore.from_config(config), name, TopicAdmin(config).describe(name).topic_id)


def assert_outputs_match_clean_replay(config: Config, table: str) -> None:
    """Redis head, every key frame on object storage and snapshots from every source agree
    with a clean replay."""
    files = bound_files(config, table)
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
    table_ = Catalog(config).load_table(table)
    sampled = random.Random(1).sample(range(final.version + 1), min(8, final.version + 1))
    probe = sorted({-1, final.version, *versions, *sampled})
    for version in probe:
        expected = reader_of(table_).snapshot(version, sources=("kafka",))
        for sources in (("redis", "object-store", "kafka"), ("object-store", "kafka")):
            got = reader_of(table_).snapshot(version, sources=sources)
            assert got.version == expected.version
            assert got.segment_list() == expected.segment_list(), f"{sources} at {version}"
            assert (got.live_rows, got.live_bytes) == (expected.live_rows, expected.live_bytes)


def namespace() -> tuple[str, str]:
    """A fresh namespace and the topic pattern that matches only its tables."""
    ns = f"m{uuid.uuid4().hex[:10]}"
    return ns, rf"^segcat\.{ns}\..*"


def write_load(config: Config, table: str, commits: int, seed: int, pause_s: float = 0.0) -> int:
    """Appends mixed with compactions (some of them losing); returns how many were accepted."""
    rng = random.Random(seed)
    accepted = 0
    with load_catalog(config).load_table(table, writer_id=f"load-{seed}") as writer:
        for k in range(commits):
            live = sorted(writer_of(writer).state.segments)
            if len(live) > 3 and rng.random() < 0.3:
                stale = rng.random() < 0.3
                drops = rng.sample(live, 2) + (["gone-already"] if stale else [])
                commit = writer.new_commit(
                    Operation.COMPACT, drops=drops, adds=[segment(f"c{seed}-{k}", "p1")]
                )
            else:
                commit = writer.new_commit(
                    Operation.APPEND, adds=[segment(f"a{seed}-{k}", rng.choice(["p0", "p1"]))]
                )
            try:
                writer.commit(commit)
                accepted += 1
            except CommitConflict:
                pass
            if pause_s:
                time.sleep(pause_s * rng.random())
    return accepted


def replay_states(
    config: Config, table: str, wanted: set[int] | None = None
) -> tuple[TableState, dict[int, TableState]]:
    """A clean replay from offset 0: the final state and copies at the ``wanted`` offsets."""
    name = TableName.parse(table)
    state = TableState(name.qualified)
    copies: dict[int, TableState] = {}

    def keep(applied: Applied, current: TableState) -> None:
        if wanted is None or applied.verdict.offset in wanted:
            copies[applied.verdict.offset] = current.copy()

    with LogReader(config, name) as reader:
        replay(reader.read(0), state, listener=keep)
    return state, copies


def head_offset(config: Config, table: str) -> int:
    with LogReader(config, TableName.parse(table)) as reader:
        return reader.watermarks()[1] - 1


def wait_for_head(store: RedisStore, table: str, offset: int, timeout_s: float = 60.0) -> Head:
    deadline = time.monotonic() + timeout_s
    while True:
        head = None
        try:
            head = store.head(table)
        except Exception:
            head = None
        if head is not None and head.offset >= offset:
            # key frames and archives are written in the background, after the head moved:
            # callers look at object storage next, so wait for the loop's current batch to be
            # handed over (its next poll began) and for the writer to finish it
            seen = time.monotonic()
            for service in list(_RUNNING):
                while (
                    service._last_poll <= seen and time.monotonic() < deadline and not service.stop.is_set()
                ):
                    time.sleep(0.01)
                if service.writer is not None:
                    assert service.writer.drain(timeout_s=max(deadline - time.monotonic(), 1.0))
            return head
        if time.monotonic() > deadline:
            raise AssertionError(f"materializer did not reach offset {offset} of {table} (head {head})")
        time.sleep(0.05)
