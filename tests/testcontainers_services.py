"""Kafka, Redis and S3 as testcontainers: the code path the design names for test services.

Each service is a ``testcontainers`` ``DockerContainer`` of an image ``containers.images``
built on this machine, on host networking (the engine ``./dev compose`` starts has no bridge)
with ports chosen free on 127.0.0.1, and a wait strategy that reads the service's own "ready"
line. Ryuk, testcontainers' reaper, is off: its image comes from a registry, and ``stop``
removes every container started here, volumes included.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from containers.compose_stack import held_ports, new_cluster_id
from containers.images import LocalImages

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")  # read when testcontainers loads

START_TIMEOUT_S = 120


@dataclass(frozen=True)
class ContainerServices:
    """Addresses of the three services and the ids that prove they are these containers."""

    bootstrap_servers: str
    redis_url: str
    s3_endpoint: str
    bucket: str
    cluster_id: str
    container_ids: dict[str, str]
    access_key: str
    secret_key: str = field(repr=False)

    def aws_env(self) -> dict[str, str]:
        return {
            "AWS_ACCESS_KEY_ID": self.access_key,
            "AWS_SECRET_ACCESS_KEY": self.secret_key,
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }


def start(images: LocalImages) -> tuple[ContainerServices, Callable[[], None]]:
    """Start Kafka, Redis and S3Proxy containers; returns them and the ``stop`` that removes them."""
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.wait_strategies import LogMessageWaitStrategy

    cluster_id = new_cluster_id()
    access_key, secret_key = f"tc-{secrets.token_hex(4)}", secrets.token_hex(20)
    started: list[Any] = []

    def stop() -> None:
        for container in reversed(started):
            with contextlib.suppress(Exception):
                container.stop()

    with held_ports(4) as (kafka_port, controller_port, redis_port, s3_port):
        pass
    kafka = (
        DockerContainer(images.kafka)
        .with_kwargs(network_mode="host")
        .with_envs(
            CLUSTER_ID=cluster_id,
            KAFKA_NODE_ID="1",
            KAFKA_PROCESS_ROLES="broker,controller",
            KAFKA_CONTROLLER_QUORUM_VOTERS=f"1@127.0.0.1:{controller_port}",
            KAFKA_LISTENERS=f"PLAINTEXT://127.0.0.1:{kafka_port},CONTROLLER://127.0.0.1:{controller_port}",
            KAFKA_ADVERTISED_LISTENERS=f"PLAINTEXT://127.0.0.1:{kafka_port}",
            KAFKA_LISTENER_SECURITY_PROTOCOL_MAP="PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            KAFKA_CONTROLLER_LISTENER_NAMES="CONTROLLER",
            KAFKA_INTER_BROKER_LISTENER_NAME="PLAINTEXT",
            KAFKA_LOG_DIRS="/var/lib/kafka/data",
            KAFKA_AUTO_CREATE_TOPICS_ENABLE="false",
            KAFKA_NUM_PARTITIONS="1",
            KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR="1",
            KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR="1",
            KAFKA_TRANSACTION_STATE_LOG_MIN_ISR="1",
            KAFKA_SHARE_COORDINATOR_STATE_TOPIC_REPLICATION_FACTOR="1",
            KAFKA_SHARE_COORDINATOR_STATE_TOPIC_MIN_ISR="1",
            KAFKA_GROUP_INITIAL_REBALANCE_DELAY_MS="0",
            KAFKA_LOG_CLEANER_ENABLE="true",
            KAFKA_HEAP_OPTS="-Xmx512m",
        )
        .waiting_for(LogMessageWaitStrategy("Kafka Server started").with_startup_timeout(START_TIMEOUT_S))
    )
    redis = (
        DockerContainer(images.redis)
        .with_kwargs(network_mode="host")
        .with_command(
            [
                "redis-server",
                "--save",
                "",
                "--appendonly",
                "no",
                "--bind",
                "127.0.0.1",
                "--port",
                str(redis_port),
            ]
        )
        .waiting_for(LogMessageWaitStrategy("Ready to accept connections").with_startup_timeout(60))
    )
    s3 = (
        DockerContainer(images.s3)
        .with_kwargs(network_mode="host")
        .with_envs(
            S3PROXY_ENDPOINT=f"http://127.0.0.1:{s3_port}",
            S3PROXY_IDENTITY=access_key,
            S3PROXY_CREDENTIAL=secret_key,
        )
        .waiting_for(LogMessageWaitStrategy("Started .*ServerConnector").with_startup_timeout(60))
    )
    try:
        for container in (kafka, redis, s3):
            container.start()
            started.append(container)
    except BaseException:
        stop()
        raise
    services = ContainerServices(
        bootstrap_servers=f"127.0.0.1:{kafka_port}",
        redis_url=f"redis://127.0.0.1:{redis_port}/0",
        s3_endpoint=f"http://127.0.0.1:{s3_port}",
        bucket="segcat-tc",
        cluster_id=cluster_id,
        container_ids={
            name: c.get_wrapped_container().id
            for name, c in zip(("kafka", "redis", "s3"), started, strict=True)
        },
        access_key=access_key,
        secret_key=secret_key,
    )
    return services, stop
