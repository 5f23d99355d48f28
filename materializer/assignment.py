"""Positioning the tables a rebalance hands to this instance, all at once.

The group uses the cooperative-sticky assignor (``ASSIGNMENT_STRATEGY``): a rebalance hands an
instance only the tables that change owner, so the callback sees the *new* tables, and the
tables it keeps go on with their images (no second recovery, no head going back).

For the new tables, whatever can be asked in one request is asked once for all of them: their
log ends (one ListOffsets) and their topic ids (one DescribeTopics, by the caller). The
recoveries (reads of each table's newest key frame from object storage) are I/O bound and
independent of each other, so they run on a bounded pool of threads. The recovery stays inside
the assignment callback: the consumer's heartbeats run on librdkafka's own thread, and with the
reads in parallel a few thousand tables take seconds, far within ``max.poll.interval.ms`` (five
minutes); a table is assigned only once positioned, so no record of it is fetched from a wrong
offset.

**Decision — cooperative-sticky, not KIP-848.** librdkafka's ``group.protocol=consumer``
accepts a regex subscription on the local Kafka, but with it the session timeout is the
broker's (``group.consumer.session.timeout.ms``, at least 45 s by default) and a client asking
for its own is refused: a killed instance's tables would wait 45 s for their new owner instead
of the materializer's 10 s, and ``--session-timeout-ms`` would stop working. The classic
protocol with cooperative-sticky moves only the changed tables too, and keeps static membership
and the materializer's own session timeout.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from segcat.catalog.errors import InvalidTableName, SegcatError
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol.names import TableName
from segcat.materializer.table_materializer import TableMaterializer

log = logging.getLogger("segcat.materializer")

ASSIGNMENT_STRATEGY = "cooperative-sticky"
RECOVERY_THREADS = 16
"""How many tables recover at once on an assignment: each recovery mostly waits for object
storage, and a bound keeps the memory of the images being read (and the store's load) small."""


def table_names(partitions: Sequence[TopicPartition]) -> list[tuple[TopicPartition, TableName]]:
    """The partitions that are a table's (partition 0 of a ``segcat.`` topic), with the table's
    name; any other is said once and left alone."""
    found = []
    for tp in partitions:
        try:
            name = TableName.from_topic(tp.topic)
        except InvalidTableName:
            log.error("ignoring topic that is no segcat table", extra={"topic": tp.topic})
            continue
        if tp.partition != 0:
            log.error("table topic has more than one partition; ignoring it", extra={"topic": tp.topic})
            continue
        found.append((tp, name))
    return found


def log_ends(admin: TopicAdmin, names: list[TableName]) -> dict[TableName, int]:
    """Each table's newest offset in one request; on trouble none (every table then ends its
    catch-up when its records stop coming, as ``_finish_catch_ups`` does on an idle poll)."""
    if not names:
        return {}
    try:
        return admin.log_ends(names)
    except SegcatError as exc:
        log.warning("log ends unavailable", extra={"tables": len(names), "error": str(exc)})
        return {}


@dataclass
class Recovered:
    """One table's recovery: the next offset to read, or the error that parks the table."""

    table: TableMaterializer
    offset: int | None
    error: Exception | None


def recover_all(tables: Sequence[TableMaterializer], *, threads: int = RECOVERY_THREADS) -> list[Recovered]:
    """``recover`` of every table, at most ``threads`` at once; in the order of ``tables``.

    A table's failure is its own (returned, to park it): the others recover regardless.
    """
    if not tables:
        return []

    def one(table: TableMaterializer) -> Recovered:
        try:
            return Recovered(table, table.recover(), None)
        except Exception as exc:  # parked by the caller, once the partition is assigned
            return Recovered(table, None, exc)

    if len(tables) == 1 or threads <= 1:
        return [one(table) for table in tables]
    with concurrent.futures.ThreadPoolExecutor(
        max_workers=min(threads, len(tables)), thread_name_prefix="segcat-recover"
    ) as pool:
        return list(pool.map(one, tables))


def position(
    partitions: Sequence[TopicPartition],
    make: Callable[[TableName], TableMaterializer],
    admin: TopicAdmin,
    *,
    threads: int = RECOVERY_THREADS,
) -> tuple[list[TopicPartition], list[Recovered], dict[str, int]]:
    """The newly assigned tables made (``make``) and recovered: (the partitions positioned right
    after each table's image, the recoveries in the same order, each topic's newest offset where
    known). A table whose recovery failed is positioned at the log's start and carries its error.
    """
    named = table_names(partitions)
    ends = log_ends(admin, [name for _, name in named])
    recovered = recover_all([make(name) for _, name in named], threads=threads)
    positioned = [
        TopicPartition(tp.topic, 0, OFFSET_BEGINNING if r.offset is None else r.offset)
        for (tp, _), r in zip(named, recovered, strict=True)
    ]
    return positioned, recovered, {name.topic: end for name, end in ends.items()}
