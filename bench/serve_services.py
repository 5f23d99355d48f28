"""The processes of a ``bench.serve`` run and how they are watched: a private Redis,
``segcat materializer`` and ``segcat serve`` (plain, under a cProfile window, or with collections
timed), each a process of its own; the CPU they use; the other work on the machine."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import runner
from bench.commit_runs import CLOCK_TICKS, broker_pid, machine_ticks, process_ticks
from bench.read_processes import table_pattern
from bench.runner import progress
from segcat.catalog.config import Config
from segcat.catalog.protocol.names import table_name
from segcat.local_stack.private import PrivateRedis, free_port


def busy_processes(
    window_s: float = 3.0, top: int = 6, exclude: tuple[int, ...] = ()
) -> list[dict[str, Any]]:
    """The processes that used the most CPU over ``window_s`` (other work on a shared machine)."""

    def sample() -> dict[int, tuple[int, str]]:
        found = {}
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
                found[int(entry.name)] = (int(fields[11]) + int(fields[12]), cmd)
        return found

    first = sample()
    time.sleep(window_s)
    second = sample()
    rows = []
    for pid, (ticks, cmd) in second.items():
        if pid in exclude or pid not in first or not cmd:
            continue
        pct = 100 * (ticks - first[pid][0]) / CLOCK_TICKS / window_s
        if pct >= 1:
            rows.append({"pid": pid, "cpu_pct": round(pct), "command": _short(cmd)})
    return sorted(rows, key=lambda r: r["cpu_pct"], reverse=True)[:top]


def _short(cmd: str) -> str:
    if "kafka.Kafka" in cmd:
        return "Kafka broker (java … kafka.Kafka)"
    words = [w.rsplit("/", 1)[-1] if w.startswith(("/", ".")) and "/" in w else w for w in cmd.split()]
    cmd = " ".join(words)
    return cmd if len(cmd) <= 90 else cmd[:87] + "…"


def wait_for_quiet(limit: float | None, max_wait_s: float) -> dict[str, Any] | None:
    if limit is None:
        return None
    started = time.monotonic()
    while os.getloadavg()[0] >= limit and time.monotonic() - started < max_wait_s:
        progress(f"load average {os.getloadavg()[0]:.1f} ≥ {limit}: waiting")
        time.sleep(30)
    return {"limit": limit, "waited_s": round(time.monotonic() - started), "load": runner.loadavg()}


def _cpu_s(pid: int | None) -> float | None:
    ticks = process_ticks(pid)
    return None if ticks is None else ticks / CLOCK_TICKS


class CpuWatch:
    """CPU seconds of named processes (and the machine) between ``start()`` and ``stop()``."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = pids
        self._start: dict[str, float | None] = {}
        self._machine: tuple[int, int] | None = None
        self._wall = 0.0

    def start(self) -> None:
        self._start = {name: _cpu_s(pid) for name, pid in self.pids.items()}
        self._machine = machine_ticks()
        self._wall = time.perf_counter()

    def stop(self) -> dict[str, Any]:
        wall = time.perf_counter() - self._wall
        out: dict[str, Any] = {"wall_s": round(wall, 2), "cpu_s": {}, "cpu_share_pct": {}}
        for name, pid in self.pids.items():
            before, after = self._start.get(name), _cpu_s(pid)
            if before is not None and after is not None:
                out["cpu_s"][name] = round(after - before, 2)
                out["cpu_share_pct"][name] = round(100 * (after - before) / wall, 1)
        machine = machine_ticks()
        if self._machine is not None and machine is not None and machine[1] > self._machine[1]:
            busy, total = machine[0] - self._machine[0], machine[1] - self._machine[1]
            out["machine_busy_pct"] = round(100 * busy / total, 1)
        return out


def _get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    import httpx

    try:
        answer = httpx.get(url, timeout=timeout)
    except httpx.HTTPError:
        return 0, b""
    return answer.status_code, answer.content


def scrape(url: str) -> dict[str, float]:
    """The server's own metrics (``/metrics``), the samples without labels and the SSE route's."""
    status, body = _get(f"{url}/metrics")
    found: dict[str, float] = {}
    if status != 200:
        return found
    for line in body.decode().splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, _, value = line.rpartition(" ")
        if name.startswith(
            ("segcat_serve_events_sent", "segcat_serve_sse_clients", "segcat_serve_feeds")
        ) or ("segcat_serve_request_seconds" in name and "snapshot" in name):
            with contextlib.suppress(ValueError):
                found[name] = float(value)
    return found


PROFILED_SERVE = """
import cProfile, signal, sys
from segcat.cli import main
out, port = sys.argv[1], sys.argv[2]
profiler = cProfile.Profile()
def window(signum, frame):
    if signum == signal.SIGUSR1:
        profiler.enable()
    else:
        profiler.disable()
        profiler.dump_stats(out)
signal.signal(signal.SIGUSR1, window)
signal.signal(signal.SIGUSR2, window)
# uvicorn re-raises SIGTERM once it has shut down: end quietly
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
try:
    main(["serve", "--port", port])
except SystemExit:
    pass
"""
"""``segcat serve`` with a cProfile window: SIGUSR1 starts it, SIGUSR2 stops it and writes the
stats. cProfile sees the thread the handlers run in, the main one, where uvicorn runs the event
loop (the feeds' watcher threads and the request thread pool are not profiled)."""


