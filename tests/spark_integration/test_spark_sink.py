"""The ``segcat`` streaming sink on real Spark (local[2]), Kafka and Redis.

- each micro-batch of a file stream is one APPEND whose rows ``si.read`` returns once, with the
  query and batch ids in its properties and in the files' footers; a batch Spark runs again
  (its checkpoint's commit entry deleted, as a crash before Spark's checkpoint leaves it) is a
  duplicate, not a second copy;
- ``complete`` mode replaces the table at every batch;
- ``partitionBy`` / ``bloomColumn`` options write as ``si.write`` does;
- typed refusals: no such table, a schema that does not fit, no checkpoint location.

The kill tests (a real ``kill -9`` of a Spark application between a batch's files and its
commit, and between its commit and Spark's checkpoint) are in ``test_spark_sink_kills.py``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession

import segcat.spark_integration as si
from segcat import Operation, Table
from segcat.catalog.config import Config
from segcat.producers.segment_files import read_provenance
from segcat.spark_integration.options import source_options
from segcat.spark_integration.stream_sink import BATCH_PROPERTY, QUERY_PROPERTY, batch_commit_id
from tests.spark_support import run_to_end, spark

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.spark]

__all__ = ["spark"]

SCHEMA = "id BIGINT, name STRING"


def write_inputs(directory: Path, batches: list[list[int]]) -> None:
    """One JSON file per batch (the file source reads one per trigger with maxFilesPerTrigger=1)."""
    directory.mkdir(parents=True, exist_ok=True)
    start = len(list(directory.glob("*.json")))
    for k, ids in enumerate(batches, start=start):
        lines = "".join(json.dumps({"id": i, "name": f"n{i}"}) + "\n" for i in ids)
        (directory / f"in-{k:04d}.json").write_text(lines)


def input_stream(spark: SparkSession, directory: Path, schema: str = SCHEMA) -> DataFrame:
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(directory))


def sink(
    df: DataFrame, config: Config, checkpoint: Path, table: str, mode: str = "append", **options: str
) -> None:
    run_to_end(
        lambda: (
            df.writeStream.format("segcat")
            .options(**source_options(config))
            .options(**options)
            .option("checkpointLocation", str(checkpoint))
            .outputMode(mode)
            .trigger(availableNow=True)
            .start(table)
        )
    )


def ids(spark: SparkSession, config: Config, table: str) -> list[int]:
    return sorted(r["id"] for r in si.read(spark, table, config=config).select("id").collect())


def test_each_batch_is_one_append_and_a_batch_run_again_is_a_duplicate(
    spark: SparkSession, config: Config, table: Table, tmp_path: Path
) -> None:
    name = table.name.qualified
    inputs, checkpoint = tmp_path / "in", tmp_path / "ckpt"
    write_inputs(inputs, [[1, 2, 3], [4, 5], [6]])
    sink(input_stream(spark, inputs), config, checkpoint, name)
    assert ids(spark, config, name) == [1, 2, 3, 4, 5, 6]
    query_id = json.loads((checkpoint / "metadata").read_text())["id"]
    appends = [h for h in table.history() if h.commit.operation is Operation.APPEND]
    assert [h.commit.properties[BATCH_PROPERTY] for h in appends] == ["0", "1", "2"]
    assert {h.commit.properties[QUERY_PROPERTY] for h in appends} == {query_id}
    assert [h.commit.commit_id for h in appends] == [batch_commit_id(name, query_id, b) for b in (0, 1, 2)]
    snapshot = table.snapshot()
    for segment in snapshot.segment_list():
        footer = read_provenance(snapshot.resolve(segment.path))
        assert footer is not None and footer["commit_id"] in {h.commit.commit_id for h in appends}
    head = snapshot.version

    # Spark's checkpoint without its last commit entry: what a crash after our commit leaves
    (checkpoint / "commits" / "2").unlink()
    write_inputs(inputs, [[7]])
    sink(input_stream(spark, inputs), config, checkpoint, name)
    assert ids(spark, config, name) == [1, 2, 3, 4, 5, 6, 7]  # batch 2 not twice, batch 3 once
    after = [h for h in table.history() if h.version > head and h.commit.operation is Operation.APPEND]
    assert [h.commit.properties[BATCH_PROPERTY] for h in after] == ["3"]


def test_complete_mode_replaces_the_table_at_every_batch(
    spark: SparkSession, config: Config, table: Table, tmp_path: Path
) -> None:
    name = table.name.qualified
    inputs = tmp_path / "in"
    write_inputs(inputs, [[1, 2, 3], [4, 5]])
    counts = input_stream(spark, inputs).selectExpr("id % 2 AS id", "name").groupBy("id").count()
    sink(counts, config, tmp_path / "ckpt", name, mode="complete")
    rows = si.read(spark, name, config=config).collect()
    assert sorted((r["id"], r["count"]) for r in rows) == [(0, 2), (1, 3)]
    operations = [h.commit.operation for h in table.history()]
    assert operations.count(Operation.REPLACE) == 2 and Operation.APPEND not in operations


def test_typed_refusals(spark: SparkSession, config: Config, table: Table, tmp_path: Path) -> None:
    name = table.name.qualified
    inputs = tmp_path / "in"
    write_inputs(inputs, [[1]])
    sink(input_stream(spark, inputs), config, tmp_path / "ckpt", name, partitionBy="name", bloomColumn="id")
    (written,) = table.snapshot().segment_list()
    assert (
        written.partition == "n1" and written.path.startswith("data/name=n1/") and written.bloom is not None
    )

    def refusal(df: DataFrame, target: str, checkpoint: Path | None) -> str:
        writer = df.writeStream.format("segcat").options(**source_options(config))
        if checkpoint is not None:
            writer = writer.option("checkpointLocation", str(checkpoint))
        with pytest.raises(StreamingQueryException) as caught:
            query = writer.trigger(availableNow=True).start(target)
            query.awaitTermination(120)
        return str(caught.value)

    other = tmp_path / "other"
    shutil.copytree(inputs, other)
    bad_type = input_stream(spark, other, "id STRING, name STRING")
    message = refusal(bad_type, name, tmp_path / "c1")
    assert "IncompatibleSchema" in message and "'id'" in message
    message = refusal(input_stream(spark, other), "test.no_such_table_here", tmp_path / "c2")
    assert "TableNotFound" in message
    # Spark refuses a query with no checkpoint at all; with only the session's default location,
    # the sink refuses (a query without a name gets a new identity at every start there)
    spark.conf.set("spark.sql.streaming.checkpointLocation", str(tmp_path / "default"))
    try:
        message = refusal(input_stream(spark, other), name, None)
    finally:
        spark.conf.unset("spark.sql.streaming.checkpointLocation")
    assert "InvalidArgument" in message and "checkpointLocation" in message
    assert ids(spark, config, name) == [1]
