"""The ``segcat`` source's rows on real Spark: a batch at a version, and the rows stream."""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession

import segcat.spark_integration as si
from segcat import Catalog, Table
from segcat.catalog.config import Config
from segcat.catalog.protocol.names import TableName
from segcat.catalog.read.vacuum import HISTORY_VERSIONS_PROPERTY, vacuum
from segcat.catalog.storage.redis import keys
from segcat.catalog.storage.redis.leases import LeaseStore
from tests.catalog.read.test_log_pruning import AGGRESSIVE_CLEANER, _alter, wait_compacted_away
from tests.handles import reader_of, tables_of
from tests.materializer_support import namespace, running_materializer, spawn_materializer, wait_for_head
from tests.spark_support import run_to_end, spark
from tests.strategies import SETTINGS

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
    """The ids of ``df``'s rows (none when it has no columns: a table without files)."""
    return sorted(r["id"] for r in df.select("id").collect()) if "id" in df.columns else []


class Batches:
    """A ``foreachBatch`` sink, idempotent by batch id (a batch run again must hold the same rows)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[int]] = {}
        self.mismatches: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        # a stream started on a table without files has no columns (and no rows) yet
        rows = sorted(r["id"] for r in df.select("id").collect()) if "id" in df.columns else []
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


def test_available_now_honours_row_limits_and_starting_timestamp(
    spark: SparkSession, config: Config, table: Table, tmp_path: Path
) -> None:
    for k in range(4):
        write(spark, config, table, range(10 * k, 10 * k + 2))
    sink = Batches()
    drain(spark, config, table, tmp_path / "cp", sink, startingVersion="0", maxRowsPerTrigger="3")
    assert sink.sizes == [2, 2, 2, 2]  # 2 + 2 rows > 3: one version per batch
    assert len(sink.ids) == 8
    times = {h.version: h.timestamp_ms for h in table.history()}
    third = sorted(times)[-2]  # the third append
    since = Batches()
    drain(spark, config, table, tmp_path / "since", since, startingTimestamp=str(times[third]))
    assert sorted(since.ids) == [20, 21, 30, 31]  # the versions committed at or after that time


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


OPS = st.lists(
    st.sampled_from(["append", "files", "compact", "delete", "props", "restart"]), min_size=3, max_size=7
)


@settings(
    SETTINGS,
    max_examples=3,
    suppress_health_check=[*SETTINGS.suppress_health_check, HealthCheck.function_scoped_fixture],
)
@given(ops=OPS)
def test_random_sequences_stream_exactly_the_appended_rows_across_restarts(
    spark: SparkSession,
    config: Config,
    catalog: Catalog,
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[str],
) -> None:
    """Appends (one file or several), compactions, tombstones, property changes and restarts from the
    checkpoint in any order: after every restart the stream holds the rows of its initial snapshot and
    each row appended since, once, and, while no delete happened since the stream started, exactly
    the rows ``si.read`` sees at the version reached."""
    table = catalog.create_table(f"test.rows_prop_{uuid.uuid4().hex[:10]}")
    name = table.name.qualified
    checkpoint = tmp_path_factory.mktemp("rows") / "cp"
    sink = Batches()
    appended: list[int] = []
    deleted = started = False
    next_id = 0
    touched = 0

    def check() -> None:
        nonlocal appended, deleted, started
        if not started:  # the first run starts with the table's rows now, deletes applied
            appended, deleted, started = ids(si.read(spark, name, config=config)), False, True
        drain(spark, config, table, checkpoint, sink, ignoreDeletes="true", maxFilesPerTrigger="2")
        assert sorted(sink.ids) == sorted(appended) and len(sink.ids) == len(set(sink.ids))
        if not deleted:
            assert sorted(sink.ids) == ids(si.read(spark, name, config=config))
        assert sink.mismatches == []

    try:
        for op in ["append", *ops, "restart"]:
            if op in ("append", "files"):
                new = list(range(next_id, next_id + 3))
                next_id += 3
                write(
                    spark,
                    config,
                    table,
                    range(new[0], new[-1] + 1),
                    max_rows_per_file=1 if op == "files" else None,
                )
                appended.extend(new)
            elif op == "compact":
                si.compact(spark, name, config=config)
            elif op == "delete" and appended:
                table.delete(predicates=[f"id = {appended[0]}"])
                deleted = True
            elif op == "props":  # a new value each time: setting the same one changes nothing (refused)
                touched += 1
                table.set_properties({"touched": str(touched)})
            elif op == "restart":
                check()
    finally:
        table.close()


def test_the_stream_runs_on_across_a_materializer_killed_9(
    spark: SparkSession, mconfig: Config, tmp_path: Path
) -> None:
    """The planner takes Redis' head as a hint of how far to read: a materializer killed -9 mid-stream
    freezes that head, and the stream must still deliver every version (from Kafka's end), once."""
    ns, pattern = namespace()
    table = Catalog(mconfig).create_table(f"{ns}.events")
    write(spark, mconfig, table, range(100, 102))  # a stream needs a schema: the first file's
    proc = spawn_materializer(mconfig, pattern, f"g-{ns}", f"i-{ns}")
    sink = Batches()
    query = (
        source(spark, mconfig, table, stream=True, kafkaCheckIntervalMs="500")
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="100 milliseconds")
        .start()
    )

    def reach(count: int) -> None:
        wait_until(lambda: not query.isActive or len(sink.ids) >= count, timeout_s=120)
        assert query.isActive, query.exception()

    try:
        for k in range(3):
            write(spark, mconfig, table, range(10 * k, 10 * k + 2))
        reach(8)
        # the materializer follows the table: Redis' head is what the planner reads first
        wait_for_head(tables_of(table.catalog).redis, table.name.qualified, table.head_offset())  # type: ignore[arg-type]
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        for k in range(3, 6):
            write(spark, mconfig, table, range(10 * k, 10 * k + 2))
        reach(14)
        proc = spawn_materializer(mconfig, pattern, f"g-{ns}", f"i-{ns}")
        write(spark, mconfig, table, range(60, 62))
        reach(16)
        query.processAllAvailable()
    finally:
        query.stop()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        table.close()
    assert sorted(sink.ids) == ids(si.read(spark, table.name.qualified, config=mconfig))
    assert len(sink.ids) == len(set(sink.ids)) == 16 and sink.mismatches == []


