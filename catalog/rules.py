"""The deterministic rules of DESIGN §4: judge a commit at offset o, apply it if accepted.

This is the only module that changes a ``TableState``. It does no I/O and reads no
clock, so writers, the materializer and readers that feed it the same log reach the
same verdicts and the same state at every version.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections import OrderedDict
from dataclasses import dataclass
from enum import StrEnum

from catalog import codec
from catalog.errors import DecodeError
from catalog.model import ColumnStats, ColumnType, Commit, Isolation, LogRecord, Operation, Segment, Tombstone
from catalog.state import DEDUP_WINDOW, DROP_MEMORY, LiveSegment, TableState


class Outcome(StrEnum):
    ACCEPTED = "ACCEPTED"
    DUPLICATE = "DUPLICATE"
    REJECTED = "REJECTED"
    INVALID = "INVALID"
    PRUNED = "PRUNED"
    """A null-value record: a pruning tombstone for an old commit key (DESIGN §7)."""


class Rule(StrEnum):
    DUPLICATE_COMMIT = "1-duplicate-commit"
    MALFORMED = "2-malformed"
    CONCURRENT_DROP = "3-concurrent-drop"
    CONCURRENT_DELETE = "3b-rewrite-after-concurrent-delete"
    DUPLICATE_SEGMENT = "4-duplicate-segment"
    CONCURRENT_APPEND = "5-concurrent-append-in-replace-scope"
    CONCURRENT_SCHEMA_CHANGE = "6-concurrent-schema-change"


@dataclass(frozen=True, slots=True)
class Verdict:
    outcome: Outcome
    offset: int
    commit_id: str | None = None
    rule: Rule | None = None
    detail: str = ""
    conflicting_version: int | None = None
    original_version: int | None = None
    """For DUPLICATE: the version the commit was first accepted at."""

    @property
    def accepted(self) -> bool:
        return self.outcome is Outcome.ACCEPTED


MAX_ID_LENGTH = 512
MAX_PREDICATE_LENGTH = 16_384
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_INT64 = (-(2**63), 2**63 - 1)
_STAT_TYPES: dict[ColumnType, tuple[type, ...]] = {
    ColumnType.INT: (int,),
    ColumnType.FLOAT: (float, int),
    ColumnType.STRING: (str,),
    ColumnType.DATE: (dt.date,),
    ColumnType.TIMESTAMP: (dt.datetime,),
    ColumnType.BOOLEAN: (bool,),
    ColumnType.BINARY: (bytes,),
}


# ---------------------------------------------------------------------------- validation


def _check_text(value: str, what: str, limit: int = MAX_ID_LENGTH) -> str | None:
    if not value:
        return f"{what} is empty"
    if len(value) > limit:
        return f"{what} is longer than {limit} characters"
    if _CONTROL.search(value):
        return f"{what} contains control characters"
    return None


def _check_path(path: str) -> str | None:
    problem = _check_text(path, "segment path", 4096)
    if problem:
        return problem
    if _URI.match(path):
        return None
    if path.startswith("/") or "\\" in path:
        return f"segment path {path!r} must be relative to the table root or an absolute URI"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return f"segment path {path!r} has empty, '.' or '..' components"
    return None


def _check_segment(segment: Segment) -> str | None:
    problem = _check_text(segment.segment_id, "segment_id") or _check_path(segment.path)
    if problem:
        return problem
    if segment.partition is not None and (p := _check_text(segment.partition, "partition")):
        return p
    if segment.size_bytes < 0 or segment.row_count < 0:
        return f"segment {segment.segment_id}: negative size_bytes or row_count"
    seen: set[str] = set()
    for stats in segment.stats:
        if stats.column in seen:
            return f"segment {segment.segment_id}: duplicate stats for column {stats.column!r}"
        seen.add(stats.column)
        if problem := _check_stat_types(stats):
            return f"segment {segment.segment_id}: {problem}"
        if stats.null_count is not None and not 0 <= stats.null_count <= segment.row_count:
            return f"segment {segment.segment_id}: null_count of {stats.column!r} out of range"
        if stats.min is not None and stats.max is not None:
            try:
                if stats.min > stats.max:  # type: ignore[operator]
                    return f"segment {segment.segment_id}: min > max for column {stats.column!r}"
            except TypeError:
                return f"segment {segment.segment_id}: min and max of {stats.column!r} differ in type"
    if segment.bloom is not None and (segment.bloom.num_hashes < 1 or not segment.bloom.bits):
        return f"segment {segment.segment_id}: empty Bloom filter"
    return None


def _check_stat_types(stats: ColumnStats) -> str | None:
    """min/max must hold the type the column claims (and INT must fit a signed 64-bit long)."""
    allowed = _STAT_TYPES.get(stats.type)
    for value in (stats.min, stats.max):
        if value is None or allowed is None:
            continue
        wrong_bool = isinstance(value, bool) and stats.type is not ColumnType.BOOLEAN
        wrong_datetime = isinstance(value, dt.datetime) and stats.type is ColumnType.DATE
        if not isinstance(value, allowed) or wrong_bool or wrong_datetime:
            return f"stats of {stats.column!r} hold a {type(value).__name__}, not {stats.type.value}"
        if stats.type is ColumnType.INT and not _INT64[0] <= value <= _INT64[1]:  # type: ignore[operator]
            return f"INT stats of {stats.column!r} do not fit in 64 bits"
    return None


def _check_json(value: str | None, what: str) -> str | None:
    if value is None:
        return None
    try:
        json.loads(value)
    except ValueError:
        return f"{what} is not valid JSON"
    return None


def malformation(commit: Commit, offset: int, table: str) -> str | None:
    """Why ``commit`` breaks the protocol's field rules (rule 2), or None if it does not."""
    if commit.table != table:
        return f"commit is for table {commit.table!r}, not {table!r}"
    if not _UUID.fullmatch(commit.commit_id):
        return f"commit_id {commit.commit_id[:60]!r} is not a UUID in canonical lowercase form"
    if commit.operation is Operation.UNKNOWN:
        return "unknown operation (written by a newer protocol version)"
    if not -1 <= commit.base_version < offset:
        return f"base_version {commit.base_version} is not in [-1, {offset})"
    if problem := _check_text(commit.writer_id, "writer_id"):
        return problem
    add_ids = [s.segment_id for s in commit.adds]
    if len(set(add_ids)) != len(add_ids):
        return "the same segment_id is added twice"
    if len(set(commit.drops)) != len(commit.drops):
        return "the same segment_id is dropped twice"
    if set(add_ids) & set(commit.drops):
        return "a segment is both added and dropped"
    for segment in commit.adds:
        if problem := _check_segment(segment):
            return problem
    for drop in commit.drops:
        if problem := _check_text(drop, "dropped segment_id"):
            return problem
    for tomb in commit.tombstones:
        if problem := _check_text(tomb.predicate, "tombstone predicate", MAX_PREDICATE_LENGTH):
            return problem
    for key, value in commit.table_properties.items():
        if problem := _check_text(key, "table property key") or (
            None if value is None else _check_text(value, "table property value", MAX_PREDICATE_LENGTH)
        ):
            return problem
    for scope in commit.replace_scope:
        if problem := _check_text(scope, "replace_scope partition"):
            return problem
    if problem := _check_json(commit.schema, "schema"):
        return problem
    return _operation_malformation(commit)


