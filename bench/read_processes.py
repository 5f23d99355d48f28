"""The child processes of the read-path benchmark: writers, materializers, a watcher.

Each runs in its own (spawned) process, so the big images (a writer's or a
materializer's 1M-segment ``TableState``) are freed when it exits and never share the
GIL with what is being timed. Entry points are module-level functions (spawn pickles
them by name); they talk to the parent through multiprocessing queues and events.
"""

from __future__ import annotations

import contextlib
import cProfile
import functools
import multiprocessing as mp
import queue
import re
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from multiprocessing.context import SpawnProcess
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from bench.runner import quiet_logging
from segcat.catalog.config import Config
from segcat.catalog.protocol.model import ColumnStats, ColumnType, Segment
from segcat.catalog.protocol.names import table_name

CTX = mp.get_context("spawn")
PARTITION = "2024-01"


def make_segment(prefix: str, i: int) -> Segment:
    """A segment like a small Spark output file: unique id, a path, two typed column stats."""
    segment_id = f"{prefix}-{i:07d}"
    return Segment(
        segment_id=segment_id,
        path=f"data/part={PARTITION}/{segment_id}.parquet",
        size_bytes=4096 + i % 1000,
        row_count=100,
        partition=PARTITION,
        stats=(
            ColumnStats("id", ColumnType.INT, min=i * 100, max=i * 100 + 99, null_count=0),
            ColumnStats("name", ColumnType.STRING, min="alpha", max="omega", null_count=0),
        ),
    )


def table_pattern(table: str) -> str:
    """A topic pattern matching exactly one table (materializers here never see other tables)."""
    return "^" + re.escape(table_name(table).topic) + "$"


def materializer_config(config: Config, keyframe_every: int | None = None) -> Config:
    """No metrics port; with ``keyframe_every``: key frames by commit count only (K), never by T, D
    or S (the segments pending)."""
    config = replace(config, metrics_port=0)
    if keyframe_every is None:
        return config
    config = replace(
        config,
        keyframe_every_commits=keyframe_every,
        keyframe_every_seconds=24 * 3600.0,
        keyframe_every_bytes=1 << 50,
    )
    if hasattr(config, "keyframe_every_segments"):  # S, where the materializer has it: off too
        config = replace(config, keyframe_every_segments=2**31 - 1)
    return config


# --------------------------------------------------------------------------- materializer


def _materializer_main(config: Config, pattern: str, group: str, ready: Event, stop: Event) -> None:
    from segcat.materializer.service import Materializer

    quiet_logging()
    service = Materializer(config, group_id=group, pattern=pattern)
    started = threading.Event()
    thread = threading.Thread(target=service.run, kwargs={"ready": started.set}, daemon=True)
    thread.start()
    if started.wait(60):
        ready.set()
    stop.wait()
    service.stop.set()
    thread.join(120)


@contextlib.contextmanager
def materializer_process(config: Config, table: str) -> Iterator[SpawnProcess]:
    """A materializer (own consumer group) over ``table`` only, in a child process."""
    ready, stop = CTX.Event(), CTX.Event()
    group = f"bench-read-{uuid.uuid4().hex[:8]}"
    proc = CTX.Process(
        target=_materializer_main, args=(config, table_pattern(table), group, ready, stop), daemon=True
    )
    proc.start()
    try:
        if not ready.wait(120):
            raise RuntimeError("materializer did not start")
        yield proc
    finally:
        stop.set()
        proc.join(180)
        if proc.is_alive():
            proc.kill()
            proc.join(10)


# --------------------------------------------------------------------------- writers


def _writer_main(
    config: Config, table: str, plan: list[int], prefix: str, out: Queue[Any], start: Event | None
) -> None:

    from segcat import load_catalog

    quiet_logging()
    versions: list[int] = []
    with load_catalog(config).load_table(table, writer_id=f"bench-{prefix}") as writer:
        if start is not None:
            start.wait(60)
        began = time.perf_counter()
        index = 0
        for count in plan:
            segments = [make_segment(prefix, index + k) for k in range(count)]
            index += count
            versions.append(writer.append(segments))
        seconds = time.perf_counter() - began
    out.put({"prefix": prefix, "versions": versions, "seconds": seconds})


