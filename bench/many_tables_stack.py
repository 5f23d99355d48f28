"""The private services of ``bench.many_tables``: one KRaft node and Redis on free ports, a
warehouse of their own, and the ``segcat materializer`` / ``segcat serve`` processes over them.

Nothing here touches the shared stack: the broker is started in a temporary home (the Kafka jars
linked from the shared stack's cache, ``kafka_topology_stacks.shared_kafka_home``), with a heap
sized for the number of topics, and stopped — with every process started here — however the run
ends. Heads are read with one pipelined ``HGET`` per poll for all the tables still missing, so
polling 10,000 tables costs one round trip, not 10,000.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from confluent_kafka import ConsumerGroupState, KafkaException
from confluent_kafka.admin import AdminClient

from bench.kafka_topology_stacks import shared_kafka_home, stop
from bench.runner import progress
from segcat import local_stack as stack
from segcat.catalog.config import Config
from segcat.catalog.protocol.names import TOPIC_PREFIX, TableName
from segcat.catalog.storage.redis import keys
from segcat.local_stack import kafka as stack_kafka
from segcat.local_stack import process
from segcat.local_stack.layout import Layout
from segcat.local_stack.private import free_port, private_settings
from segcat.local_stack.settings import StackSettings

HEAD_POLL_S = 0.05
"""Pause between two pipelined head reads while waiting for heads."""
HEAD_POLL_S_PER_KEY = 50e-6
"""And more when many heads are missing (0.5 s for 10,000), so the poll never loads the Redis
the materializer is writing to."""
SESSION_TIMEOUT_MS = 10_000
"""The materializer's default session timeout, named in the run's parameters."""

GROUP_PROTOCOL = "consumer"
"""KIP-848: librdkafka's cooperative-sticky assignor does not finish at 10,000 tables
(docs/OPERATIONS.md, *Materializer: a group of instances*)."""


def kafka_heap(largest: int) -> str:
    """The private broker's heap for a catalog of ``largest`` tables (a partition's metadata,
    index buffers and log objects cost the broker heap per topic)."""
    return "2g" if largest > 2_000 else "1g"


def namespace(tables: int) -> str:
    """The namespace of one size's tables (``many_1000``); its topics are the size's pattern."""
    return f"many_{tables}"


def pattern(tables: int) -> str:
    """The topic regex of one size's tables, so a materializer follows that size alone."""
    return "^" + (TOPIC_PREFIX + namespace(tables) + ".").replace(".", r"\.")


def names(tables: int) -> list[str]:
    """The ``tables`` table names of a size, in name order."""
    width = max(5, len(str(tables - 1)))
    return [f"{namespace(tables)}.t{i:0{width}d}" for i in range(tables)]


