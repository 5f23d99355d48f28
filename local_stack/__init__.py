"""A Docker-free local stack: one Kafka broker (KRaft) and one Redis, under ``.segcat/``.

``up`` starts what is missing and waits until both answer; ``down`` stops only processes
this module started (verified by pid file, start time and command line); ``status``
reports both. Library calls are quiet; pass ``reporter=RichReporter()`` for spinners.
"""

from __future__ import annotations

import fcntl
import logging
import time
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from segcat.local_stack import kafka, process, redis
from segcat.local_stack.errors import StackError
from segcat.local_stack.layout import LOOPBACK, Layout
from segcat.local_stack.probe import KafkaProbe, kafka_answers, redis_answers
from segcat.local_stack.report import LogReporter, Reporter, RichReporter
from segcat.local_stack.settings import StackSettings

__all__ = [
    "LogReporter",
    "Reporter",
    "RichReporter",
    "ServiceStatus",
    "StackInfo",
    "StackStatus",
    "down",
    "status",
    "up",
]

log = logging.getLogger(__name__)

SERVICES = (redis.NAME, kafka.NAME)
"""Start order: Redis first (instant), then Kafka (may fetch jars, takes seconds)."""


@dataclass(frozen=True)
class StackInfo:
    """Addresses of the running stack and which services this ``up`` call started."""

    bootstrap_servers: str
    redis_url: str
    kafka_pid: int | None
    redis_pid: int | None
    started: list[str]


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
    kafka: ServiceStatus
    redis: ServiceStatus

    @property
    def services(self) -> tuple[ServiceStatus, ServiceStatus]:
        return (self.kafka, self.redis)

    @property
    def running(self) -> bool:
        return all(s.running for s in self.services)


@dataclass(frozen=True)
class _Spec:
    """What ``up``/``down``/``status`` need to know about one service."""

    name: str
    address: str
    ports: tuple[tuple[int, str], ...]
    """(port, env var that changes it) pairs that must be free before starting."""
    start: Callable[[Layout, StackSettings, Reporter], process.PidRecord]
    probe: Callable[[], Callable[[float], bool]]


def _specs(s: StackSettings) -> dict[str, _Spec]:
    kafka_bootstrap = kafka.address(s)
    redis_url = redis.url(s)
    return {
        redis.NAME: _Spec(
            name=redis.NAME,
            address=redis.address(s),
            ports=((s.redis_port, "SEGCAT_STACK_REDIS_PORT"),),
            start=redis.start,
            probe=lambda: lambda timeout: redis_answers(redis_url, timeout),
        ),
        kafka.NAME: _Spec(
            name=kafka.NAME,
            address=kafka_bootstrap,
            ports=(
                (s.kafka_port, "SEGCAT_STACK_KAFKA_PORT"),
                (s.kafka_controller_port, "SEGCAT_STACK_KAFKA_CONTROLLER_PORT"),
            ),
            start=kafka.start,
            probe=lambda: KafkaProbe(kafka_bootstrap).answers,
        ),
    }


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
    """Start (or reuse) the local Kafka broker and Redis and wait until both answer.

    Idempotent: processes of ours that are alive are reused. A port answered by some other
    program fails fast with a StackError naming the env var that moves it. On timeout the
    services started by this call are stopped again and the error carries the log's tail.
    """
    layout = Layout.of(settings)
    reporter = reporter or LogReporter()
    specs = _specs(settings)
    layout.make_dirs()
    with _locked(layout):
        records: dict[str, process.PidRecord | None] = {}
        for name in SERVICES:
            spec = specs[name]
            record = _our_record(layout, name)
            if record is not None and record.address != spec.address:
                raise StackError(
                    f"segcat's {name} from {layout.home} is running on {record.address}, but the "
                    f"config asks for {spec.address}; run `segcat stack down` first"
                )
            if record is None:
                _check_ports_free(spec, layout)
            records[name] = record

        started: dict[str, process.PidRecord] = {}
        try:
            for name in SERVICES:
                existing = records[name]
                if existing is None:
                    started[name] = specs[name].start(layout, settings, reporter)
                    records[name] = started[name]
                else:
                    reporter.info(f"Reusing {name} (pid {existing.pid}) on {existing.address}")
            deadline = time.monotonic() + settings.start_timeout_s
            for name in SERVICES:
                record = records[name]
                assert record is not None
                _wait_until_answering(
                    specs[name], record, layout, settings.start_timeout_s, deadline, reporter
                )
        except BaseException:
            for name, record in started.items():
                log.warning("stopping %s (pid %d) after a failed start", name, record.pid)
                process.stop(record, timeout_s=10.0)
                process.remove_pid_file(layout.pid_file(name))
            raise

    kafka_record, redis_record = records[kafka.NAME], records[redis.NAME]
    return StackInfo(
        bootstrap_servers=kafka.address(settings),
        redis_url=redis.url(settings),
        kafka_pid=kafka_record.pid if kafka_record else None,
        redis_pid=redis_record.pid if redis_record else None,
        started=[name for name in SERVICES if name in started],
    )


def _check_ports_free(spec: _Spec, layout: Layout) -> None:
    for port, env_var in spec.ports:
        if process.port_answers(LOOPBACK, port):
            raise StackError(
                f"port {port} on {LOOPBACK} (for {spec.name}) is already in use by a process "
                f"segcat did not start from {layout.home}; stop that process or pick another "
                f"port, e.g. `export {env_var}=<free port>`"
            )


def _wait_until_answering(
    spec: _Spec,
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
    """Stop our Kafka and Redis (or just ``services``); returns the names actually stopped.

    Only pids recorded by ``up`` whose start time and command line still match are
    signalled; anything else listening on the ports is left alone.
    """
    layout = Layout.of(settings)
    reporter = reporter or LogReporter()
    wanted = list(SERVICES if services is None else services)
    unknown = set(wanted) - set(SERVICES)
    if unknown:
        raise StackError(f"unknown service(s) {sorted(unknown)}; known: {list(SERVICES)}")
    stopped: list[str] = []
    if not layout.run.is_dir():
        return stopped
    with _locked(layout):
        for name in reversed(SERVICES):  # Kafka first: it is the one clients hold open
            if name not in wanted:
                continue
            record = _our_record(layout, name)
            if record is None:
                continue
            with reporter.step(f"Stopping {name} (pid {record.pid})"):
                gone = process.stop(record, timeout_s=timeout_s)
            if not gone and process.is_ours(record):
                raise StackError(f"{name} (pid {record.pid}) did not stop, even after SIGKILL")
            process.remove_pid_file(layout.pid_file(name))
            stopped.append(name)
    return stopped


def status(settings: StackSettings) -> StackStatus:
    """Per service: is our process running, and does anything answer at its address?"""
    layout = Layout.of(settings)
    specs = _specs(settings)

    def one(name: str) -> ServiceStatus:
        spec = specs[name]
        record = process.read_pid_file(layout.pid_file(name))
        running = record is not None and process.is_ours(record)
        port = spec.ports[0][0]
        listening = process.port_answers(LOOPBACK, port)
        if name == kafka.NAME:
            answering = listening and kafka_answers(spec.address, 2.0)
        else:
            answering = listening and redis_answers(redis.url(settings), 1.0)
        return ServiceStatus(
            name=name,
            running=running,
            pid=record.pid if running and record is not None else None,
            address=record.address if running and record is not None else spec.address,
            answering=answering,
            log_path=layout.log_file(name),
        )

    return StackStatus(kafka=one(kafka.NAME), redis=one(redis.NAME))
