"""Structured Streaming job: follow a table version by version and print what changed.

    .venv/bin/python examples/stream_follower.py --table demo.events
    .venv/bin/python examples/stream_follower.py --table demo.events --available-now --checkpoint /tmp/ck

Uses the ``segcat`` Python data source: one row per accepted version (operation, segments
added and dropped, rows and bytes delta). Versions are the source's offsets, so with a
``--checkpoint`` a restarted follower continues right after the last version it printed.
``--available-now`` processes what exists at start (honouring ``--max-versions-per-trigger``)
and exits; otherwise it runs until Ctrl-C or ``--timeout``.
"""

from __future__ import annotations

import argparse
import tempfile

from _common import open_table, run, session
from pyspark.sql import DataFrame

import segcat.spark_integration as si


def show(df: DataFrame, batch_id: int) -> None:
    """Print one micro-batch, one line per version (runs on the driver)."""
    for row in df.orderBy("version").collect():
        when = row["timestamp"].strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        props = row["properties"] or {}
        job = props.get("segcat.spark.job", props.get("spark.app.name", ""))
        print(
            f"[batch {batch_id}] v{row['version']} (after v{row['prev_version']}) {when} "
            f"{row['operation']:<8} +{len(row['added'])} -{len(row['dropped'])} segments, "
            f"rows {row['rows_delta']:+,}, bytes {row['bytes_delta']:+,}, "
            f"{row['live_segments']} live  {job}",
            flush=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table", required=True, help="namespace.table")
    parser.add_argument("--starting-version", default="earliest", help="earliest | latest | N")
    parser.add_argument("--checkpoint", help="checkpoint directory (default: a temporary one)")
    parser.add_argument("--max-versions-per-trigger", type=int)
    parser.add_argument("--available-now", action="store_true", help="process what exists, then exit")
    parser.add_argument("--timeout", type=float, help="stop after this many seconds")
    args = parser.parse_args()

    table = open_table(args.table)  # fail early and clearly if it does not exist
    spark = session("segcat-stream-follower")
    reader = (
        spark.readStream.format("segcat")
        .option("view", "versions")
        .option("table", args.table)
        .option("startingVersion", args.starting_version)
        .options(**si.source_options(table.catalog.config))
    )
    if args.max_versions_per_trigger:
        reader = reader.option("maxVersionsPerTrigger", str(args.max_versions_per_trigger))
    checkpoint = args.checkpoint or tempfile.mkdtemp(prefix="segcat-follower-")
    writer = reader.load().writeStream.foreachBatch(show).option("checkpointLocation", checkpoint)
    writer = (
        writer.trigger(availableNow=True) if args.available_now else writer.trigger(processingTime="1 second")
    )
    query = writer.start()
    print(f"following {args.table} (checkpoint {checkpoint}); Ctrl-C to stop", flush=True)
    try:
        query.awaitTermination(args.timeout)
    except KeyboardInterrupt:
        pass
    finally:
        query.stop()
        spark.stop()


if __name__ == "__main__":
    run(main)
