"""Where every file of the local stack lives, derived from ``StackSettings.home`` alone.

Keeping all paths in one place means ``up``, ``down`` and ``status`` (possibly run from
different processes) always agree on which pid file and log belong to which service.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from segcat.local_stack.settings import StackSettings

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Layout:
    """Paths under the stack home (``.segcat`` by default, git-ignored)."""

    home: Path
    kafka_version: str

    @classmethod
    def of(cls, settings: StackSettings) -> Layout:
        return cls(home=settings.home.resolve(), kafka_version=settings.kafka_version)

    @property
    def kafka_dist(self) -> Path:
        """Per-version folder holding the Maven pom and the fetched jars."""
        return self.home / f"kafka-{self.kafka_version}"

    @property
    def jars(self) -> Path:
        return self.kafka_dist / "jars"

    @property
    def kafka_data(self) -> Path:
        return self.home / "kafka-data"

    def kafka_node_data(self, node: int) -> Path:
        """Log dir of node ``node`` of a multi-broker stack (a single broker keeps ``kafka_data``)."""
        return self.home / f"kafka-data-{node + 1}"

    @property
    def redis_data(self) -> Path:
        return self.home / "redis"

    def redis_node_data(self, node: int) -> Path:
        """Working dir (nodes.conf) of master ``node`` of a Redis Cluster stack."""
        return self.home / f"redis-cluster-{node + 1}"

    @property
    def s3_data(self) -> Path:
        """S3Proxy's filesystem backend: one folder per bucket."""
        return self.home / "s3-data"

    @property
    def s3proxy_jars(self) -> Path:
        return self.home / "s3proxy" / "jars"

    @property
    def secrets(self) -> Path:
        """Passwords, the CA and keys of a ``--secure`` stack (mode 0700, files 0600)."""
        return self.home / "secrets"

    @property
    def conf(self) -> Path:
        return self.home / "conf"

    @property
    def logs(self) -> Path:
        return self.home / "logs"

    @property
    def run(self) -> Path:
        return self.home / "run"

    @property
    def lock_file(self) -> Path:
        return self.run / "stack.lock"

    def pid_file(self, service: str) -> Path:
        return self.run / f"{service}.pid"

    def log_file(self, service: str) -> Path:
        return self.logs / f"{service}.log"

    def make_dirs(self) -> None:
        for path in (self.kafka_data, self.redis_data, self.conf, self.logs, self.run):
            path.mkdir(parents=True, exist_ok=True)
