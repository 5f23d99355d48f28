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
DEFAULT_S3_PORT = 19000
DEFAULT_S3PROXY_VERSION = "4.0.0"
DEFAULT_S3_BUCKET = "segcat"
NODE_PORT_STRIDE = 10
"""Node i of a multi-broker stack listens on ``kafka_port + 10*i`` (controller likewise)."""

_KEYS = (
    "kafka_version",
    "kafka_port",
    "kafka_controller_port",
    "kafka_heap",
    "redis_port",
    "start_timeout_s",
    "brokers",
    "secure",
    "s3",
    "s3_port",
    "s3proxy_version",
    "s3_bucket",
    "redis_cluster",
)


@dataclass(frozen=True)
class StackSettings:
    """Where and how the local stack runs."""

    home: Path
    kafka_version: str = DEFAULT_KAFKA_VERSION
    kafka_port: int = DEFAULT_KAFKA_PORT
    kafka_controller_port: int = DEFAULT_KAFKA_CONTROLLER_PORT
    kafka_heap: str = "1g"
    """The broker's -Xmx: a catalog of 10,000 tables keeps about 420 MiB of it live after a restart
    (docs/OPERATIONS.md, "Many tables: what the broker pays")."""
    redis_port: int = DEFAULT_REDIS_PORT
    start_timeout_s: float = 120.0
    brokers: int = 1
    """1, or a KRaft cluster of this many combined broker+controller nodes (replication 3, min ISR 2)."""
    secure: bool = False
    """SASL_SSL (SCRAM-SHA-512) with a CA made for the stack, Kafka ACLs per principal, a Redis ACL user."""
    s3: bool = False
    """Also run an S3-compatible server (S3Proxy, filesystem backend) with a bucket for the warehouse."""
    s3_port: int = DEFAULT_S3_PORT
    s3proxy_version: str = DEFAULT_S3PROXY_VERSION
    s3_bucket: str = DEFAULT_S3_BUCKET
    redis_cluster: bool = False
    """Three Redis masters (``redis_port`` .. ``redis_port + 2``) joined as a Redis Cluster."""

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
            kafka_heap=src.text(None, "kafka_heap", "1g", section="stack"),
            redis_port=src.integer(
                "SEGCAT_STACK_REDIS_PORT", "redis_port", DEFAULT_REDIS_PORT, 1, 65535, "stack"
            ),
            start_timeout_s=src.number(None, "start_timeout_s", 120.0, 1.0, 3600.0, "stack"),
            brokers=src.integer("SEGCAT_STACK_BROKERS", "brokers", 1, 1, 9, "stack"),
            secure=src.flag("SEGCAT_STACK_SECURE", "secure", False, "stack"),
            s3=src.flag("SEGCAT_STACK_S3", "s3", False, "stack"),
            s3_port=src.integer("SEGCAT_STACK_S3_PORT", "s3_port", DEFAULT_S3_PORT, 1, 65535, "stack"),
            s3proxy_version=src.text(None, "s3proxy_version", DEFAULT_S3PROXY_VERSION, "stack"),
            s3_bucket=src.text("SEGCAT_STACK_S3_BUCKET", "s3_bucket", DEFAULT_S3_BUCKET, "stack"),
            redis_cluster=src.flag("SEGCAT_STACK_REDIS_CLUSTER", "redis_cluster", False, "stack"),
        )

    def node_ports(self, node: int) -> tuple[int, int, int]:
        """(client, controller, inter-broker) ports of node ``node`` (0-based)."""
        offset = NODE_PORT_STRIDE * node
        return (
            self.kafka_port + offset,
            self.kafka_controller_port + offset,
            self.kafka_port + offset + 2,
        )

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"127.0.0.1:{self.node_ports(i)[0]}" for i in range(self.brokers))

    def redis_ports(self) -> list[int]:
        return [self.redis_port + i for i in range(3 if self.redis_cluster else 1)]

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"