def test_a_position_the_history_no_longer_holds_fails_unless_failondataloss_is_false(
    spark: SparkSession, mconfig: Config, tmp_path: Path, caplog: Any
) -> None:
    """The stream stops at version 0; the log is pruned and the history before version ``oldest``
    expires meanwhile: the restart cannot rebuild its position. ``StreamDataLoss``, or with
    ``failOnDataLoss=false`` the versions after ``oldest``, with a warning naming the gap."""
    ns, pattern = namespace()
    name = f"{ns}.events"
    table = Catalog(mconfig).create_table(name)
    checkpoint = tmp_path / "cp"
    sink = Batches()

    def restart(**options: str) -> None:
        run_to_end(
            lambda: (
                spark.readStream.format("segcat")
                .schema(SCHEMA)  # the table has no files yet
                .options(**si.source_options(mconfig))
                .options(**options)
                .load(name)
                .writeStream.foreachBatch(sink)
                .option("checkpointLocation", str(checkpoint))
                .trigger(availableNow=True)
                .start()
            )
        )

    restart(startingVersion="0")  # the creation: an empty batch, the offset at version 0
    versions: dict[int, int] = {}
    with running_materializer(mconfig, pattern) as service:
        for k in range(6):
            versions[write(spark, mconfig, table, range(k, k + 1))] = k
        table.set_properties({HISTORY_VERSIONS_PROPERTY: "3"})
        wait_for_head(tables_of(table.catalog).redis, name, table.head_offset())  # type: ignore[arg-type]
        assert service.writer is not None and service.writer.drain(timeout_s=60)
        pruned = table.prune_log(retain_versions=2)
        assert pruned.marker_version is not None
        wait_for_head(tables_of(table.catalog).redis, name, pruned.marker_version)  # type: ignore[arg-type]
        assert service.writer.drain(timeout_s=60)
    _alter(mconfig, TableName.parse(name).topic, AGGRESSIVE_CLEANER)
    time.sleep(0.5)
    versions[write(spark, mconfig, table, range(10, 11))] = 10
    wait_compacted_away(mconfig, TableName.parse(name), pruned.plan.prune_point)
    vacuum(reader_of(table), grace_ms=0, ignore_leases=True)  # expires the history before `oldest`
    files = reader_of(table).files
    assert files is not None
    oldest = files.oldest_readable()
    assert oldest is not None and oldest > 1

    with pytest.raises(Exception, match="StreamDataLoss") as lost:
        restart()
    assert "stopped after version 0" in str(lost.value) and "failOnDataLoss=false" in str(lost.value)
    with caplog.at_level(logging.WARNING, logger="segcat.spark.stream"):
        restart(failOnDataLoss="false")
    assert sorted(sink.ids) == sorted(k for v, k in versions.items() if v > oldest)
    table.close()
