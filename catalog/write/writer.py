"""``Writer``: produce commits, learn their verdicts by evaluating the rules locally.

Internal: users write through ``segcat.Table`` (``segcat.catalog.client``), which opens one
``Writer`` on its first write.

Idempotent producer with acks=all; the commit_id is the record key and the idempotency
key, so a retry after a timeout re-sends the very same record and the rules recognise
the duplicate. The writer follows the log to keep its image current (``Follower``), so
judging its own commit is one short fetch of the records since its last catch-up. Many
commits may be in flight (``submit``): ``pipeline.CommitPipeline`` sends them in order and
judges all those delivered with one catch-up, each by its own record.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from types import TracebackType
from typing import Any

from segcat.catalog.config import Config
from segcat.catalog.errors import (
    ColumnTypeConflict,
    CommitConflict,
    CommitTooLarge,
    InvalidArgument,
    InvalidCommit,
    MalformedCommit,
    TableDropped,
)
from segcat.catalog.log.follower import Follower
from segcat.catalog.log.pipeline import DEFAULT_MAX_IN_FLIGHT, CommitFuture, CommitPipeline
from segcat.catalog.log.producer import SharedProducer
from segcat.catalog.log.topics import TopicAdmin, TopicInfo
from segcat.catalog.protocol import codec, locations, rules, versions
from segcat.catalog.protocol.commit_types import id_collection, type_problem
from segcat.catalog.protocol.expressions import Predicate
from segcat.catalog.protocol.model import Commit, Isolation, Operation, Protocol, Segment, Tombstone
from segcat.catalog.protocol.names import TableName, table_name
from segcat.catalog.protocol.predicates import to_sql
from segcat.catalog.protocol.replay import Listener
from segcat.catalog.protocol.rules import Outcome, Prechecked, Rule, Verdict
from segcat.catalog.protocol.state import ALLOWED_LOCATIONS_PROPERTY, TableState
from segcat.catalog.read.table import table_root
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.table_files import TableFiles
from segcat.catalog.write.intent import DEFAULT_INTENT_TTL_S, WriteIntent

log = logging.getLogger("segcat.writer")

RECORD_OVERHEAD = 512
"""Bytes reserved for the record/batch headers when checking a commit against the limit."""

Planner = Callable[[TableState], Commit | None]


def _collection(value: Iterable[Any], what: str) -> tuple[Any, ...]:
    if isinstance(value, str | bytes | Segment | Predicate):
        raise TypeError(f"{what} must be a collection, not a single {type(value).__name__}")
    try:
        return tuple(value)
    except TypeError as exc:
        raise TypeError(f"{what} must be a collection, not {type(value).__name__}") from exc


def _segments(adds: Iterable[Segment]) -> tuple[Segment, ...]:
    items = _collection(adds, "adds")
    for i, item in enumerate(items):
        if not isinstance(item, Segment):
            raise TypeError(f"adds[{i}] must be a Segment, not {type(item).__name__}")
    return items


def _tombstone(predicate: str | Predicate) -> Tombstone:
    if isinstance(predicate, Predicate):
        return Tombstone(to_sql(predicate))
    if not isinstance(predicate, str):
        raise TypeError(f"a tombstone is a predicate (text or expression), not {type(predicate).__name__}")
    return Tombstone(predicate)


def _outside_root(commit: Commit, root: str, state: TableState) -> str | None:
    """Writer policy for every protocol: absolute paths only under the root or allowed locations."""
    try:
        allowed = locations.parse_allowed(state.properties.get(ALLOWED_LOCATIONS_PROPERTY))
    except ValueError:
        allowed = ()
    for segment in commit.adds:
        if locations.is_absolute_uri(segment.path) and (
            problem := locations.allowed_problem(segment.path, root, allowed)
        ):
            return problem
    return None


def _refuse_dropped(name: TableName, verdict: Verdict) -> None:
    if verdict.rule is Rule.TABLE_DROPPED:
        raise TableDropped(
            f"table {name} was dropped at version {verdict.conflicting_version}; "
            f"`segcat table undrop {name}` restores it"
        )


def _rejection(verdict: Verdict, version: int | None) -> CommitConflict | ColumnTypeConflict:
    """The typed error of a REJECTED verdict: a conflict to re-plan, except a column type change
    (rule 4d), which no retry can win."""
    kind = ColumnTypeConflict if verdict.rule is Rule.COLUMN_TYPE_CHANGE else CommitConflict
    return kind(
        str(verdict.rule), verdict.detail, version=version, conflicting_version=verdict.conflicting_version
    )


def _inert_upgrade(commit: Commit) -> str | None:
    """Writer policy: never name a feature at a version that gives it no meaning (docs/PROTOCOL.md
    §3b). The rules accept ``{version 1, features [lifecycle]}`` (protocol 1 did), but the feature
    would do nothing there and every intent would be INVALID."""
    if commit.operation is not Operation.UPGRADE_PROTOCOL or commit.protocol is None:
        return None
    inert = versions.inert_features(commit.protocol)
    if not inert:
        return None
    needs = versions.FEATURE_MIN_VERSION[inert[0]]
    return (
        f"protocol feature {inert[0]!r} means nothing below protocol version {needs}: upgrade to "
        f"version {needs} or later with it (segcat table upgrade)"
    )


def _prechecked(commit: Commit, state: TableState) -> Prechecked | None:
    """``commit`` as its own record will be judged (``_prejudge`` passed it at the next offset of
    ``state``, so its field rules did), or None when its record must be decoded: when decoding
    would not give it back exactly. The held copy has dicts of its own, so a caller changing
    the commit's mappings after ``submit`` cannot make the image differ from the log."""
    if not codec.round_trips_exactly(commit):
        return None
    c = commit  # built here rather than by dataclasses.replace, which costs as much again
    held = Commit(
        commit_id=c.commit_id,
        table=c.table,
        operation=c.operation,
        base_version=c.base_version,
        writer_id=c.writer_id,
        timestamp_ms=c.timestamp_ms,
        adds=c.adds,
        drops=c.drops,
        tombstones=c.tombstones,
        replace_scope=c.replace_scope,
        isolation=c.isolation,
        properties=dict(c.properties),
        table_properties=dict(c.table_properties),
        schema=c.schema,
        protocol=c.protocol,
        intent=c.intent,
    )
    return Prechecked(held, state.table, state.version + 1, state.protocol.version)


