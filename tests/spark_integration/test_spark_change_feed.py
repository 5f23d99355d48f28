"""The change feed (``readChangeFeed=true``) on real Spark, Kafka and Redis: batch and stream.

Applying the feed of (a, b] to ``si.read(version=a)`` gives ``si.read(version=b)`` as multisets,
for random sequences of appends, compactions, replaces, file deletes, partition drops and
tombstones; ``Table.changes`` (the core's Arrow feed) gives the same rows as Spark's; bad ranges
are typed errors. Segment files are written by ``producers.segment_files`` (no Spark job per
commit): Spark only reads. Kept to few Spark queries: each costs seconds on a small machine.
"""

from __future__ import annotations

import json
import re
import signal
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.query import StreamingQuery

import segcat.spark_integration as si
from segcat import Catalog, InvalidArgument, Segment, Table
from segcat.catalog.config import Config
from segcat.catalog.protocol.names import TableName
from segcat.catalog.read.vacuum import HISTORY_VERSIONS_PROPERTY, vacuum
from segcat.spark_integration.change_options import FeedOptions, is_change_feed
from segcat.spark_integration.read_options import SourceOptions
from tests.catalog.read.changes_support import write_segments
from tests.catalog.read.test_log_pruning import AGGRESSIVE_CLEANER, _alter, wait_compacted_away
from tests.handles import reader_of, tables_of
from tests.materializer_support import (
    PrivateRedis,
    materializer_config,
    namespace,
    running_materializer,
    spawn_materializer,
    wait_for_head,
)
from tests.spark_support import run_to_end, spark

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.spark]

__all__ = ["spark"]

Row = tuple[Any, ...]
COLUMNS = ["k", "p", "x"]
CHANGE = ["_change_type", "_commit_version", "_commit_timestamp"]


