"""The writer and watcher processes of ``bench.many_tables``.

Both are spawned processes, so what they cost (a writer's handles, a hundred watcher threads)
never shares the GIL with the benchmark's own polling:

- ``WriterProcess``: commits one-segment appends on request (``commit(tables, pause_s)``), one
  handle per table opened on its first commit; answers (table, version, sent ns, returned ns);
- ``WatcherProcess``: ``table.watch()`` on each of the active tables, a thread each, recording
  (table, version, arrival ns, broker timestamp ms) until told to stop.

Latency of a version = the watcher's arrival (wall clock) − the record's broker timestamp
(LogAppendTime, ms resolution), as ``bench.read_paths``' watch scenario measures it.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from collections.abc import Sequence
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any

from bench.read_processes import CTX, make_segment
from bench.runner import quiet_logging
from segcat.catalog.config import Config

Commit = tuple[str, int, int, int]
"""(table, version, sent ns, returned ns) of one append."""
Arrival = tuple[str, int, int, int]
"""(table, version, arrival ns, broker timestamp ms) of one notification."""


# --------------------------------------------------------------------------- writer


def _writer_main(config: Config, requests: Queue[Any], answers: Queue[Any]) -> None:
    from segcat import Catalog

    quiet_logging()
    counter = 0
    with Catalog(config) as catalog:
        handles: dict[str, Any] = {}
        while (request := requests.get()) is not None:
            tables, pause_s = request
            done: list[Commit] = []
            try:
                for table in tables:
                    if table not in handles:
                        handles[table] = catalog.load_table(table, writer_id="bench-many-tables")
                    counter += 1
                    sent = time.time_ns()
                    version = handles[table].append([make_segment("m", counter)])
                    done.append((table, version, sent, time.time_ns()))
                    if pause_s:
                        time.sleep(pause_s)
            except Exception as exc:  # handed to the parent, which fails the scenario with it
                answers.put(f"{type(exc).__name__}: {exc}")
                continue
            answers.put(done)


class WriterProcess:
    """A spawned writer committing to the tables it is asked to, in order."""

    def __init__(self, config: Config) -> None:
        self._requests: Queue[Any] = CTX.Queue()
        self._answers: Queue[Any] = CTX.Queue()
        self._proc = CTX.Process(
            target=_writer_main, args=(config, self._requests, self._answers), daemon=True
        )
        self._proc.start()

    def submit(self, tables: Sequence[str], pause_s: float = 0.0) -> None:
        self._requests.put((list(tables), pause_s))

    def result(self, timeout_s: float) -> list[Commit]:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                answer = self._answers.get(timeout=1.0)
            except queue.Empty:
                if not self._proc.is_alive():
                    raise RuntimeError(f"the writer process exited with {self._proc.exitcode}") from None
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the writer did not answer within {timeout_s:.0f} s") from None
                continue
            if isinstance(answer, str):
                raise RuntimeError(f"the writer failed: {answer}")
            return [tuple(c) for c in answer]

    def commit(self, tables: Sequence[str], pause_s: float = 0.0, timeout_s: float = 600.0) -> list[Commit]:
        """One append to each of ``tables`` in order, ``pause_s`` apart."""
        self.submit(tables, pause_s)
        return self.result(timeout_s)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._requests.put(None)
        self._proc.join(60)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(10)


# --------------------------------------------------------------------------- watchers


def _watcher_main(
    config: Config,
    tables: list[str],
    seen: Synchronized[int],
    arrivals_count: Synchronized[int],
    stop: Event,
    out: Queue[Any],
) -> None:
    from segcat import Catalog

    quiet_logging()
    lock = threading.Lock()
    arrivals: list[Arrival] = []
    watchers: list[Any] = []
    with Catalog(config) as catalog:

        def follow(table: str) -> None:
            first = True
            with catalog.load_table(table).watch(poll_s=0.2) as watcher:
                with lock:
                    watchers.append(watcher)
                for change in watcher:
                    now = time.time_ns()
                    with lock:
                        arrivals.append((table, change.version, now, change.timestamp_ms))
                    with arrivals_count.get_lock():
                        arrivals_count.value += 1
                    if first:
                        first = False
                        with seen.get_lock():
                            seen.value += 1
                    if stop.is_set():
                        break

        threads = [threading.Thread(target=follow, args=(t,), daemon=True) for t in tables]
        for thread in threads:
            thread.start()
        stop.wait()
        with lock:
            for watcher in watchers:
                watcher.stop()
        for thread in threads:
            thread.join(10)
        with lock:
            out.put(list(arrivals))


class WatcherProcess:
    """``watch()`` on each of ``tables`` (a thread each) in one spawned process."""

    def __init__(self, config: Config, tables: Sequence[str]) -> None:
        self.tables = list(tables)
        self._seen: Synchronized[int] = CTX.Value("q", 0)
        self._count: Synchronized[int] = CTX.Value("q", 0)
        self._stop = CTX.Event()
        self._out: Queue[Any] = CTX.Queue()
        args = (config, self.tables, self._seen, self._count, self._stop, self._out)
        self._proc = CTX.Process(target=_watcher_main, args=args, daemon=True)
        self._proc.start()

    @property
    def tables_seen(self) -> int:
        """How many of the tables have had at least one notification."""
        return int(self._seen.value)

    @property
    def arrivals(self) -> int:
        return int(self._count.value)

    def check_alive(self) -> None:
        if not self._proc.is_alive():
            raise RuntimeError(f"the watcher process exited with {self._proc.exitcode}")

    def result(self, timeout_s: float = 60.0) -> list[Arrival]:
        """Stop every watcher; the notifications they recorded."""
        self._stop.set()
        arrivals: list[Arrival] = [tuple(a) for a in self._out.get(timeout=timeout_s)]
        self._proc.join(30)
        return arrivals

    def kill(self) -> None:
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(10)


def latencies_ms(commits: Sequence[Commit], arrivals: Sequence[Arrival]) -> tuple[list[float], int]:
    """Arrival − broker timestamp (ms) of every timed commit the watchers saw, and how many
    they never saw. A version's first arrival counts (a table's watcher sees each once)."""
    first: dict[tuple[str, int], tuple[int, int]] = {}
    for table, version, arrived_ns, ts_ms in arrivals:
        first.setdefault((table, version), (arrived_ns, ts_ms))
    samples: list[float] = []
    missing = 0
    for table, version, _, _ in commits:
        got = first.get((table, version))
        if got is None:
            missing += 1
            continue
        samples.append((got[0] - got[1] * 1_000_000) / 1_000_000)
    return samples, missing