class CommitIds:
    """Random (version 4) UUIDs for commit ids, drawn from ``os.urandom`` 256 at a time: one
    system call per id cost a pipelined writer as much as encoding the commit."""

    BATCH = 256

    def __init__(self) -> None:
        self._pool = b""
        self._next = 0
        self._lock = threading.Lock()

    def new(self) -> str:
        with self._lock:
            if self._next >= len(self._pool):
                self._pool, self._next = os.urandom(16 * self.BATCH), 0
            raw = self._pool[self._next : self._next + 16]
            self._next += 16
        return str(uuid.UUID(bytes=raw, version=4))


def default_writer_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class Writer:
    """Publishes commits to one table and returns their versions (or raises why not)."""

    def __init__(
        self,
        config: Config,
        table: str | TableName,
        *,
        writer_id: str | None = None,
        on_applied: Listener | None = None,
        from_keyframe: bool = True,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        producer: SharedProducer | None = None,
        info: TopicInfo | None = None,
        store: ObjectStore | None = None,
    ) -> None:
        """Open ``table`` for writing; ``on_applied`` sees every record the writer's image applies
        (on the writer's judge thread, with the image locked: it must not block on the writer).

        The image starts from the newest valid key frame on object storage when there is one
        (``from_keyframe``), so opening a writer on a long log does not replay it from offset 0.
        ``max_in_flight`` bounds the commits ``submit`` keeps unresolved before it waits.
        Commits go through ``producer`` (default: the one ``config`` shares in this process,
        ``SharedProducer.acquire``), held while the writer is open. ``info`` (the topic as a
        handle described it) and ``store`` (the catalog's object store) spare the writer an admin
        client and a store of its own; the writer is then bound to the log ``info`` names.
        """
        self.name = table_name(table)
        self.config = config
        self.writer_id = writer_id or default_writer_id()
        info = info if info is not None else TopicAdmin(config).describe(self.name)
        self.max_message_bytes = info.max_message_bytes
        self._lock = threading.RLock()
        """Guards the image: held while it changes and while a commit is prejudged and produced."""
        # bound to this topic's log: a key frame or archive of a table that had the name before
        # is never this writer's image (docs/PROTOCOL.md §6, *Which log*)
        files = (
            TableFiles(store or ObjectStore.from_config(config), self.name, info.topic_id)
            if from_keyframe
            else None
        )
        self._follower = Follower.from_keyframe(config, self.name, files, full=True, guard=self._lock)
        self._producer = producer.hold() if producer is not None else SharedProducer.acquire(config)
        self._caught_up = False
        """Whether the image has read the log's end at least once (before that it is a key frame's)."""
        self._intents: list[WriteIntent] = []
        self._ids = CommitIds()
        self._closed = False
        try:
            self._pipeline = CommitPipeline(
                config,
                self.name,
                self._producer,
                self._follower,
                self._lock,
                self._outcome,
                on_applied,
                max_in_flight=max_in_flight,
            )
        except BaseException:
            self._producer.release()
            self._follower.close()
            raise

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> Writer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Abort the intents still open (a job that never committed), wait for the commits in
        flight (failing those still unsettled after the request timeout), then close the clients."""
        if self._closed:
            return
        for intent in list(self._intents):
            intent.abort()
        self._pipeline.close(self.config.request_timeout_s + 5)
        self._closed = True
        self._producer.release()
        self._follower.close()

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> TableState:
        """The writer's image as of its last catch-up (call ``refresh`` for the head)."""
        return self._follower.state

    def refresh(self) -> TableState:
        """Catch the image up with the log's end (refuses a protocol this segcat does not know)."""
        state = self._pipeline.catch_up()
        self._caught_up = True
        return state

    # ------------------------------------------------------------------ commit

    def new_commit(
        self,
        operation: Operation,
        *,
        adds: Iterable[Segment] = (),
        drops: Iterable[str] = (),
        tombstones: Iterable[str | Predicate] = (),
        replace_scope: Iterable[str] = (),
        isolation: Isolation = Isolation.SNAPSHOT,
        properties: Mapping[str, str] | None = None,
        table_properties: Mapping[str, str | None] | None = None,
        schema: str | None = None,
        base_version: int | None = None,
        protocol: Protocol | None = None,
    ) -> Commit:
        """A commit based on the writer's current image (``base_version`` = what it has read).

        Tombstones are predicates in the grammar of docs/PROTOCOL.md §4a, as text or as a
        ``protocol.expressions`` predicate. ``MalformedCommit`` for arguments of the wrong shape
        (a bare string where a collection belongs, a single segment, …); nothing is sent.
        """
        try:
            return Commit(
                commit_id=self._ids.new(),
                table=self.name.qualified,
                operation=operation,
                base_version=self.state.version if base_version is None else base_version,
                writer_id=self.writer_id,
                timestamp_ms=int(time.time() * 1000),
                adds=_segments(adds),
                drops=id_collection(drops, "drops"),
                tombstones=tuple(_tombstone(p) for p in _collection(tombstones, "tombstones")),
                replace_scope=id_collection(replace_scope, "replace_scope"),
                isolation=isolation,
                properties=dict(properties or {}),
                table_properties=dict(table_properties or {}),
                schema=schema,
                protocol=protocol,
            )
        except (TypeError, ValueError) as exc:
            raise MalformedCommit(f"commit not sent: {exc}") from exc

    def commit(self, commit: Commit, *, attempts: int = 3) -> int:
        """Publish ``commit``; return its version, or raise ``CommitConflict`` / ``InvalidCommit``
        (``ColumnTypeConflict`` for rule 4d, which no retry can win).

        Sending the same commit again (same commit_id) returns the original version. Threads
        calling this on one writer share its produce requests and catch-ups (``submit``).
        """
        if self._pipeline.on_judge_thread():  # refuse before sending, not after
            raise InvalidArgument("commit() in a commit future's callback would wait forever: use submit()")
        with self._pipeline.driving():
            return self.submit(commit, attempts=attempts).result()

    def submit(self, commit: Commit, *, attempts: int = 3) -> CommitFuture:
        """Send ``commit`` now and return a future of its version; do not wait for the verdict.

        Many commits may be in flight: they are produced in submit order, each as its own
        record, and judged together by the writer's next catch-up. The future holds the
        version or the error ``commit()`` would raise (``CommitConflict``, ``ColumnTypeConflict``,
        ``InvalidCommit``, ``TableDropped``, ``ServiceUnavailable``, ``NotAuthorized``); what the commit alone
        shows wrong (``MalformedCommit``, ``CommitTooLarge``) is raised here and nothing is
        sent. The commit is prejudged on the image as of now, which does not yet hold the
        commits still in flight: a commit that drops segments added by those must wait for
        their futures. Blocks while ``max_in_flight`` commits are unresolved. A future may be
        settled on the writer's judge thread: its callbacks must not block on this writer.
        """
        problem = type_problem(commit)
        if problem:
            raise MalformedCommit(f"commit not sent: {problem}")
        self._pipeline.check_open()
        if not self._caught_up:
            self.refresh()  # judge the first commit on the table as it is, not on a key frame's image
        if commit.base_version > self.state.version:
            self.refresh()  # the caller may have read further than this writer's image
            if commit.base_version > self.state.version:
                raise MalformedCommit(
                    f"commit not sent: base_version {commit.base_version} is beyond the head of "
                    f"{self.name} (the log ends at offset {self.state.version})"
                )
        self._pipeline.wait_for_room()
        with self._lock:
            cid = commit.commit_id
            if (in_flight := self._pipeline.pending(cid)) is not None:
                return in_flight
            known = self.state.recent_commits.get(cid)
            if known is not None:
                done = CommitFuture()
                done.set_result(known)
                return done
            state = self.state
            try:
                judged = self._prejudge(commit)
            except (CommitConflict, ColumnTypeConflict, TableDropped) as exc:  # a verdict: the future's
                refused = CommitFuture()
                refused.set_exception(exc)
                return refused
            value = codec.encode_commit(commit)
            key = cid.encode()
            if len(value) + len(key) + RECORD_OVERHEAD > self.max_message_bytes:
                raise CommitTooLarge(
                    f"commit is {len(value):,} bytes encoded; the topic {self.name.topic} accepts at most "
                    f"{self.max_message_bytes:,} (max.message.bytes): split it into several commits"
                )
            # an ACCEPTED prejudgment passed the field rules (judge() checks them before the rest)
            held = _prechecked(commit, state) if judged.outcome is Outcome.ACCEPTED else None
            return self._pipeline.send(cid, key, value, attempts, held)

    def _prejudge(self, commit: Commit) -> Verdict:
        """Judge ``commit`` on this writer's image before sending it: refuse what cannot win
        (the verdict of what may be sent: ACCEPTED on the image as of now).

        The image only moves forward, and an INVALID commit is INVALID at any offset, so
        these never reach the log. A conflict the image already shows is raised as
        ``CommitConflict`` with ``version=None`` (nothing was sent). Beyond the table's own
        protocol, a writer holds every commit to the newest protocol's field rules and keeps
        absolute paths under the table's root (protocol-1 tables, whose rules did not), never
        adds one file twice under two spellings (protocol-2 tables, whose rules compared paths
        literally) and never names a feature at a version that gives it no meaning
        (``_inert_upgrade``).
        """
        state = self.state
        offset = state.version + 1
        if problem := _inert_upgrade(commit):
            raise MalformedCommit(f"commit not sent: {problem}")
        strict = max(state.protocol.version, versions.CURRENT_VERSION)
        if strict != state.protocol.version:  # at the table's own protocol, judge() checks exactly this
            problem = rules.malformation(commit, offset, self.name.qualified, strict)
            if problem:
                raise MalformedCommit(f"commit not sent: {problem}")
        verdict = rules.judge(state, offset, commit)
        if verdict.outcome is Outcome.INVALID:
            raise MalformedCommit(f"commit not sent: {verdict.detail}")
        root = state.location or table_root(self.config, self.name)
        if problem := _outside_root(commit, root, state) or rules.same_file_added_twice(commit.adds, root):
            raise MalformedCommit(f"commit not sent: {problem}")
        if verdict.outcome is Outcome.REJECTED:
            _refuse_dropped(self.name, verdict)
            raise _rejection(verdict, None)
        return verdict

    def _outcome(self, verdict: Verdict) -> int:
        if verdict.outcome in (Outcome.ACCEPTED, Outcome.NOTED):
            return verdict.offset
        if verdict.outcome is Outcome.DUPLICATE and verdict.original_version is not None:
            return verdict.original_version
        if verdict.outcome is Outcome.REJECTED:
            _refuse_dropped(self.name, verdict)
            raise _rejection(verdict, verdict.offset)
        raise InvalidCommit(verdict.detail, version=verdict.offset)

    def commit_with_retry(self, plan: Planner, *, max_attempts: int = 10) -> int | None:
        """Plan a commit on the newest state and publish it; re-plan after each conflict.

        ``plan`` returns None when there is nothing left to do (e.g. the segments it wanted
        to compact are gone); then this returns None.
        """
        for attempt in range(1, max_attempts + 1):
            commit = plan(self.refresh())
            if commit is None:
                return None
            try:
                return self.commit(commit)
            except CommitConflict as conflict:
                log.info("attempt %d: %s; re-planning", attempt, conflict)
                if attempt == max_attempts:
                    raise
        return None

    # ------------------------------------------------------------------ helpers

    def append(self, segments: Iterable[Segment], *, properties: Mapping[str, str] | None = None) -> int:
        return self.commit(self.new_commit(Operation.APPEND, adds=segments, properties=properties))

    def append_async(
        self, segments: Iterable[Segment], *, properties: Mapping[str, str] | None = None
    ) -> CommitFuture:
        """``append`` without waiting: the future of its version (see ``submit``). Appends of
        fresh segments never conflict, so any number of them can be in flight at once."""
        return self.submit(self.new_commit(Operation.APPEND, adds=segments, properties=properties))

    def compact(
        self, drops: Iterable[str], adds: Iterable[Segment], *, properties: Mapping[str, str] | None = None
    ) -> int:
        return self.commit(self.new_commit(Operation.COMPACT, adds=adds, drops=drops, properties=properties))

    def replace(
        self,
        adds: Iterable[Segment],
        *,
        scope: Iterable[str] = (),
        isolation: Isolation = Isolation.SNAPSHOT,
        drops: Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> int:
        """Replace the segments of ``scope`` (default drops: every live segment in it)."""
        scope = tuple(scope)
        if drops is None:
            wanted = set(scope)
            drops = [
                sid
                for sid, live in self.state.segments.items()
                if not scope or live.segment.partition in wanted
            ]
        return self.commit(
            self.new_commit(
                Operation.REPLACE,
                adds=adds,
                drops=drops,
                replace_scope=scope,
                isolation=isolation,
                properties=properties,
            )
        )

    def delete(
        self,
        *,
        drops: Iterable[str] = (),
        predicates: Iterable[str | Predicate] = (),
        properties: Mapping[str, str] | None = None,
    ) -> int:
        return self.commit(
            self.new_commit(Operation.DELETE, drops=drops, tombstones=predicates, properties=properties)
        )

    def drop_partitions(
        self, partitions: Iterable[str | None], *, properties: Mapping[str, str] | None = None
    ) -> int | None:
        """Drop whole partitions: one DELETE of every live segment in them (None = the null
        partition). Re-planned on the newest state after a conflict; None when they hold nothing."""
        wanted = set(_collection(partitions, "partitions"))

        def plan(state: TableState) -> Commit | None:
            drops = sorted(sid for sid, live in state.segments.items() if live.segment.partition in wanted)
            if not drops:
                return None
            return self.new_commit(Operation.DELETE, drops=drops, properties=properties)

        return self.commit_with_retry(plan)

    def intent(
        self, prefix: str, *, ttl_s: float = DEFAULT_INTENT_TTL_S, intent_id: str | None = None
    ) -> WriteIntent:
        """A write intent for files written under ``prefix`` (a context manager, ``catalog.write.intent``).

        Give ``intent_id`` = the commit id the files' footers record (``segcat.commit_id``) and
        vacuum keeps exactly this write's files under the prefix, not every file there."""
        intent = WriteIntent(self, prefix, ttl_s, intent_id=intent_id)
        self._intents.append(intent)
        return intent

    def forget_intent(self, intent: WriteIntent) -> None:
        """No longer abort ``intent`` on close (it was handed over: ``WriteIntent.hand_over``)."""
        if intent in self._intents:
            self._intents.remove(intent)

    def set_properties(self, changes: Mapping[str, str | None]) -> int:
        return self.commit(self.new_commit(Operation.SET_PROPERTIES, table_properties=changes))

    def set_schema(self, schema_json: str) -> int:
        return self.commit(self.new_commit(Operation.SET_SCHEMA, schema=schema_json))