class Model:
    """The rows of each live segment as the test wrote them, tombstones applied (the truth)."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self.segments: dict[str, list[Row]] = {}
        self.partition: dict[str, str | None] = {}
        self.next_key = 0

    def _write(self, rows: list[Row]) -> list[Segment]:
        written = write_segments(self.table, rows, partitioned=True)  # type: ignore[arg-type]
        for segment in written:
            self.segments[segment.segment_id] = [r for r in rows if r[1] == segment.partition]
            self.partition[segment.segment_id] = segment.partition
        return written

    def fresh(self, count: int, partitions: str) -> list[Row]:
        rows = [(self.next_key + i, partitions[i % len(partitions)], float(i)) for i in range(count)]
        self.next_key += count
        return rows

    def append(self, count: int, partitions: str) -> int:
        return self.table.append(self._write(self.fresh(count, partitions)))

    def compact(self) -> int | None:
        if len(self.segments) < 2:
            return None
        ids = sorted(self.segments)[:2]
        rows = [r for sid in ids for r in self.segments.pop(sid)]
        if not rows:
            return None  # an empty rewrite is not a compaction a writer makes
        for sid in ids:
            self.partition.pop(sid)
        return self.table.compact(ids, self._write(rows))

    def replace(self, count: int) -> int | None:
        if count == 0 and not self.segments:
            return None  # a REPLACE that adds and drops nothing is malformed: no writer sends it
        self.segments.clear()
        self.partition.clear()
        return self.table.replace(self._write(self.fresh(count, "ab")))

    def delete_file(self) -> int | None:
        if not self.segments:
            return None
        sid = sorted(self.segments)[-1]
        del self.segments[sid], self.partition[sid]
        return self.table.delete(drops=[sid])

    def drop_partition(self, partition: str) -> int | None:
        ids = [sid for sid, p in self.partition.items() if p == partition]
        if not ids:
            return None
        for sid in ids:
            del self.segments[sid], self.partition[sid]
        return self.table.drop_partitions([partition])

    def tombstone(self, below: int) -> int:
        for sid, rows in self.segments.items():
            self.segments[sid] = [r for r in rows if not r[0] < below]
        return self.table.delete(predicates=[f"k < {below}"])

    def rows(self) -> Counter[Row]:
        return Counter(r for rows in self.segments.values() for r in rows)


def _feed(
    spark: SparkSession, config: Config, table: str, *, stream: bool = False, **options: str
) -> DataFrame:
    """The change feed of ``table``: a batch read, or a stream."""
    reader = spark.readStream if stream else spark.read
    feed = reader.format("segcat").option("table", table).option("readChangeFeed", "true")
    return feed.options(**si.source_options(config)).options(**options).load()


def _rows(frame: DataFrame) -> Counter[Row]:
    return Counter(tuple(r) for r in frame.select(*COLUMNS).collect())


def _read(spark: SparkSession, config: Config, table: Table, version: int) -> Counter[Row]:
    """``si.read`` at ``version`` (a version without files has no columns to select: no rows)."""
    if table.snapshot(version).live_count == 0:
        return Counter()
    return _rows(si.read(spark, table.name.qualified, version=version, config=config))


def _changes(frame: DataFrame) -> list[Row]:
    return sorted((tuple(r) for r in frame.select(*COLUMNS, *CHANGE).collect()), key=repr)


def apply(rows: Counter[Row], changes: Iterable[Row]) -> Counter[Row]:
    """``rows`` with the feed's inserts added and deletes taken away; a delete of a row that is
    not there fails (the feed would be wrong, not only the multiset)."""
    out = Counter(rows)
    for change in sorted(changes, key=lambda c: (c[4], c[3] == "insert")):  # by version, deletes first
        row, kind = change[:3], change[3]
        if kind == "insert":
            out[row] += 1
        else:
            assert kind == "delete", change
            assert out[row] > 0, f"the feed deletes {row}, which is not there"
            out[row] -= 1
    return +out


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.integers(1, 4), st.sampled_from(["a", "b", "ab"])),
        st.tuples(st.just("compact")),
        st.tuples(st.just("replace"), st.integers(0, 3)),
        st.tuples(st.just("delete_file")),
        st.tuples(st.just("drop_partition"), st.sampled_from(["a", "b"])),
        st.tuples(st.just("tombstone"), st.integers(0, 12)),
    ),
    min_size=2,
    max_size=7,
)


def _run(model: Model, ops: list[tuple[Any, ...]]) -> list[tuple[int, Counter[Row]]]:
    """Run ``ops``; the (version, rows) after each one that committed."""
    seen = []
    for op, *args in ops:
        version = getattr(model, op)(*args)
        if version is not None:
            seen.append((version, model.rows()))
    return seen


@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(ops=OPS, cut=st.integers(0, 100))
def test_the_batch_feed_applied_to_version_a_gives_version_b(
    spark: SparkSession, config: Config, catalog: Any, ops: list[tuple[Any, ...]], cut: int
) -> None:
    name = f"test.feed_{uuid.uuid4().hex[:12]}"
    table = catalog.create_table(name)
    try:
        model = Model(table)
        model.append(3, "ab")
        seen = _run(model, ops)
        head = table.head_offset()
        a = seen[cut % len(seen)][0] if seen else head
        start, end = _read(spark, config, table, a), _read(spark, config, table, head)
        assert end == model.rows()
        if a == head:
            return
        changes = _changes(_feed(spark, config, name, startingVersion=str(a + 1)))
        assert apply(start, changes) == end
        with table.changes(a + 1) as arrow:
            data = arrow.read_all()
        arrow_rows = sorted(
            zip(*(data.column(c).to_pylist() for c in [*COLUMNS, *CHANGE]), strict=True), key=repr
        )
        assert [r[:5] for r in arrow_rows] == [r[:5] for r in changes]
    finally:
        table.close()


class Batches:
    """A ``foreachBatch`` sink, idempotent by batch id as Spark asks of sinks: a batch Spark runs
    again after a restart must carry the same changes (else recorded in ``mismatches``)."""

    def __init__(self) -> None:
        self.batches: dict[int, list[Row]] = {}
        self.mismatches: list[int] = []
        self._lock = threading.Lock()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        rows = _changes(df)
        with self._lock:
            if self.batches.setdefault(batch_id, rows) != rows:
                self.mismatches.append(batch_id)

    def changes(self) -> list[Row]:
        with self._lock:
            return [r for k in sorted(self.batches) for r in self.batches[k]]


def wait_for_version(query: StreamingQuery, version: int, timeout_s: float = 60.0) -> None:
    """Until ``query`` has processed every version ≤ ``version`` (a version may emit no row)."""
    deadline = time.monotonic() + timeout_s
    while True:
        assert query.isActive, f"the query ended: {query.exception()}"
        progress = query.lastProgress
        if progress is not None and progress["sources"]:
            end = progress["sources"][0]["endOffset"]
            offset = json.loads(end) if isinstance(end, str) else end
            if "snapshot" not in offset and int(offset.get("version", -1)) >= version:
                return
        assert time.monotonic() < deadline, f"the stream did not reach version {version}: {progress}"
        time.sleep(0.1)


def test_the_stream_restarts_from_its_checkpoint_and_survives_a_materializer_kill(
    spark: SparkSession, mconfig: Config, tmp_path: Path
) -> None:
    """Initial snapshot (Delta's default), then changes; a first run ``availableNow`` with
    ``maxFilesPerTrigger=2`` (several batches), a second from the same checkpoint following live
    commits while the materializer (the stream's Redis head) is killed -9: every change once."""
    ns, pattern = namespace()
    name = f"{ns}.events"
    table = Catalog(mconfig).create_table(name)
    model = Model(table)
    model.append(4, "ab")
    model.append(2, "a")
    model.tombstone(2)
    proc = spawn_materializer(mconfig, pattern, f"feed-{ns}", f"feed-{ns}")
    sink = Batches()
    checkpoint = str(tmp_path / "checkpoint")

    def start(**trigger: Any) -> StreamingQuery:
        return (
            _feed(spark, mconfig, name, stream=True, maxFilesPerTrigger="2", kafkaCheckIntervalMs="200")
            .writeStream.foreachBatch(sink)
            .option("checkpointLocation", checkpoint)
            .trigger(**trigger)
            .start()
        )

    try:
        snapshot_rows = model.rows()
        run_to_end(lambda: start(availableNow=True))
        first = len(sink.batches)
        assert first >= 2, "the initial snapshot is split by maxFilesPerTrigger"
        assert Counter(r[:3] for r in sink.changes()) == snapshot_rows
        assert {r[3] for r in sink.changes()} == {"insert"}

        model.append(3, "b")  # while no query runs: the restart's first batch
        query = start(processingTime="100 milliseconds")
        try:
            model.compact()
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
            model.replace(2)
            model.tombstone(model.next_key - 1)
            last = model.drop_partition("a") or table.head_offset()
            wait_for_version(query, last)
        finally:
            query.stop()
        assert query.exception() is None
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(10)
        table.close()
    assert sink.mismatches == []
    changes = sink.changes()
    assert len(changes) == len(set(changes)), "a change delivered twice"
    assert apply(Counter(), changes) == model.rows()
    snapshot_at = min(r[4] for r in changes)  # the initial snapshot's version, then the changes
    later = sorted((r for r in changes if r[4] > snapshot_at), key=repr)
    assert later == _changes(_feed(spark, mconfig, name, startingVersion=str(snapshot_at + 1)))


def _error(read: Callable[[], object]) -> str:
    """The error of a read that must fail, as Spark reports it (its text names ours)."""
    try:
        read()
    except Exception as exc:
        return str(exc)
    raise AssertionError("the read ran")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingVersion": "1", "startingTimestamp": "2024-01-01"}, "not both"),
        (
            {"startingVersion": "1", "versionAsOf": "1"},
            "option versionAsOf does not apply to the change feed",
        ),
        ({"startingVersion": "1", "readChangeFeed": "yes"}, "option readChangeFeed must be true or false"),
        ({"startingVersion": "1", "maxBytesPerTrigger": "1q"}, "maxBytesPerTrigger must be a size"),
        ({"startingVersion": "-1"}, "startingVersion must be a version ≥ 0"),
        ({"startingVersion": "earliest"}, "use startingVersion=0"),
        (
            {"startingTimestamp": "yesterday"},
            "option startingTimestamp: as_of 'yesterday' is not an ISO-8601 time",
        ),
        ({"startingVersion": "1", "maxFilesPerTrigger": "0"}, "maxFilesPerTrigger must be ≥ 1"),
    ],
)
def test_option_values_are_checked_before_anything_is_read(options: dict[str, str], message: str) -> None:
    parsed = SourceOptions.parse({"table": "ns.t", "readChangeFeed": "true", **options})
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        is_change_feed(parsed)
        FeedOptions.parse(parsed, streaming=True)


