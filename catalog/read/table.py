"""The read side of a table (internal): ``Tables`` opens, creates and lists tables,
``TableReader`` answers snapshots, history and diffs and administers the table.

The public handle, ``segcat.load_catalog()`` → ``Catalog`` → ``Table``
(``segcat.catalog.client``), composes these with the writer; other packages use them only
where docs/ARCHITECTURE.md lists them as internal users.

Readers look in Redis (the materializer's key frame + deltas), then object storage (key
frame + commit archives), then judge the rest of the log themselves (docs/PROTOCOL.md §6).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import partial

from segcat.catalog.config import Config
from segcat.catalog.errors import (
    ArchiveGap,
    CorruptArchive,
    InvalidArgument,
    InvalidCommit,
    LogPruned,
    MalformedCommit,
    SegcatError,
    ServiceUnavailable,
    TableDropped,
    TablePurging,
    VersionExpired,
    VersionNotFound,
)
from segcat.catalog.log.follower import Follower
from segcat.catalog.log.producer import SharedProducer, write_commit
from segcat.catalog.log.reader import LogReader
from segcat.catalog.log.topics import DEFAULT_MAX_MESSAGE_BYTES, TopicAdmin, TopicInfo
from segcat.catalog.protocol import lifecycle, locations, versions
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.model import Commit, Operation, Protocol
from segcat.catalog.protocol.names import TableName, table_name
from segcat.catalog.protocol.replay import Applied, Listener
from segcat.catalog.protocol.rules import Outcome, Rule
from segcat.catalog.protocol.state import LOCATION_PROPERTY, TableState
from segcat.catalog.protocol.tags import oldest_tag, tags_of
from segcat.catalog.protocol.version_change import VersionChange, change_from_delta
from segcat.catalog.read import creation, log_pruning, lookup, tag_lookup
from segcat.catalog.read.lease import DEFAULT_TTL_S as DEFAULT_LEASE_TTL_S
from segcat.catalog.read.lease import HeldLease, acquire_lease
from segcat.catalog.read.log_pruning import PruneResult
from segcat.catalog.read.snapshot import Snapshot, SnapshotDiff
from segcat.catalog.read.watch import Watcher
from segcat.catalog.storage.frame_view import FrameView
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.table_files import TableFiles


@dataclass(frozen=True)
class TimelineEntry:
    """One judged record and the table's live segments, rows and bytes after it."""

    applied: Applied
    live_count: int
    live_rows: int
    live_bytes: int


@dataclass(frozen=True)
class HistoryEntry:
    version: int
    timestamp_ms: int
    commit: Commit


