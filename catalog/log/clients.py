"""librdkafka client configs: the project's defaults under the user's passthrough settings.

Defaults that the protocol depends on (idempotence, acks=all) are forced; everything
else, security included, comes from ``Config.kafka`` untouched. Those passthrough
settings are checked by librdkafka itself once per process before the first client is
built, so a misspelt ``SEGCAT_KAFKA_SECURITY_PROTOKOL`` fails as a ``ConfigError`` naming
the variable instead of a ``KafkaException`` from deep inside a writer or a reader.
"""

from __future__ import annotations

import functools
import logging
import re
import uuid
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer

from segcat.catalog.config import Config
from segcat.catalog.errors import ConfigError
from segcat.catalog.log import refusals

_librdkafka_log = logging.getLogger("segcat.librdkafka")
_quiet_log = logging.getLogger("segcat.librdkafka.check")
_quiet_log.addHandler(logging.NullHandler())
_quiet_log.propagate = False
_PROPERTY = re.compile(r'property:? "([^"]+)"')
_SECRET = re.compile(r"password|secret|key|token|jaas", re.IGNORECASE)
"""Settings whose values never appear in a message."""


def check_kafka_settings(config: Config) -> None:
    """Raise ``ConfigError`` when librdkafka refuses one of the user's passthrough settings."""
    if not config.kafka:
        return
    problem = _librdkafka_refuses(tuple(sorted(config.kafka.items())))
    if problem is None:
        return
    match = _PROPERTY.search(problem)
    named = match.group(1) if match else None
    if named is not None and named in config.kafka:
        origin = config.kafka_origins.get(named, f"Kafka setting {named!r}")
        shown = "<hidden>" if _SECRET.search(named) else repr(config.kafka[named])
        raise ConfigError(
            f"{origin} (librdkafka setting {named}={shown}) is refused: {problem}; "
            "fix or remove it (librdkafka's CONFIGURATION.md lists the settings)"
        )
    origins = ", ".join(config.kafka_origins.get(key, key) for key in sorted(config.kafka))
    raise ConfigError(f"librdkafka refuses the Kafka settings ({origins}): {problem}")


@functools.lru_cache(maxsize=32)
def _librdkafka_refuses(settings: tuple[tuple[str, str], ...]) -> str | None:
    """librdkafka's complaint about ``settings``, from a client that never connects (no bootstrap)."""
    try:
        Producer({**dict(settings), "logger": _quiet_log})
    except KafkaException as exc:
        err = exc.args[0] if exc.args else None
        return err.str() if isinstance(err, KafkaError) else str(exc)
    return None


def _base(config: Config) -> dict[str, Any]:
    check_kafka_settings(config)
    return {
        "logger": _librdkafka_log,
        "error_cb": refusals.error_callback(config),
        **config.kafka_client_config(),
    }


def admin_config(config: Config) -> dict[str, Any]:
    return {**_base(config), "socket.timeout.ms": int(config.request_timeout_s * 1000)}


def producer_config(config: Config, max_message_bytes: int, *, linger_ms: int = 0) -> dict[str, Any]:
    """``linger_ms``: how long a record may wait for others to share its produce request (a
    pipelining writer batches; ``flush()`` sends at once regardless). The user's settings win."""
    return {
        "linger.ms": linger_ms,
        "compression.type": "zstd",
        "message.timeout.ms": int(config.request_timeout_s * 1000),
        **_base(config),
        "message.max.bytes": max(max_message_bytes + 1024, 1_000_000),
        "enable.idempotence": True,
        "acks": "all",
    }


def consumer_config(config: Config, *, group_id: str | None = None) -> dict[str, Any]:
    """A consumer for reading partitions by explicit assignment (no group offsets used)."""
    return {
        "group.id": group_id or f"segcat-reader-{uuid.uuid4()}",
        "fetch.wait.max.ms": 100,
        "fetch.min.bytes": 1,
        "queued.max.messages.kbytes": 262_144,
        "fetch.max.bytes": 67_108_864,
        **_base(config),
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": True,
        "auto.offset.reset": "earliest",
    }
