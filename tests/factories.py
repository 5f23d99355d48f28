"""Small builders for segments and raw records used by the integration tests."""

from __future__ import annotations

from confluent_kafka import Producer

from segcat.catalog.config import Config
from segcat.catalog.protocol.model import ColumnStats, ColumnType, Segment


def segment(segment_id: str, partition: str | None = "2020-01", rows: int = 10) -> Segment:
    return Segment(
        segment_id=segment_id,
        path=f"data/{partition or 'all'}/{segment_id}.parquet",
        size_bytes=rows * 100,
        row_count=rows,
        partition=partition,
        stats=(ColumnStats("id", ColumnType.INT, 0, rows - 1, 0),),
    )


def raw_producer(config: Config) -> Producer:
    """A plain producer that writes whatever bytes it is given (to inject bad records)."""
    return Producer({**config.kafka_client_config(), "acks": "all", "enable.idempotence": True})


def produce_raw(config: Config, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> list[int]:
    """Produce ``(key, value)`` pairs in order; return their offsets."""
    producer = raw_producer(config)
    offsets: list[int] = []

    def delivered(err: object, msg: object) -> None:
        assert err is None, err
        offsets.append(msg.offset())  # type: ignore[attr-defined]

    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
        producer.flush(30)
    assert len(offsets) == len(records)
    return offsets
