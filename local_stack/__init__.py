"""A Docker-free local stack under ``.segcat/``: Kafka (KRaft), Redis and, on request, S3.

The default is one Kafka broker and one Redis. ``StackSettings`` asks for more: ``brokers=3``
(a KRaft cluster, replication 3, min ISR 2), ``secure`` (SASL_SSL + SCRAM + ACLs, a Redis
ACL user), ``s3`` (an S3-compatible server and a bucket) and ``redis_cluster`` (three Redis
masters). ``up`` starts what is missing and waits until everything answers, then runs each
service's one-time set-up; ``down`` stops only processes this module started (verified by
pid file, start time and command line); ``status`` reports each process. The topology of a
running stack is recorded in its home, so ``down`` and ``status`` need no options.
Library calls are quiet; pass ``reporter=RichReporter()`` for spinners.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import logging
import time
from collections.abc import Collection, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from segcat.local_stack import kafka, process, redis, s3proxy
from segcat.local_stack.errors import StackError
from segcat.local_stack.layout import LOOPBACK, Layout
from segcat.local_stack.report import LogReporter, Reporter, RichReporter
from segcat.local_stack.service import ClientSetting, ServiceSpec
from segcat.local_stack.settings import StackSettings

__all__ = [
    "ClientSetting",
    "LogReporter",
    "Reporter",
    "RichReporter",
    "ServiceStatus",
    "StackInfo",
    "StackStatus",
    "client_environment",
    "client_settings",
    "down",
    "effective_settings",
    "status",
    "up",
]

log = logging.getLogger(__name__)

TOPOLOGY_FIELDS = ("brokers", "secure", "s3", "redis_cluster")
"""The options that decide which processes a stack has (recorded while it runs)."""


@dataclass(frozen=True)
class StackInfo:
    """Addresses of the running stack and which services this ``up`` call started."""

    bootstrap_servers: str
    redis_url: str
    kafka_pid: int | None
    """The first Kafka node's pid."""
    redis_pid: int | None
    started: list[str]
    settings: StackSettings
    """The settings the stack runs with (for ``client_settings``)."""
    pids: dict[str, int]
    """Every process of the stack by service name (``kafka-2``, ``redis-1``, ``s3``)."""


@dataclass(frozen=True)
class ServiceStatus:
    name: str
    running: bool
    """Our process (per pid file, verified) is alive."""
    pid: int | None
    address: str
    answering: bool
    """Something answers the protocol at ``address`` (ours or not)."""
    log_path: Path


@dataclass(frozen=True)
class StackStatus:
    services: tuple[ServiceStatus, ...]

    def _first(self, prefix: str) -> ServiceStatus:
        return next(s for s in self.services if s.name.split("-")[0] == prefix)

    @property
    def kafka(self) -> ServiceStatus:
        return self._first(kafka.NAME)

    @property
    def redis(self) -> ServiceStatus:
        return self._first(redis.NAME)

    @property
    def running(self) -> bool:
        return all(s.running for s in self.services)


def _specs(layout: Layout, settings: StackSettings) -> list[ServiceSpec]:
    """Start order: Redis first (instant), then Kafka (may fetch jars, takes seconds), then S3."""
    return [
        *redis.specs(layout, settings),
        *kafka.specs(layout, settings),
        *s3proxy.specs(layout, settings),
    ]


def _finish(layout: Layout, settings: StackSettings, reporter: Reporter) -> None:
    redis.finish(layout, settings, reporter)
    kafka.finish(layout, settings, reporter)
    s3proxy.finish(layout, settings, reporter)


def client_settings(settings: StackSettings, principal: str = "writer") -> list[ClientSetting]:
    """The ``SEGCAT_*`` (and AWS) variables a client acting as ``principal`` needs.

    ``principal`` (writer, reader, materializer) matters on a ``secure`` stack only.
    """
    layout = Layout.of(settings)
    return [
        *kafka.client_settings(layout, settings, principal),
        *redis.client_settings(layout, settings),
        *s3proxy.client_settings(layout, settings),
    ]


def client_environment(settings: StackSettings, principal: str = "writer") -> dict[str, str]:
    """``client_settings`` as an environment with the secrets read in (for ``Config.load(env=...)``)."""
    return {c.name: c.reveal() for c in client_settings(settings, principal)}


def _topology(settings: StackSettings) -> dict[str, object]:
    return {name: getattr(settings, name) for name in TOPOLOGY_FIELDS}


