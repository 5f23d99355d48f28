"""Creating many tables on a real broker: ``Catalog.create_tables`` and the shared producer."""

from __future__ import annotations

import dataclasses
import os
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segcat import Catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import (
    InvalidArgument,
    InvalidTableName,
    SegcatError,
    ServiceUnavailable,
    TableAlreadyExists,
)
from segcat.catalog.log import producer as producer_module
from segcat.catalog.log.producer import Delivery, SharedProducer
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.model import Operation
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.state import LOCATION_PROPERTY
from tests.handles import reader_of, tables_of

pytestmark = pytest.mark.kafka


def _namespace() -> str:
    return f"ct{uuid.uuid4().hex[:10]}"


def _first_records(config: Config, names: list[TableName]) -> dict[TableName, tuple[bytes, bytes]]:
    """Each topic's record at offset 0 (key, value), read by one consumer assigned to all."""
    consumer = Consumer(
        {
            **config.kafka_client_config(),
            "group.id": f"test-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "fetch.wait.max.ms": 50,
        }
    )
    try:
        consumer.assign([TopicPartition(name.topic, 0, 0) for name in names])
        by_topic = {name.topic: name for name in names}
        found: dict[TableName, tuple[bytes, bytes]] = {}
        deadline = time.monotonic() + 60
        while len(found) < len(names) and time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=0.5):
                if msg.error() is None and msg.offset() == 0:
                    found[by_topic[msg.topic()]] = (msg.key(), msg.value())
        return found
    finally:
        consumer.close()


def test_create_tables_makes_each_table_whole_with_its_creation_record_first(
    catalog: Catalog, config: Config
) -> None:
    ns = _namespace()
    names = [f"{ns}.t{i:04d}" for i in range(300)]
    reported: list[int] = []
    tables = catalog.create_tables(names, progress=reported.append)
    assert [str(t.name) for t in tables] == names  # the order of names
    assert reported == [300]  # one batch
    admin = tables_of(catalog).admin
    parsed = [TableName.parse(n) for n in names]
    for name, table in zip(parsed, tables, strict=True):
        info = admin.describe(name)  # refuses a topic that breaks docs/PROTOCOL.md §1
        assert info.partitions == 1
        assert info.config["min.compaction.lag.ms"] == table.topic.config["min.compaction.lag.ms"]
        assert info.config["max.message.bytes"] == str(16 * 1024 * 1024)
        assert info.topic_id == table.topic.topic_id is not None
    assert admin.log_ends(parsed) == dict.fromkeys(parsed, 0)  # the creation record is the only record
    first = _first_records(config, parsed)
    assert set(first) == set(parsed)
    for name, (key, value) in first.items():
        commit = codec.decode_commit(value)
        assert key == commit.commit_id.encode()
        assert commit.operation is Operation.UPGRADE_PROTOCOL and commit.base_version == -1
        assert commit.table_properties == {LOCATION_PROPERTY: f"{config.warehouse}/{ns}/{name.table}"}
    # judged by a reader from the log alone: version 0 is the accepted creation
    for table in (tables[0], tables[-1]):
        history = table.history()
        assert [entry.version for entry in history] == [0]
        assert table.location() == f"{config.warehouse}/{ns}/{table.name.table}"


def test_location_root_places_the_tables_data(catalog: Catalog, tmp_path: Path) -> None:
    ns = _namespace()
    root = tmp_path / "elsewhere"
    tables = catalog.create_tables([f"{ns}.a", f"{ns}.b"], location_root=str(root))
    assert [t.location() for t in tables] == [f"{root}/{ns}/a", f"{root}/{ns}/b"]


