"""The lifecycle benchmark's helpers: file trees, a private Redis, the broker's view of a topic,
and the child processes that run a vacuum or a fresh materializer to be measured alone.

Each measured vacuum runs in a spawned process of its own, so its peak RSS (``VmHWM``, reset
just before the call) is the vacuum's, not the benchmark's, and no other work shares its GIL.
Entry points are module-level functions (spawn pickles them by name).
"""

from __future__ import annotations

import cProfile
import gc
import os
import queue
import resource
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.queues import Queue
from pathlib import Path
from typing import Any

from bench.read_processes import CTX, SplitClock, table_pattern
from bench.runner import quiet_logging
from segcat.catalog.config import Config
from segcat.catalog.protocol.names import table_name

# --------------------------------------------------------------------------- file trees


@dataclass(frozen=True)
class Tree:
    """``files`` empty files under ``<root>/data/d0000 … d<dirs-1>``, ``files / dirs`` per directory."""

    root: Path
    files: int
    dirs: int
    prefix: str

    @property
    def per_dir(self) -> int:
        return -(-self.files // self.dirs)

    def relative(self, i: int) -> str:
        return f"data/d{i // self.per_dir:04d}/{self.prefix}-{i:07d}.parquet"

    def directory(self, i: int) -> str:
        return f"d{i // self.per_dir:04d}"

    def create(self, tick: Callable[[int], None] | None = None) -> float:
        """Create every file that is missing (``O_CREAT``, no write), in fresh directories where the
        old ones are empty; seconds taken."""
        started = time.perf_counter()
        for d in range(self.dirs):
            directory = self.root / "data" / f"d{d:04d}"
            if directory.is_dir() and not any(directory.iterdir()):
                directory.rmdir()  # an emptied ext4 directory keeps its size: creating in it is slower
            directory.mkdir(parents=True, exist_ok=True)
        base = str(self.root)
        flags = os.O_CREAT | os.O_WRONLY
        for i in range(self.files):
            os.close(os.open(f"{base}/{self.relative(i)}", flags, 0o644))
            if tick is not None and i % 10_000 == 9_999:
                tick(10_000)
        return time.perf_counter() - started

    def count(self) -> int:
        return sum(len(os.listdir(self.root / "data" / f"d{d:04d}")) for d in range(self.dirs))

    def unlink_all(self) -> float:
        """Bare ``os.unlink`` of every file, one thread: the floor a delete loop can reach."""
        base = str(self.root)
        started = time.perf_counter()
        for i in range(self.files):
            os.unlink(f"{base}/{self.relative(i)}")
        return time.perf_counter() - started


# --------------------------------------------------------------------------- the broker's view


def kafka_data_dir(config: Config) -> Path | None:
    """The local stack broker's ``log.dirs`` (None when the config points elsewhere)."""
    from segcat.local_stack import kafka as stack_kafka
    from segcat.local_stack.layout import Layout
    from segcat.local_stack.settings import StackSettings

    settings = StackSettings.load()
    if config.bootstrap_servers != stack_kafka.address(settings):
        return None
    props = stack_kafka.server_properties_path(Layout.of(settings))
    for line in props.read_text().splitlines() if props.exists() else []:
        if line.startswith("log.dirs="):
            return Path(line.split("=", 1)[1].strip())
    return Layout.of(settings).kafka_data


def topic_files(config: Config, topic: str) -> dict[str, Any] | None:
    """Sizes of the partition's files in the broker's data directory: log segments (``*.log``),
    their indexes, how many segments, and the blocks all of them take on disk (``du``); None
    when the broker is not the local stack's."""
    data = kafka_data_dir(config)
    if data is None:
        return None
    directory = data / f"{topic}-0"
    logs = index = other = segments = allocated = 0
    for entry in os.scandir(directory):
        stat = entry.stat()
        allocated += stat.st_blocks * 512
        if entry.name.endswith(".log"):
            logs += stat.st_size
            segments += 1
        elif entry.name.endswith((".index", ".timeindex")):
            index += stat.st_size  # preallocated (sparse) for the active segment
        else:
            other += stat.st_size
    return {
        "log_bytes": logs,
        "index_bytes": index,
        "other_bytes": other,
        "segments": segments,
        "allocated_bytes": allocated,
    }


def pending_deletions(config: Config, topic: str) -> list[str]:
    """Files of the partition the broker has replaced but not yet removed (``*.deleted``,
    ``*.cleaned``, ``*.swap``); empty when the broker is not the local stack's."""
    data = kafka_data_dir(config)
    if data is None:
        return []
    suffixes = (".deleted", ".cleaned", ".swap")
    return sorted(e.name for e in os.scandir(data / f"{topic}-0") if e.name.endswith(suffixes))


def broker_records(config: Config, table: str, prune_point: int = -1) -> dict[str, int]:
    """Read the topic from offset 0: the records the broker holds, the null ones among them, and
    those at or before ``prune_point``."""
    from segcat.catalog.log.reader import LogReader

    total = nulls = pruned = 0
    first = -1
    with LogReader(config, table_name(table)) as reader:
        for record in reader.read(0):
            if first < 0:
                first = record.offset
            total += 1
            nulls += record.value is None
            pruned += record.offset <= prune_point
    return {
        "records": total,
        "null_records": nulls,
        "at_or_before_prune_point": pruned,
        "first_offset": first,
    }


def alter_topic(config: Config, topic: str, settings: dict[str, str]) -> None:
    """Incremental ``SET`` of topic configs (as tests/catalog/read/test_log_pruning.py does)."""
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    from segcat.catalog.log.clients import admin_config

    admin = AdminClient(admin_config(config))
    resource_ = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in settings.items()
        ],
    )
    for future in admin.incremental_alter_configs([resource_]).values():
        future.result(30)


