"""Issue 20 items 8, 17–21 on real Spark: ``si.read(where=…)`` returns what Spark over all files returns.

One table, written by ``si.write`` in two schemas (``i int`` first, then ``i bigint`` and a new
column ``z``), each case one file. Every predicate is answered by segcat (pruning, then its
row filter) and by Spark's own ``filter`` on the predicate's SQL text over a read of *all*
live files with the table's schema written out here by hand, in a UTC session and in an
``America/Los_Angeles`` one. Tombstones then delete what their predicate means at UTC,
whatever the reader's session; a type change no reader can widen is refused by ``si.write``
and, in a file another writer registered, a typed error of the read.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import operator
from collections.abc import Iterable, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pyspark.sql import Row, SparkSession

import segcat.spark_integration as si
from segcat import Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import IncompatibleSchema, InvalidArgument
from segcat.catalog.protocol.expressions import Predicate, col
from segcat.catalog.protocol.predicates import to_sql
from segcat.catalog.read.as_of import as_of_ms
from segcat.catalog.storage.parquet_stats import segment_from_parquet
from segcat.spark_integration.reader import scan_files, spark_path
from tests.spark_support import spark

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.spark]

__all__ = ["spark"]

UTC = dt.UTC
FIRST = "case STRING, i INT, dt DATE, ts TIMESTAMP, tn TIMESTAMP_NTZ"
SECOND = "case STRING, i BIGINT, dt DATE, ts TIMESTAMP, tn TIMESTAMP_NTZ, z STRING"
TABLE = SECOND
"""The table's schema: ``i`` widened to BIGINT, ``z`` added (NULL in the first write's files)."""
COLUMNS = ["case", "i", "dt", "ts", "tn", "z"]
D = dt.date(2024, 1, 1)
T = dt.datetime(2024, 1, 1, tzinfo=UTC)
W = dt.datetime(2024, 1, 2, 3)  # a TIMESTAMP_NTZ wall clock
H = dt.timedelta(hours=1)
DAY = dt.timedelta(days=1)


def _rows(case: str, values: Iterable[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [(case, *v) for v in values]


FIRST_ROWS = (
    _rows("nulls", [(None, D, T, W), (None, None, None, None)])
    + _rows("small", [(1, D, T + 3 * H, W), (3, D, T + 5 * H, W + H)])
    + _rows(
        "days",
        [
            (5, D - dt.timedelta(days=1), T - 9 * H, W - 9 * H),
            (6, D + dt.timedelta(days=1), T + 30 * H, W + 30 * H),
        ],
    )
    + _rows("old", [(7, dt.date(99, 1, 1), dt.datetime(1500, 1, 1, tzinfo=UTC), dt.datetime(1500, 1, 1))])
)
SECOND_ROWS = _rows("zed", [(10, D, T + 7 * H, W, "a"), (12, D, T + 9 * H, W - 2 * H, None)]) + _rows(
    "big", [(2**40, D, T, W, "b")]
)

PREDICATES: list[Predicate] = [
    # item 17: Spark folds an integral column against a decimal beyond BIGINT into a constant
    col("i") > -(2**63) - 1,
    col("i") > -(10**37),
    col("i") <= 2**63,
    col("i") < Decimal("9223372036854775807.5"),
    col("i") >= Decimal("9223372036854775807.5"),
    ~(col("i") <= 2**63),
    col("i") != 2**63,
    # item 18: a string's offset means nothing to a TIMESTAMP_NTZ column
    col("tn") < "2024-01-02T04:00:00+02:00",
    col("tn") != "2024-01-02T04:00:00+02:00",
    ~col("tn").isin(["2024-01-02T04:00:00+02:00"]),
    col("tn") == "2024-01-02T03:00:00+02:00",
    # item 19: the session's zone decides DATE vs TIMESTAMP, wall-clock strings, NTZ vs TIMESTAMP
    col("dt") <= T + 3 * H,
    col("dt") >= T + 7 * H,
    col("dt").isin([T + 8 * H]),
    col("ts") < "2024-01-01 00:00:00",
    col("ts") >= D,
    col("ts") == "2024-01-01",
    col("tn") > dt.datetime(2024, 1, 2, 10, tzinfo=UTC),
    col("tn") <= dt.datetime(2024, 1, 2, 10, tzinfo=UTC),
    # item 20: pruning drops every file holding z
    (col("i") < 8) & col("z").is_null(),
    col("z").is_null() & (col("case") == "small"),
    col("z") == "a",
    # item 21: years before 1000 and 1582, and a long OR chain
    col("dt") == dt.date(99, 1, 1),
    col("dt") < dt.date(999, 1, 1),
    col("ts") == dt.datetime(1500, 1, 1, tzinfo=UTC),
    col("tn") == dt.datetime(1500, 1, 1, tzinfo=UTC),
    functools.reduce(operator.or_, [col("i") == k for k in range(500)]),
]


def canonical(found: Iterable[Row]) -> list[tuple[Any, ...]]:
    return sorted((tuple(r) for r in found), key=repr)


def sql(predicate: Predicate) -> str:
    text = to_sql(predicate)
    # Spark's SQL parser nests 500 ORs as deeply as the old Column did: ask it the same with IN
    return "i IN (" + ", ".join(map(str, range(500))) + ")" if text.count(" OR ") >= 499 else text


@pytest.fixture
def session_zone(spark: SparkSession) -> Iterator[Any]:
    def use(zone: str) -> None:
        spark.conf.set("spark.sql.session.timeZone", zone)

    yield use
    spark.conf.set("spark.sql.session.timeZone", "UTC")


def test_reads_answer_as_spark_over_all_files(
    spark: SparkSession, config: Config, table: Table, session_zone: Any
) -> None:
    name = table.name.qualified
    si.write(
        spark.createDataFrame(FIRST_ROWS, FIRST), name, partition_by="case", bloom_column="i", config=config
    )
    si.write(spark.createDataFrame(SECOND_ROWS, SECOND), name, partition_by="case", config=config)
    files = [spark_path(f.uri) for f in scan_files(table.snapshot()).values()]
    assert len(files) == 6
    everything = spark.read.schema(TABLE).parquet(*files)

    def segcat_rows(where: Predicate | None = None) -> list[tuple[Any, ...]]:
        return canonical(si.read(spark, name, where=where, config=config).select(*COLUMNS).collect())

    def spark_rows(condition: str) -> list[tuple[Any, ...]]:
        return canonical(everything.where(condition).select(*COLUMNS).collect())

    # item 8: int then bigint, and a column added later, read as the table's schema
    frame = si.read(spark, name, config=config)
    assert frame.schema.simpleString() == spark.createDataFrame([], TABLE).schema.simpleString()
    assert segcat_rows() == canonical(everything.select(*COLUMNS).collect())
    now_ms = table.snapshot().timestamp_ms + 0.75  # a float time travels (it raised AttributeError)
    assert (
        canonical(si.read(spark, name, as_of=now_ms, config=config).select(*COLUMNS).collect())
        == segcat_rows()
    )

    for zone in ("UTC", "America/Los_Angeles"):
        session_zone(zone)
        for predicate in PREDICATES:
            assert segcat_rows(predicate) == spark_rows(sql(predicate)), (zone, to_sql(predicate)[:120])

    # a tombstone means what it means at UTC, in any session: in Los Angeles 2024-01-01's
    # midnight is 08:00Z, yet `dt <= 03:00Z` deletes 2024-01-01 as it does at UTC
    with load_catalog(config).load_table(name) as writer:
        writer.refresh()
        writer.delete(predicates=["dt <= TIMESTAMP '2024-01-01 03:00:00Z'", "ts < '2023-12-31 20:00:00'"])
    session_zone("UTC")
    kept = spark_rows(
        "NOT coalesce(dt <= TIMESTAMP '2024-01-01 03:00:00Z', false) "
        "AND NOT coalesce(ts < '2023-12-31 20:00:00', false)"
    )
    assert segcat_rows() == kept
    session_zone("America/Los_Angeles")
    assert segcat_rows() == kept
    assert segcat_rows(col("i") > 0) == [r for r in kept if r[1] is not None and r[1] > 0]

    # a change no reader widens (TIMESTAMP -> TIMESTAMP_NTZ keeps the stats type, so the log
    # would accept it): si.write refuses it before writing a file; a file another writer
    # registers is read as a typed error naming the column, not Spark's failure at an action
    session_zone("UTC")
    changed = spark.createDataFrame([("ntz", dt.datetime(2024, 1, 1))], "case STRING, ts TIMESTAMP_NTZ")
    head = table.head_offset()
    with pytest.raises(IncompatibleSchema, match="'ts'"):
        si.write(changed, name, config=config)
    assert table.head_offset() == head  # nothing committed
    snapshot = table.snapshot()
    relative = "data/import/ntz.parquet"
    target = Path(snapshot.resolve(relative).removeprefix("file://"))
    target.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(changed.toArrow(), target)
    with load_catalog(config).load_table(name) as writer:
        writer.refresh()
        writer.append([segment_from_parquet(str(target), segment_id="ntz", relative_path=relative)])
    with pytest.raises(IncompatibleSchema, match=f"'ts'.*{relative}"):
        si.read(spark, name, config=config)


def test_as_of_takes_any_time_or_is_refused() -> None:
    assert as_of_ms(1.5e12) == 1_500_000_000_000
    assert as_of_ms(1_500_000_000_000.9) == 1_500_000_000_000  # broker times are whole ms
    assert as_of_ms("2024-01-01T00:00:00+01:00") == as_of_ms(dt.datetime(2023, 12, 31, 23, tzinfo=UTC))
    assert as_of_ms(dt.date(2024, 1, 1)) == as_of_ms("2024-01-01")
    for bad in (math.nan, math.inf, "yesterday", True, [1], object()):
        with pytest.raises(InvalidArgument):
            as_of_ms(bad)  # type: ignore[arg-type]
