"""The ``segcat`` Python data source on real Spark: versions as a stream, segments as a batch."""

from __future__ import annotations

import pickle
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.datasource import ReadMaxRows

import segcat.spark_integration as si
from segcat import Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import CommitConflict
from segcat.catalog.log.reader import LogReader
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.table_files import TableFiles
from segcat.spark_integration.read_options import SourceOptions
from segcat.spark_integration.session import CHECKPOINT_MANAGER, FILE_SYSTEM_CHECKPOINTS
from segcat.spark_integration.version_follower import VersionFollower
from segcat.spark_integration.version_stream import VersionStreamReader
from tests.factories import segment
from tests.handles import reader_of
from tests.spark_support import run_to_end, spark

pytestmark = [pytest.mark.kafka, pytest.mark.redis]

__all__ = ["spark"]


class Batches:
    """A ``foreachBatch`` sink, idempotent by batch id as Spark asks of sinks.

    A batch interrupted by ``stop()`` before Spark logged it as done is run again after a
    restart with the same id; it must carry the same versions (recorded in ``mismatches``).
    """

    def __init__(self) -> None:
        self.batches: dict[int, list[dict[str, Any]]] = {}
        self.mismatches: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = [r.asDict(recursive=True) for r in df.orderBy("version").collect()]
        with self._lock:
            known = self.batches.setdefault(batch_id, rows)
            if known != rows:
                self.mismatches.append(batch_id)

    @property
    def seen(self) -> list[list[dict[str, Any]]]:
        with self._lock:
            return [self.batches[k] for k in sorted(self.batches)]

    @property
    def versions(self) -> list[int]:
        return [row["version"] for rows in self.seen for row in rows]

    def wait_for(self, count: int, timeout_s: float = 180.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.versions) < count:
            assert time.monotonic() < deadline, f"stream delivered {self.versions}, wanted {count} versions"
            time.sleep(0.1)


CREATED = 0
"""A table's first version: the UPGRADE_PROTOCOL commit that created it (an accepted version too)."""


def appends(config: Config, table: Table, count: int, *, rejected: bool = True) -> list[int]:
    """``count`` accepted appends, with a rejected commit in between (versions are not dense)."""
    versions = []
    with load_catalog(config).load_table(table.name.qualified) as writer:
        writer.refresh()
        for k in range(count):
            versions.append(writer.append([segment(f"s-{uuid.uuid4().hex[:10]}", "p1", rows=k + 1)]))
            if rejected and k == 0:
                with pytest.raises(CommitConflict):
                    writer.compact(["no-such-segment"], [segment(f"c-{uuid.uuid4().hex[:8]}", "p1")])
    return versions


def stream(spark: SparkSession, config: Config, table: Table, **options: str) -> DataFrame:
    return (
        spark.readStream.format("segcat")
        .option("view", "versions")
        .option("table", table.name.qualified)
        .options(**si.source_options(config))
        .options(**options)
        .load()
    )


