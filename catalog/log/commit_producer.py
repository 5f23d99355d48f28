"""Produce one commit record and return its offset: the smallest write path, for table set-up.

``TableWriter`` (producers/) is the writer for data; creating a table and upgrading its
protocol only need one record each, judged afterwards by reading the table back, so the
core library does that itself instead of importing the layer above it.
"""

from __future__ import annotations

import time

from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME, KafkaError, Message, Producer

from segcat.catalog.config import Config
from segcat.catalog.errors import ServiceUnavailable
from segcat.catalog.log.clients import producer_config
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.model import Commit
from segcat.catalog.protocol.names import TableName


def produce_commit(config: Config, name: TableName, commit: Commit, max_message_bytes: int) -> int:
    """Send ``commit`` (idempotent producer, acks=all) and wait for its offset."""
    return produce_commit_timed(config, name, commit, max_message_bytes)[0]


def produce_commit_timed(
    config: Config, name: TableName, commit: Commit, max_message_bytes: int
) -> tuple[int, int | None]:
    """``produce_commit``, also handing back the record's broker time (``LogAppendTime``, ms; None
    when the delivery report does not carry the broker's time)."""
    producer = Producer(producer_config(config, max_message_bytes))
    result: list[tuple[int | None, int | None, KafkaError | None]] = []

    def delivered(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            result.append((None, None, err))
            return
        kind, stamp = msg.timestamp()
        result.append((msg.offset(), stamp if kind == TIMESTAMP_LOG_APPEND_TIME else None, None))

    producer.produce(
        name.topic, key=commit.commit_id.encode(), value=codec.encode_commit(commit), on_delivery=delivered
    )
    deadline = time.monotonic() + config.request_timeout_s + 5
    while not result and time.monotonic() < deadline:
        producer.poll(0.05)
    producer.flush(1)
    if not result:
        raise ServiceUnavailable(f"no delivery report for the commit to {name.topic} (timed out)")
    offset, broker_ms, error = result[0]
    if offset is None:
        raise ServiceUnavailable(f"could not write to {name.topic}: {error}")
    return offset, broker_ms
