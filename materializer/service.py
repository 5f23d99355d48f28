"""``segcat materializer``: a consumer group over every table topic.

Kafka spreads the tables over the running instances. On assignment each table is
recovered from its newest valid key frame and the partition is positioned right after
it; the group's committed offsets are only progress markers for lag dashboards.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType

from confluent_kafka import Consumer, KafkaError, TopicPartition

from catalog.clients import consumer_config
from catalog.config import Config
from catalog.errors import InvalidTableName, ServiceUnavailable
from catalog.model import LogRecord
from catalog.names import TableName
from catalog.objectstore import ObjectStore
from catalog.redis_store import RedisStore
from catalog.table_files import TableFiles
from materializer import metrics
from materializer.table_materializer import TableMaterializer

log = logging.getLogger("segcat.materializer")

TOPIC_PATTERN = r"^segcat\..*"
DEFAULT_GROUP = "segcat-materializer"
TICK_SECONDS = 1.0


class Materializer:
    """The long-running service; ``run`` until ``stop`` is set (SIGTERM / SIGINT set it)."""

    def __init__(
        self,
        config: Config,
        *,
        group_id: str = DEFAULT_GROUP,
        use_redis: bool = True,
        pattern: str = TOPIC_PATTERN,
    ) -> None:
        self.config = config
        self.group_id = group_id
        self.pattern = pattern
        self.store = ObjectStore.from_config(config)
        self.redis = RedisStore.from_config(config) if use_redis else None
        self.tables: dict[str, TableMaterializer] = {}
        self.stop = threading.Event()
        self._consumer: Consumer | None = None
        self._catching_up: dict[str, int] = {}

    # ------------------------------------------------------------------ assignment

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        positioned = []
        for tp in partitions:
            try:
                name = TableName.from_topic(tp.topic)
            except InvalidTableName:
                log.error("ignoring topic that is no segcat table", extra={"topic": tp.topic})
                continue
            if tp.partition != 0:
                log.error("table topic has more than one partition; ignoring it", extra={"topic": tp.topic})
                continue
            table = TableMaterializer(name, self.config, self.redis, TableFiles(self.store, name))
            tp.offset = table.recover()
            self.tables[tp.topic] = table
            _, high = consumer.get_watermark_offsets(tp, timeout=self.config.request_timeout_s, cached=False)
            self._catching_up[tp.topic] = high - 1
            positioned.append(tp)
            log.info(
                "table assigned", extra={"table": name.qualified, "from_offset": tp.offset, "head": high - 1}
            )
        consumer.assign(positioned)

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            table = self.tables.pop(tp.topic, None)
            self._catching_up.pop(tp.topic, None)
            if table is not None:
                log.info(
                    "table revoked", extra={"table": table.name.qualified, "version": table.state.version}
                )
        consumer.unassign()

    # ------------------------------------------------------------------ loop

    def run(self, *, ready: Callable[[], None] | None = None) -> None:
        metrics.serve(self.config.metrics_port, self.config.metrics_addr)
        conf = consumer_config(self.config, group_id=self.group_id)
        conf.update(
            {
                "enable.partition.eof": False,
                "topic.metadata.refresh.interval.ms": 2_000,
                "enable.auto.commit": True,
                "auto.commit.interval.ms": 5_000,
            }
        )
        consumer = Consumer(conf)
        self._consumer = consumer
        consumer.subscribe(
            [self.pattern], on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_revoke
        )
        log.info("materializer started", extra={"group": self.group_id, "pattern": self.pattern})
        if ready is not None:
            ready()
        last_tick = time.monotonic()
        try:
            while not self.stop.is_set():
                self._poll(consumer)
                now = time.monotonic()
                if now - last_tick >= TICK_SECONDS:
                    last_tick = now
                    self._tick(consumer)
        finally:
            log.info("materializer stopping", extra={"tables": len(self.tables)})
            consumer.close()
            self._consumer = None

    def _poll(self, consumer: Consumer) -> None:
        first = consumer.poll(0.2)
        if first is None:
            return
        touched: set[TableMaterializer] = set()
        for msg in [first, *consumer.consume(num_messages=1_000, timeout=0)]:
            err = msg.error()
            if err is not None:
                if err.code() != KafkaError._PARTITION_EOF:
                    log.warning("consumer error", extra={"error": str(err)})
                continue
            topic, offset = msg.topic(), msg.offset()
            table = self.tables.get(topic or "")
            if table is None or offset is None:
                continue
            _, ts = msg.timestamp()
            caught_up = offset >= self._catching_up.get(topic or "", -1)
            table.apply(LogRecord(offset, int(ts), msg.key(), msg.value()), notify=caught_up)
            touched.add(table)
            consumer.store_offsets(msg)
        for table in touched:  # one Redis round trip per table per batch
            table.flush()

    def _tick(self, consumer: Consumer) -> None:
        for topic, table in list(self.tables.items()):
            try:
                table.tick()
                table.check_redis()
                _, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=1.0, cached=False)
                metrics.LAG.labels(table.name.qualified).set(max(high - 1 - table.state.version, 0))
            except ServiceUnavailable as exc:
                log.warning("tick failed", extra={"table": table.name.qualified, "error": str(exc)})
            except Exception:  # one table's trouble must not stop the others
                log.exception("tick failed", extra={"table": table.name.qualified})


def install_signal_handlers(service: Materializer) -> None:
    """SIGTERM / SIGINT stop the loop; the consumer then leaves the group cleanly."""

    def handle(signum: int, _: FrameType | None) -> None:
        log.info("signal received", extra={"signal": signal.Signals(signum).name})
        service.stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
