"""The stream source learns how far the log goes from the materialized head in Redis, and from
Kafka when Redis cannot answer or is behind; either way every accepted version, once.

The planner's calls are made in-process on a ``VersionStreamReader`` where the test must see
which service answered (Spark runs the planner in a Python process of its own); the Spark
queries (the suite's session) check what a user sees: every version exactly once.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession
from pyspark.sql.streaming.datasource import ReadAllAvailable

import segcat.spark_integration as si
from segcat import Catalog, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import CommitConflict
from segcat.catalog.storage.redis import Head, RedisStore
from segcat.spark_integration import version_follower, version_stream
from segcat.spark_integration.read_options import SourceOptions
from segcat.spark_integration.version_follower import VersionFollower
from segcat.spark_integration.version_stream import VersionStreamReader
from tests.factories import segment
from tests.handles import reader_of
from tests.materializer_support import PrivateRedis, free_port, namespace, running_materializer, wait_for_head
from tests.spark_integration.test_spark_stream import Batches
from tests.spark_support import spark

pytestmark = [pytest.mark.kafka, pytest.mark.redis]

__all__ = ["spark"]


def appends(config: Config, table: str, count: int) -> list[int]:
    """``count`` accepted appends with a rejected commit after the first (versions are not dense)."""
    versions = []
    with load_catalog(config).load_table(table) as writer:
        writer.refresh()
        for k in range(count):
            versions.append(writer.append([segment(f"s-{uuid.uuid4().hex[:10]}", "p1", rows=k + 1)]))
            if k == 0:
                with pytest.raises(CommitConflict):
                    writer.compact(["no-such-segment"], [segment(f"c-{uuid.uuid4().hex[:8]}", "p1")])
    return versions


def planner(config: Config, table: str, **options: str) -> VersionStreamReader:
    return VersionStreamReader(SourceOptions.parse({"table": table, **si.source_options(config), **options}))


class KafkaEnds:
    """Counts the planner's requests for the log's end (``VersionFollower.log_end``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls = 0
        original = VersionFollower.log_end

        def log_end(follower: VersionFollower) -> int:
            self.calls += 1
            return original(follower)

        monkeypatch.setattr(VersionFollower, "log_end", log_end)


def drain(reader: VersionStreamReader, after: int) -> tuple[int, list[int]]:
    """One trigger: ``latestOffset`` from ``after``, then the versions of the planned batch."""
    end = int(reader.latestOffset({"version": after}, ReadAllAvailable())["version"])
    rows: list[int] = []
    for part in reader.partitions({"version": after}, {"version": end}):
        rows += [int(row[1]) for row in reader.read(part)]
    reader.commit({"version": end})
    return end, rows


@pytest.fixture
def materialized(mconfig: Config) -> Iterator[tuple[Config, str]]:
    """A table followed by a materializer (thread) on a private Redis."""
    ns, pattern = namespace()
    name = f"{ns}.stream"
    Catalog(mconfig).create_table(name)
    with running_materializer(mconfig, pattern):
        yield mconfig, name


def test_latest_version_comes_from_the_redis_head(
    materialized: tuple[Config, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    config, name = materialized
    versions = appends(config, name, 3)
    store = RedisStore.from_config(config)
    wait_for_head(store, name, versions[-1])
    ends = KafkaEnds(monkeypatch)
    reader = planner(config, name)
    try:
        end, rows = drain(reader, -1)
        assert (end, rows) == (versions[-1], [0, *versions])
        more = appends(config, name, 2)
        wait_for_head(store, name, more[-1])
        assert drain(reader, end) == (more[-1], more)
        assert ends.calls == 0  # Redis said how far to judge; Kafka only served the records
        assert reader.reportLatestOffset() == {"version": more[-1]}
        assert len(reader.partitions({"version": end}, {"version": more[-1]})) == 1
        cached = reader.getCache({"version": end}, {"version": more[-1]})
        assert cached is not None and [row[1] for row in cached] == more  # handed to the JVM with the plan
        assert reader.getCache({"version": -1}, {"version": more[-1]}) is None
    finally:
        reader.stop()
        store.close()


def test_unreachable_redis_falls_back_to_kafka_with_one_warning(
    config: Config, catalog: Catalog, table_name: str, caplog: pytest.LogCaptureFixture
) -> None:
    catalog.create_table(table_name)
    closed = config.with_services(config.bootstrap_servers, f"redis://127.0.0.1:{free_port()}/0")
    versions = appends(config, table_name, 3)
    reader = planner(closed, table_name, kafkaCheckIntervalMs="0")
    caplog.set_level(logging.DEBUG, logger="segcat")
    try:
        end, rows = drain(reader, -1)
        assert (end, rows) == (versions[-1], [0, *versions])
        more = appends(config, table_name, 2)
        assert drain(reader, end) == (more[-1], more)
        assert drain(reader, more[-1]) == (more[-1], [])
    finally:
        reader.stop()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("segcat")]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "Redis does not answer" in warnings[0].getMessage()
    assert "without version leases" in warnings[0].getMessage()


def test_a_redis_head_behind_the_log_skips_nothing(
    mconfig: Config,
    private_redis: PrivateRedis,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No materializer: a head of the table's log behind the log's end, then one beyond it (a log
    cut back under the materializer, e.g. an unclean leader election)."""
    ns, _ = namespace()
    name = f"{ns}.behind"
    log_id = reader_of(Catalog(mconfig).create_table(name)).log_id
    versions = appends(mconfig, name, 4)
    store = RedisStore.from_config(mconfig)
    store.advance_head(name, Head(versions[0], None, None, 1, 1000, 1, -1, versions[0], log_id))
    ends = KafkaEnds(monkeypatch)
    reader = planner(mconfig, name, kafkaCheckIntervalMs="60000")
    try:
        # at least as far as Redis said (the records fetched with it are judged too)
        end, first = drain(reader, -1)
        assert versions[0] <= end and first == [v for v in [0, *versions] if v <= end]
        assert ends.calls == 0
        # the head is behind what the planner judged: Kafka's end at every trigger
        more = appends(mconfig, name, 2)
        end, rest = drain(reader, end)
        assert end == more[-1] and first + rest == [0, *versions, *more]  # nothing skipped, nothing twice
        assert ends.calls == 1
        assert drain(reader, end) == (end, [])
        assert ends.calls == 2
        # a head beyond the log's end: cut to the log's end, one warning
        monkeypatch.setattr(version_follower, "HINT_WAIT_S", 0.2)
        more = appends(mconfig, name, 1)
        store.advance_head(name, Head(more[0], None, None, 1, 1000, 1, -1, more[0] + 50, log_id))
        with caplog.at_level(logging.WARNING, logger="segcat.spark.stream"):
            assert drain(reader, end) == (more[0], more)
        assert [r.getMessage() for r in caplog.records if "beyond the log's end" in r.getMessage()]
    finally:
        reader.stop()
        store.close()


def _run_stream(
    spark: SparkSession, config: Config, table: str, checkpoint: Path, wanted: list[int], **options: str
) -> Batches:
    sink = Batches()
    query = (
        spark.readStream.format("segcat")
        .option("view", "versions")
        .option("table", table)
        .options(**si.source_options(config))
        .options(**options)
        .load()
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        sink.wait_for(len(wanted))
        # rows reach the sink before Spark's commit log has the batch: a stop in between makes the
        # restart run that batch again (CI saw it); wait for the commit before stopping
        query.processAllAvailable()
    finally:
        query.stop()
    return sink


def test_spark_stream_with_redis_head_and_without_redis(
    spark: SparkSession, materialized: tuple[Config, str], tmp_path: Path
) -> None:
    """Every version once: with the materializer's head, then (same checkpoint) with Redis away."""
    config, name = materialized
    versions = appends(config, name, 3)
    sink = _run_stream(spark, config, name, tmp_path / "ckpt", [0, *versions])
    assert sink.versions == [0, *versions] and sink.mismatches == []

    more = appends(config, name, 2)
    closed = config.with_services(config.bootstrap_servers, f"redis://127.0.0.1:{free_port()}/0")
    rest = _run_stream(spark, closed, name, tmp_path / "ckpt", more)
    assert rest.versions == more and rest.mismatches == []  # resumed after the checkpoint, nothing twice


def test_spark_stream_with_a_stale_head(
    spark: SparkSession, mconfig: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The materializer stopped after the first versions: the stream still gets the later ones."""
    ns, _ = namespace()
    name = f"{ns}.stale"
    Catalog(mconfig).create_table(name)
    versions = appends(mconfig, name, 2)
    store = RedisStore.from_config(mconfig)
    store.advance_head(name, Head(0, None, None, 0, 0, 0, -1, 0))
    store.close()
    options: dict[str, Any] = {"kafkaCheckIntervalMs": "200"}
    sink = _run_stream(spark, mconfig, name, tmp_path / "ckpt", [0, *versions], **options)
    assert sink.versions == [0, *versions] and sink.mismatches == []


def test_only_one_partition_batches_go_with_the_plan(
    config: Config, catalog: Catalog, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch of more than ``ROWS_PER_PARTITION`` versions is split over tasks that ``read`` it."""
    catalog.create_table(table_name)
    versions = appends(config, table_name, 3)
    monkeypatch.setattr(version_stream, "ROWS_PER_PARTITION", 2)
    reader = planner(config, table_name, latestFrom="kafka")
    try:
        parts = reader.partitions({"version": -1}, {"version": versions[-1]})
        assert [[row[1] for row in reader.read(p)] for p in parts] == [[0, versions[0]], versions[1:]]
        assert reader.getCache({"version": -1}, {"version": versions[-1]}) is None
        assert len(reader.partitions({"version": versions[0]}, {"version": versions[-1]})) == 1
        cached = reader.getCache({"version": versions[0]}, {"version": versions[-1]})
        assert cached is not None and [row[1] for row in cached] == versions[1:]
        assert reader.partitions({"version": versions[-1]}, {"version": versions[-1]}) == []
        assert reader.getCache({"version": versions[-1]}, {"version": versions[-1]}) is None
    finally:
        reader.stop()


def test_refused_redis_credentials_fall_back_with_one_warning(
    config: Config,
    catalog: Catalog,
    table_name: str,
    private_redis: PrivateRedis,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A wrong password: the store's one warning names the settings; the stream adds none."""
    catalog.create_table(table_name)
    admin = RedisStore.from_config(config.with_services(config.bootstrap_servers, private_redis.url))
    admin.client.config_set("requirepass", "right-password")
    admin.close()
    wrong = replace(
        config.with_services(config.bootstrap_servers, private_redis.url), redis_password="wrong-password"
    )
    versions = appends(config, table_name, 2)
    reader = planner(wrong, table_name, kafkaCheckIntervalMs="0")
    caplog.set_level(logging.DEBUG, logger="segcat")
    try:
        end, rows = drain(reader, -1)
        assert (end, rows) == (versions[-1], [0, *versions])
        assert drain(reader, end) == (end, [])
    finally:
        reader.stop()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("segcat")]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "wrong-password" not in warnings[0].getMessage()