class Tables:
    """The tables of one cluster, by name: created, opened or listed (one admin client, one
    Redis store and one object store, shared by every ``TableReader`` it opens)."""

    def __init__(self, config: Config | None = None, *, use_redis: bool = True) -> None:
        self.config = config or Config.load()
        self._admin: TopicAdmin | None = None
        self.redis = RedisStore.from_config(self.config) if use_redis else None
        self.store = ObjectStore.from_config(self.config)
        self.producer = SharedProducer.acquire(self.config)
        """One producer for every record its tables write, opened by the first or by a creation
        (``SharedProducer``), and kept until ``close``."""
        self._producer_hold = weakref.finalize(self, self.producer.release)

    @property
    def admin(self) -> TopicAdmin:
        if self._admin is None:
            self._admin = TopicAdmin(self.config)
        return self._admin

    def close(self) -> None:
        """Let go of the shared producer now (not when this object is collected) and of Redis."""
        self._producer_hold()
        if self.redis is not None:
            self.redis.close()

    def create_table(
        self,
        name: str | TableName,
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        location: str | None = None,
    ) -> TableReader:
        """Create the table's topic and record, as its first commit, the protocol and the location.

        ``location`` is where the table's data lives (an absolute path or URI); by default the
        configured warehouse's ``<namespace>/<table>``, made absolute now, once, so no reader
        ever resolves it from its own working directory.
        """
        parsed = table_name(name)
        root = table_root(self.config, parsed) if location is None else location
        if problem := locations.location_problem(root):
            raise InvalidArgument(problem)
        self.producer.start()  # gets its producer id while the topic is created
        info = self.admin.create(parsed, max_message_bytes=max_message_bytes)
        try:
            table = self._open(info)
            commit = creation.creation_commit(parsed, root)
            key, value = creation.record_of(commit)
            landed = self.producer.write(
                parsed.topic, key, value, f"writing commit {commit.commit_id} to {parsed.topic}"
            )
            creation.confirm_creation(table, commit, value, landed)
        except BaseException as exc:  # interrupted too: no topic without its first commit
            self._undo_creation(parsed, exc)
            raise
        return table

    def create_tables(
        self,
        names: Sequence[str | TableName],
        *,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        location_root: str | None = None,
        exist_ok: bool = False,
        progress: creation.Progress | None = None,
    ) -> list[TableReader]:
        """Create many tables, batched (``Catalog.create_tables`` says what happens when)."""
        return creation.create_tables(
            self,
            names,
            max_message_bytes=max_message_bytes,
            location_root=location_root,
            exist_ok=exist_ok,
            progress=progress,
        )

    def _undo_creation(self, name: TableName, exc: BaseException) -> None:
        """No half-created table: a topic whose first commit did not take is deleted again, and
        a typed error says so (or names the topic to delete by hand when that failed too)."""
        try:
            self.admin.delete(name)
        except SegcatError as failed:
            note = (
                f"creating {name} failed and its topic {name.topic} could not be deleted again "
                f"({failed}): delete the topic, then create the table again"
            )
        else:
            note = f"creating {name} failed; its topic was deleted again, nothing was created"
        if isinstance(exc, SegcatError):
            exc.args = (f"{exc} ({note})", *exc.args[1:])

    def open(self, name: str | TableName) -> TableReader:
        """Open an existing table; refuses a misconfigured topic before anything is read."""
        parsed = table_name(name)
        return self._open(self.admin.describe(parsed))

    def open_topic(self, info: TopicInfo) -> TableReader:
        """The reader of the log ``info`` describes (a handle's: that log, even if the name has
        been given to a new table since)."""
        return self._open(info)

    def _open(self, info: TopicInfo) -> TableReader:
        files = TableFiles(self.store, info.name, info.topic_id)
        return TableReader(self.config, info, redis=self.redis, files=files)

    def list_tables(self) -> list[TableName]:
        return self.admin.list_tables()

    def table_root(self, name: str | TableName) -> str:
        return table_root(self.config, table_name(name))


def table_root(config: Config, name: TableName) -> str:
    """The root a table gets under the configured warehouse (a relative directory made absolute).

    Only used when a table is created (then recorded in its log as ``segcat.location``) and
    for protocol-1 tables, which never recorded one.
    """
    return creation.table_root_under(config.warehouse, name)


