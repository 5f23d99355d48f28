"""Services of a test's (or a benchmark's) own: ``segcat.local_stack.private``.

Ports of private stacks lie below the kernel's range for outgoing connections. CI found a
3-broker fault test unable to restart a killed broker: while it was down, a client retrying the
connection held the broker's port (a source port from the kernel's range, i.e. a TCP
self-connect), and the restarted broker found its port "in use by a process segcat did not start".
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis

from segcat.local_stack import process
from segcat.local_stack import redis as stack_redis
from segcat.local_stack.private import (
    PrivateRedis,
    free_port_block,
    port_is_free,
    private_settings,
    stack_port_offsets,
)
from segcat.local_stack.settings import NODE_PORT_STRIDE
from tests.redis_stack_support import free_redis_base_port


def test_kafka_and_redis_ports_of_a_private_stack_avoid_the_outgoing_range(tmp_path: Path) -> None:
    low, _ = process.ephemeral_port_range()
    taken: set[int] = set()
    for i in range(50):
        s = private_settings(tmp_path / f"s{i}", brokers=3, taken=taken)
        derived = [p for node in range(3) for p in s.node_ports(node)]
        assert max([*derived, s.kafka_controller_port, s.redis_port + 2, s.s3_port]) < low
        assert derived[0] == s.kafka_port and s.kafka_controller_port == s.kafka_port + 1
        assert derived[3] == s.kafka_port + NODE_PORT_STRIDE
    assert len(taken) == 50, "a base port handed out twice within one run"


def test_options_override_what_a_private_stack_chooses(tmp_path: Path) -> None:
    s = private_settings(tmp_path, brokers=3, start_timeout_s=180.0, secure=False, s3=False)
    assert (s.brokers, s.start_timeout_s, s.secure, s.s3, s.home) == (3, 180.0, False, False, tmp_path)


def test_redis_cluster_ports_avoid_the_outgoing_range() -> None:
    low, _ = process.ephemeral_port_range()
    for _ in range(50):
        base = free_redis_base_port(cluster=True)
        assert base + 2 + stack_redis.BUS_PORT_OFFSET < low


def test_a_port_block_skips_ports_in_use_and_bases_taken() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        held = busy.getsockname()[1]
        assert not port_is_free(held)
        for _ in range(50):
            base = free_port_block(stack_port_offsets(1), lowest=10_000, step=100, taken={10_000})
            assert base != 10_000 and base % 100 == 0
            assert held not in {base + offset for offset in stack_port_offsets(1)}


def test_private_redis_answers_and_frees_its_port(tmp_path: Path) -> None:
    with PrivateRedis(tmp_path / "redis") as server:
        client = redis.Redis.from_url(server.url)
        client.set("k", b"v")
        server.flushall()
        assert client.get("k") is None
        client.close()
    assert server.proc is None
    with pytest.raises(redis.ConnectionError):
        redis.Redis.from_url(server.url, socket_connect_timeout=1).ping()