def rss_bytes(pid: int) -> int | None:
    """The resident set of process ``pid`` (``VmRSS``), or None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def http_get(url: str, timeout_s: float = 30.0) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return int(response.status), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
    except OSError:
        return 0, b""


@dataclass
class Services:
    """The private stack of one run and the processes started over it."""

    settings: StackSettings
    workdir: Path
    config: Config
    env: dict[str, str]
    materializers: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    server: subprocess.Popen[bytes] | None = None
    server_url: str = ""
    _redis: redis.Redis[bytes] | None = None
    _admin: AdminClient | None = None

    @property
    def segcat(self) -> str:
        return str(Path(sys.executable).parent / "segcat")

    @property
    def redis(self) -> redis.Redis[bytes]:
        if self._redis is None:
            self._redis = redis.Redis.from_url(self.settings.redis_url)
        return self._redis

    @property
    def admin(self) -> AdminClient:
        if self._admin is None:
            layout = Layout.of(self.settings)
            self._admin = AdminClient(
                {**stack_kafka.stack_client_config(layout, self.settings), "log_level": 2}
            )
        return self._admin

    def broker_costs(self) -> dict[str, int | None]:
        """The broker's open files, memory maps (one file and two index maps per partition: the
        two host limits a broker of many topics meets) and RSS, now."""
        record = process.read_pid_file(
            Layout.of(self.settings).pid_file(stack_kafka.node_name(self.settings, 0))
        )
        if record is None:
            return {"open_files": None, "memory_maps": None, "rss_bytes": None}
        pid = record.pid
        try:
            files: int | None = len(os.listdir(f"/proc/{pid}/fd"))
            maps: int | None = len(Path(f"/proc/{pid}/maps").read_text().splitlines())
        except OSError:
            files = maps = None
        return {"open_files": files, "memory_maps": maps, "rss_bytes": rss_bytes(pid)}

    def flush_redis(self) -> None:
        """Empty the private Redis, so a materializer starts from nothing (never the shared one)."""
        self.redis.flushall()

    # ------------------------------------------------------------------ materializers

    def start_materializer(self, instance: str, group: str, tables: int) -> subprocess.Popen[bytes]:
        """``segcat materializer`` over one size's tables, as a member ``instance`` of ``group``."""
        args = [self.segcat, "materializer", "--metrics-port", "0", "--pattern", pattern(tables)]
        args += ["--group", group, "--instance-id", instance, "--group-protocol", GROUP_PROTOCOL]
        log = (self.workdir / f"materializer-{group}-{instance}.log").open("ab")
        proc = subprocess.Popen(args, env=self.env, stdout=log, stderr=subprocess.STDOUT)
        self.materializers[instance] = proc
        return proc

    def stop_materializers(self) -> None:
        """SIGTERM every materializer still running, SIGKILL what does not leave in time."""
        procs, self.materializers = list(self.materializers.values()), {}
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def check_alive(self) -> None:
        for instance, proc in self.materializers.items():
            if proc.poll() is not None and proc.returncode != -signal.SIGKILL:
                raise RuntimeError(
                    f"materializer {instance} exited with {proc.returncode}: {self.log_tail(instance)}"
                )

    def log_tail(self, instance: str, lines: int = 15) -> str:
        found = sorted(self.workdir.glob(f"materializer-*-{instance}.log"))
        if not found:
            return ""
        return "\n".join(found[-1].read_text(errors="replace").splitlines()[-lines:])

    # ------------------------------------------------------------------ heads

    def head_versions(self, tables: Sequence[str]) -> list[int | None]:
        """Each table's head version in Redis (None: no head), in one pipelined round trip."""
        pipe = self.redis.pipeline(transaction=False)
        for name in tables:
            pipe.hget(keys.head_key(name), "version")
        return [None if raw is None else int(raw) for raw in pipe.execute()]

    def wait_heads(self, wanted: dict[str, int], timeout_s: float) -> dict[str, Any]:
        """Poll until every table of ``wanted`` has a head at or beyond its version: the seconds
        until the last one, and until the first one; the tables still missing at ``timeout_s``."""
        start = time.monotonic()
        missing = dict(wanted)
        first: float | None = None
        polls = 0
        while missing and time.monotonic() - start < timeout_s:
            self.check_alive()
            order = list(missing)
            polls += 1
            for name, version in zip(order, self.head_versions(order), strict=True):
                if version is not None and version >= missing[name]:
                    del missing[name]
                    if first is None:
                        first = time.monotonic() - start
            if missing:
                time.sleep(max(HEAD_POLL_S, len(missing) * HEAD_POLL_S_PER_KEY))
        elapsed = time.monotonic() - start
        return {
            "seconds": None if missing else round(elapsed, 3),
            "first_s": None if first is None else round(first, 3),
            "missing": len(missing),
            "polls": polls,
        }

    # ------------------------------------------------------------------ the group

    def group_assignment(self, group: str) -> tuple[bool, dict[str, set[str]]]:
        """Whether the group is stable, and member instance id → the topics assigned to it, as
        the group coordinator reports."""
        future = self.admin.describe_consumer_groups([group], request_timeout=10)[group]
        described = future.result(timeout=15)
        out: dict[str, set[str]] = {}
        for member in described.members:
            owner = member.group_instance_id or member.member_id
            parts = member.assignment.topic_partitions if member.assignment is not None else []
            out[owner] = {p.topic for p in parts}
        return described.state == ConsumerGroupState.STABLE, out

    def wait_assigned(
        self, group: str, members: set[str], topics: int, timeout_s: float
    ) -> dict[str, set[str]]:
        """Poll until the group is stable with exactly ``members``, holding ``topics`` topics
        between them (how evenly is the assignor's business: the results record it)."""
        deadline = time.monotonic() + timeout_s
        seen: dict[str, set[str]] = {}
        while time.monotonic() < deadline:
            self.check_alive()
            with contextlib.suppress(KafkaException):  # the group may not exist yet
                stable, seen = self.group_assignment(group)
                if stable and set(seen) == members and sum(len(t) for t in seen.values()) == topics:
                    return seen
            time.sleep(0.25)
        counts = {m: len(t) for m, t in seen.items()}
        raise TimeoutError(
            f"group {group} did not settle on {sorted(members)} in {timeout_s:.0f} s: {counts}"
        )

    # ------------------------------------------------------------------ serve

    def start_server(self) -> float:
        """``segcat serve`` on a free port; seconds until ``/healthz`` answers."""
        port = free_port()
        self.server_url = f"http://127.0.0.1:{port}"
        log = (self.workdir / "serve.log").open("ab")
        started = time.perf_counter()
        self.server = subprocess.Popen(
            [self.segcat, "serve", "--port", str(port)], env=self.env, stdout=log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 120
        while http_get(f"{self.server_url}/healthz", 1.0)[0] != 200:
            if self.server.poll() is not None:
                raise RuntimeError(f"segcat serve exited with {self.server.returncode}")
            if time.monotonic() > deadline:
                raise TimeoutError("segcat serve did not answer /healthz within 120 s")
            time.sleep(0.05)
        return time.perf_counter() - started

    def stop_server(self) -> None:
        proc, self.server = self.server, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)

    def get_json(self, path: str) -> tuple[int, Any, float]:
        """(status, decoded body, milliseconds) of one GET on the server."""
        start = time.perf_counter()
        status, body = http_get(self.server_url + path, timeout_s=120.0)
        elapsed = (time.perf_counter() - start) * 1000
        try:
            return status, json.loads(body), elapsed
        except ValueError:
            return status, None, elapsed

    def close(self) -> None:
        self.stop_server()
        self.stop_materializers()
        if self._redis is not None:
            self._redis.close()


