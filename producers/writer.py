"""``TableWriter``: produce one commit, learn its verdict by evaluating the rules locally.

Idempotent producer with acks=all; the commit_id is the record key and the idempotency
key, so a retry after a timeout re-sends the very same record and the rules recognise
the duplicate. The writer follows the log to keep its image current (``Follower``), so
judging its own commit is one short fetch of the records since its last catch-up.
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

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from segcat.catalog.config import Config
from segcat.catalog.errors import (
    CommitConflict,
    CommitTooLarge,
    InvalidCommit,
    MalformedCommit,
    ServiceUnavailable,
    TableDropped,
)
from segcat.catalog.log import refusals
from segcat.catalog.log.clients import producer_config
from segcat.catalog.log.follower import Follower
from segcat.catalog.log.topics import TopicAdmin, unreachable_hint
from segcat.catalog.protocol import codec, locations, rules, versions
from segcat.catalog.protocol.commit_types import id_collection, type_problem
from segcat.catalog.protocol.expressions import Predicate
from segcat.catalog.protocol.model import Commit, Isolation, Operation, Protocol, Segment, Tombstone
from segcat.catalog.protocol.names import TableName, table_name
from segcat.catalog.protocol.predicates import to_sql
from segcat.catalog.protocol.replay import Applied, Listener
from segcat.catalog.protocol.rules import Outcome, Rule, Verdict
from segcat.catalog.protocol.state import ALLOWED_LOCATIONS_PROPERTY, TableState
from segcat.catalog.read.table import table_root
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.table_files import TableFiles
from segcat.producers.intent import DEFAULT_INTENT_TTL_S, WriteIntent

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


def default_writer_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


class TableWriter:
    """Publishes commits to one table and returns their versions (or raises why not)."""

    def __init__(
        self,
        config: Config,
        table: str | TableName,
        *,
        writer_id: str | None = None,
        on_applied: Listener | None = None,
        from_keyframe: bool = True,
    ) -> None:
        """Open ``table`` for writing; ``on_applied`` sees every record the writer's image applies.

        The image starts from the newest valid key frame on object storage when there is one
        (``from_keyframe``), so opening a writer on a long log does not replay it from offset 0.
        """
        self.name = table_name(table)
        self._on_applied = on_applied
        self.config = config
        self.writer_id = writer_id or default_writer_id()
        info = TopicAdmin(config).describe(self.name)
        self.max_message_bytes = info.max_message_bytes
        self._producer = Producer(producer_config(config, info.max_message_bytes))
        files = TableFiles(ObjectStore.from_config(config), self.name) if from_keyframe else None
        self._follower = Follower.from_keyframe(config, self.name, files, full=True)
        self._caught_up = False
        """Whether the image has read the log's end at least once (before that it is a key frame's)."""
        self._verdicts: dict[str, Verdict] = {}
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._intents: list[WriteIntent] = []

    # ------------------------------------------------------------------ lifecycle

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Abort the intents still open (a job that never committed), then close the clients."""
        for intent in list(self._intents):
            intent.abort()
        self._producer.flush(self.config.request_timeout_s)
        self._follower.close()

    # ------------------------------------------------------------------ state

    @property
    def state(self) -> TableState:
        """The writer's image as of its last catch-up (call ``refresh`` for the head)."""
        return self._follower.state

    def refresh(self) -> TableState:
        """Catch the image up with the log's end (refuses a protocol this segcat does not know)."""
        state = self._follower.catch_up(listener=self._listen)
        self._caught_up = True
        return state

    def _listen(self, applied: Applied, state: TableState) -> None:
        cid = applied.verdict.commit_id
        if cid is not None and cid in self._pending:
            self._verdicts.setdefault(cid, applied.verdict)
        if self._on_applied is not None:
            self._on_applied(applied, state)

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
                commit_id=Commit.new_id(),
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
        """Publish ``commit``; return its version, or raise ``CommitConflict`` / ``InvalidCommit``.

        Sending the same commit again (same commit_id) returns the original version.
        """
        with self._lock:
            return self._commit(commit, attempts)

    def _commit(self, commit: Commit, attempts: int) -> int:
        problem = type_problem(commit)
        if problem:
            raise MalformedCommit(f"commit not sent: {problem}")
        if not self._caught_up:
            self.refresh()  # judge the first commit on the table as it is, not on a key frame's image
        if commit.base_version > self.state.version:
            self.refresh()  # the caller may have read further than this writer's image
            if commit.base_version > self.state.version:
                raise MalformedCommit(
                    f"commit not sent: base_version {commit.base_version} is beyond the head of "
                    f"{self.name} (the log ends at offset {self.state.version})"
                )
        known = self.state.recent_commits.get(commit.commit_id)
        if known is not None:
            return known
        self._prejudge(commit)
        value = codec.encode_commit(commit)
        key = commit.commit_id.encode()
        if len(value) + len(key) + RECORD_OVERHEAD > self.max_message_bytes:
            raise CommitTooLarge(
                f"commit is {len(value):,} bytes encoded; the topic {self.name.topic} accepts at most "
                f"{self.max_message_bytes:,} (max.message.bytes): split it into several commits"
            )
        cid = commit.commit_id
        self._pending.add(cid)
        try:
            offset = self._produce_with_retry(key, value, cid, attempts)
            if offset is None:  # a retry found our earlier attempt already in the log
                return self.state.recent_commits[cid]
            self._follower.catch_up(offset, listener=self._listen)
            verdict = self._verdicts.get(cid)
            if verdict is None:
                raise ServiceUnavailable(f"record at offset {offset} was not seen while catching up")
            return self._outcome(verdict)
        finally:
            self._pending.discard(cid)
            self._verdicts.pop(cid, None)

    def _prejudge(self, commit: Commit) -> None:
        """Judge ``commit`` on this writer's image before sending it: refuse what cannot win.

        The image only moves forward, and an INVALID commit is INVALID at any offset, so
        these never reach the log. A conflict the image already shows is raised as
        ``CommitConflict`` with ``version=None`` (nothing was sent). Beyond the table's own
        protocol, a writer holds every commit to the newest protocol's field rules and keeps
        absolute paths under the table's root (protocol-1 tables, whose rules did not).
        """
        state = self.state
        offset = state.version + 1
        strict = max(state.protocol.version, versions.CURRENT_VERSION)
        problem = rules.malformation(commit, offset, self.name.qualified, strict) or _outside_root(
            commit, state.location or table_root(self.config, self.name), state
        )
        if problem:
            raise MalformedCommit(f"commit not sent: {problem}")
        verdict = rules.judge(state, offset, commit)
        if verdict.outcome is Outcome.INVALID:
            raise MalformedCommit(f"commit not sent: {verdict.detail}")
        if verdict.outcome is Outcome.REJECTED:
            _refuse_dropped(self.name, verdict)
            raise CommitConflict(
                str(verdict.rule),
                verdict.detail,
                version=None,
                conflicting_version=verdict.conflicting_version,
            )

    def _produce_with_retry(self, key: bytes, value: bytes, cid: str, attempts: int) -> int | None:
        last_error: KafkaError | None = None
        for attempt in range(1, attempts + 1):
            offset, error = self._produce(key, value)
            if offset is not None:
                return offset
            refusals.raise_refusal(error, self.config, f"writing commit {cid} to {self.name.topic}")
            last_error = error
            log.warning("commit %s: delivery failed (attempt %d/%d): %s", cid, attempt, attempts, error)
            try:
                self.refresh()
            except ServiceUnavailable:
                continue
            if cid in self._verdicts or cid in self.state.recent_commits:
                return None if cid in self.state.recent_commits else self._verdicts[cid].offset
        raise ServiceUnavailable(
            f"commit {cid} could not be delivered after {attempts} attempts: {last_error}"
        )

    def _produce(self, key: bytes, value: bytes) -> tuple[int | None, KafkaError | None]:
        result: list[tuple[int | None, KafkaError | None]] = []

        def delivered(err: KafkaError | None, msg: Message) -> None:
            result.append((None, err) if err is not None else (msg.offset(), None))

        doing = f"writing to {self.name.topic}"
        try:
            self._producer.produce(self.name.topic, value=value, key=key, on_delivery=delivered)
            deadline = time.monotonic() + self.config.request_timeout_s + 5
            while not result and time.monotonic() < deadline:
                self._producer.poll(0.05)
        except KafkaException as exc:  # a fatal producer error (e.g. no idempotent-write right)
            refusals.raise_refusal(exc, self.config, doing)
            raise ServiceUnavailable(f"{doing} failed: {exc}; {unreachable_hint(self.config)}") from exc
        if not result:
            return None, KafkaError(KafkaError._MSG_TIMED_OUT)
        return result[0]

    def _outcome(self, verdict: Verdict) -> int:
        if verdict.outcome in (Outcome.ACCEPTED, Outcome.NOTED):
            return verdict.offset
        if verdict.outcome is Outcome.DUPLICATE and verdict.original_version is not None:
            return verdict.original_version
        if verdict.outcome is Outcome.REJECTED:
            _refuse_dropped(self.name, verdict)
            raise CommitConflict(
                str(verdict.rule),
                verdict.detail,
                version=verdict.offset,
                conflicting_version=verdict.conflicting_version,
            )
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
        """A write intent for files written under ``prefix`` (a context manager; see ``producers.intent``).

        Give ``intent_id`` = the commit id the files' footers record (``segcat.commit_id``) and
        vacuum keeps exactly this write's files under the prefix, not every file there."""
        intent = WriteIntent(self, prefix, ttl_s, intent_id=intent_id)
        self._intents.append(intent)
        return intent

    def set_properties(self, changes: Mapping[str, str | None]) -> int:
        return self.commit(self.new_commit(Operation.SET_PROPERTIES, table_properties=changes))

    def set_schema(self, schema_json: str) -> int:
        return self.commit(self.new_commit(Operation.SET_SCHEMA, schema=schema_json))