def _operation_malformation(commit: Commit) -> str | None:
    op = commit.operation
    changes_data = bool(commit.adds or commit.drops or commit.tombstones)
    if op is Operation.APPEND and (commit.drops or commit.tombstones):
        return "APPEND may only add segments"
    if op is Operation.APPEND and not commit.adds:
        return "APPEND adds no segment"
    if op is Operation.COMPACT and (not commit.drops or commit.tombstones):
        return "COMPACT must drop segments and carries no tombstones"
    if op is Operation.DELETE and not (commit.drops or commit.tombstones):
        return "DELETE must drop segments or carry tombstones"
    if op is Operation.SET_PROPERTIES and (changes_data or not commit.table_properties or commit.schema):
        return "SET_PROPERTIES changes table properties only"
    if op is Operation.SET_SCHEMA and (changes_data or commit.schema is None):
        return "SET_SCHEMA carries a schema and no data changes"
    if op is Operation.REPLACE and commit.replace_scope:
        scope = set(commit.replace_scope)
        outside = [s.segment_id for s in commit.adds if s.partition not in scope]
        if outside:
            return f"REPLACE adds segment {outside[0]!r} outside its replace_scope"
    if op is not Operation.REPLACE and commit.replace_scope:
        return "replace_scope is only meaningful for REPLACE"
    return None


