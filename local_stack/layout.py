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

    @property
    def redis_data(self) -> Path:
        return self.home / "redis"

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
