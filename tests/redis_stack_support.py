"""Redis servers for tests, started through ``segcat.local_stack.redis`` itself (``specs``,
``finish``, ``client_settings``) in a home of the test's own: a secure single server or a secure
three-master Redis Cluster, on free ports, stopped again by pid."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis
from redis.cluster import RedisCluster

from segcat.catalog.config import Config
from segcat.catalog.errors import SegcatError
from segcat.local_stack import private, process
from segcat.local_stack import redis as stack_redis
from segcat.local_stack.layout import LOOPBACK, Layout
from segcat.local_stack.report import LogReporter
from segcat.local_stack.settings import StackSettings
from tests.services import service_failure


def free_redis_base_port(cluster: bool) -> int:
    """A port p with p..p+2 (and the cluster bus ports p+10000..p+10002) free, below the kernel's
    range for outgoing connections (``private.free_port_block``)."""
    wanted = [0, 1, 2] if cluster else [0]
    if cluster:
        wanted += [p + stack_redis.BUS_PORT_OFFSET for p in wanted]
    return private.free_port_block(wanted, lowest=20_000)


class StackRedis:
    """Redis as ``segcat stack up`` runs it: started, probed and joined by the stack's own code."""

    def __init__(self, home: Path, *, cluster: bool, secure: bool = True) -> None:
        self.settings = StackSettings(
            home=home,
            redis_port=free_redis_base_port(cluster),
            redis_cluster=cluster,
            secure=secure,
            start_timeout_s=60.0,
        )
        self.layout = Layout.of(self.settings)
        self.records: dict[str, process.PidRecord] = {}

    @property
    def ports(self) -> list[int]:
        return self.settings.redis_ports()

    def start(self) -> None:
        """Start every node, wait for PING, run ``finish`` (the cluster join). In CI a server that
        cannot start fails the test; elsewhere it skips."""
        reporter = LogReporter()
        try:
            self.layout.make_dirs()
            specs = stack_redis.specs(self.layout, self.settings)
            for spec in specs:
                self.records[spec.name] = spec.start(self.layout, self.settings, reporter)
            for spec in specs:
                answers = spec.probe()
                deadline = time.monotonic() + 30
                while not answers(1.0):
                    if not process.is_ours(self.records[spec.name]) or time.monotonic() > deadline:
                        log = self.layout.log_file(spec.name)
                        raise SegcatError(f"{spec.name} did not answer:\n{process.tail(log)}")
                    time.sleep(0.05)
            stack_redis.finish(self.layout, self.settings, reporter)
        except (SegcatError, OSError) as exc:
            self.stop()
            service_failure(f"could not start Redis through local_stack.redis: {exc}")

    def stop(self) -> None:
        for name, record in self.records.items():
            process.stop(record, timeout_s=10.0)
            process.remove_pid_file(self.layout.pid_file(name))
        self.records.clear()

    def client_env(self) -> dict[str, str]:
        """What ``client_settings`` tells a client, secrets read from their files."""
        found = stack_redis.client_settings(self.layout, self.settings)
        return {setting.name: setting.reveal() for setting in found}

    def config(self, base: Config, warehouse: Path, **env: str) -> Config:
        """A client config built the way a user's would be: ``client_settings`` + Kafka + a warehouse."""
        return Config.load(
            env={
                **self.client_env(),
                "SEGCAT_HOME": str(self.settings.home),
                "SEGCAT_BOOTSTRAP_SERVERS": base.bootstrap_servers,
                "SEGCAT_WAREHOUSE": str(warehouse),
                "SEGCAT_KEYFRAME_EVERY_COMMITS": "7",
                "SEGCAT_KEYFRAME_EVERY_SECONDS": "3600",
                "SEGCAT_METRICS_PORT": "0",
                "SEGCAT_REQUEST_TIMEOUT_S": "30",
                **env,
            }
        )

    def password(self, user: str = stack_redis.USER) -> str:
        return stack_redis.password(self.layout, user)

    def admin(self, port: int | None = None) -> redis.Redis[bytes]:
        """The stack's admin on one node (the first by default)."""
        return redis.Redis(
            host=LOOPBACK,
            port=port or self.ports[0],
            username=stack_redis.ADMIN_USER,
            password=self.password(stack_redis.ADMIN_USER),
        )

    def admin_cluster(self) -> RedisCluster[bytes]:
        return RedisCluster(
            host=LOOPBACK,
            port=self.ports[0],
            username=stack_redis.ADMIN_USER,
            password=self.password(stack_redis.ADMIN_USER),
        )

    def acl_denials(self) -> list[str]:
        """Every ``ACL LOG`` entry of every node (commands, keys, channels the ACL refused)."""
        found = []
        for port in self.ports:
            for entry in self.admin(port).acl_log():
                found.append(f"{port}: {entry['username']} {entry['reason']} {entry['object']}")
        return found

    def reset_acl_log(self) -> None:
        for port in self.ports:
            self.admin(port).acl_log_reset()


