"""The ``segcat`` source's rows on real Spark: a batch at a version, and the rows stream."""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

import segcat.spark_integration as si
from segcat import Table
from segcat.catalog.config import Config
from segcat.catalog.storage.redis import keys
from segcat.catalog.storage.redis.leases import LeaseStore
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


def wait_until(check: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


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


def stream_error(
    spark: SparkSession, config: Config, table: Table, checkpoint: Path, sink: Batches, **options: str
) -> str:
    """The error a rows stream that must fail stops with (Spark's text names ours)."""
    try:
        drain(spark, config, table, checkpoint, sink, **options)
    except Exception as exc:  # pyspark's captured StreamingQueryException
        return str(exc)
    raise AssertionError(f"the stream with {options} ran to its end")


def test_non_append_versions_fail_the_stream_unless_skipped(
    spark: SparkSession, config: Config, table: Table, tmp_path: Path
) -> None:
    first = write(spark, config, table, range(0, 3), max_rows_per_file=1)
    si.compact(spark, table.name.qualified, config=config)  # skipped silently: its rows are in already
    deleted = table.delete(predicates=["id = 1"])  # a tombstone: removes rows, adds none
    write(spark, config, table, range(10, 12))
    replaced = write(spark, config, table, range(20, 22), mode="replace")
    write(spark, config, table, range(30, 32))
    start = {"startingVersion": str(first)}

    strict = Batches()
    error = stream_error(spark, config, table, tmp_path / "strict", strict, **start)
    assert "StreamChangeCommit" in error and f"version {deleted} of {table.name.qualified} (DELETE)" in error
    assert "skipChangeCommits=true or ignoreDeletes=true" in error
    assert strict.ids == [0, 1, 2]  # what came before the delete was delivered

    deletes_ignored = Batches()
    error = stream_error(
        spark, config, table, tmp_path / "ignore", deletes_ignored, ignoreDeletes="true", **start
    )
    assert f"version {replaced} of {table.name.qualified} (REPLACE)" in error
    assert "ignoreDeletes=true" in error and "skipChangeCommits=true to skip" in error
    assert sorted(deletes_ignored.ids) == [0, 1, 2, 10, 11]

    skipping = Batches()
    drain(spark, config, table, tmp_path / "skip", skipping, skipChangeCommits="true", **start)
    assert sorted(skipping.ids) == [0, 1, 2, 10, 11, 30, 31]  # the replace's own rows skipped too, as Delta


def test_appends_and_compactions_stream_the_rows_si_read_sees(
    spark: SparkSession, config: Config, table: Table, tmp_path: Path
) -> None:
    write(spark, config, table, range(0, 4), max_rows_per_file=1)
    sink = Batches()
    checkpoint = tmp_path / "cp"
    drain(spark, config, table, checkpoint, sink)  # the initial snapshot
    write(spark, config, table, range(4, 6), max_rows_per_file=1)
    si.compact(spark, table.name.qualified, config=config)  # merges the files of both appends
    write(spark, config, table, range(6, 8))
    table.set_properties({"owner": "someone"})  # a metadata version: nothing to emit
    drain(spark, config, table, checkpoint, sink, maxBytesPerTrigger="1")  # one version per batch
    assert sorted(sink.ids) == ids(si.read(spark, table.name.qualified, config=config)) == list(range(8))
    assert sink.sizes == [4, 2, 2]
    assert sink.mismatches == []


def test_available_now_honours_row_limits(
    spark: SparkSession, config: Config, table: Table, tmp_path: Path
) -> None:
    for k in range(4):
        write(spark, config, table, range(10 * k, 10 * k + 2))
    sink = Batches()
    drain(spark, config, table, tmp_path / "cp", sink, startingVersion="0", maxRowsPerTrigger="3")
    assert sink.sizes == [2, 2, 2, 2]  # 2 + 2 rows > 3: one version per batch
    assert len(sink.ids) == 8


def test_a_new_column_fails_the_stream_until_it_restarts(
    spark: SparkSession, config: Config, table: Table, tmp_path: Path
) -> None:
    write(spark, config, table, range(0, 2))
    sink = Batches()
    checkpoint = tmp_path / "cp"
    query = (
        source(spark, config, table, stream=True)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="100 milliseconds")
        .start()
    )
    try:
        query.processAllAvailable()
        assert sink.ids == [0, 1]
        wider = spark.createDataFrame([(5, "n5", 1.5)], "id BIGINT, name STRING, score DOUBLE")
        added = si.write(wider, table.name.qualified, config=config)
        with pytest.raises(Exception, match="StreamSchemaChanged") as failed:
            query.awaitTermination(120)
    finally:
        query.stop()
    assert "StreamSchemaChanged" in str(failed.value) and f"version {added} of" in str(failed.value)
    assert "a new column 'score'" in str(failed.value) and "restart the query" in str(failed.value)

    drain(spark, config, table, checkpoint, sink)  # restarted: the table's schema now
    assert sink.ids == [0, 1, 5] and sink.mismatches == []
    fresh = Batches()
    rows: list[Any] = []
    drain(spark, config, table, tmp_path / "fresh", fresh)
    frame = source(spark, config, table, stream=True)
    assert frame.columns == ["id", "name", "score"]
    batch = source(spark, config, table).orderBy("id").collect()
    rows = [(r["id"], r["score"]) for r in batch]
    assert rows == [(0, None), (1, None), (5, 1.5)]  # older files read the added column as null
    assert sorted(fresh.ids) == [0, 1, 5]