def broker_limits() -> dict[str, int | None]:
    """Raise this process's open-files limit to its hard limit (the broker started from it keeps a
    file open per partition) and report it with ``vm.max_map_count`` (two index maps per
    partition): the two host limits a catalog of many topics meets first."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        maps: int | None = int(Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        maps = None
    return {"open_files_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0], "max_map_count": maps}


def _client_env(settings: StackSettings, warehouse: Path) -> dict[str, str]:
    return {
        **stack.client_environment(settings),
        "SEGCAT_HOME": str(settings.home / "client"),
        "SEGCAT_WAREHOUSE": str(warehouse),
        "SEGCAT_REQUEST_TIMEOUT_S": "30",
        "SEGCAT_REDIS_URL": settings.redis_url,
    }


@contextlib.contextmanager
def private_services(largest: int, keep: bool) -> Iterator[Services]:
    """A private KRaft node and Redis for a run up to ``largest`` tables; everything started in
    the block is stopped, and the temporary home removed (unless ``keep``), however it ends."""
    root = Path(tempfile.mkdtemp(prefix="segcat-many-tables-"))
    settings = private_settings(
        root / "stack",
        jars_from=shared_kafka_home(),
        start_timeout_s=180.0,
        brokers=1,
        secure=False,
        s3=False,
        redis_cluster=False,
        kafka_heap=kafka_heap(largest),
    )
    warehouse = root / "warehouse"
    warehouse.mkdir(parents=True)
    client = _client_env(settings, warehouse)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SEGCAT_")}
    env.update({**client, "PYTHONUNBUFFERED": "1"})
    services: Services | None = None
    try:
        progress(f"starting the private stack ({settings.bootstrap_servers}, heap {settings.kafka_heap})")
        began = time.monotonic()
        stack.up(settings)
        progress(f"  private stack up in {time.monotonic() - began:.1f} s")
        services = Services(settings, root, Config.load(env=client), env)
        yield services
    finally:
        if services is not None:
            services.close()
        stop(settings)
        if keep:
            progress(f"kept the private stack's home (logs, data) under {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


def table_of(topic: str) -> str:
    """The qualified table name of a topic."""
    return TableName.from_topic(topic).qualified
