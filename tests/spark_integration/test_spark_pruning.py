"""Issue 7 on real Spark: ``si.read(where=…)`` returns exactly the rows Spark's own filter finds.

Each case of the issue is one file written by ``si.write`` (one partition per case, Bloom
filters on the column the case probes); every predicate is answered twice: by segcat
(pruning + row filter) and by Spark SQL over a read of *all* files with the predicate's
SQL text. Tombstones must delete exactly what that SQL matches too.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable
from decimal import Decimal
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F

import segcat.spark_integration as si
from segcat import Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.protocol.expressions import Predicate, col
from segcat.catalog.protocol.predicates import to_sql
from tests.spark_support import spark

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.spark]

__all__ = ["spark"]

SCHEMA = "case STRING, i BIGINT, d DOUBLE, dt DATE, ts TIMESTAMP"
D = dt.date(2024, 1, 1)
T = dt.datetime(2024, 1, 1, tzinfo=dt.UTC)
DAY = dt.timedelta(days=1)


def rows(case: str, column: str, values: Iterable[Any]) -> list[tuple[Any, ...]]:
    position = {"i": 1, "d": 2, "dt": 3, "ts": 4}[column]
    out = []
    for value in values:
        row: list[Any] = [case, None, None, None, None]
        row[position] = value
        out.append(tuple(row))
    return out


WRITES: dict[str | None, list[tuple[Any, ...]]] = {
    "d": rows("nan", "d", [1.0, math.nan])
    + rows("doubles", "d", [1.0, 5.0, 9.0])
    + rows("negative_zero", "d", [-1.0, -0.0, 1.0])
    + rows("both_zeros", "d", [-1.0, -0.0, 0.0, 1.0]),
    "i": rows("two", "i", [2]) + rows("minus_two", "i", [-2]) + rows("ints", "i", [1, 5, 9]),
    "dt": rows("day", "dt", [D]) + rows("days", "dt", [D - DAY, D, D + DAY]),
    "ts": rows("times", "ts", [T - DAY, T, T + DAY]),
}
"""Bloom column → rows; each case is written as one file (``partition_by="case"``)."""

PREDICATES: list[Predicate] = [
    # NaN: above every number, equal to itself
    col("d") != 1.0,
    col("d") > 5.0,
    col("d") <= math.nan,
    col("d").isin([math.nan]),
    ~(col("d") < 5.0),
    # literals of another type than the column
    col("i") < 2.5,
    col("i") != 2.5,
    col("i") > -2.5,
    col("i") < Decimal("2.5"),
    col("dt") < dt.datetime(2024, 1, 1, 12),
    # Bloom filters probed with the literal as the column's type
    col("d") == 5,
    col("i") == 5.0,
    col("dt") == dt.datetime(2024, 1, 1),
    col("dt") == "2024-01-01",
    col("ts") == D,
    col("d") == 0.0,
    col("d").isin([0, 9]),
    # what used to crash
    col("i") == 2**63,
    col("d") == 10**20,
    col("i") == np.int64(5),
    col("d") == np.float32(0.5),
    col("ts") == pd.Timestamp("2024-01-01"),
]


def canonical(found: Iterable[Row]) -> list[tuple[Any, ...]]:
    """Rows comparable as sets: NaN as a marker (NaN != NaN in Python)."""
    out = [tuple("NaN" if isinstance(v, float) and math.isnan(v) else v for v in r) for r in found]
    return sorted(out, key=repr)


COLUMNS = ["case", "i", "d", "dt", "ts"]


def spark_answer(spark: SparkSession, frame: DataFrame, condition: str) -> list[tuple[Any, ...]]:
    """The rows Spark SQL's semantics select. Parquet filter pushdown is off: it trusts footer
    min/max that skip NaN, and with it Spark itself drops NaN rows for ``d > 5`` from files
    other writers made (segcat's files carry no float footer stats for that reason)."""
    spark.conf.set("spark.sql.parquet.filterPushdown", "false")
    try:
        return canonical(frame.where(condition).select(*COLUMNS).collect())
    finally:
        spark.conf.unset("spark.sql.parquet.filterPushdown")


def test_reads_and_deletes_agree_with_spark(spark: SparkSession, config: Config, table: Table) -> None:
    name = table.name.qualified
    for bloom_column, data in WRITES.items():
        frame = spark.createDataFrame(data, SCHEMA)
        si.write(frame, name, partition_by="case", bloom_column=bloom_column, config=config)
    everything = si.read(spark, name, config=config)
    assert len(everything.inputFiles()) == 10

    def read(where: Predicate | Column | str) -> list[tuple[Any, ...]]:
        return canonical(si.read(spark, name, where=where, config=config).select(*COLUMNS).collect())

    for predicate in PREDICATES:
        assert read(predicate) == spark_answer(spark, everything, to_sql(predicate)), predicate
    assert si.read(spark, name, where=col("i") == 2**63, config=config).inputFiles() == []

    # a pyspark Column filters rows (no pruning) instead of being ignored
    assert read(F.col("d") > 5.0) == spark_answer(spark, everything, "d > 5.0")
    assert len(read(F.col("d") > 5.0)) == 2  # 9.0 and NaN

    # a tombstone deletes what the same SQL matches: NaN is above 5.0; a column the data
    # lacks reads as NULL, so that tombstone deletes nothing instead of failing the read
    with load_catalog(config).load_table(name) as writer:
        writer.refresh()
        writer.delete(predicates=["d > 5.0", "no_such_column = 1"])
    kept_rows = "NOT coalesce(d > 5.0, false)"
    assert canonical(si.read(spark, name, config=config).select(*COLUMNS).collect()) == spark_answer(
        spark, everything, kept_rows
    )
    assert read(col("d") != 1.0) == spark_answer(spark, everything, f"{kept_rows} AND d != 1.0")
