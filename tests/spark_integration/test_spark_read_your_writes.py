"""Spark reads see the job's own writes while the materializer is behind, and refuse foreign files.

Regressions of issue 7: ``si.read(spark, t)`` right after ``si.write`` read 0 rows while the
materializer was not keeping up (item 1), and ``si.read`` read files outside the warehouse
that a protocol-1 log had accepted (item 9).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import segcat.spark_integration as si
from segcat import Catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import UnsafeLocation
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.model import Commit, Operation, Segment
from segcat.catalog.protocol.names import TableName
from segcat.catalog.storage.redis import RedisStore
from tests.factories import produce_raw
from tests.materializer_support import PrivateRedis, materializer_config, namespace, running_materializer
from tests.spark_support import spark

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.spark]

__all__ = ["spark"]


def test_spark_reads_its_own_writes_with_the_materializer_behind(
    spark: SparkSession, config: Config, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    mconfig = materializer_config(config, private_redis.url, tmp_path / "warehouse")
    ns, pattern = namespace()
    name = f"{ns}.events"
    Catalog(mconfig).create_table(name)
    df = spark.createDataFrame([(i, f"u{i % 3}") for i in range(30)], "id BIGINT, user STRING")
    with running_materializer(mconfig, pattern):
        first = si.write(df, name, config=mconfig)
        store = RedisStore.from_config(mconfig)
        deadline = time.monotonic() + 30
        while (head := store.head(name)) is None or head.version < first:
            assert time.monotonic() < deadline, "the materializer never caught up"
            time.sleep(0.05)
    second = si.write(df.where("id < 10"), name, config=mconfig)  # nobody materializes this one
    assert si.read(spark, name, config=mconfig).count() == 40
    assert si.read(spark, name, version=second, config=mconfig).count() == 40
    assert si.read(spark, name, version=first, config=mconfig).count() == 30


def test_spark_refuses_to_read_a_file_outside_the_table(
    spark: SparkSession, config: Config, catalog: Catalog, table_name: str, tmp_path: Path
) -> None:
    name = TableName.parse(table_name)
    TopicAdmin(config).create(name)  # a protocol-1 table: its rules accepted any absolute URI
    outside = tmp_path / "elsewhere.parquet"
    spark.createDataFrame([(1,)], "id BIGINT").toPandas().to_parquet(outside)
    commit = Commit(
        Commit.new_id(),
        name.qualified,
        Operation.APPEND,
        -1,
        "raw",
        0,
        adds=(Segment("s", f"file://{outside}", outside.stat().st_size, 1),),
    )
    produce_raw(config, name.topic, [(commit.commit_id.encode(), codec.encode_commit(commit))])
    table = catalog.load_table(name)
    assert table.snapshot().live_count == 1  # accepted under protocol 1 ...
    with pytest.raises(UnsafeLocation, match="outside the table's location"):
        si.read(spark, name, config=config)  # ... but never read
