"""Services of one's own beside the shared stack, on loopback: free ports, a private stack's
settings and a private ``redis-server``.

Tests and benchmarks that kill, flush, pause or restart a service start their own, so nothing
shared is touched. This module is their one copy of how that is done: ports are found free
(``free_port``) or as a block below the kernel's range for outgoing connections
(``free_port_block``), where a client retrying a stopped server cannot take the server's port as
its own source port (a TCP self-connect) and keep it from coming back.
"""

from __future__ import annotations

import random
import shutil
import socket
import subprocess
import time
from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path
from types import TracebackType
from typing import Any

from segcat.local_stack import process
from segcat.local_stack.errors import StackError
from segcat.local_stack.layout import LOOPBACK, Layout
from segcat.local_stack.probe import redis_answers
from segcat.local_stack.settings import NODE_PORT_STRIDE, StackSettings

REDIS_START_TIMEOUT_S = 10.0
STACK_PORT_STEP = 100
"""Private stacks' base ports are multiples of this, so two stacks' derived ports never interleave."""


def port_is_free(port: int) -> bool:
    """True if a listener could bind ``port`` on loopback right now."""
    with socket.socket() as sock:
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port the kernel reports free on loopback (for a server that is not restarted)."""
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def free_port_block(
    offsets: Sequence[int], *, lowest: int, step: int = 1, taken: Collection[int] = ()
) -> int:
    """A base port ``b`` (``lowest`` ≤ b, a multiple of ``step``, not in ``taken``) with every
    ``b + offset`` free and below the kernel's range for outgoing connections."""
    highest = process.ephemeral_port_range()[0] - max(offsets, default=0) - 1
    if highest <= lowest:
        raise StackError(f"no room for private ports between {lowest} and the outgoing range")
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(lowest, highest, step)
        if base not in taken and all(port_is_free(base + offset) for offset in offsets):
            return base
    raise StackError("no free ports for a private service")


def stack_port_offsets(brokers: int) -> list[int]:
    """Every port a private stack derives from its Kafka base port: each node's client, controller
    and inter-broker port, Redis at +50..+52 (a cluster's three masters) and S3 at +60."""
    nodes = [off + NODE_PORT_STRIDE * node for node in range(brokers) for off in (0, 1, 2)]
    return [*nodes, 50, 51, 52, 60]


def private_settings(
    home: Path, *, jars_from: Path | None = None, taken: set[int] | None = None, **options: Any
) -> StackSettings:
    """Settings of a stack in ``home`` of its own, on free ports; ``options`` override any setting,
    those chosen here included (``brokers=3``, ``secure=True``, ``start_timeout_s=180``, ...).
    With ``jars_from`` (a stack home), its Kafka distribution is linked in, so nothing is fetched
    twice. Base ports in ``taken`` are avoided and the chosen one is added to it."""
    brokers = int(options.get("brokers", 1))
    used = set() if taken is None else taken
    base = free_port_block(stack_port_offsets(brokers), lowest=10_000, step=STACK_PORT_STEP, taken=used)
    used.add(base)
    chosen: dict[str, Any] = {
        "home": home,
        "kafka_port": base,
        "kafka_controller_port": base + 1,
        "redis_port": base + 50,
        "s3_port": base + 60,
        "start_timeout_s": 120.0,
    }
    settings = replace(StackSettings.load(), **{**chosen, **options})
    layout = Layout.of(settings)
    layout.home.mkdir(parents=True, exist_ok=True)
    if jars_from is not None:
        shared = Layout.of(replace(settings, home=jars_from)).kafka_dist
        if shared.is_dir() and not layout.kafka_dist.exists():
            layout.kafka_dist.symlink_to(shared, target_is_directory=True)
    return settings


class PrivateRedis:
    """A ``redis-server`` of one's own on a free loopback port: no persistence, its working files
    in ``workdir``; FLUSHALL, SIGSTOP, kill and restart touch nothing shared.

    ``proc`` is the server's process while it runs (``None`` otherwise)."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.workdir = workdir
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://{LOOPBACK}:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait until it answers PING; StackError if it does not."""
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.workdir.mkdir(parents=True, exist_ok=True)
        argv = [binary, "--port", str(self.port), "--bind", LOOPBACK, "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(
            [*argv, "--dir", str(self.workdir)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + REDIS_START_TIMEOUT_S
        while not redis_answers(self.url, 1.0):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise StackError(f"redis-server on port {self.port} did not answer")
            time.sleep(0.05)

    def flushall(self) -> None:
        import redis

        with redis.Redis.from_url(self.url) as client:
            client.flushall()

    def stop(self) -> None:
        """Kill the server (it keeps nothing worth a clean shutdown) and reap it."""
        proc, self.proc = self.proc, None
        if proc is not None:
            proc.kill()
            proc.wait(10)

    def __enter__(self) -> PrivateRedis:
        self.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