# ---------------------------------------------------------------------------- judging


def judge(state: TableState, offset: int, commit: Commit) -> Verdict:
    """The verdict on ``commit`` at ``offset`` given ``state`` = S(offset-1). Pure."""
    cid = commit.commit_id
    original = state.recent_commits.get(cid)
    if original is not None:
        return Verdict(
            Outcome.DUPLICATE,
            offset,
            cid,
            Rule.DUPLICATE_COMMIT,
            f"commit already accepted at version {original}",
            original,
            original,
        )
    problem = malformation(commit, offset, state.table)
    if problem:
        return Verdict(Outcome.INVALID, offset, cid, Rule.MALFORMED, problem)
    for drop in commit.drops:
        if drop not in state.segments:
            dropped_at = state.recently_dropped.get(drop)
            why = f"already dropped at version {dropped_at}" if dropped_at is not None else "not live"
            return Verdict(
                Outcome.REJECTED,
                offset,
                cid,
                Rule.CONCURRENT_DROP,
                f"dropped segment {drop!r} is {why}",
                dropped_at,
            )
    if commit.drops and commit.adds and state.last_tombstone_version > commit.base_version:
        return Verdict(
            Outcome.REJECTED,
            offset,
            cid,
            Rule.CONCURRENT_DELETE,
            "a soft delete was accepted after base_version; rewritten data would bring deleted rows back",
            state.last_tombstone_version,
        )
    if commit.operation is Operation.REPLACE and commit.replace_scope:
        scope = set(commit.replace_scope)
        for drop in commit.drops:
            if state.segments[drop].segment.partition not in scope:
                return Verdict(
                    Outcome.INVALID,
                    offset,
                    cid,
                    Rule.MALFORMED,
                    f"REPLACE drops segment {drop!r} outside its replace_scope",
                )
    for segment in commit.adds:
        live = state.segments.get(segment.segment_id)
        if live is not None:
            return Verdict(
                Outcome.REJECTED,
                offset,
                cid,
                Rule.DUPLICATE_SEGMENT,
                f"segment {segment.segment_id!r} is already live",
                live.added_version,
            )
    if commit.operation is Operation.REPLACE and commit.isolation is Isolation.SERIALIZABLE:
        conflict = _scope_touched_after(state, commit)
        if conflict is not None:
            return Verdict(
                Outcome.REJECTED,
                offset,
                cid,
                Rule.CONCURRENT_APPEND,
                "a commit after base_version touched the replace scope",
                conflict,
            )
    if commit.schema is not None and state.schema_version > commit.base_version:
        return Verdict(
            Outcome.REJECTED,
            offset,
            cid,
            Rule.CONCURRENT_SCHEMA_CHANGE,
            "the schema changed after base_version",
            state.schema_version,
        )
    return Verdict(Outcome.ACCEPTED, offset, cid)