# --------------------------------------------------------------------------- children


def _maxrss_mb() -> float:
    """``getrusage`` ``ru_maxrss``. On Linux it survives ``execve``: a spawned child starts with its
    parent's RSS at the fork as its high-water mark, so it is reported beside ``VmHWM``, not alone."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _status_mb(field: str) -> float | None:
    """``VmRSS`` / ``VmHWM`` of this process from ``/proc/self/status``, in MB (None elsewhere)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _reset_peak() -> bool:
    """Reset ``VmHWM`` to the current RSS (``echo 5 > /proc/self/clear_refs``); whether it worked."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def _instrument_vacuum(clock: SplitClock) -> None:
    from segcat.catalog.read import vacuum as vac
    from segcat.catalog.read.table import TableReader
    from segcat.catalog.storage.objectstore import ObjectStore

    clock.wrap(vac._History, "catch_up", "replay")  # the key frame read, the replay to the head
    clock.wrap(vac.Recheck, "refresh", "recheck")
    clock.wrap(vac, "_delete", "delete")
    clock.wrap(vac, "_dedupe", "dedupe")
    clock.wrap(vac, "_record", "record")
    clock.wrap(ObjectStore, "list_files", "listing")
    clock.wrap(TableReader, "snapshot", "snapshots")


def _vacuum_main(
    config: Config, table: str, kwargs: dict[str, Any], reps: int, profile_to: str | None, out: Queue[Any]
) -> None:
    """Open the table, then ``reps`` vacuums (the first one a warm-up when ``reps`` > 1)."""
    from segcat.catalog.read import vacuum as vac
    from segcat.catalog.read.table import Tables

    quiet_logging()
    clock = SplitClock()
    if profile_to is None:
        _instrument_vacuum(clock)
    handle = Tables(config).open(table)
    gc.collect()
    runs: list[dict[str, Any]] = []
    for _ in range(reps):
        clock.totals.clear()
        gc.collect()
        reset = _reset_peak()
        rss_start = _status_mb("VmRSS")
        cpu = time.process_time()
        started = time.perf_counter()
        if profile_to is None:
            report = vac.vacuum(handle, **kwargs)
        else:
            profiler = cProfile.Profile()
            report = profiler.runcall(vac.vacuum, handle, **kwargs)
            profiler.dump_stats(profile_to)
        seconds = time.perf_counter() - started
        runs.append(
            {
                "seconds": round(seconds, 3),
                "cpu_s": round(time.process_time() - cpu, 2),
                "rss_start_mb": None if rss_start is None else round(rss_start, 1),
                "peak_rss_mb": None if (hwm := _status_mb("VmHWM")) is None or not reset else round(hwm, 1),
                "ru_maxrss_mb": round(_maxrss_mb(), 1),
                "files": len(report.files),
                "by_reason": report.by_reason(),
                "deleted": report.deleted,
                "already_gone": report.already_gone,
                "kept_by_grace": report.kept_by_grace,
                "horizon": report.horizon,
                "head": report.head,
                "split_s": {k: round(v, 3) for k, v in clock.totals.items()},
            }
        )
        del report
    out.put(runs)


def run_vacuum(
    config: Config,
    table: str,
    kwargs: dict[str, Any],
    *,
    reps: int = 1,
    profile_to: Path | None = None,
    timeout_s: float = 3600,
) -> list[dict[str, Any]]:
    """``reps`` vacuums of ``table`` in one fresh child process; one dict per vacuum."""
    out: Queue[Any] = CTX.Queue()
    args = (config, table, kwargs, reps, None if profile_to is None else str(profile_to), out)
    proc = CTX.Process(target=_vacuum_main, args=args, daemon=True)
    runs: list[dict[str, Any]] = _result(proc, out, timeout_s, "vacuum")
    return runs


def _result(proc: Any, out: Queue[Any], timeout_s: float, what: str) -> Any:
    """Start ``proc`` and return what it puts on ``out``; RuntimeError if it dies first."""
    proc.start()
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return out.get(timeout=5)
            except queue.Empty:
                if not proc.is_alive():
                    raise RuntimeError(f"{what} process died with exit code {proc.exitcode}") from None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{what} process gave no result within {timeout_s:.0f} s") from None
    finally:
        proc.join(180)
        if proc.is_alive():
            proc.kill()
            proc.join(10)


def _materializer_main(config: Config, table: str, end_offset: int, spawned: float, out: Queue[Any]) -> None:
    """A fresh materializer (new group); marks until its Redis head has applied ``end_offset``."""
    marks: dict[str, float] = {"spawned": spawned, "main": time.time()}
    from segcat.catalog.storage.redis import RedisStore
    from segcat.materializer.service import Materializer
    from segcat.materializer.table_materializer import TableMaterializer

    quiet_logging()
    marks["imported"] = time.time()
    recovered: dict[str, float] = {}
    original = TableMaterializer.recover

    def recover(self: TableMaterializer) -> int:
        started = time.time()
        next_offset = original(self)
        recovered.update(start=started, end=time.time(), next_offset=next_offset)
        return next_offset

    TableMaterializer.recover = recover  # type: ignore[method-assign]
    store = RedisStore.from_config(config)
    name = table_name(table).qualified
    service = Materializer(
        config, group_id=f"bench-lifecycle-{uuid.uuid4().hex[:8]}", pattern=table_pattern(table)
    )
    marks["constructed"] = time.time()
    thread = threading.Thread(target=service.run, kwargs={"ready": lambda: marks.update(ready=time.time())})
    thread.daemon = True
    cpu = time.process_time()
    thread.start()
    deadline = time.monotonic() + 1800
    first_head = None
    while time.monotonic() < deadline:
        head = store.head(name)
        if head is not None and first_head is None:
            marks["first_head"] = time.time()
            first_head = head.offset
        if head is not None and head.offset >= end_offset:
            marks["head_reached"] = time.time()
            break
        time.sleep(0.005)
    cpu_s = time.process_time() - cpu
    service.stop.set()
    thread.join(120)
    out.put(
        {
            "marks": marks,
            "recover": recovered,
            "first_head_offset": first_head,
            "process_cpu_s": round(cpu_s, 2),
        }
    )


def fresh_materializer(
    config: Config, table: str, end_offset: int, timeout_s: float = 1800
) -> dict[str, Any]:
    """Spawn a fresh materializer process; its marks (epoch seconds) once its head reaches ``end_offset``."""
    out: Queue[Any] = CTX.Queue()
    proc = CTX.Process(
        target=_materializer_main, args=(config, table, end_offset, time.time(), out), daemon=True
    )
    result: dict[str, Any] = _result(proc, out, timeout_s, "materializer")
    return result
