"""librdkafka client configs: the project's defaults under the user's passthrough settings.

Defaults that the protocol depends on (idempotence, acks=all) are forced; everything
else, security included, comes from ``Config.kafka`` untouched.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

from catalog.config import Config

_librdkafka_log = logging.getLogger("segcat.librdkafka")


def _base(config: Config) -> dict[str, Any]:
    return {"logger": _librdkafka_log, **config.kafka_client_config()}


def admin_config(config: Config) -> dict[str, Any]:
    return {**_base(config), "socket.timeout.ms": int(config.request_timeout_s * 1000)}


def producer_config(config: Config, max_message_bytes: int) -> dict[str, Any]:
    return {
        "linger.ms": 0,
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
