"""Tables on a real broker: creation with docs/PROTOCOL.md §1's config, refusal of bad names and topics."""

from __future__ import annotations

import os
import time
from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource
from confluent_kafka.cimpl import NewTopic

from segcat import Catalog, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import InvalidTableName, MisconfiguredTable, TableAlreadyExists, TableNotFound
from segcat.catalog.log.reader import LogReader
from segcat.catalog.protocol.names import TableName
from tests.handles import tables_of

pytestmark = pytest.mark.kafka


def _wait_visible(admin: AdminClient, topic: str) -> None:
    """Creation is acknowledged before the metadata shows the topic everywhere."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if found is not None and found.error is None:
            return
        time.sleep(0.05)
    raise AssertionError(f"topic {topic} never became visible")


def _topics(config: Config) -> set[str]:
    return set(AdminClient(config.kafka_client_config()).list_topics(timeout=10).topics)


def test_create_sets_the_protocol_topic_config(catalog: Catalog, table_name: str) -> None:
    table = catalog.create_table(table_name)
    assert table.topic.partitions == 1
    assert table.topic.config["cleanup.policy"] == "compact"
    assert table.topic.config["message.timestamp.type"] == "LogAppendTime"
    assert table.topic.config["compression.type"] == "zstd"
    assert int(table.topic.config["max.message.bytes"]) >= 16 * 1024 * 1024
    assert "min.compaction.lag.ms" in table.topic.config
    assert TableName.parse(table_name) in catalog.list_tables()
    with pytest.raises(TableAlreadyExists):
        catalog.create_table(table_name)


def test_open_missing_table_is_a_typed_error(catalog: Catalog, table_name: str) -> None:
    with pytest.raises(TableNotFound, match="create it first"):
        catalog.load_table(table_name)


@pytest.mark.parametrize(
    "bad", ["../x", "", "a" * 300, "ns.has space", "ns.t/../../etc", "ns", "a.b.c", "ns.t\n"]
)
def test_invalid_names_never_reach_kafka(catalog: Catalog, config: Config, bad: str) -> None:
    before = _topics(config)
    with pytest.raises(InvalidTableName):
        catalog.create_table(bad)
    with pytest.raises(InvalidTableName):
        load_catalog(config).load_table(bad)
    assert _topics(config) == before


@pytest.mark.parametrize(
    ("partitions", "settings", "complaint"),
    [
        (2, {"cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime"}, "2 partitions"),
        (1, {"cleanup.policy": "delete", "message.timestamp.type": "LogAppendTime"}, "cleanup.policy"),
        (
            1,
            {"cleanup.policy": "compact,delete", "message.timestamp.type": "LogAppendTime"},
            "cleanup.policy",
        ),
        (1, {"cleanup.policy": "compact", "message.timestamp.type": "CreateTime"}, "LogAppendTime"),
    ],
)
def test_misconfigured_topics_are_refused_before_any_write(
    catalog: Catalog,
    config: Config,
    table_name: str,
    partitions: int,
    settings: dict[str, str],
    complaint: str,
) -> None:
    name = TableName.parse(table_name)
    admin = AdminClient(config.kafka_client_config())
    admin.create_topics(
        [NewTopic(name.topic, num_partitions=partitions, replication_factor=1, config=settings)]
    )[name.topic].result(30)
    _wait_visible(admin, name.topic)
    with pytest.raises(MisconfiguredTable, match=complaint):
        catalog.load_table(table_name)
    with pytest.raises(MisconfiguredTable):
        load_catalog(config).load_table(table_name)
    with LogReader(config, name) as reader:
        assert reader.watermarks() == (0, 0)


def test_names_that_collide_in_kafka_get_a_clear_error(catalog: Catalog, config: Config) -> None:
    stem = f"c{os.urandom(3).hex()}"
    catalog.create_table(f"{stem}_a.t_b")
    with pytest.raises(InvalidTableName, match="collides"):
        catalog.create_table(f"{stem}.a_t_b")


def test_create_waits_for_a_broker_that_has_not_heard_of_the_topic(
    catalog: Catalog, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a cluster the broker asked for the new topic's config may not know it yet (metadata
    spreads after the creation is acknowledged): creation waits, as it does for the metadata.
    (Seen on the 3-broker stack: UNKNOWN_TOPIC_OR_PART from describe_configs, ServiceUnavailable.)"""
    admin = tables_of(catalog).admin
    real = admin._admin.describe_configs
    refused: list[int] = []

    def lagging(resources: list[ConfigResource], **kwargs: Any) -> dict[ConfigResource, Future[Any]]:
        if len(refused) < 2:
            refused.append(1)
            future: Future[Any] = Future()
            future.set_exception(KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART)))
            return {r: future for r in resources}
        return real(resources, **kwargs)

    monkeypatch.setattr(admin._admin, "describe_configs", lagging)
    table = catalog.create_table(table_name)
    assert len(refused) == 2
    assert table.topic.config["cleanup.policy"] == "compact"
