"""Batch job: merge a table's small segments into fewer large ones, as ONE COMPACT commit.

    .venv/bin/python examples/compaction.py --table demo.events
    .venv/bin/python examples/compaction.py --table demo.events --day 2024-01-02 --target-file-rows 50000

Only segments of the same partition are merged; ``--day`` restricts the job to the segments
whose stats say they may hold that day. The commit drops exactly what the job read, so
appends committed while it runs never conflict; if another compaction got to the same
segments first, this one fails with ``CommitConflict`` and changes nothing.
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys

from _common import open_table, run, session

import segcat.spark_integration as si
from segcat import CommitConflict, col, exit_code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table", required=True, help="namespace.table")
    parser.add_argument("--target-file-rows", type=int, default=1_000_000)
    parser.add_argument("--day", type=dt.date.fromisoformat, help="only segments that may hold this day")
    args = parser.parse_args()

    table = open_table(args.table)
    before = table.snapshot()
    spark = session("segcat-compaction")
    where = col("day") == args.day if args.day else None
    try:
        version = si.compact(spark, table, where=where, target_file_rows=args.target_file_rows)
    except CommitConflict as conflict:
        print(f"error: compaction lost a race, nothing changed: {conflict}", file=sys.stderr)
        raise SystemExit(exit_code(conflict)) from conflict
    finally:
        spark.stop()
    after = table.snapshot(version)
    if version == before.version:
        print(f"nothing to compact at version {version} ({before.live_count} segments)")
        return
    print(
        f"COMPACT accepted at version {version}: {before.live_count} → {after.live_count} live segments "
        f"({after.live_rows:,} rows)"
    )
    added, removed = before.diff(after).added, before.diff(after).removed
    print(f"  dropped {len(removed)} segment(s), added {len(added)}:")
    for segment in added:
        print(
            f"  {segment.partition}  {segment.row_count:>9,} rows  {segment.size_bytes:>9,} B  {segment.path}"
        )


if __name__ == "__main__":
    run(main)
