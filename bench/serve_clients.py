"""The SSE side of ``bench.serve``: a client process holding every SSE connection (a raw
asyncio protocol on uvloop, or httpx) and a Redis subscriber process on the table's channel,
each stamping arrivals with ``time.time_ns()``."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import re
import time
from collections.abc import Callable
from multiprocessing.queues import Queue
from multiprocessing.sharedctypes import Synchronized
from multiprocessing.synchronize import Event
from typing import Any

from bench import runner
from bench.read_processes import CTX
from segcat.catalog.config import Config
from segcat.catalog.protocol.names import table_name

EVENT = re.compile(rb"id: (\d+)\r\nevent: version\r\ndata: [^\r\n]*\r\n\r\n")
"""One version event as sse-starlette writes it (the body is chunked: a chunk holds whole events)."""


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
