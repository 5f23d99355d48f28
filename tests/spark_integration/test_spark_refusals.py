"""Spark-side refusals and limits on real Spark (local[2]), Kafka and Redis (issue 20's smaller list).

- a partition value whose directory name exceeds a filesystem's 255 bytes is written (a head
  and a digest name the directory) and read back exactly; one too long for the protocol's
  partition name is refused naming the column, before anything is committed;
- the ``segcat`` source refuses a misspelt option, stream and batch, and an option of the
  other kind of read;
- a stream whose ``startingVersion`` is past the head is refused (``VersionNotFound``) instead
  of silently returning nothing;
- a stream of a purged table says the table does not exist, not "check that the broker runs".

Kept in few tests: each Spark query costs seconds on a small machine.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession

import segcat.spark_integration as si
from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import InvalidArgument
from segcat.catalog.read.purge import purge
from tests.factories import segment
from tests.handles import reader_of, tables_of
from tests.spark_support import spark

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.spark]

__all__ = ["spark"]


def test_partition_values_too_long_for_a_directory_name_are_written_and_read_back(
    spark: SparkSession, config: Config, table: Table
) -> None:
    """300 'é' escape to 1,800 bytes (a directory name may have 255): the job failed in an executor
    with "File name too long". 600 characters exceed the protocol's partition name (512): refused."""
    name = table.name.qualified
    long_value = "é" * 300
    rows = [(1, long_value), (2, long_value), (3, "short")]
    df = spark.createDataFrame(rows, "id BIGINT, p STRING")
    version = si.write(df, name, partition_by="p", config=config)
    snapshot = table.snapshot(version)
    assert {s.partition for s in snapshot.segment_list()} == {long_value, "short"}
    for added in snapshot.segment_list():
        assert all(len(part.encode()) <= 255 for part in added.path.split("/"))
        assert (Path(table.location()) / added.path).is_file()
    read = si.read(spark, name, config=config).select("id", "p").collect()
    assert sorted((r["id"], r["p"]) for r in read) == sorted(rows)

    too_long = spark.createDataFrame([(4, "x" * 600)], "id BIGINT, p STRING")
    with pytest.raises(InvalidArgument, match=r"partition column p makes a partition name of 600"):
        si.write(too_long, name, partition_by="p", config=config)
    assert table.snapshot().version == version  # nothing committed


def _stream(spark: SparkSession, config: Config, table: str, **options: str) -> DataFrame:
    return (
        spark.readStream.format("segcat")
        .option("view", "versions")
        .option("table", table)
        .options(**si.source_options(config))
        .options(**options)
        .load()
    )


def _run_stream_error(spark: SparkSession, config: Config, table: str, tmp: Path, **options: str) -> str:
    """The error of a stream that must fail, as Spark reports it (its text names ours)."""
    try:
        query = (
            _stream(spark, config, table, **options)
            .writeStream.format("memory")
            .queryName(f"q{abs(hash((table, tuple(options.items())))) % 10**9}")
            .option("checkpointLocation", str(tmp))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(180)
    except Exception as exc:
        return str(exc)
    raise AssertionError(f"the stream with {options} ran")


def _batch_error(spark: SparkSession, config: Config, table: str, **options: str) -> str:
    try:
        spark.read.format("segcat").option("view", "versions").option("table", table).options(
            **si.source_options(config)
        ).options(**options).load().collect()
    except Exception as exc:
        return str(exc)
    raise AssertionError(f"the batch read with {options} ran")


def test_the_source_refuses_unknown_options_and_versions_past_the_head_and_names_a_purged_table(
    spark: SparkSession, config: Config, catalog: Catalog, table: Table, tmp_path: Path
) -> None:
    name = table.name.qualified
    with load_catalog(config).load_table(name) as writer:
        head = writer.append([segment("s1", "p1")])

    error = _run_stream_error(spark, config, name, tmp_path / "typo", startingVersoin="1")
    assert "unknown option 'startingversoin'" in error and "did you mean startingVersion?" in error
    error = _run_stream_error(spark, config, name, tmp_path / "ending", endingVersion="1")
    assert "option endingVersion of the segcat source applies to a batch read" in error
    error = _batch_error(spark, config, name, endingVersoin="1")
    assert "unknown option 'endingversoin'" in error and "did you mean endingVersion?" in error
    error = _batch_error(spark, config, name, maxVersionsPerTrigger="1")
    assert "applies to a stream (spark.readStream), not to a batch read" in error
    error = _batch_error(spark, config, name, **{"segcat.redisurl": "redis://[::1"})
    assert "option segcat.redisUrl is not a valid URL" in error

    error = _run_stream_error(spark, config, name, tmp_path / "past", startingVersion=str(head + 5))
    assert f"startingVersion {head + 5} is past the head of {name}" in error
    assert "VersionNotFound" in error
    # the version the next commit takes is a valid start: nothing yet, then that commit
    sink = (
        _stream(spark, config, name, startingVersion=str(head + 1))
        .writeStream.format("memory")
        .queryName("next_version")
        .option("checkpointLocation", str(tmp_path / "next"))
        .trigger(availableNow=True)
        .start()
    )
    sink.awaitTermination(180)
    assert spark.sql("SELECT * FROM next_version").count() == 0

    table.catalog.drop_table(table.name)
    purge(tables_of(catalog), reader_of(table))
    error = _run_stream_error(spark, config, name, tmp_path / "purged")
    assert f"table {name} does not exist" in error and "purged" in error
    assert "check that the broker runs" not in error
