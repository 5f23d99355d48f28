"""A stack of a test's own (3 brokers, secure, ...) beside the shared one: own home, free ports.

The settings come from ``segcat.local_stack.private`` (shared with bench/); the Kafka jars from
the shared stack's cache (a symlink), so nothing is fetched twice.
Under ``CI=true`` a stack that cannot start fails the test (``service_failure``), never skips.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from segcat import local_stack as stack
from segcat.catalog.config import Config
from segcat.catalog.errors import SegcatError
from segcat.local_stack import kafka as stack_kafka
from segcat.local_stack import private, process
from segcat.local_stack.layout import Layout
from segcat.local_stack.settings import StackSettings
from tests.services import LOCAL_STACK_HOME, service_failure


def private_settings(home: Path, **options: Any) -> StackSettings:
    """A stack of the test's own (free ports below the outgoing range, ``options`` override any
    setting) that links the shared stack's Kafka jars."""
    return private.private_settings(home, jars_from=LOCAL_STACK_HOME, **options)


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
