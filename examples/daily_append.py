"""Batch job: append (or replace) daily partitions of synthetic events to a segcat table.

    .venv/bin/python examples/daily_append.py --table demo.events --days 3
    .venv/bin/python examples/daily_append.py --table demo.events --start 2024-01-02 --days 1 --replace

Each day becomes one partition (``day=YYYY-MM-DD``); Spark writes the Parquet files, the
executors compute their stats (and a Bloom filter on ``user``) from the footers, and the
driver publishes the whole job as ONE commit. Run it again to add more segments.
"""

from __future__ import annotations

import argparse
import datetime as dt

from _common import open_table, run, session
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

import segcat.spark_integration as si
from segcat import Isolation


def events(spark: SparkSession, start: dt.date, days: int, rows_per_day: int) -> DataFrame:
    """``rows_per_day`` events per day: id, day, ts, user, amount (deterministic per id)."""
    total = days * rows_per_day
    base = dt.datetime.combine(start, dt.time(), tzinfo=dt.UTC)
    seconds_per_row = 86_400 / rows_per_day
    return (
        spark.range(total)
        .withColumn("day", F.date_add(F.lit(start), (F.col("id") / rows_per_day).cast("int")))
        .withColumn(
            "ts",
            F.timestamp_seconds(
                F.lit(int(base.timestamp()))
                + (F.col("id") / rows_per_day).cast("int") * 86_400
                + ((F.col("id") % rows_per_day) * seconds_per_row).cast("long")
            ),
        )
        .withColumn("user", F.format_string("user-%02d", (F.col("id") * 7) % 50))
        .withColumn("amount", F.round((F.col("id") * 3.7) % 100, 2))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table", required=True, help="namespace.table (created if missing)")
    parser.add_argument("--start", type=dt.date.fromisoformat, help="first day (default: days before today)")
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--rows-per-day", type=int, default=10_000)
    parser.add_argument("--replace", action="store_true", help="replace those days instead of appending")
    parser.add_argument("--serializable", action="store_true", help="with --replace: fail on a racing append")
    args = parser.parse_args()

    table = open_table(args.table, create=True)
    start = args.start or dt.datetime.now(dt.UTC).date() - dt.timedelta(days=args.days)
    spark = session("segcat-daily-append")
    df = events(spark, start, args.days, args.rows_per_day)
    version = si.write(
        df,
        table,
        mode="replace" if args.replace else "append",
        partition_by="day",
        bloom_column="user",
        isolation=Isolation.SERIALIZABLE if args.serializable else Isolation.SNAPSHOT,
    )
    snap = table.snapshot(version)
    (entry,) = [h for h in table.history() if h.version == version]
    print(
        f"{entry.commit.operation.value} of {args.days} day(s) from {start} accepted at version {version}: "
        f"+{len(entry.commit.adds)} segment(s), -{len(entry.commit.drops)}; the table now holds "
        f"{snap.live_count} segments, {snap.live_rows:,} rows, {snap.live_bytes:,} bytes"
    )
    for segment in sorted(entry.commit.adds, key=lambda s: (s.partition or "", s.path)):
        print(
            f"  {segment.partition}  {segment.row_count:>7,} rows  {segment.size_bytes:>9,} B  {segment.path}"
        )
    spark.stop()


if __name__ == "__main__":
    run(main)
