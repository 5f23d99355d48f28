"""Where and how the local (Docker-free) stack runs: ``SEGCAT_HOME``, ``SEGCAT_STACK_*``, TOML ``[stack]``.

The stack's own settings, read with the same checks as ``segcat.catalog.config.Config`` (a
typo names its variable or key). Clients never read them: ``segcat stack up`` prints the
``SEGCAT_BOOTSTRAP_SERVERS`` / ``SEGCAT_REDIS_URL`` a client needs when the ports differ from
the defaults.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from segcat.catalog.config import SettingsSource, read_toml

DEFAULT_KAFKA_PORT = 19092
DEFAULT_KAFKA_CONTROLLER_PORT = 19093
DEFAULT_REDIS_PORT = 16379
DEFAULT_KAFKA_VERSION = "4.1.1"

_KEYS = (
    "kafka_version",
    "kafka_port",
    "kafka_controller_port",
    "kafka_heap",
    "redis_port",
    "start_timeout_s",
)


@dataclass(frozen=True)
class StackSettings:
    """Where and how the local stack runs."""

    home: Path
    kafka_version: str = DEFAULT_KAFKA_VERSION
    kafka_port: int = DEFAULT_KAFKA_PORT
    kafka_controller_port: int = DEFAULT_KAFKA_CONTROLLER_PORT
    kafka_heap: str = "512m"
    redis_port: int = DEFAULT_REDIS_PORT
    start_timeout_s: float = 120.0

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, path: str | Path | None = None) -> StackSettings:
        """Defaults < the ``[stack]`` table of the TOML file (``SEGCAT_CONFIG``) < the environment."""
        env = os.environ if env is None else env
        toml_path = path or env.get("SEGCAT_CONFIG")
        data = read_toml(Path(toml_path)) if toml_path else {}
        src = SettingsSource(env, data, str(toml_path))
        src.refuse_unknown(src.table("stack"), _KEYS, "stack")
        return cls(
            home=Path(src.text("SEGCAT_HOME", "home", ".segcat")).absolute(),
            kafka_version=src.text("SEGCAT_KAFKA_VERSION", "kafka_version", DEFAULT_KAFKA_VERSION, "stack"),
            kafka_port=src.integer(
                "SEGCAT_STACK_KAFKA_PORT", "kafka_port", DEFAULT_KAFKA_PORT, 1, 65535, "stack"
            ),
            kafka_controller_port=src.integer(
                "SEGCAT_STACK_KAFKA_CONTROLLER_PORT",
                "kafka_controller_port",
                DEFAULT_KAFKA_CONTROLLER_PORT,
                1,
                65535,
                "stack",
            ),
            kafka_heap=src.text(None, "kafka_heap", "512m", section="stack"),
            redis_port=src.integer(
                "SEGCAT_STACK_REDIS_PORT", "redis_port", DEFAULT_REDIS_PORT, 1, 65535, "stack"
            ),
            start_timeout_s=src.number(None, "start_timeout_s", 120.0, 1.0, 3600.0, "stack"),
        )

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"