def write_in_processes(
    config: Config, table: str, plans: list[tuple[str, list[int]]]
) -> list[dict[str, Any]]:
    """Run one writer process per ``(prefix, plan)`` at once; their results once all are done."""
    out: Queue[Any] = CTX.Queue()
    start = CTX.Event()
    procs = [
        CTX.Process(target=_writer_main, args=(config, table, plan, prefix, out, start), daemon=True)
        for prefix, plan in plans
    ]
    for proc in procs:
        proc.start()
    time.sleep(0.5)
    start.set()
    results: list[dict[str, Any]] = []
    while len(results) < len(procs):
        try:
            results.append(out.get(timeout=5))
        except queue.Empty:
            dead = [p for p in procs if not p.is_alive() and p.exitcode not in (0, None)]
            if dead:
                raise RuntimeError(f"writer process failed with exit code {dead[0].exitcode}") from None
    for proc in procs:
        proc.join(60)
    return results


# --------------------------------------------------------------------------- watcher


def _watcher_main(
    config: Config, table: str, stop_at: Synchronized[int], out: Queue[Any], first: Event
) -> None:
    from segcat import Catalog

    quiet_logging()
    arrivals: list[tuple[int, int, int, int, str]] = []
    with Catalog(config).load_table(table).watch(poll_s=0.2) as watcher:
        for change in watcher:
            now = time.time_ns()
            arrivals.append((change.version, now, change.timestamp_ms, change.prev_version, change.source))
            if not first.is_set():
                first.set()
            target = stop_at.value
            if target >= 0 and change.version >= target:
                break
    out.put(arrivals)


class WatcherProcess:
    """``table.watch()`` in a child process recording (version, arrival ns, broker ts ms, prev, source)."""

    def __init__(self, config: Config, table: str) -> None:
        self._stop_at: Synchronized[int] = CTX.Value("q", -1)
        self._out: Queue[Any] = CTX.Queue()
        self.first = CTX.Event()
        self._proc = CTX.Process(
            target=_watcher_main, args=(config, table, self._stop_at, self._out, self.first), daemon=True
        )
        self._proc.start()

    def stop_at(self, version: int) -> None:
        """Stop after the first change at or beyond ``version`` (commit one more to make sure)."""
        self._stop_at.value = version

    def result(self, timeout_s: float = 120.0) -> list[tuple[int, int, int, int, str]]:
        arrivals: list[tuple[int, int, int, int, str]] = self._out.get(timeout=timeout_s)
        self._proc.join(30)
        return arrivals

    def kill(self) -> None:
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(10)


# --------------------------------------------------------------------------- catch-up


class SplitClock:
    """Exclusive wall time per label of wrapped methods (nested calls are charged to themselves).

    Benchmark-only instrumentation of the materializer's internals, used from one thread; a
    method that does not exist in this version of segcat is simply not timed.
    """

    def __init__(self) -> None:
        self.totals: dict[str, float] = {}
        self._stack: list[float] = []

    def wrap(self, owner: Any, attribute: str, label: str) -> None:
        original = getattr(owner, attribute, None)
        if original is None:
            return
        clock = self

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            clock._stack.append(0.0)
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                elapsed = time.perf_counter() - start
                inner = clock._stack.pop()
                clock.totals[label] = clock.totals.get(label, 0.0) + elapsed - inner
                if clock._stack:
                    clock._stack[-1] += elapsed

        setattr(owner, attribute, timed)