def _recorded_topology(layout: Layout) -> dict[str, object] | None:
    try:
        data = json.loads((layout.run / "topology.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and set(data) == set(TOPOLOGY_FIELDS) else None


def effective_settings(settings: StackSettings) -> StackSettings:
    """``settings`` with the topology of the stack that runs from this home, if one does."""
    recorded = _recorded_topology(Layout.of(settings))
    if recorded is None:
        return settings
    return dataclasses.replace(settings, **recorded)  # type: ignore[arg-type]


@contextmanager
def _locked(layout: Layout) -> Iterator[None]:
    """Serialize up/down across processes (e.g. parallel test workers sharing a home)."""
    layout.run.mkdir(parents=True, exist_ok=True)
    with layout.lock_file.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _our_record(layout: Layout, name: str) -> process.PidRecord | None:
    """The verified record of our running process, removing a stale pid file on the way."""
    pid_file = layout.pid_file(name)
    record = process.read_pid_file(pid_file)
    if record is None:
        return None
    if process.is_ours(record):
        return record
    log.info("removing stale pid file %s (pid %d is not our %s)", pid_file, record.pid, name)
    process.remove_pid_file(pid_file)
    return None


def up(settings: StackSettings, *, reporter: Reporter | None = None) -> StackInfo:
    """Start (or reuse) every process of the stack, wait until all answer, then set them up.

    Idempotent: processes of ours that are alive are reused (a killed node is started again).
    A port answered by some other program fails fast with a StackError naming the env var
    that moves it; a stack of another topology running from the same home is an error too.
    On timeout the services started by this call are stopped again and the error carries the
    log's tail.
    """
    layout = Layout.of(settings)
    reporter = reporter or LogReporter()
    specs = _specs(layout, settings)
    layout.make_dirs()
    with _locked(layout):
        recorded = _recorded_topology(layout)
        records: dict[str, process.PidRecord | None] = {}
        for spec in specs:
            record = _our_record(layout, spec.name)
            if record is not None and record.address != spec.address:
                raise StackError(
                    f"segcat's {spec.name} from {layout.home} is running on {record.address}, but "
                    f"the config asks for {spec.address}; run `segcat stack down` first"
                )
            records[spec.name] = record
        running = [name for name, record in records.items() if record is not None]
        if recorded is not None and recorded != _topology(settings) and (running or _any_running(layout)):
            raise StackError(
                f"the stack in {layout.home} runs with {_describe(recorded)}, but this `up` asks for "
                f"{_describe(_topology(settings))}; run `segcat stack down` first"
            )
        for spec in specs:
            if records[spec.name] is None:
                _check_ports_free(spec, layout)
        (layout.run / "topology.json").write_text(json.dumps(_topology(settings)) + "\n")

        started: dict[str, process.PidRecord] = {}
        try:
            for spec in specs:
                existing = records[spec.name]
                if existing is None:
                    started[spec.name] = spec.start(layout, settings, reporter)
                    records[spec.name] = started[spec.name]
                else:
                    reporter.info(f"Reusing {spec.name} (pid {existing.pid}) on {existing.address}")
            deadline = time.monotonic() + settings.start_timeout_s
            for spec in specs:
                record = records[spec.name]
                assert record is not None
                _wait_until_answering(spec, record, layout, settings.start_timeout_s, deadline, reporter)
            _finish(layout, settings, reporter)
        except BaseException:
            for name, record in started.items():
                log.warning("stopping %s (pid %d) after a failed start", name, record.pid)
                process.stop(record, timeout_s=10.0)
                process.remove_pid_file(layout.pid_file(name))
            raise

    pids = {name: record.pid for name, record in records.items() if record is not None}
    kafka_name = kafka.node_name(settings, 0)
    redis_name = next((spec.name for spec in specs if spec.name.startswith(redis.NAME)), redis.NAME)
    return StackInfo(
        bootstrap_servers=settings.bootstrap_servers,
        redis_url=redis.url(settings),
        kafka_pid=pids.get(kafka_name),
        redis_pid=pids.get(redis_name),
        started=[spec.name for spec in specs if spec.name in started],
        settings=settings,
        pids=pids,
    )


def _describe(topology: dict[str, object]) -> str:
    return ", ".join(f"{k}={v}" for k, v in topology.items())


def _any_running(layout: Layout) -> bool:
    """Any process of ours from this home, whatever its name (a node of another topology)."""
    return any(_our_record(layout, pid.stem) is not None for pid in layout.run.glob("*.pid"))


def _check_ports_free(spec: ServiceSpec, layout: Layout) -> None:
    low, high = process.ephemeral_port_range()
    for port, env_var in spec.ports:
        if process.port_answers(LOOPBACK, port):
            ephemeral = (
                f" (port {port} lies in the kernel's range for outgoing connections, {low}-{high}, "
                f"where a client retrying a stopped server can hold it; a port below {low} avoids that)"
                if low <= port <= high
                else ""
            )
            raise StackError(
                f"port {port} on {LOOPBACK} (for {spec.name}) is already in use by a process "
                f"segcat did not start from {layout.home}; stop that process or pick another "
                f"port, e.g. `export {env_var}=<free port>`{ephemeral}"
            )


def _wait_until_answering(
    spec: ServiceSpec,
    record: process.PidRecord,
    layout: Layout,
    timeout_s: float,
    deadline: float,
    reporter: Reporter,
) -> None:
    answers = spec.probe()
    log_path = layout.log_file(spec.name)
    with reporter.step(f"Waiting for {spec.name} on {spec.address}"):
        while True:
            remaining = deadline - time.monotonic()
            if answers(max(0.5, min(2.0, remaining))):
                return
            if not process.is_ours(record):
                raise StackError(
                    f"{spec.name} (pid {record.pid}) exited before answering on {spec.address}; "
                    f"last lines of {log_path}:\n{process.tail(log_path)}"
                )
            if time.monotonic() >= deadline:
                raise StackError(
                    f"{spec.name} (pid {record.pid}) did not answer on {spec.address} within "
                    f"{timeout_s:.0f}s; last lines of {log_path}:\n{process.tail(log_path)}"
                )
            time.sleep(0.2)


def down(
    settings: StackSettings,
    *,
    services: Collection[str] | None = None,
    timeout_s: float = 30.0,
    reporter: Reporter | None = None,
) -> list[str]:
    """Stop our processes (or just ``services``, by name or kind: ``kafka`` stops every node);
    returns the names actually stopped.

    Only pids recorded by ``up`` whose start time and command line still match are
    signalled; anything else listening on the ports is left alone.
    """
    layout = Layout.of(settings)
    reporter = reporter or LogReporter()
    if not layout.run.is_dir():
        return []
    stopped: list[str] = []
    with _locked(layout):
        names = [pid.stem for pid in sorted(layout.run.glob("*.pid"))]
        known = {n.split("-")[0] for n in names} | set(names) | {kafka.NAME, redis.NAME, s3proxy.NAME}
        wanted = set(names if services is None else services)
        unknown = wanted - known
        if unknown:
            raise StackError(f"unknown service(s) {sorted(unknown)}; known: {sorted(known)}")
        # Kafka first: it is the one clients hold open; then S3, then Redis. The nodes of a
        # cluster stop together: stopped one by one, the last loses its controller quorum and
        # waits out the whole timeout in its controlled shutdown.
        chosen = [n for n in names if n in wanted or n.split("-")[0] in wanted]
        records = {n: r for n in chosen if (r := _our_record(layout, n)) is not None}
        for kind in ("kafka", "s3", "redis"):
            group = {n: r for n, r in records.items() if n.split("-")[0] == kind}
            if not group:
                continue
            label = ", ".join(f"{n} (pid {r.pid})" for n, r in group.items())
            with reporter.step(f"Stopping {label}"), ThreadPoolExecutor(len(group)) as pool:
                stops = {n: pool.submit(process.stop, r, timeout_s=timeout_s) for n, r in group.items()}
                gone = {n: f.result() for n, f in stops.items()}
            for name, record in group.items():
                if not gone[name] and process.is_ours(record):
                    raise StackError(f"{name} (pid {record.pid}) did not stop, even after SIGKILL")
                process.remove_pid_file(layout.pid_file(name))
                stopped.append(name)
        if not _any_running(layout):
            (layout.run / "topology.json").unlink(missing_ok=True)
    return stopped


def status(settings: StackSettings) -> StackStatus:
    """Per process of the stack (as recorded while it runs): is it ours and running, and does
    anything answer its protocol at its address?"""
    settings = effective_settings(settings)
    layout = Layout.of(settings)

    def one(spec: ServiceSpec) -> ServiceStatus:
        record = process.read_pid_file(layout.pid_file(spec.name))
        running = record is not None and process.is_ours(record)
        listening = process.port_answers(LOOPBACK, spec.ports[0][0])
        return ServiceStatus(
            name=spec.name,
            running=running,
            pid=record.pid if running and record is not None else None,
            address=record.address if running and record is not None else spec.address,
            answering=listening and spec.probe()(2.0),
            log_path=layout.log_file(spec.name),
        )

    return StackStatus(services=tuple(one(spec) for spec in _specs(layout, settings)))