@contextmanager
def stack_redis_running(home: Path, *, cluster: bool, secure: bool = True) -> Iterator[StackRedis]:
    server = StackRedis(home, cluster=cluster, secure=secure)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@contextmanager
def tls_cluster(home: Path) -> Iterator[tuple[list[int], Path]]:
    """Three TLS-only cluster masters (``tls-port``, ``port 0``, TLS on the cluster bus too) with
    the stack's CA and node certificate (``local_stack.tls``); yields (ports, CA file). The local
    stack itself runs Redis without TLS: this checks that ``rediss://`` reaches a cluster."""
    from segcat.local_stack import tls

    files = tls.ensure(Layout(home=home, kafka_version="-"))
    base = free_redis_base_port(cluster=True)
    ports = [base + i for i in range(3)]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        for port in ports:
            workdir = home / f"tls-{port}"
            workdir.mkdir(parents=True, exist_ok=True)
            argv = ["redis-server", "--port", "0", "--tls-port", str(port), "--bind", LOOPBACK]
            argv += ["--tls-cert-file", str(files.node_cert), "--tls-key-file", str(files.node_key)]
            argv += ["--tls-ca-cert-file", str(files.ca_cert), "--tls-auth-clients", "no"]
            argv += ["--tls-cluster", "yes", "--cluster-enabled", "yes", "--save", "", "--appendonly", "no"]
            with (workdir / "redis.log").open("ab") as log:
                procs.append(subprocess.Popen(argv, cwd=workdir, stdout=log, stderr=subprocess.STDOUT))
        cli = ["redis-cli", "--tls", "--cacert", str(files.ca_cert)]
        deadline = time.monotonic() + 20
        while not all(
            subprocess.run([*cli, "-p", str(p), "ping"], capture_output=True, check=False).stdout.strip()
            == b"PONG"
            for p in ports
        ):
            if time.monotonic() > deadline or any(p.poll() is not None for p in procs):
                raise SegcatError("TLS Redis nodes did not answer")
            time.sleep(0.1)
        create = [*cli, "--cluster", "create", *(f"{LOOPBACK}:{p}" for p in ports)]
        out = subprocess.run(
            [*create, "--cluster-replicas", "0", "--cluster-yes"],
            capture_output=True,
            timeout=60,
            check=False,
        )
        if out.returncode != 0:
            raise SegcatError(f"redis-cli --cluster create over TLS failed: {out.stdout[-500:]!r}")
        while (
            b"cluster_state:ok"
            not in subprocess.run(
                [*cli, "-p", str(ports[0]), "cluster", "info"], capture_output=True, check=False
            ).stdout
        ):
            if time.monotonic() > deadline + 20:
                raise SegcatError("the TLS cluster did not reach cluster_state:ok")
            time.sleep(0.1)
    except (SegcatError, OSError, subprocess.TimeoutExpired) as exc:
        for proc in procs:
            proc.kill()
            proc.wait(10)
        service_failure(f"could not start a TLS Redis Cluster: {exc}")
    try:
        yield ports, files.ca_cert
    finally:
        for proc in procs:
            proc.kill()
            proc.wait(10)