_good_tables = st.lists(
    st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True), min_size=1, max_size=6, unique=True
)
_bad_names = st.one_of(
    st.sampled_from(
        ["", "ns", "a.b.c", "ns.has space", "ns.t/../x", "ns.-t", "ns.t\n", "../x", "ns." + "a" * 101]
    ),
    st.text(max_size=30).filter(lambda s: s.count(".") != 1),
    st.builds(
        lambda t: f"ns.{t}", st.text(min_size=1, max_size=20).filter(lambda t: not t.isascii() or " " in t)
    ),
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tables=_good_tables, bad=st.one_of(_bad_names, st.integers(), st.none()), at=st.integers(0, 6))
def test_a_bad_name_anywhere_creates_nothing(catalog: Catalog, tables: list[str], bad: Any, at: int) -> None:
    ns = _namespace()
    good = [f"{ns}.{t}" for t in tables]
    names: list[Any] = [*good]
    index = min(at, len(names))
    names.insert(index, bad)
    with pytest.raises(InvalidTableName, match=rf"names\[{index}\].*nothing was created"):
        catalog.create_tables(names)
    assert tables_of(catalog).admin.existing([TableName.parse(n) for n in good]) == []


@pytest.mark.parametrize(
    ("names", "complaint"),
    [
        (["{ns}.a", "{ns}.b", "{ns}.a"], r"names\[2\]: table {ns}.a is given twice"),
        (["{ns}_x.t", "{ns}.x_t"], r"names\[1\].*collide in Kafka"),
    ],
)
def test_duplicates_and_kafka_collisions_are_refused_before_anything(
    catalog: Catalog, names: list[str], complaint: str
) -> None:
    ns = _namespace()
    given_names = [n.format(ns=ns) for n in names]
    with pytest.raises(InvalidArgument, match=complaint.format(ns=ns)):
        catalog.create_tables(given_names)
    assert tables_of(catalog).admin.existing([TableName.parse(n) for n in given_names]) == []


def test_arguments_that_are_not_a_list_of_names(catalog: Catalog) -> None:
    with pytest.raises(InvalidArgument, match="list of table names"):
        catalog.create_tables("ns.t")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="max_message_bytes"):
        catalog.create_tables([f"{_namespace()}.t"], max_message_bytes=10)
    with pytest.raises(InvalidArgument, match=r"path components; nothing was created"):
        catalog.create_tables([f"{_namespace()}.t"], location_root="s3://b/../x")
    assert catalog.create_tables([]) == []


def test_an_existing_name_refuses_the_batch_unless_exist_ok(catalog: Catalog) -> None:
    ns = _namespace()
    old = catalog.create_table(f"{ns}.b")
    old.set_properties({"owner": "test"})  # version 1: the existing table is left as it is
    names = [f"{ns}.a", f"{ns}.b", f"{ns}.c"]
    with pytest.raises(TableAlreadyExists, match=rf"table {ns}\.b already exists; nothing was created"):
        catalog.create_tables(names)
    admin = tables_of(catalog).admin
    assert admin.existing([TableName.parse(n) for n in names]) == [TableName.parse(f"{ns}.b")]
    tables = catalog.create_tables(names, exist_ok=True)
    assert [str(t.name) for t in tables] == names
    assert tables[1].topic.topic_id == old.topic.topic_id
    assert tables[1].head_offset() == 1
    assert [t.head_offset() for t in (tables[0], tables[2])] == [0, 0]


def test_a_table_created_by_someone_else_meanwhile(catalog: Catalog, monkeypatch: pytest.MonkeyPatch) -> None:
    """The up-front look finds nothing, then CreateTopics says the topic exists: with exist_ok it
    is taken as it is; without, the others of the batch are made and the error names it."""
    ns = _namespace()
    catalog.create_table(f"{ns}.b")
    admin = tables_of(catalog).admin
    monkeypatch.setattr(admin, "existing", lambda names: [])
    tables = catalog.create_tables([f"{ns}.a", f"{ns}.b"], exist_ok=True)
    assert [t.head_offset() for t in tables] == [0, 0]
    catalog.create_table(f"{ns}.d")
    with pytest.raises(
        TableAlreadyExists,
        match=rf"{ns}\.d already exists.*made or found 2 of 3 tables; not made: table {ns}\.d",
    ):
        catalog.create_tables([f"{ns}.c", f"{ns}.d", f"{ns}.e"])
    assert [t.head_offset() for t in catalog.create_tables([f"{ns}.c", f"{ns}.e"], exist_ok=True)] == [0, 0]


