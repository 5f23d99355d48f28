"""Ports of the tests' private stacks lie below the kernel's range for outgoing connections.

CI found a 3-broker fault test unable to restart a killed broker: while it was down, a client
retrying the connection held the broker's port (a source port from the kernel's range, i.e. a TCP
self-connect), and the restarted broker found its port "in use by a process segcat did not start".
"""

from __future__ import annotations

from segcat.local_stack import process
from segcat.local_stack import redis as stack_redis
from segcat.local_stack.settings import NODE_PORT_STRIDE
from tests.private_stack import free_base_ports
from tests.redis_stack_support import free_redis_base_port


def test_kafka_and_redis_ports_of_a_private_stack_avoid_the_outgoing_range() -> None:
    low, _ = process.ephemeral_port_range()
    for _ in range(50):
        kafka_port, controller_port, redis_port = free_base_ports(brokers=3)
        derived = [kafka_port + off + NODE_PORT_STRIDE * node for node in range(3) for off in (0, 1, 2)]
        assert max([*derived, controller_port, redis_port + 2, kafka_port + 60]) < low


def test_redis_cluster_ports_avoid_the_outgoing_range() -> None:
    low, _ = process.ephemeral_port_range()
    for _ in range(50):
        base = free_redis_base_port(cluster=True)
        assert base + 2 + stack_redis.BUS_PORT_OFFSET < low