def test_bad_ranges_and_options_are_typed_errors(
    spark: SparkSession, config: Config, table: Table, tmp_path: Path
) -> None:
    name = table.name.qualified
    model = Model(table)
    first = model.append(2, "a")
    head = model.append(2, "b")

    def batch(**options: str) -> str:
        return _error(lambda: _feed(spark, config, name, **options).collect())

    error = batch(startingVersion=str(head), endingVersion=str(first))
    assert "InvalidArgument" in error and f"startingVersion {head} is after endingVersion {first}" in error
    error = batch(startingVersion=str(head + 1))
    assert "VersionNotFound" in error and f"startingVersion {head + 1} is past the head of {name}" in error
    error = batch(startingVersion=str(first), endingVersion=str(head + 3))
    assert "VersionNotFound" in error and f"endingVersion {head + 3} is past the head" in error
    error = batch()
    assert "needs startingVersion or startingTimestamp" in error
    error = batch(startingVersion="1", maxFilesPerTrigger="3")
    assert "option maxFilesPerTrigger of the segcat source applies to a stream" in error

    # the range's own rows: one version, and by timestamps (the versions' broker times)
    only = _changes(_feed(spark, config, name, startingVersion=str(head), endingVersion=str(head)))
    assert [(r[0], r[3], r[4]) for r in only] == [(2, "insert", head), (3, "insert", head)]
    stamp = str(table.snapshot(head).timestamp_ms)
    timed = _changes(_feed(spark, config, name, startingTimestamp=stamp, endingTimestamp=stamp))
    assert timed == only

    error = _error(
        lambda: (
            _feed(spark, config, name, stream=True, endingVersion="3")
            .writeStream.format("memory")
            .queryName("feed_bad")
            .option("checkpointLocation", str(tmp_path / "bad"))
            .trigger(availableNow=True)
            .start()
            .awaitTermination(120)
        )
    )
    assert "option endingVersion of the segcat source applies to a batch read" in error

    # a stream's other starts: the version at a time, and the head (nothing until a commit)
    for options, expected in (({"startingTimestamp": stamp}, only), ({"startingVersion": "latest"}, [])):
        sink = Batches()
        run_to_end(
            lambda options=options, sink=sink: (
                _feed(spark, config, name, stream=True, **options)
                .writeStream.foreachBatch(sink)
                .option("checkpointLocation", str(tmp_path / next(iter(options))))
                .trigger(availableNow=True)
                .start()
            )
        )
        assert sink.changes() == expected, options


