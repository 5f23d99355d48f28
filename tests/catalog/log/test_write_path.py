"""One write path: every record a client produces goes through ``SharedProducer`` and fails with
the typed error of one mapping (``write_errors.write_error``), whatever kind of record it was.

Kafka's answers are injected into the delivery reports (and as librdkafka's fatal error) of a
client wrapped around a real producer; the writer's image, the table and the commits are real.
"""

from __future__ import annotations

import ast
import gc
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from segcat import Table
from segcat.catalog.config import Config
from segcat.catalog.errors import (
    CommitTooLarge,
    ConfigError,
    NotAuthorized,
    SegcatError,
    ServiceUnavailable,
    TableNotFound,
)
from segcat.catalog.log import producer as producer_module
from segcat.catalog.log.producer import SharedProducer, write_commit, write_nulls
from segcat.catalog.log.write_errors import retriable, write_error
from segcat.catalog.protocol.model import Commit, Operation
from segcat.catalog.read.table import Tables
from segcat.catalog.write.writer import Writer
from tests.factories import segment

REPO = Path(__file__).resolve().parents[3]

MAPPING: dict[int, type[SegcatError]] = {
    KafkaError.TOPIC_AUTHORIZATION_FAILED: NotAuthorized,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED: NotAuthorized,
    KafkaError.SASL_AUTHENTICATION_FAILED: ConfigError,
    KafkaError.UNKNOWN_TOPIC_OR_PART: TableNotFound,
    KafkaError._UNKNOWN_TOPIC: TableNotFound,
    KafkaError.MSG_SIZE_TOO_LARGE: CommitTooLarge,
    KafkaError._MSG_TIMED_OUT: ServiceUnavailable,
    KafkaError.NOT_ENOUGH_REPLICAS: ServiceUnavailable,
    KafkaError._TRANSPORT: ServiceUnavailable,
}


@pytest.mark.parametrize("code", sorted(MAPPING), ids=lambda code: KafkaError(code).name())
def test_each_kafka_error_has_one_typed_error(config: Config, code: int) -> None:
    error = write_error(KafkaError(code), config, "writing commit c to segcat.ns.t")
    assert type(error) is MAPPING[code]
    assert "\n" not in str(error) and (type(error) is ConfigError or "segcat.ns.t" in str(error))
    assert retriable(error) is (MAPPING[code] is ServiceUnavailable)


class _Answering:
    """A real producer whose records, once ``answer`` is set, are not sent: their delivery report
    carries that error instead (``fatal``: serving the queue raises it as librdkafka's fatal error)."""

    def __init__(self, real: Producer, answer: dict[str, Any]) -> None:
        self._real = real
        self._answer = answer
        self._due: list[Callable[[KafkaError | None, Any], None]] = []
        self._lock = threading.Lock()

    def produce(self, *args: Any, **kwargs: Any) -> None:
        if "code" not in self._answer:
            self._real.produce(*args, **kwargs)
            return
        with self._lock:
            self._due.append(kwargs["on_delivery"])

    def _serve(self, timeout: float = 0) -> int:
        if "code" not in self._answer:
            return int(self._real.poll(timeout))
        if self._answer.get("fatal"):
            raise KafkaException(KafkaError(self._answer["code"], "refused (the test)", fatal=True))
        with self._lock:
            due, self._due = self._due, []
        for report in due:
            report(KafkaError(self._answer["code"], "answered (the test)"), None)
        return len(due)

    poll = _serve

    def flush(self, timeout: float = 0) -> int:
        self._serve(0)
        return 0 if "code" in self._answer else int(self._real.flush(timeout))

    def __len__(self) -> int:
        return len(self._due) + len(self._real)


def _answering(config: Config, answer: dict[str, Any]) -> SharedProducer:
    def client(settings: dict[str, Any]) -> Producer:
        return _Answering(Producer(settings), answer)  # type: ignore[return-value]

    return SharedProducer(config, client_factory=client)


def _admin_commit(table: Table) -> Commit:
    """A table-administration record as ``Table.drop`` writes it."""
    return Commit(
        commit_id=Commit.new_id(),
        table=table.name.qualified,
        operation=Operation.SET_PROPERTIES,
        base_version=table.head_offset(),
        writer_id="segcat-drop-test",
        timestamp_ms=0,
        table_properties={"segcat.dropped": "1"},
    )