GC_OBSERVED = """
import gc, json, signal, sys, time
from segcat.cli import main
out, port = sys.argv[1], sys.argv[2]
pauses, began = [], [0.0]
def observe(phase, info):
    if phase == "start":
        began[0] = time.perf_counter()
    else:
        pauses.append([info["generation"], (time.perf_counter() - began[0]) * 1000, time.time()])
def window(signum, frame):
    if signum == signal.SIGUSR1:
        pauses.clear()
    else:
        json.dump({"pauses": list(pauses), "threshold": gc.get_threshold()}, open(out, "w"))
gc.callbacks.append(observe)
signal.signal(signal.SIGUSR1, window)
signal.signal(signal.SIGUSR2, window)
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
try:
    main(["serve", "--port", port])
except SystemExit:
    pass
"""
"""``segcat serve`` with a ``gc.callbacks`` hook timing every collection of the main thread's
interpreter (all threads share it); SIGUSR1 starts the window, SIGUSR2 writes the pauses."""


class Services:
    """Private Redis, ``segcat materializer`` and ``segcat serve``, each a process of its own."""

    def __init__(self, config: Config, workdir: Path, ns: str) -> None:
        self.workdir = workdir
        self.ns = ns
        self.redis = PrivateRedis(workdir / "redis")
        self.warehouse = workdir / "warehouse"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.base = config
        self.config = config
        self.materializer: subprocess.Popen[bytes] | None = None
        self.server: subprocess.Popen[bytes] | None = None
        self.segcat = str(Path(sys.executable).parent / "segcat")
        self.extra_tables: list[str] = []

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "SEGCAT_BOOTSTRAP_SERVERS": self.config.bootstrap_servers,
            "SEGCAT_REDIS_URL": self.redis.url,
            "SEGCAT_WAREHOUSE": str(self.warehouse),
            "PYTHONUNBUFFERED": "1",
        }

    def start_redis(self) -> None:
        self.redis.start()
        self.warehouse.mkdir(parents=True, exist_ok=True)
        self.config = replace(
            self.base.with_services(self.base.bootstrap_servers, self.redis.url),
            warehouse=str(self.warehouse),
        )

    def start_materializer(self, table: str) -> None:
        """``segcat materializer`` following ``table`` alone (group and instance id of its own)."""
        self.stop_materializer()
        member = f"bench-serve-{table_name(table).qualified}-{uuid.uuid4().hex[:6]}"
        args = [self.segcat, "materializer", "--metrics-port", "0", "--pattern", table_pattern(table)]
        args += ["--group", member, "--instance-id", member]
        log = (self.workdir / "materializer.log").open("ab")
        self.materializer = subprocess.Popen(args, env=self.env(), stdout=log, stderr=subprocess.STDOUT)

    def stop_materializer(self) -> None:
        proc, self.materializer = self.materializer, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def start_server(self, profile_to: Path | None = None, gc_to: Path | None = None) -> float:
        """``segcat serve --port P``; seconds until ``/healthz`` answers. With ``profile_to``, the
        same command with a cProfile window; with ``gc_to``, with collections timed."""
        log = (self.workdir / "serve.log").open("ab")
        started = time.perf_counter()
        command = [self.segcat, "serve", "--port", str(self.port)]
        if profile_to is not None:
            command = [sys.executable, "-c", PROFILED_SERVE, str(profile_to), str(self.port)]
        elif gc_to is not None:
            command = [sys.executable, "-c", GC_OBSERVED, str(gc_to), str(self.port)]
        self.server = subprocess.Popen(command, env=self.env(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while _get(f"{self.url}/healthz", 1.0)[0] != 200:
            if self.server.poll() is not None:
                raise RuntimeError(
                    f"segcat serve exited with {self.server.returncode}: {self.log_tail('serve')}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError("segcat serve did not answer /healthz within 60 s")
            time.sleep(0.05)
        return time.perf_counter() - started

    def log_tail(self, which: str, lines: int = 20) -> str:
        path = self.workdir / f"{which}.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else ""

    def check_alive(self) -> None:
        for name, proc in (("materializer", self.materializer), ("serve", self.server)):
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}: {self.log_tail(name)}")

    def pids(self, config: Config) -> dict[str, int | None]:
        return {
            "server": None if self.server is None else self.server.pid,
            "materializer": None if self.materializer is None else self.materializer.pid,
            "broker": broker_pid(config),
            "benchmark": os.getpid(),
        }

    def wait_materialized(self, table: str, offset: int, timeout_s: float = 120) -> None:
        from segcat.catalog.storage.redis import RedisStore

        store = RedisStore.from_config(self.config)
        deadline = time.monotonic() + timeout_s
        while (head := store.head(table)) is None or head.offset < offset:
            self.check_alive()
            if time.monotonic() > deadline:
                raise TimeoutError(f"the materializer did not reach offset {offset} of {table} (head {head})")
            time.sleep(0.05)

    def stop_server(self) -> None:
        if self.server is not None and self.server.poll() is None:
            self.server.terminate()
            try:
                self.server.wait(60)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait(10)

    def stop(self) -> None:
        for proc in (self.server, self.materializer):
            if proc is None or proc.poll() is not None:
                continue
            proc.terminate()
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        self.redis.stop()
