"""Spark write / replace / compact / read on real Spark (local[2]), Kafka and Redis."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession

import segcat.spark_integration as si
from segcat import Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import CommitConflict
from segcat.catalog.protocol.expressions import col
from segcat.catalog.protocol.model import Isolation, Operation
from segcat.catalog.protocol.rules import Rule
from tests.spark_support import spark

pytestmark = [pytest.mark.kafka, pytest.mark.redis]

__all__ = ["spark"]

SCHEMA = "id BIGINT, day DATE, ts TIMESTAMP, user STRING, amount DOUBLE"
Row = tuple[Any, ...]


def rows_for(day: dt.date, ids: range, users: tuple[str, ...] = ("u1", "u2", "u3")) -> list[Row]:
    start = dt.datetime.combine(day, dt.time(), tzinfo=dt.UTC)
    return [(i, day, start + dt.timedelta(minutes=i), users[i % len(users)], float(i) * 1.5) for i in ids]


def frame(spark: SparkSession, rows: list[Row]) -> DataFrame:
    return spark.createDataFrame(rows, SCHEMA)


def collected(df: DataFrame) -> list[Row]:
    out = []
    for row in df.select("id", "day", "ts", "user", "amount").collect():
        ts = row["ts"].replace(tzinfo=dt.UTC)  # the session time zone is UTC
        out.append((row["id"], row["day"], ts, row["user"], row["amount"]))
    return sorted(out)


D1, D2, D3, D4 = (dt.date(2024, 1, d) for d in (1, 2, 3, 4))


def test_append_then_read_back(spark: SparkSession, config: Config, table: Table) -> None:
    rows = rows_for(D1, range(0, 40)) + rows_for(D2, range(40, 70)) + rows_for(D3, range(70, 75))
    name = table.name.qualified
    with si.stage_write(frame(spark, rows), name, partition_by="day", config=config) as staged:
        assert {s.partition for s in staged.adds} == {"2024-01-01", "2024-01-02", "2024-01-03"}
        for segment in staged.adds:  # written, described from the footer, not yet visible
            assert (Path(table.location()) / segment.path).is_file()
            assert segment.path.startswith(f"data/day={segment.partition}/part-")
        assert si.read(spark, name, config=config).count() == 0
        version = staged.commit()

    snap = table.snapshot(version)
    assert snap.version == version and snap.live_count == 3 and snap.live_rows == len(rows)
    by_partition = {s.partition: s for s in snap.segment_list()}
    stats = {s.column: s for s in by_partition["2024-01-02"].stats}
    assert (stats["id"].min, stats["id"].max, stats["id"].null_count) == (40, 69, 0)
    assert stats["ts"].min == dt.datetime(2024, 1, 2, 0, 40, tzinfo=dt.UTC)
    _created, entry = table.history()
    assert entry.commit.operation is Operation.APPEND
    assert entry.commit.properties["spark.app.id"] == spark.sparkContext.applicationId

    assert collected(si.read(spark, name, config=config)) == sorted(rows)
    # more files per partition when asked for, and an empty DataFrame commits nothing
    more = rows_for(D4, range(100, 125))
    version2 = si.write(frame(spark, more), table, partition_by="day", max_rows_per_file=10)
    assert [s.row_count for s in table.snapshot(version2).prune(col("day") == D4).segment_list()] in (
        [10, 10, 5],
        [5, 10, 10],
        [10, 5, 10],
    )
    assert si.write(frame(spark, []), table, partition_by="day") == version2
    assert collected(si.read(spark, table)) == sorted(rows + more)


def test_replace_snapshot_keeps_concurrent_append_serializable_rejects(
    spark: SparkSession, config: Config, table: Table
) -> None:
    name = table.name.qualified
    old1, old2 = rows_for(D1, range(0, 10)), rows_for(D2, range(10, 20))
    si.write(frame(spark, old1 + old2), name, partition_by="day", config=config)

    # SNAPSHOT (default): an append into the partition while the replace job runs survives it
    new1, extra1 = rows_for(D1, range(100, 105)), rows_for(D1, range(200, 203))
    with si.stage_write(frame(spark, new1), name, "replace", partition_by="day", config=config) as staged:
        assert staged.planned is not None and staged.planned.replace_scope == ("2024-01-01",)
        appended = si.write(frame(spark, extra1), name, partition_by="day", config=config)
        replaced = staged.commit()
    assert replaced > appended
    assert collected(si.read(spark, name, config=config)) == sorted(new1 + extra1 + old2)

    # SERIALIZABLE: the same race is rejected by rule 5, naming the append; nothing changes
    new2, extra2 = rows_for(D2, range(300, 304)), rows_for(D2, range(400, 402))
    with si.stage_write(
        frame(spark, new2),
        name,
        "replace",
        partition_by="day",
        isolation=Isolation.SERIALIZABLE,
        config=config,
    ) as staged:
        appended = si.write(frame(spark, extra2), name, partition_by="day", config=config)
        with pytest.raises(CommitConflict) as conflict:
            staged.commit()
        losing_files = [Path(table.location()) / s.path for s in staged.adds]
    assert conflict.value.rule == Rule.CONCURRENT_APPEND.value
    assert conflict.value.conflicting_version == appended
    assert all(f.is_file() for f in losing_files)  # left for vacuum, never referenced
    assert collected(si.read(spark, name, config=config)) == sorted(new1 + extra1 + old2 + extra2)

    # without a race SERIALIZABLE replaces, and replace_scope may name a partition df lacks
    si.write(
        frame(spark, new2),
        name,
        "replace",
        partition_by="day",
        replace_scope=["2024-01-01", "2024-01-02"],
        isolation=Isolation.SERIALIZABLE,
        config=config,
    )
    assert collected(si.read(spark, name, config=config)) == sorted(new2)


def test_concurrent_compactions_one_wins(spark: SparkSession, config: Config, table: Table) -> None:
    name = table.name.qualified
    rows: list[Row] = []
    for k in range(4):  # four small appends into one partition, one into another
        batch = rows_for(D1, range(k * 10, k * 10 + 10))
        si.write(frame(spark, batch), name, partition_by="day", config=config)
        rows += batch
    lone = rows_for(D2, range(900, 905))
    si.write(frame(spark, lone), name, partition_by="day", config=config)
    rows += lone
    before = table.snapshot()
    small = {s.segment_id for s in before.prune(col("day") == D1).segment_list()}

    first = si.stage_compaction(spark, name, target_file_rows=1_000, config=config)
    second = si.stage_compaction(spark, name, target_file_rows=1_000, config=config)
    with first, second:
        assert set(first.drops) == set(second.drops) == small  # a lone segment is not "compacted"
        assert len(first.adds) == len(second.adds) == 1
        late = rows_for(D1, range(500, 503))
        si.write(frame(spark, late), name, partition_by="day", config=config)  # appends never conflict
        won = first.commit()
        with pytest.raises(CommitConflict) as conflict:
            second.commit()
    assert conflict.value.rule == Rule.CONCURRENT_DROP.value
    assert conflict.value.conflicting_version == won

    after = table.snapshot()
    assert not small & after.segment_ids()
    (merged,) = first.adds
    assert merged.segment_id in after.segment_ids() and merged.row_count == 40
    assert merged.path.startswith("data/day=2024-01-01/")
    assert after.live_count == 3  # merged + the late append + the lone segment
    assert collected(si.read(spark, name, config=config)) == sorted(rows + late)
    assert si.compact(spark, name, target_file_rows=2, config=config) == after.version  # nothing to do


def test_time_travel_by_version_and_timestamp(spark: SparkSession, config: Config, table: Table) -> None:
    name = table.name.qualified
    first, second = rows_for(D1, range(0, 6)), rows_for(D2, range(6, 9))
    v1 = si.write(frame(spark, first), name, config=config)
    time.sleep(0.05)  # broker timestamps (LogAppendTime) of the two commits differ
    v2 = si.write(frame(spark, second), name, config=config)
    t1 = table.snapshot(v1).timestamp_ms
    t2 = table.snapshot(v2).timestamp_ms
    assert t2 > t1

    assert collected(si.read(spark, name, version=v1, config=config)) == sorted(first)
    assert collected(si.read(spark, name, as_of=t1, config=config)) == sorted(first)
    moment = dt.datetime.fromtimestamp(t1 / 1000, tz=dt.UTC)
    assert collected(si.read(spark, name, as_of=moment, config=config)) == sorted(first)
    assert collected(si.read(spark, name, as_of=moment.isoformat(), config=config)) == sorted(first)
    assert collected(si.read(spark, name, as_of=t2, config=config)) == sorted(first + second)
    assert si.read(spark, name, version=v1 - 1, config=config).count() == 0  # before the first commit


def test_tombstones_apply_to_older_data_only(spark: SparkSession, config: Config, table: Table) -> None:
    name = table.name.qualified
    old = rows_for(D1, range(0, 12))  # users u1, u2, u3
    v_old = si.write(frame(spark, old), name, config=config)
    with load_catalog(config).load_table(name) as writer:
        writer.refresh()
        v_delete = writer.delete(predicates=["user = 'u1'"])
    new = rows_for(D1, range(100, 106))  # u1 again: newer than the delete, so kept
    si.write(frame(spark, new), name, config=config)

    expected = sorted([r for r in old if r[3] != "u1"] + new)
    assert collected(si.read(spark, name, config=config)) == expected
    assert collected(si.read(spark, name, version=v_old, config=config)) == sorted(old)
    assert collected(si.read(spark, name, version=v_delete, config=config)) == sorted(
        r for r in old if r[3] != "u1"
    )

    # compaction rewrites after the delete: the deleted rows must not come back
    version = si.compact(spark, name, target_file_rows=1_000, config=config)
    snap = table.snapshot(version)
    assert snap.live_count == 1 and snap.live_rows == len(expected)
    assert collected(si.read(spark, name, config=config)) == expected
    only_u1 = si.read(spark, name, where="user = 'u1'", config=config)
    assert collected(only_u1) == sorted(r for r in new if r[3] == "u1")


def test_pruning_skips_files(spark: SparkSession, config: Config, table: Table) -> None:
    name = table.name.qualified
    rows: list[Row] = []
    for day, users in ((D1, ("a", "c")), (D2, ("b", "d")), (D3, ("a", "c")), (D4, ("b", "d"))):
        start = len(rows)
        rows += rows_for(day, range(start, start + 8), users)
    si.write(frame(spark, rows), name, partition_by="day", bloom_column="user", config=config)

    everything = si.read(spark, name, config=config)
    assert len(everything.inputFiles()) == 4

    by_day = si.read(spark, name, where=col("day") == D2, config=config)
    assert len(by_day.inputFiles()) == 1
    assert collected(by_day) == sorted(r for r in rows if r[1] == D2)

    by_range = si.read(spark, name, where=(col("id") >= 10) & (col("id") < 20), config=config)
    assert len(by_range.inputFiles()) == 2  # ids 8..15 and 16..23
    assert collected(by_range) == sorted(r for r in rows if 10 <= r[0] < 20)

    # "b" lies inside every file's [min, max] user range; the Bloom filters rule two files out
    by_user = si.read(spark, name, where=col("user") == "b", config=config)
    assert len(by_user.inputFiles()) == 2
    assert collected(by_user) == sorted(r for r in rows if r[3] == "b")

    nothing = si.read(spark, name, where=col("day") > D4, config=config)
    assert nothing.inputFiles() == [] and nothing.count() == 0 and "user" in nothing.columns

    sql = si.read(spark, name, where=col("day") <= D2, filter="amount >= 6", config=config)
    assert len(sql.inputFiles()) == 2
    assert collected(sql) == sorted(r for r in rows if r[1] <= D2 and r[4] >= 6)