def test_a_vacuumed_file_fails_the_read_unless_fail_on_data_loss_is_false(
    spark: SparkSession, config: Config, table: Table
) -> None:
    """A file gone from storage (deleted here by hand, as a vacuum without leases would) is
    ``DataFileMissing`` naming the version and ``failOnDataLoss``; with ``false`` it is skipped."""
    name = table.name.qualified
    model = Model(table)
    first = model.append(2, "a")
    gone = model.append(2, "b")
    snapshot = table.snapshot(gone)
    (added,) = snapshot.segment_ids() - table.snapshot(first).segment_ids()
    (segment,) = [s for s in snapshot.segment_list() if s.segment_id == added]
    Path(snapshot.resolve(segment.path).removeprefix("file://")).unlink()
    error = _error(lambda: _feed(spark, config, name, startingVersion=str(first)).collect())
    assert "DataFileMissing" in error and f"version {gone} of {name}" in error and "failOnDataLoss" in error
    kept = _changes(_feed(spark, config, name, startingVersion=str(first), failOnDataLoss="false"))
    assert [(r[0], r[3], r[4]) for r in kept] == [(0, "insert", first), (1, "insert", first)]


def test_a_position_pruned_away_is_version_expired_unless_fail_on_data_loss_is_false(
    spark: SparkSession, config: Config, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    """A stream stopped at version P, then the log pruned past P and the old key frames vacuumed:
    the restart from the checkpoint is ``VersionExpired`` naming the oldest readable version; with
    ``failOnDataLoss=false`` it resumes there. A batch read of the pruned range is refused too."""
    pconfig = materializer_config(config, private_redis.url, tmp_path / "warehouse", every=2)
    ns, pattern = namespace()
    name = f"{ns}.pruned"
    catalog = Catalog(pconfig)
    table = catalog.create_table(name)
    model = Model(table)
    checkpoint = str(tmp_path / "checkpoint")

    def run(sink: Batches, where: str, **options: str) -> StreamingQuery:
        return run_to_end(
            lambda: (
                _feed(spark, pconfig, name, stream=True, startingVersion="1", **options)
                .writeStream.foreachBatch(sink)
                .option("checkpointLocation", where)
                .trigger(availableNow=True)
                .start()
            )
        )

    with running_materializer(pconfig, pattern) as service:
        stopped_at = model.append(2, "a")
        run(Batches(), checkpoint)
        for _ in range(6):
            model.append(1, "b")
        table.set_properties({HISTORY_VERSIONS_PROPERTY: "4"})
        wait_for_head(tables_of(catalog).redis, name, table.head_offset())  # type: ignore[arg-type]
        assert service.writer is not None and service.writer.drain(timeout_s=60)
        pruned = table.prune_log(retain_versions=2)
        assert pruned.marker_version is not None
        wait_for_head(tables_of(catalog).redis, name, pruned.marker_version)  # type: ignore[arg-type]
        assert service.writer.drain(timeout_s=60)
    _alter(pconfig, TableName.parse(name).topic, AGGRESSIVE_CLEANER)
    time.sleep(0.5)
    model.append(1, "a")
    wait_compacted_away(pconfig, TableName.parse(name), pruned.plan.prune_point)
    vacuum(reader_of(table), grace_ms=0, ignore_leases=True)
    files = reader_of(table).files
    assert files is not None
    oldest = files.oldest_readable()
    assert oldest is not None and oldest > stopped_at

    error = _error(lambda: run(Batches(), checkpoint))
    assert "VersionExpired" in error and f"after version {stopped_at}" in error
    assert f"the oldest readable version is {oldest}" in error and "failOnDataLoss=false" in error
    resumed = Batches()
    run(resumed, checkpoint, failOnDataLoss="false")
    versions = {r[4] for r in resumed.changes()}
    assert versions and min(versions) > oldest and max(versions) == table.head_offset()

    error = _error(lambda: _feed(spark, pconfig, name, startingVersion="1").collect())
    assert "VersionExpired" in error
    table.close()
