"""One configuration for every component, read from the environment and/or a TOML file.

Nothing about addresses, credentials or directories lives in code: a user's own cluster
is reached by setting ``SEGCAT_BOOTSTRAP_SERVERS`` / ``SEGCAT_REDIS_URL`` (or the TOML
file named by ``SEGCAT_CONFIG``), and any librdkafka setting passes through untouched.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from catalog.errors import ConfigError

DEFAULT_KAFKA_PORT = 19092
DEFAULT_KAFKA_CONTROLLER_PORT = 19093
DEFAULT_REDIS_PORT = 16379

_KAFKA_ENV_PREFIX = "SEGCAT_KAFKA_"


@dataclass(frozen=True)
class StackSettings:
    """Where and how the local (Docker-free) stack runs."""

    home: Path
    kafka_version: str = "4.1.1"
    kafka_port: int = DEFAULT_KAFKA_PORT
    kafka_controller_port: int = DEFAULT_KAFKA_CONTROLLER_PORT
    kafka_heap: str = "512m"
    redis_port: int = DEFAULT_REDIS_PORT
    start_timeout_s: float = 120.0


@dataclass(frozen=True)
class Config:
    """Everything a component needs to reach Kafka, Redis and the warehouse."""

    bootstrap_servers: str
    redis_url: str
    warehouse: str
    stack: StackSettings
    kafka: Mapping[str, str] = field(default_factory=dict)
    """librdkafka settings passed through untouched (security.protocol, sasl.*, ssl.*, …)."""
    replication_factor: int = 1
    min_insync_replicas: int = 1
    request_timeout_s: float = 30.0
    redis_username: str | None = None
    redis_password: str | None = None
    s3_endpoint: str | None = None
    """Endpoint override for ``s3://`` warehouses (MinIO, a test server); None = AWS."""
    s3_region: str | None = None
    keyframe_every_commits: int = 1_000
    """K: write a key frame after this many accepted commits ..."""
    keyframe_every_seconds: float = 60.0
    """T: ... or when the oldest commit not in a key frame is this old ..."""
    keyframe_every_bytes: int = 8 * 1024 * 1024
    """D: ... or when the deltas since the last key frame reach this many bytes."""
    metrics_port: int = 9464
    metrics_addr: str = "127.0.0.1"
    """Where /metrics listens (0.0.0.0 inside a container)."""

    @classmethod
    def load(cls, env: Mapping[str, str] | None = None, path: str | Path | None = None) -> Config:
        """Build the config: defaults < TOML file (``SEGCAT_CONFIG`` or ``path``) < environment."""
        env = os.environ if env is None else env
        toml_path = path or env.get("SEGCAT_CONFIG")
        data: dict[str, Any] = {}
        if toml_path:
            try:
                data = tomllib.loads(Path(toml_path).read_text())
            except (OSError, tomllib.TOMLDecodeError) as exc:
                raise ConfigError(f"cannot read config file {toml_path}: {exc}") from exc
        home = Path(env.get("SEGCAT_HOME") or data.get("home") or ".segcat").absolute()
        stack_data = dict(data.get("stack", {}))
        stack = StackSettings(
            home=home,
            kafka_version=str(env.get("SEGCAT_KAFKA_VERSION") or stack_data.get("kafka_version", "4.1.1")),
            kafka_port=_int(env, "SEGCAT_STACK_KAFKA_PORT", stack_data.get("kafka_port", DEFAULT_KAFKA_PORT)),
            kafka_controller_port=_int(
                env,
                "SEGCAT_STACK_KAFKA_CONTROLLER_PORT",
                stack_data.get("kafka_controller_port", DEFAULT_KAFKA_CONTROLLER_PORT),
            ),
            kafka_heap=str(stack_data.get("kafka_heap", "512m")),
            redis_port=_int(env, "SEGCAT_STACK_REDIS_PORT", stack_data.get("redis_port", DEFAULT_REDIS_PORT)),
            start_timeout_s=float(stack_data.get("start_timeout_s", 120.0)),
        )
        kafka_cfg = {str(k): str(v) for k, v in dict(data.get("kafka", {})).items()}
        for key, value in env.items():
            if key.startswith(_KAFKA_ENV_PREFIX) and key not in _RESERVED_KAFKA_ENV:
                kafka_cfg[key[len(_KAFKA_ENV_PREFIX) :].lower().replace("_", ".")] = value
        bootstrap = (
            env.get("SEGCAT_BOOTSTRAP_SERVERS")
            or data.get("bootstrap_servers")
            or f"127.0.0.1:{stack.kafka_port}"
        )
        redis_url = (
            env.get("SEGCAT_REDIS_URL") or data.get("redis_url") or f"redis://127.0.0.1:{stack.redis_port}/0"
        )
        warehouse = env.get("SEGCAT_WAREHOUSE") or data.get("warehouse") or str(home / "warehouse")
        return cls(
            bootstrap_servers=str(bootstrap),
            redis_url=str(redis_url),
            warehouse=str(warehouse),
            stack=stack,
            kafka=kafka_cfg,
            replication_factor=_int(env, "SEGCAT_REPLICATION_FACTOR", data.get("replication_factor", 1)),
            min_insync_replicas=_int(env, "SEGCAT_MIN_INSYNC_REPLICAS", data.get("min_insync_replicas", 1)),
            request_timeout_s=float(
                env.get("SEGCAT_REQUEST_TIMEOUT_S") or data.get("request_timeout_s", 30.0)
            ),
            redis_username=env.get("SEGCAT_REDIS_USERNAME") or data.get("redis_username"),
            redis_password=env.get("SEGCAT_REDIS_PASSWORD") or data.get("redis_password"),
            s3_endpoint=env.get("SEGCAT_S3_ENDPOINT") or data.get("s3_endpoint"),
            s3_region=env.get("SEGCAT_S3_REGION") or data.get("s3_region"),
            keyframe_every_commits=_int(
                env, "SEGCAT_KEYFRAME_EVERY_COMMITS", data.get("keyframe_every_commits", 1_000)
            ),
            keyframe_every_seconds=float(
                env.get("SEGCAT_KEYFRAME_EVERY_SECONDS") or data.get("keyframe_every_seconds", 60.0)
            ),
            keyframe_every_bytes=_int(
                env, "SEGCAT_KEYFRAME_EVERY_BYTES", data.get("keyframe_every_bytes", 8 * 1024 * 1024)
            ),
            metrics_port=_int(env, "SEGCAT_METRICS_PORT", data.get("metrics_port", 9464)),
            metrics_addr=str(env.get("SEGCAT_METRICS_ADDR") or data.get("metrics_addr", "127.0.0.1")),
        )

    def with_services(self, bootstrap_servers: str, redis_url: str) -> Config:
        """The same config pointed at other service addresses (test fixtures use this)."""
        return replace(self, bootstrap_servers=bootstrap_servers, redis_url=redis_url)

    def kafka_client_config(self) -> dict[str, str]:
        """Base librdkafka config: bootstrap servers plus the user's passthrough settings."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.kafka}


_RESERVED_KAFKA_ENV = {"SEGCAT_KAFKA_VERSION"}


def _int(env: Mapping[str, str], key: str, default: Any) -> int:
    raw = env.get(key)
    try:
        return int(raw) if raw else int(default)
    except ValueError as exc:
        raise ConfigError(f"{key} must be an integer, got {raw!r}") from exc