def test_a_record_that_fails_leaves_no_topic_and_exist_ok_finishes(
    catalog: Catalog, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns = _namespace()
    names = [f"{ns}.a", f"{ns}.b", f"{ns}.c"]
    shared = tables_of(catalog).producer
    real = shared.write_each

    def one_fails(records: Any, doing: str) -> list[Delivery | SegcatError]:
        landed = real([r for r in records if not r[0].endswith(".b")], doing)
        landed.insert(1, ServiceUnavailable("writing the creation record: the broker went away"))
        return landed

    monkeypatch.setattr(shared, "write_each", one_fails)
    with pytest.raises(
        ServiceUnavailable, match=rf"went away.*made or found 2 of 3 tables; not made: table {ns}\.b"
    ):
        catalog.create_tables(names)
    admin = tables_of(catalog).admin
    assert admin.existing([TableName.parse(n) for n in names]) == [
        TableName.parse(names[0]),
        TableName.parse(names[2]),
    ]
    monkeypatch.undo()
    tables = catalog.create_tables(names, exist_ok=True)
    assert [t.head_offset() for t in tables] == [0, 0, 0]


def _own_config(config: Config) -> Config:
    """``config`` with a producer of its own (a fresh ``SharedProducer``: another client.id)."""
    kafka = {**config.kafka, "client.id": f"create-test-{os.getpid()}-{uuid.uuid4().hex[:6]}"}
    return dataclasses.replace(config, kafka=kafka)


def test_consecutive_creations_share_one_producer_opened_before_the_topic(
    config: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One client for every creation of a catalog, opened while the first topic is created (a
    client whose first record is produced as it opens waits 0.5 s for its producer id)."""
    built: list[int] = []
    real_config = producer_module.producer_config

    def counting(*args: Any, **kwargs: Any) -> dict[str, Any]:
        built.append(1)
        return real_config(*args, **kwargs)

    monkeypatch.setattr(producer_module, "producer_config", counting)
    with Catalog(_own_config(config)) as catalog:
        tables = tables_of(catalog)
        opened_first: list[bool] = []
        real_create = tables.admin._admin.create_topics

        def create_topics(*args: Any, **kwargs: Any) -> Any:
            opened_first.append(tables.producer._client is not None)
            return real_create(*args, **kwargs)

        monkeypatch.setattr(tables.admin._admin, "create_topics", create_topics)
        ns = _namespace()
        for i in range(3):
            catalog.create_table(f"{ns}.t{i}")
        catalog.create_tables([f"{ns}.u{i}" for i in range(3)])
        assert opened_first == [True, True, True, True]
        assert len(built) == 1
        assert isinstance(tables.producer, SharedProducer)
        assert reader_of(catalog.load_table(f"{ns}.t2")).log_end() == 0


def test_a_topic_kafka_refuses_in_a_batch_keeps_the_others(catalog: Catalog) -> None:
    """No mock: Kafka refuses one topic of the batch (it collides with an existing table's), the
    others are made whole, and the error names the one not made."""
    ns = _namespace()
    catalog.create_table(f"{ns}_x.t")
    names = [f"{ns}.a", f"{ns}.x_t", f"{ns}.b"]
    with pytest.raises(
        InvalidTableName, match=rf"collides.*made or found 2 of 3 tables; not made: table {ns}\.x_t"
    ):
        catalog.create_tables(names)
    assert [catalog.load_table(n).head_offset() for n in (names[0], names[2])] == [0, 0]
    assert not catalog.table_exists(names[1])
