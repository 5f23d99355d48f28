"""HTTP API and SSE (``segcat serve``): commit → SSE event latency with 1 and with 1,000 clients on
one server process, and a 50,000-segment snapshot as JSON vs Arrow — one run.

    .venv/bin/python -m bench.serve            # full run (~11 min on 2 cores), updates docs/BENCHMARKS.md
    .venv/bin/python -m bench.serve --quick    # smoke run: 1 + 50 clients, 5,000 segments, doc untouched
    .venv/bin/python -m bench.serve --only sse1000 --repeats 1 --no-doc   # one scenario
    .venv/bin/python -m bench.serve --render bench/results/serve-<time>.json

(``./dev bench`` runs the other benchmarks, not this one.) Every part is a real process of its
own, as in production: a private ``redis-server`` (the dev Redis holds other work's tables),
``segcat serve`` (one uvicorn process), per scenario a ``segcat materializer`` whose
``--pattern`` matches that scenario's table alone (it publishes the version notifications the
server relays), and for the SSE scenarios a client process holding every SSE connection and a
Redis subscriber process. The benchmark process commits (``Table.append``) and fetches
snapshots. Kafka is the local stack's.

1. ``sse1`` / ``sse1000``: N clients (1; 1,000) each open ``GET /api/tables/<t>/events`` on a
   connection of its own (asyncio on uvloop in one client process); after warm-up commits
   every client has seen, one-segment appends on a fixed schedule (1 client: 200 commits 50 ms
   apart; 1,000: 100 commits 200 ms apart), 3 passes pooled. Latency of a (client, version)
   pair = when the client process read the event's bytes off its socket − just before
   ``append()`` was called (``time.time_ns()`` in both processes: one machine, one clock).
   Also kept: − the return of ``append()``; and, from the Redis subscriber on the table's
   channel, where the time goes: commit → the materializer's notification → the SSE client.
2. ``snapshot``: a table of 50,000 live segments (10 appends of 5,000), then ``GET
   /api/tables/<t>/snapshot`` as one JSON page (``limit=50000``), the default JSON page
   (1,000), all 50,000 as JSON pages of 10,000 (following ``next``), and the whole snapshot with
   ``Accept: application/vnd.apache.arrow.stream`` (decoded with pyarrow); medians of 5
   interleaved rounds after a warm-up round, response sizes; the route's steps redone
   in-process to show where its time goes.
3. ``profile``, ``gc``: the 1,000-client scenario once more on a server restarted through a
   launcher: with a cProfile window, and with a ``gc.callbacks`` hook timing collections.
4. ``tick``: the materializer's once-a-second tick (one watermark query per table) by the
   number of tables it follows, and what it does to commit → notification.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

from bench import report, runner
from bench.commit_runs import _machine_ticks, _process_ticks, broker_pid
from bench.lifecycle_procs import PrivateRedis, free_port
from bench.read_processes import CTX, make_segment, table_pattern
from bench.report import get, ms, table
from bench.runner import Context, Results, percentile, progress, summary
from segcat import load_catalog
from segcat.catalog.config import Config
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol.names import table_name

SCENARIOS = ("sse1", "sse1000", "snapshot", "profile", "gc", "tick")
ARROW = "application/vnd.apache.arrow.stream"
TARGET_P99_1_MS = 20.0
TARGET_P99_1000_MS = 250.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
EVENT = re.compile(rb"id: (\d+)\r\nevent: version\r\ndata: [^\r\n]*\r\n\r\n")
"""One version event as sse-starlette writes it (the body is chunked: a chunk holds whole events)."""


@dataclass(frozen=True)
class Params:
    small_clients: int
    small_commits: int
    small_pause_s: float
    big_clients: int
    big_commits: int
    big_pause_s: float
    snapshot_segments: int
    per_commit: int
    snapshot_reps: int
    json_page: int
    client: str
    tick_tables: tuple[int, ...]
    tick_commits: int
    repeats: int

    @classmethod
    def of(cls, quick: bool, args: argparse.Namespace) -> Params:
        p = (
            cls(1, 40, 0.05, 50, 20, 0.2, 5_000, 1_000, 3, 1_000, "raw", (1, 5), 40, 1)
            if quick
            else cls(1, 200, 0.05, 1_000, 100, 0.2, 50_000, 5_000, 5, 10_000, "raw", (1, 5, 20), 200, 3)
        )
        changes: dict[str, Any] = {}
        if args.clients is not None:
            changes["big_clients"] = args.clients
        if args.client is not None:
            changes["client"] = args.client
        if args.segments is not None:
            changes["snapshot_segments"] = args.segments
        if args.repeats is not None:
            changes["repeats"] = args.repeats
        return replace(p, **changes)


def options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--clients", type=int, help="SSE clients of the big scenario (default 1,000; quick 50)")
    add(
        "--client",
        choices=("raw", "httpx"),
        help="SSE client: raw asyncio protocol (default: cheapest, times bytes off the socket) or httpx",
    )
    add("--segments", type=int, help="live segments of the snapshot table (default 50,000)")
    add("--repeats", type=int, help="passes of each reference SSE scenario, pooled (default 3; quick 1)")
    add(
        "--quiet-load",
        type=float,
        default=None,
        help="before measuring, wait (at most --quiet-wait s) until the 1-minute load average is below this",
    )
    add("--quiet-wait", type=float, default=1800.0, help="longest wait for --quiet-load (s; default 1,800)")


# --------------------------------------------------------------------------- processes


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
        pct = 100 * (ticks - first[pid][0]) / CLK_TCK / window_s
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
    ticks = _process_ticks(pid)
    return None if ticks is None else ticks / CLK_TCK


class CpuWatch:
    """CPU seconds of named processes (and the machine) between ``start()`` and ``stop()``."""

    def __init__(self, pids: dict[str, int | None]) -> None:
        self.pids = pids
        self._start: dict[str, float | None] = {}
        self._machine: tuple[int, int] | None = None
        self._wall = 0.0

    def start(self) -> None:
        self._start = {name: _cpu_s(pid) for name, pid in self.pids.items()}
        self._machine = _machine_ticks()
        self._wall = time.perf_counter()

    def stop(self) -> dict[str, Any]:
        wall = time.perf_counter() - self._wall
        out: dict[str, Any] = {"wall_s": round(wall, 2), "cpu_s": {}, "cpu_share_pct": {}}
        for name, pid in self.pids.items():
            before, after = self._start.get(name), _cpu_s(pid)
            if before is not None and after is not None:
                out["cpu_s"][name] = round(after - before, 2)
                out["cpu_share_pct"][name] = round(100 * (after - before) / wall, 1)
        machine = _machine_ticks()
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


# --------------------------------------------------------------------------- the SSE client process


class _RawSSE(asyncio.Protocol):
    """One SSE connection: a hand-written GET, then every event's version and arrival time
    (taken when its bytes come off the socket)."""

    def __init__(self, request: bytes, arrivals: list[tuple[int, int]], ready: asyncio.Future[None]) -> None:
        self.request = request
        self.arrivals = arrivals
        self.ready = ready
        self.headers_done = False
        self.buffer = b""
        self.last = -1
        self.closed = False
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is no asyncio.Transport
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        now = time.time_ns()
        buffer = self.buffer + data
        if not self.headers_done:
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                self.buffer = buffer
                return
            status = buffer.split(b"\r\n", 1)[0]
            if b" 200 " not in status + b" ":
                if not self.ready.done():
                    self.ready.set_exception(RuntimeError(f"SSE answer {status!r}"))
                return
            self.headers_done = True
            if not self.ready.done():
                self.ready.set_result(None)
            buffer = buffer[end + 4 :]
        consumed = 0
        for match in EVENT.finditer(buffer):
            version = int(match.group(1))
            self.arrivals.append((version, now))
            self.last = version
            consumed = match.end()
        self.buffer = buffer[consumed:] if consumed else buffer[-65536:]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.ready.done():
            self.ready.set_exception(exc or ConnectionError("closed before the answer"))


async def _httpx_sse(
    client: Any, url: str, arrivals: list[tuple[int, int]], ready: asyncio.Future[None], state: list[int]
) -> None:
    """One SSE connection with httpx: the arrival time is taken when the event's blank line is parsed."""
    async with client.stream("GET", url, headers={"Accept": "text/event-stream"}) as answer:
        if answer.status_code != 200:
            ready.set_exception(RuntimeError(f"SSE answer {answer.status_code}"))
            return
        ready.set_result(None)
        current: int | None = None
        async for line in answer.aiter_lines():
            if line.startswith("id:"):
                current = int(line[3:].strip())
            elif line == "" and current is not None:
                arrivals.append((current, time.time_ns()))
                state[0] = current
                current = None