def _scope_touched_after(state: TableState, commit: Commit) -> int | None:
    base = commit.base_version
    if state.last_tombstone_version > base:
        return state.last_tombstone_version
    if not commit.replace_scope:
        return state.last_data_version if state.last_data_version > base else None
    touched = [state.partition_touched.get(p, -1) for p in commit.replace_scope]
    latest = max(touched)
    return latest if latest > base else None


# ---------------------------------------------------------------------------- applying


def apply(state: TableState, offset: int, timestamp_ms: int, commit: Commit) -> Verdict:
    """Judge ``commit`` at ``offset`` and, if ACCEPTED, fold it into ``state``."""
    if offset <= state.version:
        raise ValueError(f"offset {offset} is not after the state's version {state.version}")
    verdict = judge(state, offset, commit)
    state.version = offset
    if verdict.outcome is Outcome.ACCEPTED:
        _fold(state, offset, timestamp_ms, commit)
    else:
        _count(state, verdict.outcome)
    return verdict


def apply_record(state: TableState, record: LogRecord) -> tuple[Verdict, Commit | None]:
    """Decode a raw log record and apply it; garbage is INVALID and changes nothing."""
    if record.offset <= state.version:
        raise ValueError(f"offset {record.offset} is not after the state's version {state.version}")
    if record.value is None:
        state.version = record.offset
        return Verdict(Outcome.PRUNED, record.offset, _text(record.key)), None
    try:
        commit = codec.decode_commit(record.value)
    except DecodeError as exc:
        return _invalid(state, record, str(exc)), None
    if record.key is None or _text(record.key) != commit.commit_id:
        return _invalid(state, record, "record key is not the commit_id", commit.commit_id), commit
    return apply(state, record.offset, record.timestamp_ms, commit), commit


def _text(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    return raw.decode("utf-8", errors="replace")


def _invalid(state: TableState, record: LogRecord, why: str, cid: str | None = None) -> Verdict:
    state.version = record.offset
    state.invalid += 1
    return Verdict(Outcome.INVALID, record.offset, cid or _text(record.key), Rule.MALFORMED, why)


def _count(state: TableState, outcome: Outcome) -> None:
    if outcome is Outcome.REJECTED:
        state.rejected += 1
    elif outcome is Outcome.INVALID:
        state.invalid += 1
    elif outcome is Outcome.DUPLICATE:
        state.duplicates += 1


def _fold(state: TableState, offset: int, timestamp_ms: int, commit: Commit) -> None:
    segments = state.segments
    for drop in commit.drops:
        gone = segments.pop(drop).segment
        state.live_bytes -= gone.size_bytes
        state.live_rows -= gone.row_count
        state.partition_touched[gone.partition] = offset
        _remember(state.recently_dropped, drop, offset, DROP_MEMORY)
    for segment in commit.adds:
        segments[segment.segment_id] = LiveSegment(segment, offset)
        state.live_bytes += segment.size_bytes
        state.live_rows += segment.row_count
        state.partition_touched[segment.partition] = offset
    if commit.tombstones:
        state.tombstones.extend(Tombstone(t.predicate, offset) for t in commit.tombstones)
        state.last_tombstone_version = offset
    if commit.adds or commit.drops or commit.tombstones:
        state.last_data_version = offset
    if commit.schema is not None:
        state.schema = commit.schema
        state.schema_version = offset
    for key, value in commit.table_properties.items():
        if value is None:
            state.properties.pop(key, None)
        else:
            state.properties[key] = value
    _remember(state.recent_commits, commit.commit_id, offset, DEDUP_WINDOW)
    state.last_accepted_version = offset
    state.last_accepted_timestamp_ms = timestamp_ms
    state.last_commit_id = commit.commit_id
    state.accepted += 1


def _remember(window: OrderedDict[str, int], key: str, offset: int, limit: int) -> None:
    window[key] = offset
    window.move_to_end(key)
    if len(window) > limit:
        del window[next(iter(window))]