class TableReader:
    """One table's read side: snapshots at any version or time, history and diffs.

    Snapshots come from the first source that can answer: Redis (key frame + deltas),
    object storage (key frame + commit archives), then Kafka for whatever the
    materializer has not covered yet. Without Redis or object storage, answers are the
    same, only slower. Whatever the sources, a snapshot is of exactly the version asked
    for, and the default is the log's end: a reader always sees the latest commit.
    """

    def __init__(
        self,
        config: Config,
        info: TopicInfo,
        *,
        redis: RedisStore | None = None,
        files: TableFiles | None = None,
    ) -> None:
        self.config = config
        self.info = info
        self.name = info.name
        self.root = table_root(config, info.name)
        """Where data would live by the configured warehouse; the recorded location wins."""
        self.redis = redis
        self.files = files
        self.log_id = info.topic_id
        """Which log this handle reads (the topic id, fixed when the handle opened): key frames,
        archives and Redis values of any other log are never taken (docs/PROTOCOL.md §6)."""

    def _reader(self) -> LogReader:
        return LogReader(self.config, self.name)

    def log_end(self) -> int:
        """The offset of the newest record in the log (-1 for an empty topic): one watermark request."""
        with self._reader() as reader:
            return reader.watermarks()[1] - 1

    def resolve_version(self, version: int | str | None = None, as_of_ms: int | None = None) -> Resolved:
        """The offset bound a snapshot covers: ``version`` (or the version tag ``version`` names),
        the last record ≤ ``as_of_ms``, or the log's end.

        ``InvalidArgument`` for values that can never name a version, ``VersionNotFound`` for
        a version beyond the log's end (it names the head) or a tag the table lacks. A time
        after the last record resolves to the log's end, and the answer says so.
        """
        if version is not None and as_of_ms is not None:
            raise InvalidArgument("give a version or as_of, not both")
        if isinstance(version, str):
            version = self.tag_version(version)
        if version is not None:
            _check_version_argument(version)
        if as_of_ms is not None:
            _check_time_argument(as_of_ms)
        with self._reader() as reader:
            end = reader.watermarks()[1] - 1
            if as_of_ms is None:
                if version is not None and version > end:
                    raise VersionNotFound(
                        f"version {version} of {self.name} does not exist yet: the log ends at offset {end}"
                    )
                return Resolved(end if version is None else version, end)
            first_after = reader.offset_for_time(as_of_ms + 1)
        first_after = self._archived_time_lookup(as_of_ms, first_after)
        if first_after is None:
            note = (
                f"as_of {_format_ms(as_of_ms)} is after the table's last record: "
                f"this is the head as of the log's end (offset {end})"
            )
            return Resolved(end, end, note)
        return Resolved(first_after - 1, end)

    def _archived_time_lookup(self, as_of_ms: int, first_after: int | None) -> int | None:
        """Kafka's time index misses the records pruning removed: when its answer falls inside
        what the archives cover, the archives (which keep every record's broker time) decide."""
        if self.files is None or first_after is None:
            return first_after
        try:
            if first_after > self.files.archived_upto() + 1:
                return first_after  # the records before it are still in Kafka
            archived = self.files.first_after_time(as_of_ms, first_after)
        except (OSError, ArchiveGap, CorruptArchive):
            return first_after
        return first_after if archived is None else archived

    def state(
        self, version: int | None = None, as_of_ms: int | None = None, *, listener: Listener | None = None
    ) -> TableState:
        """Replay the whole log up to ``version`` / ``as_of_ms``; ``listener`` sees every record.

        The slow, always-correct path: what every faster source must agree with.
        """
        bound = self.resolve_version(version, as_of_ms).bound
        if bound < 0:
            return TableState(self.name.qualified)
        with Follower(self.config, self.name, files=self.files) as follower:
            try:
                return follower.catch_up(bound, listener=listener, exact=True)
            except LogPruned as exc:
                raise self._expired(bound) or exc from exc

    def tag_version(self, name: str) -> int:
        """The version tag ``name`` names now (the head's properties: one head lookup)."""
        number = tag_lookup.version_or_tag(
            name, lambda: self.snapshot(include_dropped=True).properties, self.name.qualified
        )
        if not isinstance(number, int):
            raise InvalidArgument(f"a tag name is text, not {type(name).__name__}")
        return number

    def tags(self) -> dict[str, int]:
        """Every tag of the table at its head: name → version, by name."""
        return tags_of(self.snapshot(include_dropped=True).properties)

    def snapshot(
        self,
        version: int | str | None = None,
        as_of_ms: int | None = None,
        *,
        listener: Listener | None = None,
        sources: tuple[str, ...] = ("redis", "object-store", "kafka"),
        stale_ok: bool = False,
        include_dropped: bool = False,
    ) -> Snapshot:
        """The table at ``version`` (any offset ≤ the log's end) or as of a broker timestamp.

        The default is the head as of the log's end, found with one watermark request:
        Redis' key frame and deltas plus whatever the log holds past the materialized head,
        judged here by the same rules. ``stale_ok=True`` (head only) skips that tail and
        answers from the materialized head at once; the snapshot's ``behind`` then says how
        many log records it trails by. ``sources`` narrows the lookup chain (tests, tools).
        A dropped table raises ``TableDropped`` unless ``include_dropped`` (undrop, purge, tools).
        A text ``version`` is a tag name (``tag_lookup``), resolved at the head first.
        """
        if isinstance(version, str):
            version = self.tag_version(version)
        if stale_ok and version is None and as_of_ms is None and "redis" in sources:
            materialized = self._materialized_head()
            if materialized is not None:
                return materialized
        resolved: Resolved | None = None
        if version is not None and as_of_ms is None:
            _check_version_argument(version)
        if version is not None and as_of_ms is None and 0 <= version <= _INT64_MAX:
            bound = version  # a source that reaches it proves it exists: no watermark request
        else:
            resolved = self.resolve_version(version, as_of_ms)
            bound = resolved.bound
            if bound < 0:
                empty = FrameView.from_state(TableState(self.name.qualified))
                return self._snapshot(empty, "kafka", resolved, include_dropped)
        answer = self._lookup(bound, sources, listener, lean=True, version=version, resolved=resolved)
        return self._snapshot(answer.frame, answer.origin, resolved, include_dropped, answer)

    def _lookup(
        self,
        bound: int,
        sources: tuple[str, ...],
        listener: Listener | None,
        *,
        lean: bool,
        version: int | None = None,
        resolved: Resolved | None = None,
    ) -> Answer:
        """The view at offset ``bound`` through the chain, and how it was found. ``lean``: without
        ``segment_avro`` (listing); otherwise a full view (``Segment`` objects come from it)."""
        found: lookup.Found | None = None
        if lean and "redis" in sources and self.redis is not None:
            probe = resolved is None or bound < resolved.log_end  # a version, not the log's end
            found = lookup.from_redis(self.redis, self.name.qualified, bound, probe=probe, log_id=self.log_id)
        if found is None and lean and "object-store" in sources and self.files is not None:
            found = lookup.from_next_keyframe(self.files, bound)
        if found is None and "object-store" in sources and self.files is not None:
            found = lookup.from_object_store(self.files, bound, lean=lean)
        if found is not None and found.frame.offset >= bound:
            return Answer(found.frame, found.origin, found)
        if resolved is None:
            self.resolve_version(version if version is not None else bound)  # VersionNotFound past the end
        if "kafka" not in sources:
            raise VersionNotFound(f"no source among {sources} reaches version {bound} of {self.name}")
        if found is None:
            replayed = self.state(bound, listener=listener)
            return Answer(FrameView.from_state(replayed), "kafka")
        image = lookup.judging_image(found, self.name.qualified)
        tail, last = lookup.kafka_tail(self.config, self.name, image, found.frame.offset, bound)
        frame = found.frame.apply(tail, offset=max(last, found.frame.offset))
        return Answer(frame, found.origin if not tail else f"{found.origin}+kafka", found, tuple(tail))

    def _full_view(self, answer: Answer, offset: int) -> FrameView:
        """The table at ``offset`` with every segment's Avro: rebuilt from what answered the lean
        view (its key frame's Parquet copy and the same commits), else object storage, then Kafka."""
        if answer.found is not None:
            rebuilt = lookup.full_view(answer.found, answer.tail, self.files, offset)
            if rebuilt is not None and rebuilt.offset == offset:
                return rebuilt
        return self._lookup(offset, ("object-store", "kafka"), None, lean=False).frame

    def _expired(self, version: int) -> VersionExpired | None:
        """``VersionExpired`` naming the oldest readable version, when ``version`` is older than it."""
        if self.files is None:
            return None
        try:
            oldest = self.files.oldest_readable()
        except OSError:
            return None
        if oldest is not None and version >= oldest:
            return None
        return VersionExpired(
            f"version {version} of {self.name} is older than the history kept "
            + (f"(the oldest readable version is {oldest})" if oldest is not None else "(none is kept)"),
            oldest=oldest,
        )

    def _snapshot(
        self,
        frame: FrameView,
        origin: str,
        resolved: Resolved | None,
        include_dropped: bool,
        answer: Answer | None = None,
    ) -> Snapshot:
        if not include_dropped and lifecycle.is_dropped(frame.protocol, dict(frame.properties)):
            raise TableDropped(
                f"table {self.name} is dropped; `segcat table undrop {self.name}` brings it back"
            )
        note = resolved.note if resolved is not None else None
        found = answer or Answer(frame, origin)
        return Snapshot(
            frame, self.root, origin=origin, note=note, behind=0, full_view=partial(self._full_view, found)
        )

    def _materialized_head(self) -> Snapshot | None:
        """Redis' head as it is, with how far it trails the log (None: Redis cannot answer)."""
        assert self.redis is not None
        found = lookup.from_redis(self.redis, self.name.qualified, None, log_id=self.log_id)
        if found is None:
            return None
        try:
            behind: int | None = max(self.log_end() - found.frame.offset, 0)
        except ServiceUnavailable:
            behind = None
        answer = partial(self._full_view, Answer(found.frame, found.origin, found))
        return Snapshot(found.frame, self.root, origin=found.origin, behind=behind, full_view=answer)

    def protocol(self) -> Protocol:
        """The protocol (rules version and features) the log is at now."""
        return self.snapshot(include_dropped=True).protocol

    def location(self) -> str:
        """Where the table's data lives: the recorded location, else the configured warehouse's."""
        return self.snapshot(include_dropped=True).root

    def upgrade_protocol(self) -> int:
        """Move the table to this segcat's protocol (an UPGRADE_PROTOCOL commit in the log).

        Records the table's location if the log has none yet (protocol 2 needs it): the
        configured warehouse's root for this table. Returns the version of the upgrade, or
        the current head version when the table already is at this protocol. A table holding
        a reserved lifecycle property set as plain text is refused before anything is written
        (``MalformedCommit``): the upgrade that brings the feature would be INVALID (§3b).
        """
        head = self.snapshot()
        target = versions.new_table_protocol()
        if head.protocol.version >= target.version and set(target.features) <= set(head.protocol.features):
            return head.version
        target = Protocol(
            max(target.version, head.protocol.version),
            tuple(sorted(set(target.features) | set(head.protocol.features))),
        )
        held = () if versions.has_lifecycle(head.protocol) else lifecycle.held_as_text(head.properties)
        if held:
            removal = json.dumps({"operation": "SET_PROPERTIES", "table_properties": {held[0]: None}})
            raise MalformedCommit(
                f"upgrade of {self.name} not sent: the table holds {held[0]!r}, set as plain text before "
                f"it had the feature '{versions.LIFECYCLE}'; remove it first "
                f"(`segcat commit {self.name} -` with {removal}), then upgrade"
            )
        changes: dict[str, str | None] = {} if head.location is not None else {LOCATION_PROPERTY: self.root}
        return self._publish(head, Operation.UPGRADE_PROTOCOL, "upgrade", changes, protocol=target)

    def _publish(
        self,
        head: Snapshot,
        operation: Operation,
        what: str,
        changes: dict[str, str | None],
        protocol: Protocol | None = None,
    ) -> int:
        """One table-administration commit based on ``head``; its version, or why not."""
        commit = Commit(
            commit_id=Commit.new_id(),
            table=self.name.qualified,
            operation=operation,
            base_version=head.offset,
            writer_id=f"segcat-{what}-{os.getpid()}",
            timestamp_ms=int(time.time() * 1000),
            table_properties=changes,
            protocol=protocol,
        )
        offset = write_commit(self.config, self.name, commit).offset
        return self.expect_accepted(commit, offset)

    def expect_accepted(self, commit: Commit, offset: int) -> int:
        """Judge the record at ``offset`` (by reading the table back); its version, or why not."""
        for applied in self.records(offset, offset + 1):
            verdict = applied.verdict
            if applied.commit is not None and applied.commit.commit_id != commit.commit_id:
                raise ServiceUnavailable(
                    f"the record read back at offset {offset} of {self.name} is commit "
                    f"{applied.commit.commit_id}, not {commit.commit_id}: the log changed under the "
                    "writer (its topic re-created?); read the table again before retrying"
                )
            if verdict.outcome is Outcome.ACCEPTED and verdict.commit_id == commit.commit_id:
                return offset
            if verdict.outcome is Outcome.DUPLICATE and verdict.original_version is not None:
                return verdict.original_version
            if verdict.rule is Rule.TABLE_PURGING:
                raise TablePurging(
                    f"table {self.name} is being purged (its purge began at version "
                    f"{verdict.conflicting_version}): it can no longer be undropped"
                )
            raise InvalidCommit(f"{verdict.outcome.value}: {verdict.detail}", version=offset)
        raise ServiceUnavailable(f"the record at offset {offset} of {self.name} was not read back")

    def head_offset(self) -> int:
        """The offset of the newest record (-1 for an empty topic)."""
        return self.log_end()

    def records(self, start: int = 0, end: int | None = None) -> Iterator[Applied]:
        """Every record from ``start`` (before ``end``) with its verdict, in log order.

        Judging starts from the newest key frame before ``start`` (Redis or object storage),
        so listing the tail of a long log does not replay it from offset 0.
        """
        for entry in self.timeline(start, end):
            yield entry.applied

    def timeline(self, start: int = 0, end: int | None = None) -> list[TimelineEntry]:
        """``records``, each with the table's live totals after it (what dashboards plot)."""
        collected: list[TimelineEntry] = []

        def remember(applied: Applied, state: TableState) -> None:
            if applied.verdict.offset >= start:
                collected.append(TimelineEntry(applied, state.live_count, state.live_rows, state.live_bytes))

        with Follower(self.config, self.name, self._image_before(start), files=self.files) as follower:
            upto = follower.log_end() if end is None else end - 1
            try:
                follower.catch_up(upto, listener=remember, exact=True)
            except LogPruned as exc:
                raise self._expired(start) or exc from exc
        return collected

    def _image_before(self, start: int) -> TableState:
        """The rules' (light) image at offset ``start - 1``, or an earlier one the caller replays from."""
        empty = TableState(self.name.qualified)
        if start <= 0:
            return empty
        found: lookup.Found | None = None
        if self.redis is not None:
            found = lookup.from_redis(self.redis, self.name.qualified, start - 1, log_id=self.log_id)
        if found is None and self.files is not None:
            found = lookup.from_object_store(self.files, start - 1)
        if found is None or found.frame.offset >= start:
            return empty
        return lookup.judging_image(found, self.name.qualified)

    def history(self) -> list[HistoryEntry]:
        """The accepted commits, oldest first."""
        return [
            HistoryEntry(a.verdict.offset, a.timestamp_ms, a.commit)
            for a in self.records()
            if a.verdict.outcome is Outcome.ACCEPTED and a.commit is not None
        ]

    # ------------------------------------------------------------------ lifecycle

    def _lifecycle_head(self, what: str) -> Snapshot:
        """The head, dropped or not; ``InvalidArgument`` when the table lacks the lifecycle feature."""
        head = self.snapshot(include_dropped=True)
        if not lifecycle.has_feature(head.protocol):
            raise InvalidArgument(
                f"{what} needs the protocol feature 'lifecycle'; run `segcat table upgrade {self.name}` first"
            )
        return head

    def log_start(self) -> int:
        """The first version still in Kafka (0 until the log is pruned)."""
        return self.snapshot(include_dropped=True).log_start

    def prune_log(
        self,
        *,
        retain_versions: int | None = None,
        retain_age_ms: int | None = None,
        dry_run: bool = False,
    ) -> PruneResult:
        """Cut the Kafka log from its beginning up to the newest key frame the archives cover
        (and no newer than retention allows): null records for the keys, then ``segcat.log.start``."""
        log_pruning.check_retention(retain_versions, retain_age_ms)
        if self.files is None:
            raise InvalidArgument("pruning needs object storage (the history moves there)")
        head = self._lifecycle_head("pruning")
        files = self.files

        def planned(keep_from: int | None) -> log_pruning.PrunePlan:
            return log_pruning.plan_prune(
                self.config,
                self.name,
                files,
                head.log_start,
                retain_versions=retain_versions,
                retain_age_ms=retain_age_ms,
                keep_from=keep_from,
            )

        plan = planned(oldest_tag(head.properties))
        if dry_run or not plan.prunes:
            return PruneResult(plan, None)
        tagged = oldest_tag(self.snapshot(include_dropped=True).properties)
        if tagged is not None and tagged <= plan.prune_point:  # a tag made while planning
            plan = planned(tagged)
            if not plan.prunes:
                return PruneResult(plan, None)
        log_pruning.write_nulls(self.config, self.name, plan.nulls)
        version = self._publish(head, Operation.SET_PROPERTIES, "prune", log_pruning.marker_properties(plan))
        return PruneResult(plan, version)

    def drop(self) -> int:
        """Drop the table: a commit in the log; readers and writers then get ``TableDropped``."""
        head = self._lifecycle_head("drop")
        if head.dropped:
            raise TableDropped(f"table {self.name} is already dropped")
        dropped_at = str(int(time.time() * 1000))
        return self._publish(head, Operation.SET_PROPERTIES, "drop", {lifecycle.DROPPED_PROPERTY: dropped_at})

    def undrop(self) -> int:
        """Bring a dropped table back (before it is purged)."""
        head = self._lifecycle_head("undrop")
        if not head.dropped:
            raise InvalidArgument(f"table {self.name} is not dropped")
        return self._publish(head, Operation.SET_PROPERTIES, "undrop", {lifecycle.DROPPED_PROPERTY: None})

    def lease(self, version: int, ttl_s: float = DEFAULT_LEASE_TTL_S, holder: str | None = None) -> HeldLease:
        """A lease on ``version`` (``with table.lease(v): ...``): vacuum keeps every file it needs
        while held; renewed every third of ``ttl_s``. Needs Redis (``ServiceUnavailable`` on enter)."""
        return acquire_lease(self.redis, self.name, version, ttl_s=ttl_s, holder=holder)

    def watch(self, from_version: int | None = None, *, poll_s: float = 0.5) -> Watcher:
        """Every accepted version after ``from_version`` (default: the current head), gap-free."""
        start = self.snapshot().version if from_version is None else from_version
        return Watcher(
            self.config, self.name, self.redis, self.files, start, poll_s=poll_s, log_id=self.log_id
        )

    def changes(self, after: int, upto: int) -> list[VersionChange]:
        """The accepted versions in (``after``, ``upto``], judged here from the log and the archives:
        what ``watch`` would deliver, without waiting for the materializer."""
        found: list[VersionChange] = []
        if upto <= after:
            return found
        prev = after
        for applied in self.records(after + 1, upto + 1):
            delta = applied.delta
            if applied.verdict.outcome is Outcome.ACCEPTED and delta is not None:
                found.append(change_from_delta(self.name.qualified, prev, delta, "kafka"))
                prev = delta.version
        return found

    def diff(self, from_version: int, to_version: int) -> SnapshotDiff:
        """Segments to load and unload between two versions (both must exist)."""
        return self.snapshot(from_version).diff(self.snapshot(to_version))