def test_stream_restarts_from_checkpoint_exactly(
    spark: SparkSession, config: Config, table: Table, tmp_path: Path
) -> None:
    # si.local_session writes checkpoints through Hadoop's FileSystem (renames): this restart covers it
    assert spark.conf.get(CHECKPOINT_MANAGER) == FILE_SYSTEM_CHECKPOINTS
    first = appends(config, table, 3)
    checkpoint = str(tmp_path / "checkpoint")

    # run 1: a continuous query, two versions per trigger at most; stopped once caught up
    sink = Batches()
    query = (
        stream(spark, config, table, maxVersionsPerTrigger="2")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        sink.wait_for(len(first) + 1)
        # rows reach the sink before Spark's commit log has the batch: a stop in between makes the
        # restart run that batch again (CI saw it); wait for the commit before stopping
        query.processAllAvailable()
    finally:
        query.stop()
    assert sink.versions == [CREATED, *first]  # the table's creation is its version 0
    assert all(len(rows) <= 2 for rows in sink.seen)
    creation, row = sink.seen[0][0], sink.seen[0][1]
    assert creation["operation"] == "UPGRADE_PROTOCOL" and creation["prev_version"] == -1
    assert row["operation"] == "APPEND" and row["table"] == table.name.qualified
    assert row["prev_version"] == CREATED and row["rows_delta"] == 1 and len(row["added"]) == 1
    assert row["dropped"] == [] and row["live_segments"] == 1
    run1_batches = len(sink.batches)

    # more versions while the query is down (a compaction among them), then restart
    second = appends(config, table, 2)
    with load_catalog(config).load_table(table.name.qualified) as writer:
        image = writer.refresh()
        live = sorted(image.segments)
        merged_away = sum(image.segments[sid].segment.row_count for sid in live[:2])
        second.append(writer.compact(live[:2], [segment("merged", "p1", rows=3)]))

    run_to_end(
        lambda: (
            stream(spark, config, table, maxVersionsPerTrigger="2")
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
    )
    assert sink.versions == [CREATED, *first, *second]  # nothing lost, nothing repeated
    assert sink.mismatches == []
    assert [len(rows) for rows in sink.seen[run1_batches:]] == [2, 1]  # the limit holds under AvailableNow
    compaction = sink.seen[-1][-1]
    assert compaction["operation"] == "COMPACT" and sorted(compaction["dropped"]) == live[:2]
    assert compaction["added"] == ["merged"] and compaction["rows_delta"] == 3 - merged_away
    assert compaction["prev_version"] == second[-2]

    # a third run has nothing new: it ends without a batch of rows
    sink3 = Batches()
    run_to_end(
        lambda: (
            stream(spark, config, table)
            .writeStream.foreachBatch(sink3)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
    )
    assert sink3.versions == []


def test_starting_version_and_batch_views(
    spark: SparkSession, config: Config, table: Table, tmp_path: Path
) -> None:
    versions = appends(config, table, 4)

    sink = Batches()
    query = (
        stream(spark, config, table, startingVersion=str(versions[2]))
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "from-v"))
        .trigger(availableNow=True)
        .start()
    )
    assert query.awaitTermination(300)
    assert sink.versions == versions[2:]

    options = si.source_options(config)
    history = (
        spark.read.format("segcat")
        .option("view", "versions")
        .option("table", table.name.qualified)
        .options(**options)
        .load()
    )
    assert [r["version"] for r in history.orderBy("version").collect()] == [CREATED, *versions]

    listed = (
        spark.read.format("segcat")
        .option("view", "segments")
        .option("table", table.name.qualified)
        .option("versionAsOf", str(versions[1]))
        .options(**options)
        .load()
    )
    rows = {r["segment_id"]: r for r in listed.collect()}
    snap = table.snapshot(versions[1])
    assert set(rows) == snap.segment_ids() and len(rows) == 2
    some = rows[sorted(rows)[0]]
    assert some["version"] == versions[1] and some["partition"] == "p1"
    assert some["stats"]["id"]["type"] == "INT" and some["stats"]["id"]["min"] == "0"
    assert some["uri"] == f"{table.location()}/{some['path']}"


def test_follower_starts_from_a_key_frame(
    config: Config, table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner's image of a long table comes from the newest key frame, not offset 0."""
    versions = appends(config, table, 5)
    state = reader_of(table).state(versions[2])
    TableFiles(ObjectStore.from_config(config), table.name, reader_of(table).log_id).write_keyframe(
        keyframe.build(state, log_id=reader_of(table).log_id), state.version
    )
    starts: list[int] = []
    original = LogReader.seek

    def seek(self: LogReader, offset: int) -> None:
        starts.append(offset)
        original(self, offset)

    monkeypatch.setattr(LogReader, "seek", seek)
    follower = VersionFollower(config, table.name)
    try:
        rows = follower.accepted_after(versions[3] - 1)
        assert starts[0] == versions[2] + 1  # right after the key frame
        assert [r[1] for r in rows] == versions[3:]
        assert rows[0][2] == versions[2]  # prev_version known from the key frame's image
        assert follower.last_accepted() == versions[-1]
    finally:
        follower.close()


def test_a_fresh_reader_plans_any_journaled_range(config: Config, table: Table) -> None:
    """After a restart Spark re-plans the last journaled batch on a new reader: no state needed."""
    versions = appends(config, table, 4)
    options = SourceOptions.parse({"table": table.name.qualified, **si.source_options(config)})
    planner = VersionStreamReader(options)
    assert planner.latestOffset({"version": versions[0]}, ReadMaxRows(2)) == {"version": versions[2]}
    shipped = pickle.loads(pickle.dumps(planner))  # Kafka clients stay behind
    assert shipped._follower is None

    fresh = VersionStreamReader(options)
    (part,) = fresh.partitions({"version": versions[0]}, {"version": versions[2]})
    assert [row[1] for row in fresh.read(part)] == versions[1:3]
    fresh.commit({"version": versions[2]})
    assert fresh.partitions({"version": versions[2]}, {"version": versions[2]}) == []
    # a rewind (a checkpoint from before what this reader has freed) rebuilds the image
    (part,) = fresh.partitions({"version": -1}, {"version": versions[1]})
    assert [row[1] for row in fresh.read(part)] == [CREATED, *versions[:2]]
    fresh.stop()
    planner.stop()