def _client_main(
    host: str,
    port: int,
    path: str,
    clients: int,
    kind: str,
    ready: Event,
    warm_target: Synchronized[int],
    warmed: Event,
    stop_at: Synchronized[int],
    timing: Event,
    done: Event,
    out: Queue[Any],
) -> None:
    """Open ``clients`` SSE streams, record every event's arrival per client, until every client
    has seen ``stop_at`` (or 60 s after it is set); then put the arrivals on ``out``."""
    import uvloop

    runner.quiet_logging()
    arrivals: list[list[tuple[int, int]]] = [[] for _ in range(clients)]
    info: dict[str, Any] = {"kind": kind, "clients": clients}

    async def main() -> None:
        loop = asyncio.get_running_loop()
        started = time.perf_counter()
        request = (
            f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n"
            "Cache-Control: no-cache\r\n\r\n"
        ).encode()
        gate = asyncio.Semaphore(64)
        lasts: list[Callable[[], int]] = []
        closers: list[Callable[[], None]] = []
        tasks: list[asyncio.Task[None]] = []
        httpx_client: Any = None
        if kind == "httpx":
            import httpx

            httpx_client = httpx.AsyncClient(
                timeout=httpx.Timeout(60.0, read=None),
                limits=httpx.Limits(max_connections=clients + 10, max_keepalive_connections=0),
            )

        async def open_one(i: int) -> None:
            async with gate:
                fut: asyncio.Future[None] = loop.create_future()
                if kind == "raw":
                    proto = _RawSSE(request, arrivals[i], fut)
                    await loop.create_connection(lambda: proto, host, port)
                    lasts.append(lambda: proto.last)
                    closers.append(lambda: proto.transport.close() if proto.transport else None)
                else:
                    state = [-1]
                    url = f"http://{host}:{port}{path}"
                    tasks.append(asyncio.create_task(_httpx_sse(httpx_client, url, arrivals[i], fut, state)))
                    lasts.append(lambda: state[0])
                await asyncio.wait_for(fut, 60)

        await asyncio.gather(*(open_one(i) for i in range(clients)))
        info["connect_s"] = round(time.perf_counter() - started, 2)
        ready.set()
        stop_deadline: float | None = None
        window_start: float | None = None
        while True:
            await asyncio.sleep(0.01)
            if window_start is None and timing.is_set():
                window_start = time.process_time()
            lowest = min(last() for last in lasts)
            target = warm_target.value
            if target >= 0 and not warmed.is_set() and lowest >= target:
                warmed.set()
            stop = stop_at.value
            if stop >= 0:
                if stop_deadline is None:
                    stop_deadline = time.monotonic() + 60
                if lowest >= stop or time.monotonic() > stop_deadline:
                    if window_start is not None:
                        info["cpu_window_s"] = time.process_time() - window_start
                    done.set()
                    break
        for close in closers:
            close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        if httpx_client is not None:
            await httpx_client.aclose()
        await asyncio.sleep(0.2)

    cpu = time.process_time()
    uvloop.run(main())
    info["cpu_s"] = round(time.process_time() - cpu, 2)
    out.put({"info": info, "arrivals": arrivals})


