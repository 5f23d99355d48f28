"""The core's Arrow reading of a version equals ``si.read`` of it (issue 22, item 7).

One table: files of two schemas (``k int``, then ``k bigint`` and a new column ``z``), NaN,
-0.0 and NULLs, tombstones, a compaction and a file delete; at every version the rows of
``snapshot_reads`` read with ``read_rows`` are, as a multiset, the rows Spark's ``si.read``
returns.
"""

from __future__ import annotations

import json
import math
from collections import Counter

import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

import segcat.spark_integration as si
from segcat import Config, Table
from segcat.catalog.read.changes import arrow_schema, read_rows, snapshot_reads
from tests.catalog.read.changes_support import write_table
from tests.spark_support import spark

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.spark]

__all__ = ["spark"]


def _schema(fields: list[tuple[str, str]]) -> str:
    return json.dumps(
        {
            "type": "struct",
            "fields": [{"name": n, "type": t, "nullable": True, "metadata": {}} for n, t in fields],
        }
    )


OLD = _schema([("k", "integer"), ("x", "double")])
NEW = _schema([("k", "long"), ("x", "double"), ("z", "string")])


def _key(row: tuple[object, ...]) -> tuple[object, ...]:
    return tuple("nan" if isinstance(v, float) and math.isnan(v) else v for v in row)


def test_arrow_rows_equal_spark_rows(spark: SparkSession, table: Table, config: Config) -> None:
    old = pa.table({"k": pa.array([1, 2, None, 4], pa.int32()), "x": [math.nan, -0.0, None, 1.5]})
    first = write_table(table, old, OLD)
    versions = [table.append(first)]
    new = pa.table({"k": pa.array([2**40, 5], pa.int64()), "x": [0.0, 2.5], "z": ["a", None]})
    second = write_table(table, new, NEW)
    versions.append(table.append(second))
    versions.append(table.delete(predicates=["x > 1.0"]))  # NaN rows too
    versions.append(table.delete(predicates=["z IS NULL AND k < 3"]))  # z is NULL in old files
    table.refresh()
    versions.append(table.delete(drops=[second[0].segment_id]))
    versions.append(table.append(write_table(table, old, OLD)))
    for v in versions:
        snapshot = table.snapshot(v)
        reads = snapshot_reads(snapshot)
        schema = arrow_schema(NEW)
        ours = Counter(
            _key(row)
            for r in reads
            for batch in read_rows(r, schema, config)
            for row in zip(*(batch.column(c).to_pylist() for c in ("k", "x", "z")), strict=True)
        )
        frame = si.read(spark, table, version=v)
        theirs = Counter(_key((r["k"], r["x"], r.asDict().get("z"))) for r in frame.collect())
        assert ours == theirs, v
