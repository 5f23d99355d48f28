"""Private Kafka stacks for ``bench.kafka_topology``: one per topology, each in a temporary home
with free ports (``segcat.local_stack.private``) and the shared stack's Kafka jars, stopped
whatever happens; and the CPU their nodes use per commit."""

from __future__ import annotations

import contextlib
import logging
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from bench import runner
from bench.commit_runs import CLOCK_TICKS, CpuMeter, process_ticks
from bench.runner import progress
from segcat import local_stack as stack
from segcat.catalog.config import Config
from segcat.catalog.errors import SegcatError
from segcat.local_stack import kafka as stack_kafka
from segcat.local_stack import process
from segcat.local_stack.layout import Layout
from segcat.local_stack.private import private_settings
from segcat.local_stack.settings import StackSettings

_quiet = logging.getLogger("bench.kafka_topology.librdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False
TOPOLOGY_HEAP = "512m"
"""Each node's -Xmx, as in the figures of docs/BENCHMARKS.md ("Kafka topology"), whatever the
local stack's default."""
TOPOLOGIES = {"single": 1, "three": 3}
"""Topology key → number of KRaft nodes."""


def shared_kafka_home() -> Path:
    """The shared stack's home whose Kafka jars a private stack links: ``SEGCAT_HOME``'s (usually
    ``<repo>/.segcat``)."""
    for home in (StackSettings.load().home, runner.REPO / ".segcat"):
        if Layout.of(replace(StackSettings.load(), home=home)).kafka_dist.is_dir():
            return home
    return runner.REPO / ".segcat"


def stack_settings(home: Path, brokers: int, taken: set[int]) -> StackSettings:
    """A plain (not secure) Kafka stack of the benchmark's own on free ports (``taken`` keeps
    the stacks of one run apart before either is up)."""
    return private_settings(
        home,
        jars_from=shared_kafka_home(),
        taken=taken,
        start_timeout_s=180.0,
        brokers=brokers,
        secure=False,
        s3=False,
        redis_cluster=False,
        kafka_heap=TOPOLOGY_HEAP,
    )


@dataclass
class PrivateStack:
    """One running private stack and a client config for it."""

    key: str
    settings: StackSettings
    config: Config
    started_s: float
    _admin: AdminClient | None = None

    @property
    def layout(self) -> Layout:
        return Layout.of(self.settings)

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            conf: dict[str, Any] = {
                **stack_kafka.stack_client_config(self.layout, self.settings),
                "logger": _quiet,
                "log_level": 2,
            }
            self._admin = AdminClient(conf)
        return self._admin

    def partition(self, topic: str, timeout_s: float = 10.0) -> tuple[int, list[int], list[int]]:
        """(leader node id, replicas, in-sync replicas) of the table's partition."""
        part = self.admin.list_topics(topic=topic, timeout=timeout_s).topics[topic].partitions[0]
        return int(part.leader), sorted(int(n) for n in part.replicas), sorted(int(n) for n in part.isrs)

    def node_record(self, node_id: int) -> process.PidRecord:
        """The pid record of node ``node_id`` (1-based), verified as our running process."""
        name = stack_kafka.node_name(self.settings, node_id - 1)
        record = process.read_pid_file(self.layout.pid_file(name))
        if record is None or not process.is_ours(record):
            raise RuntimeError(f"{name} of the {self.key} stack is not running")
        return record

    def node_pids(self) -> list[int]:
        return [self.node_record(n + 1).pid for n in range(self.settings.brokers)]

    def wait_for_isr(self, topic: str, size: int, timeout_s: float = 180.0) -> float:
        """Seconds until the partition's ISR has ``size`` replicas."""
        start = time.monotonic()
        while True:
            with contextlib.suppress(KafkaException, KeyError, IndexError):
                if len(self.partition(topic, 5.0)[2]) >= size:
                    return time.monotonic() - start
            if time.monotonic() - start > timeout_s:
                raise RuntimeError(f"the ISR of {topic} did not reach {size} within {timeout_s:.0f} s")
            time.sleep(0.25)


def client_config(settings: StackSettings, redis_url: str) -> Config:
    env = {
        **stack.client_environment(settings),
        "SEGCAT_HOME": str(settings.home / "client"),
        "SEGCAT_WAREHOUSE": str(settings.home / "warehouse"),
        "SEGCAT_REQUEST_TIMEOUT_S": "30",
        "SEGCAT_REDIS_URL": redis_url,
    }
    return Config.load(env=env)


@contextlib.contextmanager
def private_stacks(keys: list[str], redis_url: str, keep: bool) -> Iterator[dict[str, PrivateStack]]:
    """Start a private stack per key (in order); stop every one of them, and remove their
    homes (unless ``keep``), however the block ends."""
    root = Path(tempfile.mkdtemp(prefix="segcat-topology-"))
    taken: set[int] = set()
    settings = {key: stack_settings(root / key, TOPOLOGIES[key], taken) for key in keys}
    stacks: dict[str, PrivateStack] = {}
    try:
        for key in keys:
            s = settings[key]
            progress(f"starting the private {key} stack ({s.brokers} node(s), {s.bootstrap_servers})")
            start = time.monotonic()
            stack.up(s)
            stacks[key] = PrivateStack(
                key, s, client_config(s, redis_url), round(time.monotonic() - start, 1)
            )
            progress(f"  {key} stack up in {stacks[key].started_s} s")
        yield stacks
    finally:
        for key in keys:
            stop(settings[key])
        if keep:
            progress(f"kept the private stacks' homes (logs, data) under {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def stop(settings: StackSettings) -> None:
    try:
        stopped = stack.down(settings, timeout_s=15.0)
    except SegcatError as exc:  # never mask the run's own error; say what is left
        progress(f"WARNING: could not stop the private stack in {settings.home}: {exc}")
        return
    if stopped:
        progress(f"stopped the private stack in {settings.home.name}: {', '.join(stopped)}")


# --------------------------------------------------------------------------- CPU


class StackMeter(CpuMeter):
    """``CpuMeter`` (machine, writer CPU) plus the CPU of every node of a private stack."""

    def __init__(self, config: Config, pids: list[int]) -> None:
        super().__init__(config)
        self._pids = pids
        self._nodes0: list[int | None] = []

    def start(self) -> None:
        super().start()
        self._nodes0 = [process_ticks(p) for p in self._pids]

    def stop(self, commits: int, client_cpu_ns: int | None = None) -> dict[str, Any]:
        out = super().stop(commits, client_cpu_ns)
        now = [process_ticks(p) for p in self._pids]
        if commits > 0 and self._nodes0 and all(v is not None for v in [*now, *self._nodes0]):
            used = [b - a for a, b in zip(self._nodes0, now, strict=True) if a is not None and b is not None]
            out["brokers_cpu_ms_per_commit"] = round(sum(used) / CLOCK_TICKS * 1000 / commits, 3)
            out["per_node_cpu_ms_per_commit"] = [round(u / CLOCK_TICKS * 1000 / commits, 3) for u in used]
        return out
