"""The ``segcat`` source's rows on real Spark: a batch at a version, and the rows stream."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

import segcat.spark_integration as si
from segcat import Table
from segcat.catalog.config import Config
from tests.spark_support import run_to_end, spark

pytestmark = [pytest.mark.kafka, pytest.mark.redis]

__all__ = ["spark"]

SCHEMA = "id BIGINT, name STRING"


def write(
    spark: SparkSession, config: Config, table: Table, ids: range, mode: str = "append", **kw: Any
) -> int:
    frame = spark.createDataFrame([(i, f"n{i}") for i in ids], SCHEMA)
    return si.write(frame, table.name.qualified, mode, config=config, **kw)  # type: ignore[arg-type]


def source(
    spark: SparkSession, config: Config, table: Table, stream: bool = False, **options: str
) -> DataFrame:
    reader = spark.readStream if stream else spark.read
    return (
        reader.format("segcat")
        .options(**si.source_options(config))
        .options(**options)
        .load(table.name.qualified)
    )


def ids(df: DataFrame) -> list[int]:
    return sorted(r["id"] for r in df.select("id").collect())


class Batches:
    """A ``foreachBatch`` sink, idempotent by batch id (a batch run again must hold the same rows)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[int]] = {}
        self.mismatches: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = sorted(r["id"] for r in df.select("id").collect())
        with self._lock:
            if self.batches.setdefault(batch_id, rows) != rows:
                self.mismatches.append(batch_id)

    @property
    def ids(self) -> list[int]:
        with self._lock:
            return [i for k in sorted(self.batches) for i in self.batches[k]]

    @property
    def sizes(self) -> list[int]:
        with self._lock:
            return [len(self.batches[k]) for k in sorted(self.batches) if self.batches[k]]


def drain(
    spark: SparkSession, config: Config, table: Table, checkpoint: Path, sink: Batches, **options: str
) -> None:
    """Run the rows stream with ``Trigger.AvailableNow`` from ``checkpoint`` to its end."""
    run_to_end(
        lambda: (
            source(spark, config, table, stream=True, **options)
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
    )


def test_batch_rows_at_versions_equal_si_read(spark: SparkSession, config: Config, table: Table) -> None:
    v1 = write(spark, config, table, range(0, 5))
    v2 = write(spark, config, table, range(5, 9))
    table.delete(predicates=["id < 2"])
    v4 = write(spark, config, table, range(100, 103), mode="replace")
    name = table.name.qualified
    for version in (v1, v2, v2 + 1, v4):
        expected = ids(si.read(spark, name, version=version, config=config))
        assert ids(source(spark, config, table, versionAsOf=str(version))) == expected
    assert ids(source(spark, config, table)) == list(range(100, 103))
    assert source(spark, config, table).schema.simpleString() == "struct<id:bigint,name:string>"


def test_stream_snapshot_then_appends_split_by_max_files(
    spark: SparkSession, config: Config, table: Table, tmp_path: Path
) -> None:
    for k in range(3):
        write(spark, config, table, range(10 * k, 10 * k + 3), max_rows_per_file=1)  # 3 files each
    sink = Batches()
    checkpoint = tmp_path / "cp"
    drain(spark, config, table, checkpoint, sink, maxFilesPerTrigger="4")
    assert sorted(sink.ids) == sorted([*range(0, 3), *range(10, 13), *range(20, 23)])
    assert sink.sizes == [4, 4, 1]  # the initial snapshot split across batches
    write(spark, config, table, range(30, 33), max_rows_per_file=1)
    write(spark, config, table, range(40, 42))
    drain(spark, config, table, checkpoint, sink, maxFilesPerTrigger="2")
    assert sink.sizes[3:] == [3, 2]  # whole versions: 3 files > 2 still goes in, alone
    assert len(sink.ids) == len(set(sink.ids)) == 9 + 3 + 2
    assert sink.mismatches == []
