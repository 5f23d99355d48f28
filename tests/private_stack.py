"""A stack of a test's own (3 brokers, secure, ...) beside the shared one: own home, free ports.

The Kafka jars come from the shared stack's cache (a symlink), so nothing is fetched twice.
Under ``CI=true`` a stack that cannot start fails the test (``service_failure``), never skips.
"""

from __future__ import annotations

import contextlib
import random
import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

from confluent_kafka.admin import AdminClient

from segcat import local_stack as stack
from segcat.catalog.config import Config
from segcat.catalog.errors import SegcatError
from segcat.local_stack import kafka as stack_kafka
from segcat.local_stack import process
from segcat.local_stack.layout import Layout
from segcat.local_stack.settings import NODE_PORT_STRIDE, StackSettings
from tests.services import LOCAL_STACK_HOME, service_failure


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_base_ports(brokers: int) -> tuple[int, int, int]:
    """(kafka_port, controller_port, redis_port) with every port the stack derives from them free.

    The ports lie below the kernel's range for outgoing connections: a broker port inside it can
    be held by a client's self-connect while the broker is down, and the broker cannot come back.
    """
    rng = random.Random()
    ephemeral_low, _ = process.ephemeral_port_range()
    highest_base = min(ephemeral_low, 65536) - 100
    for _ in range(200):
        kafka_port = rng.randrange(10000, max(highest_base, 10100), 100)
        ports = [
            p
            for node in range(brokers)
            for p in (
                kafka_port + NODE_PORT_STRIDE * node,
                kafka_port + 1 + NODE_PORT_STRIDE * node,
                kafka_port + 2 + NODE_PORT_STRIDE * node,
            )
        ]
        redis_ports = [kafka_port + 50 + i for i in range(3)]
        if all(_free(p) for p in ports + redis_ports + [kafka_port + 60]):
            return kafka_port, kafka_port + 1, kafka_port + 50
    raise RuntimeError("no free ports for a private stack")


def private_settings(home: Path, **options: object) -> StackSettings:
    brokers = int(str(options.get("brokers", 1)))
    kafka_port, controller_port, redis_port = free_base_ports(brokers)
    settings = replace(
        StackSettings.load(),
        home=home,
        kafka_port=kafka_port,
        kafka_controller_port=controller_port,
        redis_port=redis_port,
        s3_port=kafka_port + 60,
        start_timeout_s=120.0,
        **options,  # type: ignore[arg-type]
    )
    layout = Layout.of(settings)
    layout.home.mkdir(parents=True, exist_ok=True)
    shared = Layout.of(replace(settings, home=LOCAL_STACK_HOME)).kafka_dist
    if shared.is_dir() and not layout.kafka_dist.exists():
        layout.kafka_dist.symlink_to(shared, target_is_directory=True)
    return settings


@contextlib.contextmanager
def running_stack(settings: StackSettings) -> Iterator[stack.StackInfo]:
    try:
        info = stack.up(settings)
    except SegcatError as exc:
        stack.down(settings, timeout_s=10.0)
        service_failure(f"could not start a private stack in {settings.home}: {exc}")
    try:
        yield info
    finally:
        stack.down(settings, timeout_s=10.0)


def client_config(
    settings: StackSettings, warehouse: Path, principal: str = "writer", **extra: str
) -> Config:
    env = {
        **stack.client_environment(settings, principal),
        "SEGCAT_HOME": str(settings.home / "client"),
        "SEGCAT_WAREHOUSE": str(warehouse),
        "SEGCAT_REQUEST_TIMEOUT_S": "30",
        **extra,
    }
    return Config.load(env=env)


def partition_leader(settings: StackSettings, topic: str) -> int:
    """The node id (1-based) leading the table's partition."""
    admin = AdminClient(stack_kafka.stack_client_config(Layout.of(settings), settings))
    metadata = admin.list_topics(topic=topic, timeout=10)
    return int(metadata.topics[topic].partitions[0].leader)


def in_sync_replicas(settings: StackSettings, topic: str) -> list[int]:
    admin = AdminClient(stack_kafka.stack_client_config(Layout.of(settings), settings))
    metadata = admin.list_topics(topic=topic, timeout=10)
    return sorted(int(n) for n in metadata.topics[topic].partitions[0].isrs)


def node_record(settings: StackSettings, node_id: int) -> process.PidRecord:
    """The pid record of node ``node_id`` (1-based)."""
    name = stack_kafka.node_name(settings, node_id - 1)
    record = process.read_pid_file(Layout.of(settings).pid_file(name))
    assert record is not None and process.is_ours(record), f"{name} is not running"
    return record
