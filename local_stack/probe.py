"""Is a service really answering (not just listening)? Used while waiting for startup.

A TCP connect succeeds long before the broker can serve metadata, so Kafka is probed with
an AdminClient metadata request and Redis with PING (as the secure stack's admin user when it
has one: its default user is off).
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

_quiet = logging.getLogger("segcat.local_stack.librdkafka")


class KafkaProbe:
    """One AdminClient reused across probes (creating one per attempt is slow)."""

    def __init__(self, bootstrap_servers: str, extra: dict[str, str] | None = None) -> None:
        conf: dict[str, Any] = {
            "bootstrap.servers": bootstrap_servers,
            # While the broker is still starting librdkafka logs "Connection refused"
            # several times a second; route its logs to a logger and only keep fatal ones.
            "logger": _quiet,
            "log_level": 2,
            "error_cb": _ignore,
            "reconnect.backoff.ms": 100,
            "reconnect.backoff.max.ms": 500,
            **(extra or {}),
        }
        self._admin = AdminClient(conf)

    def answers(self, timeout_s: float = 2.0) -> bool:
        """True once the broker returns metadata that lists at least one broker."""
        try:
            metadata = self._admin.list_topics(timeout=timeout_s)
        except KafkaException:
            return False
        finally:
            self._admin.poll(0)  # deliver (and drop) queued log lines
        return bool(metadata.brokers)


def kafka_answers(bootstrap_servers: str, timeout_s: float = 2.0) -> bool:
    """One-shot probe for status output."""
    return KafkaProbe(bootstrap_servers).answers(timeout_s)


class RedisProbe:
    """PING one Redis server as ``username`` (the secure stack's admin; None = the default user).

    The password is an argument, never part of a URL that could end up in a message.
    """

    def __init__(
        self, host: str, port: int, username: str | None = None, password: str | None = None
    ) -> None:
        self.host, self.port = host, port
        self._username, self._password = username, password

    def answers(self, timeout_s: float = 1.0) -> bool:
        """True if the server replies to PING (a refused login or NOAUTH is no answer)."""
        client = redis.Redis(
            host=self.host,
            port=self.port,
            username=self._username,
            password=self._password,
            socket_connect_timeout=timeout_s,
            socket_timeout=timeout_s,
        )
        return _pings(client)


def redis_answers(
    url: str, timeout_s: float = 1.0, *, username: str | None = None, password: str | None = None
) -> bool:
    """True if Redis at ``url`` replies to PING (as ``username`` when given)."""
    client = redis.Redis.from_url(
        url,
        socket_connect_timeout=timeout_s,
        socket_timeout=timeout_s,
        username=username,
        password=password,
    )
    return _pings(client)


def _pings(client: redis.Redis[bytes]) -> bool:
    """PING answered (a refused login or NOAUTH is no answer); closes ``client``."""
    try:
        return bool(client.ping())
    except (redis.RedisError, OSError):
        return False
    finally:
        client.close()


def redis_cluster_info(
    host: str, port: int, username: str | None = None, password: str | None = None, timeout_s: float = 2.0
) -> dict[str, str]:
    """``CLUSTER INFO`` of one node as text fields (``cluster_state``, ``cluster_known_nodes``, ...);
    empty when the node does not answer."""
    client = redis.Redis(
        host=host,
        port=port,
        username=username,
        password=password,
        socket_connect_timeout=timeout_s,
        socket_timeout=timeout_s,
        decode_responses=True,
    )
    try:
        raw = client.execute_command("CLUSTER INFO")
    except (redis.RedisError, OSError):
        return {}
    finally:
        client.close()
    if isinstance(raw, dict):  # redis-py parses CLUSTER INFO into a dict
        return {str(k): str(v) for k, v in raw.items()}
    fields = (line.split(":", 1) for line in str(raw).splitlines() if ":" in line)
    return {k.strip(): v.strip() for k, v in fields}


def _ignore(_err: KafkaError) -> None:
    """Errors while probing only mean "not yet"; the caller decides when to give up."""