class ClientProcess:
    def __init__(self, url: str, table: str, clients: int, kind: str) -> None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        self.ready, self.warmed = CTX.Event(), CTX.Event()
        self.timing, self.done = CTX.Event(), CTX.Event()
        self.warm_target: Synchronized[int] = CTX.Value("q", -1)
        self.stop_at: Synchronized[int] = CTX.Value("q", -1)
        self.out: Queue[Any] = CTX.Queue()
        path = f"/api/tables/{table_name(table).qualified}/events"
        args = (host, int(port), path, clients, kind, self.ready, self.warm_target, self.warmed)
        events = (self.timing, self.done)
        self.proc = CTX.Process(
            target=_client_main, args=(*args, self.stop_at, *events, self.out), daemon=True
        )
        self.proc.start()

    def wait(self, event: Event, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while not event.wait(0.5):
            if not self.proc.is_alive():
                raise RuntimeError(f"the SSE client process died ({what}), exit code {self.proc.exitcode}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"SSE clients: {what} not within {timeout_s:.0f} s")

    def result(self, timeout_s: float = 180) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                found: dict[str, Any] = self.out.get(timeout=2)
                break
            except queue.Empty:
                if not self.proc.is_alive():
                    raise RuntimeError(
                        f"the SSE client process died, exit code {self.proc.exitcode}"
                    ) from None
                if time.monotonic() > deadline:
                    raise TimeoutError("the SSE client process gave no result") from None
        self.proc.join(30)
        return found

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(10)


def _probe_main(config: Config, table: str, ready: Event, stop: Event, out: Queue[Any]) -> None:
    """A plain Redis subscriber on the table's channel: when each notification was published."""
    from segcat.catalog.storage.redis import RedisStore

    runner.quiet_logging()
    seen: list[tuple[int, int, int]] = []
    with contextlib.closing(RedisStore.from_config(config).subscribe(table)) as sub:
        ready.set()
        while not stop.is_set():
            event = sub.get(timeout=0.1)
            if event is not None:
                seen.append((event.version, time.time_ns(), event.timestamp_ms))
    out.put(seen)


class RedisProbe:
    def __init__(self, config: Config, table: str) -> None:
        self.ready, self.stop = CTX.Event(), CTX.Event()
        self.out: Queue[Any] = CTX.Queue()
        self.proc = CTX.Process(
            target=_probe_main, args=(config, table, self.ready, self.stop, self.out), daemon=True
        )
        self.proc.start()
        if not self.ready.wait(30):
            raise RuntimeError("the Redis probe did not subscribe")

    def result(self) -> list[tuple[int, int, int]]:
        self.stop.set()
        seen: list[tuple[int, int, int]] = self.out.get(timeout=30)
        self.proc.join(10)
        return seen


# --------------------------------------------------------------------------- 1. SSE latency


def _signed(samples_ms: list[float]) -> dict[str, float]:
    out = summary(samples_ms)
    out["median_ms"] = round(percentile(sorted(samples_ms), 50), 4)
    out["negative_share"] = round(sum(1 for v in samples_ms if v < 0) / len(samples_ms), 3)
    return out


def sse_scenario(
    services: Services,
    table: str,
    clients: int,
    commits: int,
    pause_s: float,
    kind: str,
    around: tuple[Callable[[], None], Callable[[], None]] | None = None,
    repeats: int = 1,
) -> Results:
    """``repeats`` passes (each: a fresh client process, warm-up, ``commits`` timed commits); the
    figures pool every pass's pairs, ``passes`` has each pass's headline figures."""
    before = scrape(services.url)
    sends: dict[int, tuple[int, int]] = {}
    arrivals: list[list[tuple[int, int]]] = [[] for _ in range(clients)]
    seen: list[tuple[int, int, int]] = []
    usages: list[dict[str, Any]] = []
    passes: list[Results] = []
    connected: dict[str, float] = {}
    info: dict[str, Any] = {}
    warm_commits = 0
    for number in range(repeats):
        one = _sse_pass(services, table, clients, commits, pause_s, kind, around, f"p{number}")
        connected, info = one["connected"], one["got"]["info"]
        warm_commits += one["warm_commits"]
        alone = _latencies(
            one["sends"], one["got"], one["seen"], clients, commits, pause_s, 0, one["usage"], {}, {}, {}
        )
        passes.append(
            {
                "commit_to_event": alone["commit_to_event"],
                "fan_out_span_per_version": alone["fan_out_span_per_version"],
                "commit_to_notification": alone["commit_to_notification"],
                "missing_pairs": alone["missing_pairs"],
                "server_cpu_us_per_event": _per_event_us(alone),
                "loadavg_after": runner.loadavg(),
            }
        )
        sends.update(one["sends"])
        for index, received in enumerate(one["got"]["arrivals"]):
            arrivals[index].extend(received)
        seen.extend(one["seen"])
        usages.append(one["usage"])
        progress(
            f"  pass {number + 1}/{repeats}: p50 {alone['commit_to_event']['median_ms']:.1f} ms, p99 "
            f"{alone['commit_to_event']['p99_ms']:.1f} ms"
        )
    after = scrape(services.url)
    pooled = _latencies(
        sends,
        {"info": info, "arrivals": arrivals},
        seen,
        clients,
        commits * repeats,
        pause_s,
        warm_commits,
        _pool_usage(usages),
        before,
        connected,
        after,
    )
    pooled["passes"] = passes
    return pooled


def _per_event_us(r: Results) -> float | None:
    cpu = r["cpu"]["cpu_s"].get("server")
    return None if cpu is None or not r["pairs"] else round(cpu * 1e6 / r["pairs"], 1)


def _pool_usage(usages: list[dict[str, Any]]) -> dict[str, Any]:
    """CPU of several passes as one: seconds added up, shares over the summed wall time."""
    wall = sum(u["wall_s"] for u in usages)
    names = {name for u in usages for name in u["cpu_s"]}
    cpu = {name: round(sum(u["cpu_s"].get(name, 0.0) for u in usages), 2) for name in names}
    busy = [u["machine_busy_pct"] * u["wall_s"] for u in usages if "machine_busy_pct" in u]
    return {
        "wall_s": round(wall, 2),
        "cpu_s": cpu,
        "cpu_share_pct": {name: round(100 * value / wall, 1) for name, value in cpu.items()},
        **({"machine_busy_pct": round(sum(busy) / wall, 1)} if busy else {}),
        "passes": usages,
    }


def _sse_pass(
    services: Services,
    table: str,
    clients: int,
    commits: int,
    pause_s: float,
    kind: str,
    around: tuple[Callable[[], None], Callable[[], None]] | None,
    tag: str,
) -> dict[str, Any]:

    config = services.config
    name = table_name(table).qualified
    progress(f"{clients:,} SSE client(s) ({kind}) on {name}")
    client = ClientProcess(services.url, table, clients, kind)
    probe: RedisProbe | None = None
    prefix = f"s{clients}{tag}"
    try:
        client.wait(client.ready, "connected", 300)
        connected = scrape(services.url)
        progress(
            f"  connected ({connected.get('segcat_serve_sse_clients', 0):.0f} streams open on the server)"
        )
        probe = RedisProbe(config, table)
        sends: dict[int, tuple[int, int]] = {}
        counter = 0
        with load_catalog(config).load_table(table, writer_id=f"bench-serve-{clients}") as writer:

            def one() -> int:
                nonlocal counter
                counter += 1
                return writer.append([make_segment(prefix, counter)])

            services.wait_materialized(table, one(), 120)  # the materializer has the table
            warm_deadline = time.monotonic() + 120
            while not client.warmed.is_set():
                client.warm_target.value = one()
                client.warmed.wait(1.0)
                if time.monotonic() > warm_deadline:
                    raise TimeoutError("no warm-up version reached every SSE client")
            warm_commits = counter
            time.sleep(1.0)
            cpu = CpuWatch(services.pids(config))
            if around is not None:
                around[0]()
            cpu.start()
            client.timing.set()
            began = time.perf_counter()
            for k in range(commits):
                due = began + k * pause_s
                if (wait := due - time.perf_counter()) > 0:
                    time.sleep(wait)
                sent = time.time_ns()
                version = writer.append([make_segment(prefix, counter + 1)])
                counter += 1
                sends[version] = (sent, time.time_ns())
            client.stop_at.value = max(sends)
            client.wait(client.done, "every client has the last version", 120)
            usage = cpu.stop()
            got = client.result()
            if (window := got["info"].get("cpu_window_s")) is not None:  # it has exited by now
                usage["cpu_s"]["clients"] = round(window, 2)
                usage["cpu_share_pct"]["clients"] = round(100 * window / usage["wall_s"], 1)
            if around is not None:
                around[1]()
        seen = probe.result()
        probe = None
    finally:
        client.kill()
        if probe is not None:
            probe.stop.set()
            probe.proc.kill()
    time.sleep(1.0)
    return {
        "sends": sends,
        "got": got,
        "seen": seen,
        "usage": usage,
        "warm_commits": warm_commits,
        "connected": connected,
    }


def _latencies(
    sends: dict[int, tuple[int, int]],
    got: dict[str, Any],
    seen: list[tuple[int, int, int]],
    clients: int,
    commits: int,
    pause_s: float,
    warm_commits: int,
    usage: dict[str, Any],
    before: dict[str, float],
    connected: dict[str, float],
    after: dict[str, float],
) -> Results:
    notified = {v: (t, ts) for v, t, ts in seen}
    from_send: list[float] = []
    from_return: list[float] = []
    from_notification: list[float] = []
    per_version: dict[int, list[int]] = {v: [] for v in sends}
    missing = duplicates = 0
    per_client_p50: list[float] = []
    split: list[tuple[float, float]] = []
    for arrivals in got["arrivals"]:
        by_version: dict[int, int] = {}
        for version, at in arrivals:
            if version in by_version:
                duplicates += 1
            by_version.setdefault(version, at)
        mine: list[float] = []
        for version, (sent, returned) in sends.items():
            at = by_version.get(version)
            if at is None:
                missing += 1
                continue
            from_send.append((at - sent) / 1e6)
            mine.append((at - sent) / 1e6)
            from_return.append((at - returned) / 1e6)
            per_version[version].append(at)
            if version in notified:
                from_notification.append((at - notified[version][0]) / 1e6)
                split.append(((at - sent) / 1e6, (notified[version][0] - sent) / 1e6))
        if mine:
            per_client_p50.append(statistics.median(mine))
    commit_to_notification = [(notified[v][0] - s) / 1e6 for v, (s, _) in sends.items() if v in notified]
    send_to_broker = [notified[v][1] - s / 1e6 for v, (s, _) in sends.items() if v in notified]
    broker_to_notification = [(notified[v][0] / 1e6 - notified[v][1]) for v in sends if v in notified]
    append_ms = [(r - s) / 1e6 for s, r in sends.values()]
    spans = [(max(ts) - min(ts)) / 1e6 for ts in per_version.values() if ts]
    first = [(min(ts) - sends[v][0]) / 1e6 for v, ts in per_version.items() if ts]
    last = [(max(ts) - sends[v][0]) / 1e6 for v, ts in per_version.items() if ts]
    events = after.get("segcat_serve_events_sent_total", 0) - before.get("segcat_serve_events_sent_total", 0)
    split.sort()
    tail = split[max(0, len(split) - max(1, len(split) // 100)) :]  # the slowest 1 % of pairs
    return {
        "clients": clients,
        "commits": commits,
        "pause_s": pause_s,
        "warm_commits": warm_commits,
        "client": got["info"],
        "pairs": len(from_send),
        "missing_pairs": missing,
        "duplicate_events": duplicates,
        "notifications_seen": sum(1 for v in sends if v in notified),
        "commit_to_event": summary(from_send),
        "append_return_to_event": _signed(from_return),
        "append": summary(append_ms),
        "commit_to_notification": summary(commit_to_notification) if commit_to_notification else None,
        "send_to_broker_ts": _signed(send_to_broker) if send_to_broker else None,
        "broker_ts_to_notification": _signed(broker_to_notification) if broker_to_notification else None,
        "notification_to_event": summary(from_notification) if from_notification else None,
        "first_client_per_version": summary(first),
        "last_client_per_version": summary(last),
        "fan_out_span_per_version": summary(spans),
        "per_client_median": summary(per_client_p50) if per_client_p50 else None,
        "slowest_1pct": {
            "pairs": len(tail),
            "commit_to_event_median_ms": round(statistics.median(t for t, _ in tail), 3) if tail else None,
            "commit_to_notification_median_ms": round(statistics.median(n for _, n in tail), 3)
            if tail
            else None,
            "notification_to_event_median_ms": round(statistics.median(t - n for t, n in tail), 3)
            if tail
            else None,
        },
        "cpu": usage,
        "cpu_ms_per_commit": {k: round(v * 1000 / commits, 2) for k, v in usage["cpu_s"].items()},
        "server_metrics": {
            "sse_clients_connected": connected.get("segcat_serve_sse_clients"),
            "sse_clients_after_disconnect": after.get("segcat_serve_sse_clients"),
            "events_sent": events,
            "feeds": after.get("segcat_serve_feeds"),
        },
        "versions": [
            [v, sends[v][0], min(ts), max(ts), len(ts)] for v, ts in sorted(per_version.items()) if ts
        ],
        "samples_commit_to_event_ms": sorted(round(v, 3) for v in from_send)
        if len(from_send) <= 2_000
        else [round(percentile(sorted(from_send), q / 10), 3) for q in range(1, 1001)],
    }


def tick_scenario(services: Services, ns: str, p: Params) -> Results:
    """How the materializer's periodic tick delays notifications, by the number of tables it follows:
    a ``Materializer`` in a thread of this process (the server idle), its ``_tick`` timed, one table
    committed to at the 1-client pace while the others stay idle; commit → Redis notification."""
    from segcat import Catalog
    from segcat.catalog.storage.redis import RedisStore
    from segcat.materializer.service import Materializer
    from segcat.materializer.table_materializer import TableMaterializer

    config = replace(services.config, metrics_port=0)
    catalog = Catalog(config)
    store = RedisStore.from_config(config)
    out: Results = {"commits": p.tick_commits, "pause_s": p.small_pause_s, "runs": {}}
    timings: dict[str, list[float]] = {}
    originals = {
        (Materializer, "_tick"): Materializer._tick,
        (TableMaterializer, "tick"): TableMaterializer.tick,
        (TableMaterializer, "check_redis"): TableMaterializer.check_redis,
    }

    def timed(label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                timings.setdefault(label, []).append((time.perf_counter() - began) * 1000)

        return run

    for (owner, attr), fn in originals.items():
        setattr(owner, attr, timed(f"{owner.__name__}.{attr}", fn))
    try:
        plan = [(count, None) for count in p.tick_tables] + [(max(p.tick_tables), "10")]
        for count, fetch_wait in plan:
            prefix = f"{ns}_tick{count}" + ("" if fetch_wait is None else f"w{fetch_wait}")
            run_config = (
                config
                if fetch_wait is None
                else replace(config, kafka={**config.kafka, "fetch.wait.max.ms": fetch_wait})
            )
            names = [f"{prefix}.t{i:03d}" for i in range(count)]
            for name in names:
                catalog.create_table(name)
            services.extra_tables.extend(names)
            progress(f"materializer tick with {count} table(s), fetch.wait.max.ms {fetch_wait or 'default'}")
            timings.clear()
            service = Materializer(
                run_config,
                group_id=f"bench-serve-{prefix}",
                pattern=rf"^segcat\.{prefix}\..*",
                instance_id=f"bench-serve-{prefix}",
            )
            ready = threading.Event()
            thread = threading.Thread(target=service.run, kwargs={"ready": ready.set}, daemon=True)
            thread.start()
            try:
                ready.wait(60)
                with load_catalog(config).load_table(names[0], writer_id="bench-serve-tick") as writer:
                    first = writer.append([make_segment("tick", 0)])
                    services.wait_materialized(names[0], first, 120)
                    arrived: dict[int, int] = {}
                    listening = threading.Event()
                    listener = threading.Thread(
                        target=_listen, args=(store, names[0], arrived, listening), daemon=True
                    )
                    listener.start()
                    if not listening.wait(30):
                        raise RuntimeError("the notification listener did not subscribe")
                    sends: dict[int, int] = {}
                    timings.clear()
                    began = time.perf_counter()
                    for k in range(p.tick_commits):
                        due = began + k * p.small_pause_s
                        if (wait := due - time.perf_counter()) > 0:
                            time.sleep(wait)
                        sent = time.time_ns()
                        sends[writer.append([make_segment("tick", k + 1)])] = sent
                    wall = time.perf_counter() - began
                    deadline = time.monotonic() + 60
                    while max(sends) not in arrived and time.monotonic() < deadline:
                        time.sleep(0.05)
                    window = time.perf_counter() - began  # until the last notification
                    taken = {label: list(values) for label, values in timings.items()}
                    listening.clear()
                    listener.join(10)
                latencies = [(arrived[v] - t) / 1e6 for v, t in sends.items() if v in arrived]
            finally:
                service.stop.set()
                thread.join(60)
            ticks = taken.get("Materializer._tick", [])
            inner = sum(taken.get("TableMaterializer.tick", [])) + sum(
                taken.get("TableMaterializer.check_redis", [])
            )
            key = str(count) if fetch_wait is None else f"{count}, fetch.wait.max.ms={fetch_wait}"
            out["runs"][key] = {
                "tables": count,
                "fetch_wait_max_ms": fetch_wait,
                "commit_to_notification": summary(latencies),
                "missing": len(sends) - len(latencies),
                "ticks": len(ticks),
                "tick": summary(ticks) if ticks else None,
                "tick_share_pct": round(100 * sum(ticks) / 1000 / window, 1),
                "tick_inner_ms_total": round(inner, 1),
                "tick_watermarks_ms_total": round(sum(ticks) - inner, 1),
                "wall_s": round(wall, 2),
                "window_s": round(window, 2),
            }
            tick = out["runs"][key]["tick"] or {}
            progress(
                f"  {count} table(s): tick median {tick.get('median_ms', 0):.0f} ms, commit → notification "
                f"p99 {percentile(sorted(latencies), 99):.1f} ms"
            )
    finally:
        for (owner, attr), fn in originals.items():
            setattr(owner, attr, fn)
    return out


def _listen(store: Any, table: str, arrived: dict[int, int], listening: threading.Event) -> None:
    """Record when each version's notification arrives, until ``listening`` is cleared."""
    with contextlib.closing(store.subscribe(table)) as sub:
        listening.set()
        while listening.is_set():
            event = sub.get(timeout=0.1)
            if event is not None:
                arrived.setdefault(event.version, time.time_ns())


def profile_scenario(services: Services, table: str, p: Params, workdir: Path) -> Results:
    """The big SSE scenario again (fewer commits) on a server restarted under cProfile: where the
    event loop spends its time per delivered event. Its latencies are not the reference (cProfile
    slows every Python call)."""
    stats = workdir / "serve.prof"
    services.stop_server()
    services.start_server(profile_to=stats)
    commits = max(10, p.big_commits // 3)
    server = services.server
    assert server is not None

    def start() -> None:
        server.send_signal(signal.SIGUSR1)

    def stop() -> None:
        server.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 60
        while not stats.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.0)  # the dump may still be being written

    measured = sse_scenario(services, table, p.big_clients, commits, p.big_pause_s, p.client, (start, stop))
    services.stop_server()
    events = measured["pairs"]
    prof = runner.profile_file(stats, top=40, focus=PROFILE_FOCUS) if stats.exists() else None
    services.start_server()  # anything after this scenario gets the plain server back
    return {
        "clients": p.big_clients,
        "commits": commits,
        "pairs": events,
        "commit_to_event": measured["commit_to_event"],
        "fan_out_span_per_version": measured["fan_out_span_per_version"],
        "cpu": measured["cpu"],
        "profile": prof,
        "note": "the event loop's thread from the first timed commit until every client had the last one",
    }


def gc_scenario(services: Services, table: str, p: Params, workdir: Path) -> Results:
    """The big SSE scenario on ``segcat serve`` with a ``gc.callbacks`` hook: the collector's pauses
    in the server while the timed commits run (the hook itself costs a call per collection)."""
    out_file = workdir / "gc.json"
    services.stop_server()
    services.start_server(gc_to=out_file)
    server = services.server
    assert server is not None

    def start() -> None:
        server.send_signal(signal.SIGUSR1)

    def stop() -> None:
        server.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + 30
        while not out_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)

    try:
        measured = sse_scenario(
            services, table, p.big_clients, p.big_commits, p.big_pause_s, p.client, (start, stop)
        )
    finally:
        services.stop_server()
        services.start_server()
    found = json.loads(out_file.read_text()) if out_file.exists() else {"pauses": []}
    by_generation: dict[str, Any] = {}
    for generation in (0, 1, 2):
        pauses = sorted(ms_ for gen, ms_, _ in found["pauses"] if gen == generation)
        by_generation[str(generation)] = {
            "count": len(pauses),
            "total_ms": round(sum(pauses), 1),
            "max_ms": round(pauses[-1], 1) if pauses else None,
            "median_ms": round(statistics.median(pauses), 2) if pauses else None,
        }
    hit = []
    for generation, pause_ms, ended in found["pauses"]:
        if generation != 2:
            continue
        start_ns, end_ns = (ended - pause_ms / 1000) * 1e9, ended * 1e9
        for version, sent, _, last, _ in measured["versions"]:
            if sent < end_ns and last > start_ns:  # the version was in flight during the pause
                hit.append(
                    {
                        "pause_ms": round(pause_ms, 1),
                        "version": version,
                        "last_ms": round((last - sent) / 1e6, 1),
                    }
                )
    return {
        **measured,
        "gc": {
            "threshold": found.get("threshold"),
            "by_generation": by_generation,
            "pauses": found["pauses"],
            "versions_in_flight_during_gen2": hit,
        },
    }


PROFILE_FOCUS = (
    *("_fan_out", "follow", "_chained", "stream", "_event", "version_event", "asdict", "dumps"),
    *("_stream_response", "_send_with_timeout", "ensure_bytes", "encode", "send", "write", "put_nowait"),
    *("__call__", "observed", "get", "_ping"),
)


# --------------------------------------------------------------------------- 2. snapshot


def build_snapshot_table(services: Services, table: str, segments: int, per_commit: int) -> Results:

    commit_ms: list[float] = []
    version = -1
    with load_catalog(services.config).load_table(table, writer_id="bench-serve-snapshot") as writer:
        for start in range(0, segments, per_commit):
            batch = [make_segment("snap", i) for i in range(start, min(start + per_commit, segments))]
            began = time.perf_counter()
            version = writer.append(batch)
            commit_ms.append((time.perf_counter() - began) * 1000)
    began = time.perf_counter()
    services.wait_materialized(table, version, 300)
    from segcat.catalog.storage.redis import RedisStore

    head = RedisStore.from_config(services.config).head(table)
    return {
        "keyframe_version": None if head is None else head.keyframe_version,
        "commits": len(commit_ms),
        "per_commit": per_commit,
        "append_median_ms": round(statistics.median(commit_ms), 1),
        "version": version,
        "materialized_after_s": round(time.perf_counter() - began, 2),
    }


def snapshot_scenario(services: Services, table: str, p: Params) -> Results:
    import httpx
    import pyarrow as pa

    name = table_name(table).qualified
    progress(f"building {name}: {p.snapshot_segments:,} live segments in commits of {p.per_commit:,}")
    built = build_snapshot_table(services, table, p.snapshot_segments, p.per_commit)
    time.sleep(2.0)
    base = f"{services.url}/api/tables/{name}/snapshot"
    http = httpx.Client(timeout=120.0)
    full_limit = max(p.snapshot_segments, 1_000)

    def json_full() -> tuple[int, int, dict[str, Any]]:
        answer = http.get(base, params={"limit": full_limit})
        answer.raise_for_status()
        body = answer.content
        return 1, len(body), {"body": body}

    def json_page() -> tuple[int, int, dict[str, Any]]:
        answer = http.get(base)
        answer.raise_for_status()
        return 1, len(answer.content), {"body": answer.content}

    def json_paged() -> tuple[int, int, dict[str, Any]]:
        url: str | None = f"{base}?limit={p.json_page}"
        requests = size = 0
        bodies = []
        while url is not None:
            answer = http.get(url if url.startswith("http") else f"{services.url}{url}")
            answer.raise_for_status()
            requests += 1
            size += len(answer.content)
            bodies.append(answer.content)
            url = json.loads(answer.content)["next"]  # needed to go on: part of the request time
        return requests, size, {"bodies": bodies}

    def arrow() -> tuple[int, int, dict[str, Any]]:
        answer = http.get(base, headers={"Accept": ARROW})
        answer.raise_for_status()
        return 1, len(answer.content), {"body": answer.content, "headers": dict(answer.headers)}

    def decode_json(found: dict[str, Any]) -> int:
        if "bodies" in found:
            return sum(len(json.loads(b)["segments"]) for b in found["bodies"])
        return len(json.loads(found["body"])["segments"])

    def decode_arrow(found: dict[str, Any]) -> int:
        return int(pa.ipc.open_stream(found["body"]).read_all().num_rows)

    variants: dict[
        str, tuple[Callable[[], tuple[int, int, dict[str, Any]]], Callable[[dict[str, Any]], int]]
    ] = {
        "json_all": (json_full, decode_json),
        "json_default_page": (json_page, decode_json),
        "json_paged": (json_paged, decode_json),
        "arrow": (arrow, decode_arrow),
    }
    samples: dict[str, dict[str, list[float]]] = {k: {"request": [], "decode": []} for k in variants}
    facts: dict[str, dict[str, Any]] = {}
    metrics_before = scrape(services.url)
    for round_ in range(p.snapshot_reps + 1):
        for key, (fetch, decode) in variants.items():
            services.check_alive()
            began = time.perf_counter()
            requests, size, found = fetch()
            fetched = time.perf_counter()
            rows = decode(found)
            decoded = time.perf_counter()
            if round_ == 0:  # warm-up round: checks and facts only
                facts[key] = {"requests": requests, "bytes": size, "rows": rows}
                if key == "json_all":
                    first = json.loads(found["body"])
                    facts[key].update(
                        origin=first["origin"],
                        version=first["version"],
                        live_segments=first["live_segments"],
                        next=first["next"],
                    )
                if key == "arrow":
                    headers = found["headers"]
                    facts[key].update(
                        content_type=headers.get("content-type"),
                        version=headers.get("x-segcat-version"),
                        live_segments=headers.get("x-segcat-live-segments"),
                        columns=pa.ipc.open_stream(found["body"]).schema.names,
                    )
                continue
            samples[key]["request"].append((fetched - began) * 1000)
            samples[key]["decode"].append((decoded - fetched) * 1000)
            del found
    metrics_after = scrape(services.url)
    http.close()
    out: Results = {"table": name, "segments": p.snapshot_segments, "build": built, "variants": {}}
    for key in variants:
        req, dec = samples[key]["request"], samples[key]["decode"]
        total = [a + b for a, b in zip(req, dec, strict=True)]
        out["variants"][key] = {
            **facts[key],
            "request": summary(req),
            "decode": summary(dec),
            "total": summary(total),
        }
    out["server_histogram"] = {
        k: metrics_after[k] - metrics_before.get(k, 0) for k in metrics_after if "request_seconds" in k
    }
    out["full_limit"] = full_limit
    out["paged_limit"] = p.json_page
    out["server_steps"] = server_steps(services.config, name, full_limit, p.snapshot_reps)
    return out


def server_steps(config: Config, name: str, limit: int, reps: int) -> Results:
    """The snapshot route's steps redone in this process, as ``tables_api.snapshot`` runs them
    (medians): where the server's time goes. Not the server's own timings: no HTTP, no threads."""
    import pyarrow as pa
    from fastapi.encoders import jsonable_encoder
    from fastapi.responses import JSONResponse

    from segcat.catalog.read.table import Tables
    from segcat.server import views

    opened = Tables(config).open(name)  # the server's read side, as `segcat serve` holds it
    steps: dict[str, list[float]] = {}

    def clock(label: str, began: float) -> float:
        now = time.perf_counter()
        steps.setdefault(label, []).append((now - began) * 1000)
        return now

    same: bool | None = None
    sizes: dict[str, int] = {}
    for round_ in range(reps + 1):
        t = time.perf_counter()
        snap = opened.snapshot(None, None)
        t = clock(SNAPSHOT_STEP, t)
        page = snap.segment_page(None, limit)
        t = clock(f"JSON: `segment_page(None, {limit:,})` (Avro-decodes each segment to a `Segment`)", t)
        rendered = views.segments(page)
        t = clock("JSON: `views.segments` (`segment_to_json` per segment)", t)
        encoded = jsonable_encoder({"segments": rendered})
        t = clock("JSON: FastAPI's `jsonable_encoder` of the returned dict", t)
        body = JSONResponse(encoded).body
        t = clock("JSON: `JSONResponse` render (`json.dumps`)", t)
        segments = snap.segments
        t = clock("Arrow: `snap.segments` (the Arrow table)", t)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, segments.schema) as writer:
            writer.write_table(segments)
        data = sink.getvalue().to_pybytes()
        clock("Arrow: IPC stream write + `to_pybytes`", t)
        if round_ == 0:
            steps.clear()
            same = JSONResponse({"segments": rendered}).body == body
            sizes = {"json_segments_bytes": len(body), "arrow_bytes": len(data)}
        del snap, page, rendered, encoded, body, segments, data
    medians = {k: round(statistics.median(v), 2) for k, v in steps.items()}
    return {
        "median_ms": medians,
        "json_route_ms": round(
            sum(v for k, v in medians.items() if k.startswith("JSON") or k == SNAPSHOT_STEP), 1
        ),
        "arrow_route_ms": round(
            sum(v for k, v in medians.items() if k.startswith("Arrow") or k == SNAPSHOT_STEP), 1
        ),
        "same_bytes_without_encoder": same,
        **sizes,
    }


SNAPSHOT_STEP = "both: `table.snapshot()` (Redis key frame + deltas)"


# --------------------------------------------------------------------------- the run


def source_digest() -> str:
    digest = hashlib.sha256()
    for folder in ("catalog", "producers", "materializer", "server"):
        for path in sorted((runner.REPO / folder).rglob("*.py")):
            digest.update(str(path.relative_to(runner.REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def run(ctx: Context) -> Results:
    p = Params.of(ctx.quick, ctx.args)
    quiet = wait_for_quiet(ctx.args.quiet_load, ctx.args.quiet_wait)
    ns = f"benchserve_{uuid.uuid4().hex[:8]}"
    workdir = Path(tempfile.mkdtemp(prefix="segcat-bench-serve-"))
    digest = source_digest()
    services = Services(ctx.config, workdir, ns)
    tables = {
        "sse1": f"{ns}.sse{p.small_clients}",
        "sse1000": f"{ns}.sse{p.big_clients}",
        "snapshot": f"{ns}.snapshot",
        "profile": f"{ns}.profiled{p.big_clients}",
        "gc": f"{ns}.gc{p.big_clients}",
    }
    out: Results = {"params": asdict(p), "namespace": ns, "packages": _packages(), "quiet": quiet}
    out["other_work_at_start"] = busy_processes(exclude=(os.getpid(),))
    created: list[str] = []
    try:
        from segcat import Catalog

        services.start_redis()
        catalog = Catalog(services.config)
        for scenario in ctx.only:
            if scenario in tables:
                catalog.create_table(tables[scenario])
                created.append(tables[scenario])
        out["server_start_s"] = round(services.start_server(), 2)
        progress(f"segcat serve at {services.url} (up in {out['server_start_s']:.1f} s)")
        for scenario in ctx.only:
            started, load = time.perf_counter(), runner.loadavg()
            if scenario != "tick":
                services.start_materializer(tables[scenario])
            if scenario == "tick":
                out[scenario] = tick_scenario(services, ns, p)
            elif scenario == "snapshot":
                out[scenario] = snapshot_scenario(services, tables[scenario], p)
            elif scenario == "profile":
                out[scenario] = profile_scenario(services, tables[scenario], p, workdir)
            elif scenario == "gc":
                out[scenario] = gc_scenario(services, tables[scenario], p, workdir)
            else:
                small = scenario == "sse1"
                out[scenario] = sse_scenario(
                    services,
                    tables[scenario],
                    p.small_clients if small else p.big_clients,
                    p.small_commits if small else p.big_commits,
                    p.small_pause_s if small else p.big_pause_s,
                    p.client,
                    repeats=p.repeats,
                )
            services.check_alive()
            services.stop_materializer()
            out[scenario]["server_rss_mb"] = _rss_mb(services.server.pid if services.server else None)
            out[scenario]["scenario_s"] = round(time.perf_counter() - started, 1)
            out[scenario]["loadavg"] = {"start": load, "end": runner.loadavg()}
            progress(f"{scenario} done in {out[scenario]['scenario_s']:.0f} s")
        mine = tuple(pid for pid in services.pids(services.config).values() if pid is not None)
        out["other_work_at_end"] = busy_processes(
            exclude=(*mine, services.redis.proc.pid if services.redis.proc else 0)
        )
        after = source_digest()
        out["source_digest"] = {"start": digest, "end": after, "changed": after != digest}
        if after != digest:
            progress(f"WARNING: segcat's source changed during the run ({digest} → {after})")
    finally:
        services.stop()
        out["server_log"] = log_errors(workdir / "serve.log")
        out["findings"] = findings(out)
        if ctx.args.keep:
            progress(f"kept tables {created} and files under {workdir}")
        else:
            for name in [*created, *services.extra_tables]:
                with contextlib.suppress(Exception):
                    TopicAdmin(services.config).delete(table_name(name))
            shutil.rmtree(workdir, ignore_errors=True)
    return out


def log_errors(path: Path) -> dict[str, Any]:
    """ERROR lines in the server's JSON log, counted by message."""
    messages: dict[str, int] = {}
    if path.exists():
        for line in path.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError, AttributeError):
                record = json.loads(line)
                if record.get("level") in ("error", "critical"):
                    text = f"{record.get('logger')}: {_last_line(str(record.get('msg')))}"
                    if record.get("exc"):
                        text += f" ({_last_line(str(record['exc']))})"
                    messages[text] = messages.get(text, 0) + 1
    return {"error_lines": sum(messages.values()), "messages": messages}


def _last_line(text: str) -> str:
    """A traceback's last line (the exception), or a message's first."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    found = lines[-1] if lines[0].startswith("Traceback") else lines[0]
    return found if len(found) <= 160 else found[:157] + "…"


def findings(out: Results) -> list[str]:
    """What the run showed about the server beside the figures (contract vs behaviour)."""
    from segcat.server import tables_api

    found = []
    snap = out.get("snapshot")
    doc = (runner.REPO / "docs" / "HTTP_API.md").read_text()
    if snap and snap["full_limit"] > 10_000 and "at most 10,000" in doc:
        found.append(
            f"`?limit={snap['full_limit']:,}` was answered with all {snap['variants']['json_all']['rows']:,} "
            f"segments, though docs/HTTP_API.md says `limit` is at most 10,000: the code's bound "
            f"(`tables_api.MAX_PAGE`) is {tables_api.MAX_PAGE:,}."
        )
    return found


def _rss_mb(pid: int | None) -> dict[str, float] | None:
    if pid is None:
        return None
    found = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                found[line.split(":")[0]] = round(int(line.split()[1]) / 1024, 1)
    return found


def _packages() -> dict[str, str]:
    names = ("fastapi", "starlette", "uvicorn", "uvloop", "httptools", "sse-starlette", "httpx", "redis")
    return {name: runner.package_version(name) for name in names}


# --------------------------------------------------------------------------- targets and words


def evaluate(results: Results) -> None:
    big = get(results, "params", "big_clients") or 1000
    results["targets"] = [
        report.target(
            "commit → SSE event p99, 1 client",
            get(results, "sse1", "commit_to_event", "p99_ms"),
            TARGET_P99_1_MS,
            "ms",
        ),
        report.target(
            f"commit → SSE event p99, {big:,} clients",
            get(results, "sse1000", "commit_to_event", "p99_ms"),
            TARGET_P99_1000_MS,
            "ms",
        ),
    ]


def _kb(n: float | None) -> str:
    if n is None:
        return "–"
    return f"{n / 1e6:,.1f} MB" if n >= 1e6 else f"{n / 1e3:,.1f} kB"


def _p50_p99(s: dict[str, Any] | None) -> tuple[str, str]:
    return ("–", "–") if not s else (ms(s["median_ms"]), ms(s["p99_ms"]))


def _pct(part: float | None, whole: float | None) -> str:
    return "–" if part is None or not whole else f"{100 * part / whole:.0f} %"


SSE_STAGES = (
    ("append", "`append()` call (produce, delivery report, verdict)"),
    ("send_to_broker_ts", "commit start → broker timestamp (ms resolution)"),
    ("broker_ts_to_notification", "broker timestamp → the materializer's Redis notification"),
    ("commit_to_notification", "commit start → Redis notification"),
    ("notification_to_event", "Redis notification → SSE event at the client (all pairs)"),
    ("first_client_per_version", "commit start → the first client's event, per version"),
    ("last_client_per_version", "commit start → the last client's event, per version"),
    ("fan_out_span_per_version", "fan-out span: last − first client, per version"),
    ("append_return_to_event", "`append()` return → event (all pairs)"),
)
PROCS = ("server", "clients", "materializer", "broker", "benchmark")


def render(results: Results) -> str:
    pk = results.get("packages", {})
    server = (
        f"`segcat serve`, one process: uvicorn {pk.get('uvicorn')} (uvloop {pk.get('uvloop')}, "
        f"httptools {pk.get('httptools')}), FastAPI {pk.get('fastapi')}, "
        f"sse-starlette {pk.get('sse-starlette')}"
    )
    around = (
        "`segcat materializer` (own process), a private `redis-server`, the SSE clients in one process "
        "(asyncio on uvloop), Kafka of the local stack"
    )
    lines = report.head(
        results,
        "HTTP API and SSE",
        "all scenarios in one run",
        [("Server", server), ("Around it", around)],
    )
    if other := results.get("other_work_at_start"):
        listed = "; ".join(f"`{o['command']}` {o['cpu_pct']} %" for o in other[:5])
        lines += ["", f"Other work on the machine when the run started (CPU over 3 s): {listed}."]
    lines += ["", "### Targets", "", *report.targets_table(results.get("targets", []), ms)]
    sse = [results[k] for k in ("sse1", "sse1000") if k in results]
    for key in ("sse1", "sse1000"):
        if key in results:
            results[key]["label"] = f"{results[key]['clients']:,}"
    if sse:
        lines += _sse_section(sse)
    if prof := results.get("profile"):
        lines += _profile_section(prof)
    if gc_run := results.get("gc"):
        lines += _gc_section(gc_run)
    if tick := results.get("tick"):
        lines += _tick_section(tick)
    if snap := results.get("snapshot"):
        lines += _snapshot_section(results, snap)
    lines += ["", *_observations(results), "", *_suggestions(results), "", *_method(results)]
    return "\n".join(lines)


def _sse_section(sse: list[Results]) -> list[str]:
    lines = [
        "",
        "### 1. Commit → SSE event",
        "",
        "Latency of each (client, version) pair: when the client process read the event off its socket − "
        "just before `Table.append()` was called (wall clock; every process on one machine).",
        "",
        *table(
            ("Clients", "Timed commits (pace)", "Pairs", "p50", "p90", "p99", "Max", "Missing"),
            [
                (
                    r["label"],
                    f"{r['commits']}"
                    + (f" in {len(r['passes'])} passes" if len(r.get("passes", [])) > 1 else "")
                    + f" ({r['pause_s'] * 1000:.0f} ms apart)",
                    f"{r['pairs']:,}",
                    ms(r["commit_to_event"]["median_ms"]),
                    ms(r["commit_to_event"]["p90_ms"]),
                    ms(r["commit_to_event"]["p99_ms"]),
                    ms(r["commit_to_event"]["max_ms"]),
                    f"{r['missing_pairs']:,}",
                )
                for r in sse
            ],
        ),
        "",
        *_passes_table(sse),
        "Where the time goes, p50 / p99 of each stage. The *Redis notification* is when a plain Redis "
        "subscriber (a process of its own, on the table's channel) received the materializer's PUBLISH, "
        "the message the server's feed waits for too.",
        "",
    ]
    header = ["Stage"]
    for r in sse:
        header += [f"{r['label']}: p50", f"{r['label']}: p99"]
    rows = []
    for key, label in SSE_STAGES:
        cells = [label]
        for r in sse:
            cells += list(_p50_p99(r.get(key)))
        rows.append(cells)
    lines += table(header, rows)
    lines += [
        "",
        "The slowest 1 % of pairs (medians within them):",
        "",
        *table(
            ("Clients", "Pairs", "commit → event", "commit → notification", "notification → event"),
            [
                (
                    r["label"],
                    f"{r['slowest_1pct']['pairs']:,}",
                    ms(r["slowest_1pct"]["commit_to_event_median_ms"]),
                    ms(r["slowest_1pct"]["commit_to_notification_median_ms"]),
                    ms(r["slowest_1pct"]["notification_to_event_median_ms"]),
                )
                for r in sse
            ],
        ),
        "",
        "CPU while the timed commits ran. *Machine busy*: the share of both cores in use (`/proc/stat`); "
        "the processes: their CPU seconds ÷ wall seconds (100 % = one core); *per event*: the server's CPU "
        "seconds over the (client, version) pairs delivered (with one client mostly work that is not per "
        "event: the feeds' watchdog and pollers):",
        "",
        *table(
            ("Clients", "Wall", "Machine busy", *PROCS, "Server CPU per event"),
            [
                (
                    r["label"],
                    f"{r['cpu']['wall_s']:.1f} s",
                    f"{r['cpu'].get('machine_busy_pct', 0):.0f} %",
                    *(f"{r['cpu']['cpu_share_pct'].get(k, 0):.0f} %" for k in PROCS),
                    _per_event(r),
                )
                for r in sse
            ],
        ),
    ]
    return lines


def _passes_table(sse: list[Results]) -> list[str]:
    rows = [
        (
            r["label"],
            str(number),
            ms(one["commit_to_event"]["median_ms"]),
            ms(one["commit_to_event"]["p99_ms"]),
            ms(one["commit_to_event"]["max_ms"]),
            ms(one["fan_out_span_per_version"]["p99_ms"]),
            "–" if one["server_cpu_us_per_event"] is None else f"{one['server_cpu_us_per_event']:,.0f} µs",
        )
        for r in sse
        if len(r.get("passes", [])) > 1
        for number, one in enumerate(r["passes"], 1)
    ]
    if not rows:
        return []
    return [
        "Each pass alone (a fresh client process, warm-up commits, then the timed ones; the rows above "
        "pool the passes):",
        "",
        *table(("Clients", "Pass", "p50", "p99", "Max", "Fan-out span p99", "Server CPU per event"), rows),
        "",
    ]


def _per_event(r: Results) -> str:
    cpu = r["cpu"]["cpu_s"].get("server")
    return "–" if cpu is None or not r["pairs"] else f"{cpu * 1e6 / r['pairs']:,.0f} µs"


IDLE = ("asyncio/runners.py", "select", "epoll", "run_forever", "run_until_complete")
"""Profile rows that are the event loop waiting (uvloop's C loop counts its idle time as its own)."""


def _busy_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if not any(word in r["function"] for word in IDLE)]


def _profile_section(prof: Results) -> list[str]:
    p = prof.get("profile") or {}
    lines = [
        "",
        f"### Where the server's event loop spends its time ({prof['clients']:,} clients, cProfile)",
        "",
        f"The {prof['clients']:,}-client scenario once more ({prof['commits']} commits, "
        f"{prof['pairs']:,} pairs) on a server restarted with a cProfile window (SIGUSR1 / SIGUSR2) "
        "from the first timed commit until every client had the last version. cProfile sees the event "
        "loop's thread (accepting, the fan-out, sse-starlette, uvicorn's writes), not the feeds' watcher "
        "threads. Under the profiler: commit → event p50 "
        f"{ms(prof['commit_to_event']['median_ms'])}, p99 {ms(prof['commit_to_event']['p99_ms'])}. "
        "Totals over the window in ms; the loop's idle wait is left out.",
        "",
    ]
    if p:
        own = {**p, "by_own_time": _busy_rows(p["by_own_time"])}
        lines += report.profile_table(own, "by_own_time", 12)
        lines += ["", "By cumulative time:", ""]
        lines += report.profile_table({"by_cumulative_time": _busy_rows(p["by_cumulative_time"])}, top=12)
    return lines


def _slowest(r: Results) -> list[tuple[int, float]]:
    """(version, commit start → last client's event in ms), slowest first."""
    return sorted(((v, (last - sent) / 1e6) for v, sent, _, last, _ in r["versions"]), key=lambda x: -x[1])


def _gc_section(r: Results) -> list[str]:
    gc_ = r["gc"]
    rows = [
        (g, f"{d['count']:,}", ms(d["total_ms"]), ms(d["median_ms"]), ms(d["max_ms"]))
        for g, d in gc_["by_generation"].items()
    ]
    ranked = [v for v, _ in _slowest(r)]
    hits = [
        f"version {h['version']} (commit start → its last client {ms(h['last_ms'])}, "
        f"{_rank(ranked.index(h['version']) + 1)} of {len(ranked)})"
        for h in gc_["versions_in_flight_during_gen2"]
        if h["version"] in ranked
    ]
    return [
        "",
        f"### Garbage collection in the server ({r['clients']:,} clients)",
        "",
        f"The {r['clients']:,}-client scenario once more ({r['commits']} commits, same pace) on "
        "`segcat serve` "
        "started with a `gc.callbacks` hook that times every collection, over the timed commits "
        f"(threshold {tuple(gc_['threshold'] or ())}). Under the hook: commit → event p50 "
        f"{ms(r['commit_to_event']['median_ms'])}, p99 {ms(r['commit_to_event']['p99_ms'])}, fan-out span "
        f"p99 {ms(r['fan_out_span_per_version']['p99_ms'])}.",
        "",
        *table(("Generation", "Collections", "Total pause", "Median", "Max"), rows),
        "",
        "In flight during a generation-2 collection: "
        + ("; ".join(hits) if hits else "no timed version")
        + ".",
    ]


def _rank(n: int) -> str:
    """1 → "the slowest", 2 → "the 2nd slowest", …"""
    if n == 1:
        return "the slowest"
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"the {n}{suffix} slowest"


def _tick_section(tick: Results) -> list[str]:
    runs = list(tick["runs"].values())
    return [
        "",
        "### The materializer's tick, by the number of tables it follows",
        "",
        "Every second the materializer's loop runs `_tick`: for each table it follows, `tick()` and "
        "`check_redis()`, then `consumer.get_watermark_offsets(..., cached=False)` (a ListOffsets round "
        "trip to the broker); no record is consumed meanwhile. Measured with a `Materializer` in a thread "
        f"of the benchmark process (the server idle): {tick['commits']} one-segment commits to one table on "
        f"a fixed schedule {tick['pause_s'] * 1000:.0f} ms apart, the other tables idle; commit start → "
        "Redis notification (a subscriber thread in the same process).",
        "",
        *table(
            (
                "Tables followed",
                "Tick (median)",
                "Tick (max)",
                "Loop time in ticks",
                "of which watermark queries",
                "commit → notification p50",
                "p99",
            ),
            [
                (
                    f"{r['tables']:,}"
                    + (
                        ""
                        if r.get("fetch_wait_max_ms") is None
                        else f" (`fetch.wait.max.ms={r['fetch_wait_max_ms']}`)"
                    ),
                    ms((r["tick"] or {}).get("median_ms")),
                    ms((r["tick"] or {}).get("max_ms")),
                    f"{r['tick_share_pct']:.0f} %",
                    _pct(
                        r["tick_watermarks_ms_total"],
                        r["tick_watermarks_ms_total"] + r["tick_inner_ms_total"],
                    ),
                    ms(r["commit_to_notification"]["median_ms"]),
                    ms(r["commit_to_notification"]["p99_ms"]),
                )
                for r in runs
            ],
        ),
    ]


SNAPSHOT_LABELS = {
    "json_all": "JSON, one page (`?limit={full:,}`)",
    "json_paged": "JSON, pages of {paged:,} following `next`",
    "json_default_page": "JSON, the default page (1,000)",
    "arrow": "Arrow IPC stream (`Accept: " + ARROW + "`)",
}


def _snapshot_section(results: Results, snap: Results) -> list[str]:
    v = snap["variants"]
    build = snap["build"]
    reps = results["params"]["snapshot_reps"]
    lines = [
        "",
        f"### 2. Snapshot of {snap['segments']:,} live segments: JSON vs Arrow",
        "",
        f"The table: {build['commits']} appends of {build['per_commit']:,} segments (id, path, partition, "
        f"size, rows, min/max/null count of an INT and a STRING column; median append "
        f"{ms(build['append_median_ms'])}); the server answered from `{v['json_all'].get('origin')}`"
        + (
            ""
            if build.get("keyframe_version") is None
            else f" (its key frame at version {build['keyframe_version']} of {build['version']})"
        )
        + ". "
        f"Medians of {reps} rounds (the four requests interleaved, after an untimed round), httpx on a "
        "kept-alive connection from the benchmark process. *Request*: send → the whole body received; "
        "*decode*: `json.loads`, or `pyarrow.ipc.open_stream(body).read_all()`.",
        "",
    ]
    rows = []
    for key in ("json_all", "json_paged", "json_default_page", "arrow"):
        if key not in v:
            continue
        label = SNAPSHOT_LABELS[key].format(full=snap["full_limit"], paged=snap["paged_limit"])
        rows.append(
            (
                label,
                v[key]["requests"],
                f"{v[key]['rows']:,}",
                _kb(v[key]["bytes"]),
                ms(v[key]["request"]["median_ms"]),
                ms(v[key]["decode"]["median_ms"]),
                ms(v[key]["total"]["median_ms"]),
            )
        )
    lines += table(("Request", "Requests", "Segments", "Body", "Request", "Decode", "Total"), rows)
    if "json_all" in v and "arrow" in v:
        j, a = v["json_all"], v["arrow"]
        lines += [
            "",
            f"JSON ÷ Arrow for all {snap['segments']:,} segments: request "
            f"{report.ratio(j['request']['median_ms'], a['request']['median_ms'])}, with decoding "
            f"{report.ratio(j['total']['median_ms'], a['total']['median_ms'])}, body "
            f"{report.ratio(j['bytes'], a['bytes'])}.",
        ]
    steps = snap["server_steps"]
    lines += [
        "",
        "The snapshot route's steps for one answer of all segments, redone in the benchmark process as "
        "`tables_api.snapshot` runs them (no HTTP, no thread pool; medians):",
        "",
        *table(("Step", "Median"), [(k, ms(val)) for k, val in steps["median_ms"].items()]),
    ]
    if steps.get("same_bytes_without_encoder") is not None:
        lines += [
            "",
            "Rendering the page with `JSONResponse` directly, without `jsonable_encoder`, gives "
            + ("the same bytes" if steps["same_bytes_without_encoder"] else "**different** bytes")
            + " (checked in this run).",
        ]
    return lines


def _observations(results: Results) -> list[str]:
    notes: list[str] = []
    for key in ("sse1", "sse1000"):
        if (r := results.get(key)) is not None:
            notes += _sse_notes(r, TARGET_P99_1_MS if key == "sse1" else TARGET_P99_1000_MS)
    if tick := results.get("tick"):
        runs = list(tick["runs"].values())
        listed = "; ".join(
            f"{r['tables']:,} table(s): tick {ms((r['tick'] or {}).get('median_ms'))}, p99 "
            f"{ms(r['commit_to_notification']['p99_ms'])}"
            for r in runs
            if r.get("fetch_wait_max_ms") is None
        )
        fast = [r for r in runs if r.get("fetch_wait_max_ms") is not None]
        notes.append(
            "The materializer stops consuming while it ticks, once a second, and its tick grows with the "
            "tables it follows (one watermark round trip each, queued behind the consumer's fetch): "
            f"{listed}. "
            "A notification due during a tick waits for its end. The SSE scenarios above run a materializer "
            "per table, so they see the one-table tick; a materializer following every table (the default "
            "pattern) holds notifications back by about a second per 20 idle tables."
            + "".join(
                " With `fetch.wait.max.ms` lowered from the 100 ms of segcat's consumer settings to "
                f"{r['fetch_wait_max_ms']} ms (`SEGCAT_KAFKA_FETCH_WAIT_MAX_MS`), {r['tables']:,} tables "
                "tick in "
                f"{ms((r['tick'] or {}).get('median_ms'))} (commit → notification p99 "
                f"{ms(r['commit_to_notification']['p99_ms'])}): each watermark query waits for the "
                "consumer's in-flight fetch to the same broker, which the broker holds up to that long."
                for r in fast
            )
        )
    if (g := results.get("gc")) and (gen2 := g["gc"]["by_generation"].get("2")) and gen2["count"]:
        slow = _slowest(g)
        gen0 = g["gc"]["by_generation"]["0"]
        last3 = ", ".join(ms(x) for _, x in slow[:3])
        notes.append(
            f"Garbage collection: over the {g['cpu']['wall_s']:.0f} s of timed commits with {g['clients']:,} "
            f"connections the server ran {gen2['count']} generation-2 collection(s) of up to "
            f"{ms(gen2['max_ms'])} (every Python thread of the server waits meanwhile) and "
            f"{gen0['count']:,} generation-0 ones ({ms(gen0['total_ms'])} in all). One version is 1 % of "
            "the pairs, so one pause during a fan-out sets the p99: the "
            f"slowest versions' last clients got their event {last3} after the "
            "commit (section above)."
        )
    if (prof := results.get("profile")) and prof.get("profile"):
        top = _busy_rows(prof["profile"]["by_own_time"])[:4]
        listed = ", ".join(f"`{row['function']}` {row['tottime_ms']:,.0f} ms" for row in top)
        notes.append(f"Under cProfile the event loop's largest own times are {listed} (section above).")
    rss = [
        f"{label} {results[key]['server_rss_mb']['VmHWM']:,.0f} MB"
        for key, label in (
            ("sse1", "after 1 client"),
            ("sse1000", "after 1,000 clients"),
            ("snapshot", "after the snapshots"),
        )
        if (results.get(key) or {}).get("server_rss_mb")
    ]
    if rss:
        notes.append(
            "The server's peak resident memory (`VmHWM`, one process for these three): "
            + ", ".join(rss)
            + "."
        )
    if snap := results.get("snapshot"):
        notes += _snapshot_notes(snap)
    if (errors := results.get("server_log")) and errors.get("error_lines"):
        notes.append(
            f"The server's log has {errors['error_lines']} ERROR line(s) in this run: "
            + "; ".join(f"`{m}` ×{n}" for m, n in errors["messages"].items())
            + "."
        )
    notes += results.get("findings", [])
    return ["### Observations", "", *report.bullets(notes)] if notes else []


def _sse_notes(r: Results, target: float) -> list[str]:
    c, n = r["commit_to_event"], r["clients"]
    who = f"{n:,} client{'s' if n > 1 else ''}"
    notes = [
        f"**{who}: p50 {ms(c['median_ms'])}, p99 {ms(c['p99_ms'])}** (target p99 ≤ {ms(target)}: "
        f"{'met' if c['p99_ms'] <= target else '**missed**'}). Median split: commit start → the "
        f"materializer's Redis notification {ms(get(r, 'commit_to_notification', 'median_ms'))} (the "
        f"`append()` call itself {ms(r['append']['median_ms'])}), notification → event at the client "
        f"{ms(get(r, 'notification_to_event', 'median_ms'))}."
    ]
    tail = r["slowest_1pct"]
    if tail["pairs"] and tail["commit_to_notification_median_ms"] is not None:
        upstream = tail["commit_to_notification_median_ms"]
        downstream = tail["notification_to_event_median_ms"]
        side = (
            "before the notification (broker, materializer)"
            if upstream > downstream
            else "after the notification (server fan-out, the client process)"
        )
        notes.append(
            f"{who}, the slowest 1 % of pairs ({tail['pairs']:,}): median "
            f"{ms(tail['commit_to_event_median_ms'])}, "
            f"of which {ms(upstream)} up to the notification and {ms(downstream)} after it: the tail is "
            f"mostly {side}."
        )
    if n > 1:
        share = r["cpu"]["cpu_share_pct"]
        notes.append(
            f"{who}: one version reaches the first client {ms(r['first_client_per_version']['median_ms'])} "
            f"and the last {ms(r['last_client_per_version']['median_ms'])} after the commit started "
            "(medians); "
            f"the fan-out span (last − first) is p50 {ms(r['fan_out_span_per_version']['median_ms'])}, p99 "
            f"{ms(r['fan_out_span_per_version']['p99_ms'])}. The server spent {_per_event(r)} of CPU per "
            f"delivered event, ≈ {_per_version_ms(r)} per version for {n:,} connections, all in one event "
            f"loop (one core at most). While the commits ran both cores were "
            f"{r['cpu'].get('machine_busy_pct', 0):.0f} % busy; in shares of one core: server "
            f"{share.get('server', 0):.0f} %, client process {share.get('clients', 0):.0f} %, broker "
            f"{share.get('broker', 0):.0f} %, materializer {share.get('materializer', 0):.0f} %."
        )
    return notes


def _per_version_ms(r: Results) -> str:
    cpu = r["cpu"]["cpu_s"].get("server")
    return "–" if cpu is None or not r["commits"] else ms(cpu * 1000 / r["commits"])


def _snapshot_notes(snap: Results) -> list[str]:
    v, steps = snap["variants"], snap["server_steps"]
    notes = []
    if "json_all" in v and "arrow" in v:
        notes.append(
            f"**Snapshot of {snap['segments']:,} segments: JSON {ms(v['json_all']['request']['median_ms'])} "
            f"({_kb(v['json_all']['bytes'])}) vs Arrow {ms(v['arrow']['request']['median_ms'])} "
            f"({_kb(v['arrow']['bytes'])})** per request; decoding adds "
            f"{ms(v['json_all']['decode']['median_ms'])} (`json.loads`) vs "
            f"{ms(v['arrow']['decode']['median_ms'])} (pyarrow)."
        )
    medians = steps["median_ms"]
    json_total = steps.get("json_route_ms") or 0
    if json_total:
        parts = [
            f"{label.split(': ', 1)[1].split(' (')[0]} {ms(value)} ({_pct(value, json_total)})"
            for label, value in medians.items()
            if label.startswith(("JSON", "both"))
        ]
        notes.append(
            f"The JSON route is Python per segment: of its {ms(json_total)} in-process, "
            + ", ".join(parts)
            + f". The Arrow route is {ms(steps.get('arrow_route_ms'))}: the snapshot the chain loads is "
            "already an Arrow table, written out as it is."
        )
    return notes


def _suggestions(results: Results) -> list[str]:
    """What the measurements point at (nothing here is implemented by the benchmark)."""
    items = []
    gc_run = results.get("gc")
    if gc_run and (gen2 := gc_run["gc"]["by_generation"].get("2")) and gen2["count"]:
        items.append(
            f"**Keep generation-2 collections out of the fan-out**: one took {ms(gen2['max_ms'])} with 1,000 "
            "connections open. `gc.freeze()` once the server has started (and after clients connect in "
            "bulk) or a higher `gc.set_threshold` for the oldest generation would shorten or space them; "
            "fewer allocations per event (above) make them rarer. Not measured here."
        )
    if (prof := results.get("profile")) and prof.get("profile"):
        items.append(
            "**Fewer layers per write**: every event passes sse-starlette's per-send timeout scope "
            "(`anyio.move_on_after`), three ASGI `send` wrappers (the access log's `observed`, Starlette's "
            "exception and error middlewares) and uvicorn's `send` (cumulative times in the profile above); "
            "with 1,000 clients each costs 1,000 times per version."
        )
    if (snap := results.get("snapshot")) and snap["server_steps"].get("same_bytes_without_encoder"):
        steps = snap["server_steps"]["median_ms"]
        encoder = next((v for k, v in steps.items() if "jsonable_encoder" in k), None)
        decode = next((v for k, v in steps.items() if "segment_page" in k), None)
        items.append(
            f"**JSON snapshots**: return a `JSONResponse` built from `views.segments` (the same bytes; "
            f"saves `jsonable_encoder`, {ms(encoder)} of the route at {snap['segments']:,} segments), and "
            "build "
            "the page's dicts from the snapshot's Arrow columns instead of Avro-decoding each segment "
            f"into a `Segment` ({ms(decode)}); clients that want everything should ask for Arrow."
        )
    if results.get("tick"):
        items.append(
            "**Materializer tick**: the once-a-second `get_watermark_offsets(cached=False)` per table blocks "
            "the consumer loop for about `fetch.wait.max.ms` per table (see its section). One ListOffsets "
            "request for all of an instance's tables, the cached watermarks, or a thread of its own would "
            "take it off the notification path; `check_redis()` also reads each table's whole key frame "
            "from Redis every second to see that it exists."
        )
    if not items:
        return []
    return ["### Suggestions (not implemented here)", "", *report.bullets(items)]


def _method(results: Results) -> list[str]:
    p = results["params"]
    client = (
        "a hand-written `GET` on an asyncio protocol per connection (uvloop) that scans the chunked body "
        "for complete events and stamps `time.time_ns()` when their bytes arrive: the cheapest client "
        "Python offers, so the figures are the server's rather than a client library's"
        if p["client"] == "raw"
        else "`httpx.AsyncClient.stream` per connection and `aiter_lines()`; the arrival is stamped when "
        "the event's blank line is parsed"
    )
    return [
        "### Method",
        "",
        *report.bullets(
            [
                "Processes: the benchmark (one `Table` handle committing; the snapshot requests), "
                "`segcat serve --port P` (one process for the reference scenarios; the profiled, "
                "GC-observed passes each restart it through a `python -c` launcher that adds "
                "its hook and then runs the same command), for each scenario a "
                "`segcat materializer --metrics-port 0` whose "
                "`--pattern` matches that scenario's table alone (consumer group and instance id of its "
                "own: its tick then costs one watermark query, see above), a private `redis-server` "
                "holding only this run's tables, one SSE client process and one Redis subscriber process; "
                "Kafka is the local stack's broker.",
                "Everything shares the 2 CPUs: with 1,000 connections the client process needs CPU for "
                "every event it reads at the same moment the server needs it to write them, and the broker, "
                "the materializer and any other work on the machine (above) compete too. The figures are an "
                "upper bound for a server with a machine of its own.",
                f"SSE clients: {client}. Each client has its own TCP connection to "
                "`/api/tables/<t>/events` without `Last-Event-ID` (it starts at the head); the connections "
                "are opened 64 at a time before any timed commit.",
                "Untimed warm-up commits until every client has received one, then the timed commits on a "
                "fixed schedule (start + k × pace; one segment each, `bench.read_processes.make_segment`). "
                "The client process stops when every client has the last timed version.",
                "Percentiles are nearest-rank over all (client, version) pairs; *missing* counts pairs "
                "never received (a gap-checked feed should have none).",
                "Clock: `time.time_ns()` in every process (one machine, one clock); the broker timestamp "
                "has millisecond resolution.",
                "Snapshot: the JSON route decodes each segment of the page from its Avro bytes into a "
                "`Segment`, turns it into a dict (`segment_to_json`), and FastAPI runs `jsonable_encoder` "
                "and `json.dumps` over the page; the Arrow route writes the snapshot's Arrow table as one "
                "IPC stream. Neither is compressed (no gzip middleware).",
                "The profiled pass's latencies are slowed by cProfile and are not reference figures; the "
                "GC-observed pass adds one Python call per collection.",
            ]
        ),
    ]


def summary_text(results: Results) -> str:
    rows = []
    for key in ("sse1", "sse1000", "profile"):
        if r := results.get(key):
            c = r["commit_to_event"]
            label = "profiled " if key == "profile" else ""
            rows.append(
                f"{label}commit → SSE event, {r['clients']:,} client(s): p50 {ms(c['median_ms'])}, p99 "
                f"{ms(c['p99_ms'])} over {r['pairs']:,} pairs; fan-out span p99 "
                f"{ms(r['fan_out_span_per_version']['p99_ms'])}"
            )
    if snap := results.get("snapshot"):
        for key, variant in snap["variants"].items():
            rows.append(
                f"snapshot {snap['segments']:,} {key:<18} request {ms(variant['request']['median_ms']):>10}, "
                f"decode {ms(variant['decode']['median_ms']):>10}, body {_kb(variant['bytes'])}"
            )
    return "\n".join([*rows, report.targets_text(results.get("targets", []), ms)])


BENCHMARK = runner.Benchmark(
    name="serve",
    module="bench.serve",
    description="segcat serve: commit → SSE event with 1 and 1,000 clients, snapshot JSON vs Arrow.",
    scenarios=SCENARIOS,
    run=run,
    render=render,
    summary=summary_text,
    evaluate=evaluate,
    options=options,
    wait_for_others_s=600.0,
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCHMARK))
