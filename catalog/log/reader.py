"""Reads a table's topic by explicit assignment: ranges, watermarks and time lookups.

Consumer-group offsets are never used for correctness; every read states where it starts.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import TracebackType

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from segcat.catalog.config import Config
from segcat.catalog.errors import ServiceUnavailable
from segcat.catalog.log import refusals
from segcat.catalog.log.clients import consumer_config
from segcat.catalog.log.topics import TopicAdmin, unreachable_hint
from segcat.catalog.protocol.model import LogRecord
from segcat.catalog.protocol.names import TableName

BATCH = 5_000
_UNKNOWN_TOPIC_CODES = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
)


class LogReader:
    """One consumer over partition 0 of one table's topic."""

    def __init__(self, config: Config, name: TableName) -> None:
        self._name = name
        self._timeout = config.request_timeout_s
        self._config = config
        self._consumer = Consumer(consumer_config(config))
        self._assigned_at: int | None = None

    def __enter__(self) -> LogReader:
        return self

    def __exit__(self, *exc: object | type[BaseException] | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._consumer.close()

    def watermarks(self) -> tuple[int, int]:
        """(low, high): the first retained offset and the offset the next record will take."""
        try:
            low, high = self._consumer.get_watermark_offsets(
                TopicPartition(self._name.topic, 0), timeout=self._timeout, cached=False
            )
        except KafkaException as exc:
            refusals.raise_refusal(exc, self._config, f"reading {self._name.topic}")
            self._raise_if_gone(exc)
            raise ServiceUnavailable(
                f"cannot read the end of {self._name.topic}: {exc}; {unreachable_hint(self._config)}"
            ) from exc
        return int(low), int(high)

    def _raise_if_gone(self, exc: KafkaException | KafkaError) -> None:
        """``TableNotFound`` when Kafka says the topic does not exist (purged, or never created).

        Asked the admin API before saying so: a broker that has not yet learned of a topic just
        created answers the same, and that is an outage to retry, not a missing table.
        """
        err = refusals.kafka_error(exc)
        if err is None or err.code() not in _UNKNOWN_TOPIC_CODES:
            return
        TopicAdmin(self._config).describe(self._name)  # TableNotFound if the cluster agrees

    def offset_for_time(self, timestamp_ms: int) -> int | None:
        """The first offset whose (LogAppendTime) timestamp is ≥ ``timestamp_ms``, or None."""
        try:
            (tp,) = self._consumer.offsets_for_times(
                [TopicPartition(self._name.topic, 0, timestamp_ms)], timeout=self._timeout
            )
        except KafkaException as exc:
            refusals.raise_refusal(exc, self._config, f"reading {self._name.topic}")
            self._raise_if_gone(exc)
            raise ServiceUnavailable(f"offsets_for_times failed on {self._name.topic}: {exc}") from exc
        return None if tp.offset < 0 else int(tp.offset)

    def seek(self, offset: int) -> None:
        """Read from ``offset`` on.

        The first seek asks for the watermarks first: that connects to the partition's leader
        and loads the topic's metadata, which a consumer that polls right after ``assign``
        would otherwise do lazily, costing its first polls their whole timeout (~0.5 s).
        """
        if self._assigned_at is None:
            self.watermarks()
        start = OFFSET_BEGINNING if offset <= 0 else offset
        self._consumer.assign([TopicPartition(self._name.topic, 0, start)])
        self._assigned_at = offset

    def poll_batch(self, timeout_s: float) -> list[LogRecord]:
        """Whatever records arrive within ``timeout_s`` (after ``seek``)."""
        out: list[LogRecord] = []
        first = self._consumer.poll(timeout_s)
        if first is None:
            return out
        # consume() waits for a full batch or its timeout, so wait only for the first record
        for msg in [first, *self._consumer.consume(num_messages=BATCH, timeout=0)]:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                refusals.raise_refusal(err, self._config, f"reading {self._name.topic}")
                self._raise_if_gone(err)
                raise ServiceUnavailable(f"reading {self._name.topic} failed: {err}")
            _, ts = msg.timestamp()
            offset = msg.offset()
            if offset is None:
                continue
            out.append(LogRecord(offset, int(ts), msg.key(), msg.value()))
        return out

    def read(self, start: int, end: int | None = None) -> Iterator[LogRecord]:
        """Records with ``start`` ≤ offset < ``end`` (default: the current high watermark)."""
        low, high = self.watermarks()
        stop = high if end is None else min(end, high)
        if max(start, low) >= stop:
            return
        self.seek(max(start, low))
        deadline = time.monotonic() + self._timeout
        next_offset = max(start, low)
        while next_offset < stop:
            batch = self.poll_batch(0.5)
            if not batch:
                if time.monotonic() > deadline:
                    raise ServiceUnavailable(
                        f"timed out reading {self._name.topic} at offset {next_offset} (end {stop})"
                    )
                continue
            deadline = time.monotonic() + self._timeout
            for record in batch:
                if record.offset >= stop:
                    return
                next_offset = record.offset + 1
                yield record
            if self.position() >= stop:
                return

    def position(self) -> int:
        """The offset the consumer will fetch next (-1 if unknown)."""
        (tp,) = self._consumer.position([TopicPartition(self._name.topic, 0)])
        offset = tp.offset
        return int(offset) if offset is not None and offset >= 0 else -1