def _instrument(clock: SplitClock) -> None:
    from segcat.catalog.protocol import rules
    from segcat.materializer.keyframe_publisher import KeyframePublisher
    from segcat.materializer.redis_publisher import RedisPublisher
    from segcat.materializer.service import Materializer
    from segcat.materializer.table_materializer import TableMaterializer

    clock.wrap(rules, "apply_record", "decode_and_rules")
    clock.wrap(RedisPublisher, "publish", "redis_writes")
    clock.wrap(RedisPublisher, "flush", "redis_writes")
    clock.wrap(KeyframePublisher, "write_keyframe", "keyframes_and_archives")
    clock.wrap(TableMaterializer, "recover", "recovery")
    clock.wrap(Materializer, "_tick", "ticks")


def _catchup_main(
    config: Config, table: str, group: str, end_offset: int, out: Queue[Any], profile_to: str | None
) -> None:
    from segcat.materializer import metrics
    from segcat.materializer.service import Materializer

    quiet_logging()
    name = table_name(table)
    clock = SplitClock()
    if profile_to is None:
        _instrument(clock)
    service = Materializer(config, group_id=group, pattern=table_pattern(table))
    marks: dict[str, float] = {}

    def ready() -> None:
        marks["ready"] = time.time()

    def run() -> None:
        if profile_to is None:
            service.run(ready=ready)
            return
        profiler = cProfile.Profile()
        try:
            profiler.runcall(service.run, ready=ready)
        finally:
            profiler.dump_stats(profile_to)

    cpu_before = time.process_time()
    marks["constructed"] = time.time()
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    first_version = -1
    deadline = time.monotonic() + 3600
    while time.monotonic() < deadline:
        current = service.tables.get(name.topic)
        version = -1 if current is None else current.state.version
        if current is not None and "assigned" not in marks:
            marks["assigned"] = time.time()
        if version >= 0 and "first_record" not in marks:
            marks["first_record"] = time.time()
            first_version = version
        if version >= end_offset:
            marks["caught_up"] = time.time()
            break
        time.sleep(0.002)
    # the outputs too: the key frame of the last version in Redis (readers' fast path; the
    # log's last record is an accepted append) and on object storage (where recovery starts)
    materialized = service.tables.get(name.topic)
    while "caught_up" in marks and materialized is not None and time.monotonic() < deadline:
        if "redis_keyframe" not in marks and service.redis is not None:
            stored = service.redis.keyframe_version(name)
            if stored is not None and stored >= end_offset:
                marks["redis_keyframe"] = time.time()
        if "object_store_keyframe" not in marks:
            latest = materialized.files.latest()
            if latest is not None and latest[0] >= end_offset:
                marks["object_store_keyframe"] = time.time()
        if "object_store_keyframe" in marks and ("redis_keyframe" in marks or service.redis is None):
            break
        time.sleep(0.002)
    cpu = time.process_time() - cpu_before
    split = dict(clock.totals)
    service.stop.set()
    thread.join(120)
    label = {"table": name.qualified}
    sample = metrics.REGISTRY.get_sample_value
    out.put(
        {
            "marks": marks,
            "first_version": first_version,
            "process_cpu_s": cpu,
            "keyframes": sample("segcat_materializer_keyframe_write_seconds_count", label),
            "split_s": split,
        }
    )


def catch_up(
    config: Config, table: str, end_offset: int, *, profile_to: Path | None = None, timeout_s: float = 3600
) -> dict[str, Any]:
    """A fresh materializer (new group, ``config``'s warehouse) replays ``table`` to ``end_offset``."""
    out: Queue[Any] = CTX.Queue()
    group = f"bench-catchup-{uuid.uuid4().hex[:8]}"
    args = (config, table, group, end_offset, out, None if profile_to is None else str(profile_to))
    proc = CTX.Process(target=_catchup_main, args=args, daemon=True)
    proc.start()
    try:
        result: dict[str, Any] = out.get(timeout=timeout_s)
    finally:
        proc.join(180)
        if proc.is_alive():
            proc.kill()
    return result