@dataclass(frozen=True)
class Answer:
    """A view from the lookup chain and how it was found (what its full view is rebuilt from)."""

    frame: FrameView
    origin: str
    found: lookup.Found | None = None
    tail: tuple[CommitDelta, ...] = ()
    """The accepted commits judged from Kafka after ``found``."""


@dataclass(frozen=True)
class Resolved:
    """What a version / time argument named: the offset bound, the log's end, and a note."""

    bound: int
    log_end: int
    note: str | None = None


_INT64_MAX = 2**63 - 1
"""The largest time in ms a Kafka time lookup takes."""


def _check_version_argument(version: object) -> None:
    if isinstance(version, bool) or not isinstance(version, int):
        raise InvalidArgument(f"a version is an integer offset, not {type(version).__name__} {version!r}")
    if version < -1:
        raise InvalidArgument(f"version {version} is not an offset (versions are ≥ 0; -1 is the empty table)")


def _check_time_argument(as_of_ms: object) -> None:
    if isinstance(as_of_ms, bool) or not isinstance(as_of_ms, int):
        raise InvalidArgument(f"as_of is milliseconds since the epoch, not {type(as_of_ms).__name__}")
    if not 0 <= as_of_ms <= _INT64_MAX - 1:
        raise InvalidArgument(f"as_of {as_of_ms} ms is not a time segcat can look up (≥ 0 since the epoch)")


def _format_ms(ms: int) -> str:
    try:
        return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")
    except (OverflowError, ValueError, OSError):
        return f"{ms} ms"