def _each_kind(config: Config, table: Table, shared: SharedProducer) -> dict[str, SegcatError]:
    """The error each kind of record meets: a data commit, an administration commit, null records."""
    met: dict[str, SegcatError] = {}
    with Writer(config, table.name, producer=shared) as writer:
        try:
            writer.append([segment("refused")])
        except SegcatError as exc:
            met["data commit"] = exc
    try:
        write_commit(config, table.name, _admin_commit(table), producer=shared)
    except SegcatError as exc:
        met["administration commit"] = exc
    try:
        write_nulls(config, table.name, (b"k1", b"k2"), producer=shared)
    except SegcatError as exc:
        met["null records"] = exc
    return met


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("code", "fatal"),
    [
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, False),
        (KafkaError.CLUSTER_AUTHORIZATION_FAILED, True),
        (KafkaError.SASL_AUTHENTICATION_FAILED, False),
        (KafkaError._UNKNOWN_TOPIC, False),
        (KafkaError.MSG_SIZE_TOO_LARGE, False),
        (KafkaError.NOT_ENOUGH_REPLICAS, False),
    ],
    ids=["topic-acl", "fatal-cluster-acl", "credentials", "unknown-topic", "too-large", "too-few-replicas"],
)
def test_every_kind_of_record_meets_the_same_typed_error(
    config: Config, table: Table, code: int, fatal: bool
) -> None:
    """Whatever the record (a writer's data commit; create, drop, undrop, upgrade, prune's marker,
    purge's fence and the clock record, which ``write_commit`` writes; prune's null records), the
    same answer from Kafka is the same typed error; nothing reaches the log."""
    shared = _answering(config, {"code": code, "fatal": fatal})
    end = table.head_offset()
    met = _each_kind(config, table, shared)
    assert set(met) == {"data commit", "administration commit", "null records"}, met
    assert {kind: type(exc) for kind, exc in met.items()} == dict.fromkeys(met, MAPPING[code]), met
    assert table.head_offset() == end


def _constructs_producer(path: Path) -> list[int]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (
            (isinstance(node.func, ast.Name) and node.func.id == "Producer")
            or (isinstance(node.func, ast.Attribute) and node.func.attr == "Producer")
        )
    ]


def test_only_the_shared_producer_makes_a_kafka_producer() -> None:
    """No second write path: outside ``catalog/log/producer.py`` no product module makes a Kafka
    producer (``clients.py`` makes one that never connects, to check the user's settings)."""
    allowed = {REPO / "catalog/log/producer.py", REPO / "catalog/log/clients.py"}
    folders = ("catalog", "producers", "materializer", "server", "spark_integration", "cli", "local_stack")
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for folder in folders
        for path in sorted((REPO / folder).rglob("*.py"))
        if path not in allowed
        for line in _constructs_producer(path)
    ]
    assert not found, "a Kafka producer made outside the shared one:\n" + "\n".join(found)
    assert _constructs_producer(REPO / "catalog/log/producer.py") == []  # by its factory, a parameter
    assert producer_module.SharedProducer.__init__.__kwdefaults__ == {"client_factory": Producer}


@pytest.mark.kafka
def test_a_catalog_holds_one_producer_for_its_tables(config: Config, table_name: str) -> None:
    """A catalog holds its config's producer: a read-only catalog never opens a client, creating
    tables opens one that every creation reuses, and letting go of the catalog closes it."""
    own = replace(config, request_timeout_s=29.0)  # a config no other test's producer serves
    catalog = Tables(own, use_redis=False)
    shared = SharedProducer.acquire(own)
    shared.release()  # only a look at the catalog's producer: the catalog still holds it
    catalog.list_tables()
    assert shared._client is None
    first = catalog.create_table(table_name + "_a")
    client = shared._client
    assert client is not None
    second = catalog.create_table(table_name + "_b")
    assert shared._client is client and first.log_end() == second.log_end() == 0
    del catalog
    gc.collect()  # finalisation is not promised at `del`: a cycle elsewhere in the suite can hold it
    assert shared._client is None
