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

**Decision — cooperative-sticky by default; KIP-848 (``--group-protocol consumer``) for many
tables.** On the classic protocol the group's leader computes the assignment in librdkafka, and
its cooperative-sticky assignor does not finish for ten thousand partitions (it ran minutes at
100 % of a core without handing out a table; librdkafka issue 4629). Under KIP-848
(``group.protocol=consumer``, Kafka 4.0 and later) the broker assigns, incrementally too, with the
regex subscription and static membership (10,000 tables assigned in seconds); the session timeout
is then the broker's ``group.consumer.session.timeout.ms`` (45 s by default; the local stack and
docker-compose set 10 s) and a client asking for its own is refused, so ``--session-timeout-ms``
belongs to the classic protocol only. The classic protocol stays the default: it works with any
broker and keeps the materializer's own session timeout.
"""

from __future__ import annotations

import concurrent.futures
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from segcat.catalog.errors import ConfigError, InvalidTableName, SegcatError
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol.names import TableName
from segcat.materializer.table_materializer import TableMaterializer

log = logging.getLogger("segcat.materializer")

ASSIGNMENT_STRATEGY = "cooperative-sticky"
CLASSIC = "classic"
CONSUMER = "consumer"
GROUP_PROTOCOLS = (CLASSIC, CONSUMER)
CLASSIC_ONLY = ("partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms")
"""Consumer settings librdkafka refuses under ``group.protocol=consumer`` (the broker's there)."""


def broker_pattern(pattern: str) -> str:
    """The topic regex as the broker must get it under KIP-848: the broker matches the whole topic
    name (Java's ``matches``) where librdkafka searches from the start, so ``^segcat\\.ns\\.``
    would follow nothing there. ``^(X).*`` matches in full exactly what ``^X`` matches at the
    start (topic names hold no line breaks; librdkafka checks the regex with its own engine, which
    knows no ``(?:``)."""
    return f"^({pattern.removeprefix('^')}).*"


def check_group_protocol(protocol: str, session_timeout_ms: int | None) -> str:
    """The group protocol if it is one of ``GROUP_PROTOCOLS`` and fits the other options, else
    ``ConfigError`` naming the option."""
    if protocol not in GROUP_PROTOCOLS:
        raise ConfigError(f"--group-protocol {protocol!r} must be one of {', '.join(GROUP_PROTOCOLS)}")
    if protocol == CONSUMER and session_timeout_ms is not None:
        raise ConfigError(
            "--session-timeout-ms applies to the classic group protocol only: under "
            "--group-protocol consumer the broker's group.consumer.session.timeout.ms decides"
        )
    return protocol

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
