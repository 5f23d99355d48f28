"""The Docker-free local stack against real processes: a Kafka broker and redis-server.

The shared stack (``<repo>/.segcat``, default ports) is reused when it is already up and
left running; tests that stop things use their own home and free ports.
"""

from __future__ import annotations

import os
import socket
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import redis
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from segcat import local_stack as stack
from segcat.local_stack import process
from segcat.local_stack.errors import StackError
from segcat.local_stack.layout import Layout
from segcat.local_stack.settings import StackSettings
from tests.services import ENV_KEEP, LOCAL_STACK_HOME

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


def _free_ports(count: int) -> list[int]:
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


@pytest.fixture(scope="module")
def main_config() -> StackSettings:
    return replace(StackSettings.load(), home=LOCAL_STACK_HOME)


@pytest.fixture(scope="module")
def main_stack(main_config: StackSettings) -> Iterator[stack.StackInfo]:
    """The shared stack; stopped afterwards only if these tests were the ones to start it."""
    info = stack.up(main_config)
    yield info
    if info.started and os.environ.get(ENV_KEEP, "") not in {"1", "true", "yes"}:
        stack.down(main_config, services=info.started)


@pytest.fixture
def isolated_config(
    tmp_path: Path, main_config: StackSettings, main_stack: stack.StackInfo
) -> Iterator[StackSettings]:
    """A second stack: own home and free ports, but the jar cache of the shared one."""
    kafka_port, controller_port, redis_port = _free_ports(3)
    settings = replace(
        main_config,
        home=tmp_path / "home",
        kafka_port=kafka_port,
        kafka_controller_port=controller_port,
        redis_port=redis_port,
        start_timeout_s=90.0,
    )
    layout = Layout.of(settings)
    layout.home.mkdir(parents=True)
    layout.kafka_dist.symlink_to(Layout.of(main_config).kafka_dist, target_is_directory=True)
    yield settings
    stack.down(settings, timeout_s=10.0)  # in case a test failed half-way


def test_up_returns_addresses_that_answer(main_stack: stack.StackInfo) -> None:
    topic = f"segcat-stack-test-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": main_stack.bootstrap_servers})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    try:
        producer = Producer({"bootstrap.servers": main_stack.bootstrap_servers})
        producer.produce(topic, key=b"k", value=b"hello")
        assert producer.flush(30) == 0

        consumer = Consumer(
            {
                "bootstrap.servers": main_stack.bootstrap_servers,
                "group.id": topic,
                "enable.auto.commit": False,
            }
        )
        consumer.assign([TopicPartition(topic, 0, 0)])
        try:
            deadline = time.monotonic() + 30
            message = None
            while message is None and time.monotonic() < deadline:
                message = consumer.poll(1.0)
                if message is not None and message.error():
                    message = None
            assert message is not None, "no message consumed within 30s"
            assert (message.key(), message.value()) == (b"k", b"hello")
        finally:
            consumer.close()
    finally:
        admin.delete_topics([topic])[topic].result(30)

    client = redis.Redis.from_url(main_stack.redis_url)
    key = f"segcat:stack-test:{uuid.uuid4().hex}"
    try:
        client.set(key, b"v", ex=60)
        assert client.get(key) == b"v"
    finally:
        client.delete(key)
        client.close()


def test_broker_refuses_topic_auto_creation(main_stack: stack.StackInfo) -> None:
    admin = AdminClient({"bootstrap.servers": main_stack.bootstrap_servers})
    topic = f"segcat-never-created-{uuid.uuid4().hex[:8]}"
    producer = Producer({"bootstrap.servers": main_stack.bootstrap_servers})
    producer.produce(topic, value=b"x")
    producer.flush(3)
    assert topic not in admin.list_topics(timeout=10).topics


def test_up_twice_reuses_the_same_processes(main_config: StackSettings, main_stack: stack.StackInfo) -> None:
    again = stack.up(main_config)
    assert again.started == []
    assert (again.kafka_pid, again.redis_pid) == (main_stack.kafka_pid, main_stack.redis_pid)
    assert again.bootstrap_servers == main_stack.bootstrap_servers


def test_status_reports_running(main_config: StackSettings, main_stack: stack.StackInfo) -> None:
    st = stack.status(main_config)
    assert st.running
    assert (st.kafka.pid, st.redis.pid) == (main_stack.kafka_pid, main_stack.redis_pid)
    assert st.kafka.answering and st.redis.answering
    assert st.kafka.address == main_stack.bootstrap_servers
    assert st.kafka.log_path.is_file() and st.redis.log_path.is_file()


def test_down_stops_only_our_processes(isolated_config: StackSettings, main_stack: stack.StackInfo) -> None:
    info = stack.up(isolated_config)
    assert info.started == ["redis", "kafka"]
    assert info.kafka_pid not in (None, main_stack.kafka_pid)
    assert stack.status(isolated_config).running

    assert stack.down(isolated_config) == ["kafka", "redis"]

    st = stack.status(isolated_config)
    assert not st.kafka.running and not st.redis.running
    assert not st.kafka.answering and not st.redis.answering
    assert info.kafka_pid is not None and not process.pid_alive(info.kafka_pid)
    assert stack.down(isolated_config) == []
    # The shared stack was not touched.
    assert main_stack.kafka_pid is not None and process.pid_alive(main_stack.kafka_pid)


@pytest.mark.parametrize(
    ("field", "env_var"),
    [("kafka_port", "SEGCAT_STACK_KAFKA_PORT"), ("redis_port", "SEGCAT_STACK_REDIS_PORT")],
)
def test_port_taken_by_a_foreign_listener_is_an_error(
    isolated_config: StackSettings, field: str, env_var: str
) -> None:
    with socket.socket() as foreign:
        foreign.bind(("127.0.0.1", 0))
        foreign.listen()
        port = foreign.getsockname()[1]
        config = replace(isolated_config, **{field: port})
        with pytest.raises(StackError, match=rf"port {port}.*{env_var}") as refused:
            stack.up(config)
        low, high = process.ephemeral_port_range()
        assert low <= port <= high  # port 0 binds inside the kernel's range for outgoing connections
        assert f"range for outgoing connections, {low}-{high}" in str(refused.value)
    st = stack.status(config)
    assert not st.kafka.running and not st.redis.running  # nothing was started


def test_a_recycled_pid_is_never_treated_as_ours(isolated_config: StackSettings) -> None:
    layout = Layout.of(isolated_config)
    layout.make_dirs()
    # Our own pid in the pid file: alive, but its command line is not a Kafka broker.
    record = process.PidRecord(
        pid=os.getpid(),
        marker=f"kafka.Kafka {layout.conf / 'server.properties'}",
        address=f"127.0.0.1:{isolated_config.kafka_port}",
        start_ticks=process.start_ticks(os.getpid()),
    )
    process.write_pid_file(layout.pid_file("kafka"), record)
    assert not stack.status(isolated_config).kafka.running
    assert stack.down(isolated_config) == []
    assert process.pid_alive(os.getpid())
    assert not layout.pid_file("kafka").exists()


def test_start_timeout_reports_the_log_and_cleans_up(isolated_config: StackSettings) -> None:
    config = replace(isolated_config, start_timeout_s=0.0)
    with pytest.raises(StackError, match=r"did not answer .* last lines of .*\.log"):
        stack.up(config)
    st = stack.status(config)
    assert not st.kafka.running and not st.redis.running