def test_leases_keep_a_batch_s_files_from_vacuum_until_it_is_done(
    spark: SparkSession, config: Config, table: Table, tmp_path: Path
) -> None:
    name = table.name.qualified
    first = write(spark, config, table, range(0, 2))
    second = write(spark, config, table, range(2, 4))
    si.compact(spark, name, config=config)  # drops both appends' files inside the batch below
    last = write(spark, config, table, range(4, 6))
    store = LeaseStore.from_config(config)
    seen: list[tuple[set[int], list[int]]] = []

    def vacuum_then_read(df: DataFrame, batch_id: int) -> None:
        leased = store.leased_versions(name)
        table.vacuum(grace_ms=0, retain_versions=1)  # would delete the compacted-away files
        seen.append((leased, sorted(r["id"] for r in df.select("id").collect())))

    try:
        run_to_end(
            lambda: (
                source(spark, config, table, stream=True, startingVersion=str(first))
                .writeStream.foreachBatch(vacuum_then_read)
                .option("checkpointLocation", str(tmp_path / "cp"))
                .trigger(availableNow=True)
                .start()
            )
        )
        # one batch: the end version, and the versions whose files a later version of it dropped
        assert seen == [({first, second, last}, list(range(6)))]
        wait_until(lambda: store.leased_versions(name) == set(), timeout_s=60)  # let go at the end
    finally:
        store.client.delete(keys.leases_key(name), keys.lease_info_key(name))
        store.close()


def test_files_vacuumed_while_the_stream_was_down_fail_it_unless_failondataloss_is_false(
    spark: SparkSession, config: Config, table: Table, tmp_path: Path, caplog: Any
) -> None:
    name = table.name.qualified
    first = write(spark, config, table, range(0, 2))
    sink = Batches()
    checkpoint = tmp_path / "cp"
    drain(spark, config, table, checkpoint, sink, startingVersion=str(first))
    lost = write(spark, config, table, range(2, 4))
    si.compact(spark, name, config=config)
    write(spark, config, table, range(4, 6))
    table.vacuum(grace_ms=0, retain_versions=1)  # the stream is down: nothing leases `lost`'s files

    error = stream_error(spark, config, table, checkpoint, sink)
    assert "StreamDataLoss" in error and f"(version {lost})" in error and "failOnDataLoss=false" in error
    with caplog.at_level(logging.WARNING, logger="segcat.spark.stream"):
        drain(spark, config, table, checkpoint, sink, failOnDataLoss="false")
    assert sink.ids == [0, 1, 4, 5]  # the vacuumed version's rows skipped, nothing else
