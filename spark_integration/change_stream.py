"""``spark.readStream.format("segcat").option("readChangeFeed", "true")``: the change feed as a stream.

Each micro-batch holds the changes of whole versions, in version order; a version's rows are
its deletes and inserts (``change_feed``). Where to start (used only when the checkpoint has no
offset): ``startingVersion`` N (the changes of N and after) or ``latest`` (the changes after the
head at start), ``startingTimestamp`` (the first version at or after it); default, as Delta's
Change Data Feed: the table at the head as one initial snapshot of inserts (``_commit_version``
= the head), then the changes after it. The snapshot is the only thing split across
batches (by files: it may be the whole table); versions never are.

Offsets (JSON, string keys, plain ints): ``{"version": V}`` = every accepted version ≤ V emitted;
``{"version": S, "snapshot": n}`` = the first n files of the initial snapshot at S emitted;
``{"start": "snapshot" | "latest"}`` = the first batch's start before the head it stands for is
known. The head is decided when the first batch is planned and then journaled in that batch's
end offset, so a restart that plans the first batch again reads the same snapshot.

Admission: ``maxFilesPerTrigger`` (default 1,000) and ``maxBytesPerTrigger``, soft (at least one
version per batch, whole versions; files of the snapshot one by one), honoured under
``Trigger.AvailableNow`` (up to the head when the query started); ``Trigger.Once`` reads all.

How far to look at each trigger, the planner's leases (taken through Redis, released on commit,
stop or SIGTERM) and the Kafka/Redis fallbacks are the version stream's (``version_stream``),
which this reader extends. **Decision — what the lease covers.** The planner leases the version
before the batch's first version while the batch is planned and read (vacuum keeps every file of
every version at or after a leased one: the files the batch's versions drop and add), and on
``commit`` moves the lease to the batch's end, the next batch's start: a stopped-and-restarted
query finds its position's files unless the lease expired (its TTL) and vacuum ran meanwhile.

**Decision — failOnDataLoss.** A position whose versions were pruned from the log and its
archives (``VersionExpired``) or a file vacuumed away (``DataFileMissing``) fails the query with
the error naming the version, as Delta does by default. With ``failOnDataLoss=false`` the stream
resumes at the oldest version still readable, or skips the missing file, after a warning.

**Decision — schema changes.** The stream reads with the table's schema at the head when the
query starts (Spark fixes a source's schema then); a version whose files add a column, or change a type to one
that schema cannot hold, fails the stream with ``IncompatibleSchema`` naming the version; the
query restarted from its checkpoint reads with the new schema (older files: the new columns
null), as Delta asks.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxFiles

from segcat import IncompatibleSchema, VersionExpired, load_catalog
from segcat.catalog.errors import LogPruned
from segcat.catalog.protocol import spark_types
from segcat.catalog.read.changes import VersionFiles
from segcat.spark_integration.change_feed import plan_partitions, read_partition, reads_of, snapshot_version
from segcat.spark_integration.change_options import FeedOptions
from segcat.spark_integration.read_options import SourceOptions
from segcat.spark_integration.stream_planning import Budget, TrackingFollower
from segcat.spark_integration.version_stream import VersionStreamReader

log = logging.getLogger("segcat.spark.changes")

Offset = dict[str, Any]


class ChangeStreamReader(VersionStreamReader):
    """The change feed's stream reader: the version stream's planning, with the feed's offsets,
    admission and partitions (module docstring)."""

    def __init__(
        self, options: SourceOptions, feed: FeedOptions, schema: pa.Schema, schema_version: int
    ) -> None:
        super().__init__(options)
        self._feed = feed
        self._schema = schema
        self._schema_version = schema_version
        """The version whose schema ``schema`` is: a later version that changes it fails the stream."""

    # ------------------------------------------------------------------ the follower

    def _follow(self) -> TrackingFollower:
        if self._follower is None:
            self._follower = TrackingFollower(self._options.config(), self._options.name, schemas=True)
        assert isinstance(self._follower, TrackingFollower)
        return self._follower

    def _head(self) -> int:
        """The version the feed starts from or stops at: the head now, or Trigger.AvailableNow's."""
        return self._target if self._target is not None else self._follow().last_accepted()

    def _changes_after(self, after: int, upto: int | None) -> tuple[int, list[VersionFiles]]:
        """(the position read from, the versions in (it, ``upto``]): ``after``, unless its versions
        are gone and ``failOnDataLoss=false`` moves it to the oldest readable version."""
        try:
            return after, self._judged(after, upto)
        except LogPruned as exc:
            hint = "set failOnDataLoss=false to resume at the oldest readable version"
            if self._feed.fail_on_data_loss:
                raise self._expired(after, exc, hint) from None
            oldest = self._oldest_readable()
            if oldest is None or oldest <= after:
                raise self._expired(after, exc, "nothing older is readable") from None
            log.warning(
                "change feed of %s: the versions after %s are gone (%s); resuming after version %s "
                "(failOnDataLoss=false): the changes in between are lost to this stream",
                self._options.table,
                after,
                exc,
                oldest,
            )
            return oldest, self._judged(oldest, upto)

    def _judged(self, after: int, upto: int | None) -> list[VersionFiles]:
        follower = self._follow()
        if upto is not None:
            return follower.files_after(after, upto)
        self._judge_to_end(follower, after)
        return follower.judged_after(after, follower.judged)

    def _oldest_readable(self) -> int | None:
        """The oldest version object storage can still rebuild (None: none, or it does not answer)."""
        try:
            return self._follow().oldest_readable()
        except OSError:
            return None

    def _expired(self, after: int, cause: LogPruned, option_hint: str) -> VersionExpired:
        """The typed error of a position the log and its archives no longer reach."""
        oldest = self._oldest_readable()
        where = (
            f"the oldest readable version is {oldest}" if oldest is not None else "no older version is kept"
        )
        return VersionExpired(
            f"the change feed of {self._options.name} cannot resume after version {after}: the versions "
            f"after it were pruned or vacuumed away ({where}); {option_hint} ({cause})",
            oldest=oldest,
        )

    # ------------------------------------------------------------------ offsets

    def initialOffset(self) -> Offset:
        feed = self._feed
        if feed.starting_latest:
            return {"start": "latest"}
        if feed.starting_ms is not None:
            table = load_catalog(self._options.config()).load_table(self._options.name)
            return {"version": table.resolve_version(as_of=feed.starting_ms - 1)}
        if feed.starting_version is not None:
            return {"version": self._options.starting_after(self._follow())}
        return {"start": "snapshot"}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxFiles(self._feed.max_files)

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._follow().last_accepted()

    def latestOffset(self, start: Offset, limit: ReadLimit) -> Offset:
        budget = Budget.of(limit, self._feed.max_files, self._feed.max_bytes, None)
        pending = start.get("start")
        if pending == "latest":
            return {"version": self._head()}
        if pending == "snapshot":
            return self._snapshot_end(self._head(), 0, budget)
        if "snapshot" in start:
            return self._snapshot_end(int(start["version"]), int(start["snapshot"]), budget)
        after = int(start["version"])
        if self._target is not None and after >= self._target:
            return {"version": after}
        base, versions = self._changes_after(after, self._target)
        taken = budget.take(reads_of(vf) for vf in versions)
        # ``base`` > ``after``: failOnDataLoss=false moved past lost versions; an (empty) batch
        # journals that, so later triggers do not look for them again
        return {"version": versions[taken - 1].version} if taken else {"version": base}

    def _snapshot_end(self, version: int, done: int, budget: Budget) -> Offset:
        reads = self._follow().snapshot(version).reads
        taken = done + budget.take((read,) for read in reads[done:])
        return {"version": version} if taken >= len(reads) else {"version": version, "snapshot": taken}

    # ------------------------------------------------------------------ batches

    def partitions(self, start: Offset, end: Offset) -> Sequence[InputPartition]:
        if start.get("start") == "latest":
            return []
        upto = int(end["version"])
        if start.get("start") == "snapshot" or "snapshot" in start or "snapshot" in end:
            first = int(start.get("snapshot", 0))
            snapshot = self._follow().snapshot(upto)
            last = int(end["snapshot"]) if "snapshot" in end else len(snapshot.reads)
            self._hold(max(upto, 0))
            return plan_partitions([snapshot_version(snapshot, first, last)], upto)
        after, versions = self._changes_after(int(start["version"]), upto)
        if upto <= after:
            return []
        for vf in versions:
            if vf.version > self._schema_version:
                self._check_schema(vf)
        self._hold(max(after, 0))
        return plan_partitions(versions, max(after, 0))

    def _check_schema(self, vf: VersionFiles) -> None:
        problem = schema_change(vf.schema, self._schema)
        if problem is not None:
            raise IncompatibleSchema(
                f"version {vf.version} of {self._options.table} {problem}; the stream reads with the "
                "schema the table had when the query started: restart the query from its checkpoint "
                "to read the new schema"
            )

    def getCache(self, start: Offset, end: Offset) -> Iterator[tuple[Any, ...]] | None:
        return None  # rows are read from files, on the executors

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self._schema, self._options, self._feed.fail_on_data_loss)

    def commit(self, end: Offset) -> None:
        """The batches up to ``end`` are done: the lease moves to ``end`` (the next batch's start)."""
        upto = int(end["version"])
        if "snapshot" not in end:
            self._hold(max(upto, 0))
            if self._follower is not None:
                self._follow().forget(upto)


def schema_change(version_schema: str | None, read_with: pa.Schema) -> str | None:
    """What in a version's table schema the stream's schema cannot hold (None: nothing)."""
    if version_schema is None:
        return None
    after = spark_types.parse_schema(version_schema)
    if after is None:
        return None
    have = {f["name"].lower(): f for f in spark_types.schema_from_arrow(read_with)["fields"]}
    for field in after["fields"]:
        known = have.get(field["name"].lower())
        if known is None:
            return f"adds column {field['name']!r}"
        if field["type"] != known["type"]:
            try:
                wider = spark_types.widen(field["type"], known["type"], field["name"])
            except spark_types.Conflict:
                wider = None
            if wider != known["type"]:
                return (
                    f"changes column {field['name']!r} to {spark_types.simple_string(field['type'])} "
                    f"(the stream reads {spark_types.simple_string(known['type'])})"
                )
    return None
