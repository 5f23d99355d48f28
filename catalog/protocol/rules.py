"""The deterministic rules (docs/PROTOCOL.md §4): judge a commit at offset o, apply it if accepted.

They judge a record against the image S(o−1) and hand the accepted commit's delta to the
image (``TableState.apply``, the one fold). No I/O, no clock, so writers, the materializer
and readers that feed them the same log reach the same verdicts and the same image at every
version.

The rules are versioned with the log (``segcat.catalog.protocol.versions``): each record is judged by the
protocol in force before it. Protocol 1 is the rule set segcat had before versioning;
protocol 2 adds the checks marked "v2" below, protocol 3 those marked "v3" (docs/PROTOCOL.md §3a
lists them), and an upgrade *to* 3 or later follows its target's upgrade rules (§3b), whatever
protocol judges it. A well-formed ``UPGRADE_PROTOCOL`` to a
version or feature this code does not know raises ``UnsupportedProtocol``: judging on
with the wrong rules is never an option.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from enum import StrEnum

from segcat.catalog.errors import DecodeError, InvalidPredicate
from segcat.catalog.protocol import codec, lifecycle, locations, versions
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.model import (
    ColumnStats,
    ColumnType,
    Commit,
    Isolation,
    LogRecord,
    Operation,
    Protocol,
    Segment,
)
from segcat.catalog.protocol.predicates import parse_predicate
from segcat.catalog.protocol.state import (
    ALLOWED_LOCATIONS_PROPERTY,
    LOCATION_PROPERTY,
    TableState,
    path_key,
)


class Outcome(StrEnum):
    ACCEPTED = "ACCEPTED"
    DUPLICATE = "DUPLICATE"
    REJECTED = "REJECTED"
    INVALID = "INVALID"
    PRUNED = "PRUNED"
    """A null-value record: a pruning tombstone for an old commit key (docs/PROTOCOL.md §2)."""
    NOTED = "NOTED"
    """A valid ``INTENT`` commit: the image records the write intent; it is not a version (§3c)."""


class Rule(StrEnum):
    DUPLICATE_COMMIT = "1-duplicate-commit"
    MALFORMED = "2-malformed"
    CONCURRENT_DROP = "3-concurrent-drop"
    CONCURRENT_DELETE = "3b-rewrite-after-concurrent-delete"
    DUPLICATE_SEGMENT = "4-duplicate-segment"
    DUPLICATE_PATH = "4b-duplicate-path"
    SEGMENT_ID_REUSED = "4c-dropped-segment-returns"
    COLUMN_TYPE_CHANGE = "4d-column-type-change"
    CONCURRENT_APPEND = "5-concurrent-append-in-replace-scope"
    CONCURRENT_SCHEMA_CHANGE = "6-concurrent-schema-change"
    TABLE_DROPPED = "7-table-dropped"
    TABLE_PURGING = "7b-table-purging"


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


@dataclass(frozen=True, slots=True)
class Prechecked:
    """A commit whose record a writer produced, and where its field rules (rule 2's
    context-free part, ``malformation``) already passed: on table ``table`` at offset
    ``offset`` under protocol ``version``.

    Those rules read only the commit, the table's name, the offset (``base_version`` below it)
    and the protocol, so they pass again at any later offset of the same table while the
    protocol is the same: the judgment of the record skips them then, and nothing else.
    ``commit`` must be what the record decodes to (``codec.round_trips_exactly``).
    """

    commit: Commit
    table: str
    offset: int
    version: int

    def holds(self, state: TableState, offset: int) -> bool:
        """Whether the field rules' pass still stands at ``offset`` on ``state``."""
        return offset >= self.offset and state.table == self.table and state.protocol.version == self.version


OwnRecords = Callable[[LogRecord], Prechecked | None]
"""The writer's own records: a record that is exactly one it produced → that commit, prechecked."""


MAX_ID_LENGTH = 512
MAX_PREDICATE_LENGTH = 16_384
MAX_PATH_LENGTH = 4096
MAX_BLOOM_HASHES = 64
"""v2: a Bloom filter with more hash functions is INVALID (a reader would loop that often per value)."""
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_CONTROL_V2 = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")
"""v2: Unicode general categories Cc (C0, DEL, C1), Zl, Zp and lone surrogates (Cs)."""
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_INT64 = (-(2**63), 2**63 - 1)
_SUPPORTED: set[Protocol] = set()
"""Protocols ``versions.check_supported`` passed: checked once, not for every record."""
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


def _check_text(value: str, what: str, limit: int = MAX_ID_LENGTH, version: int = 1) -> str | None:
    if not value:
        return f"{what} is empty"
    if len(value) > limit:
        return f"{what} is longer than {limit} characters"
    if (_CONTROL_V2 if version >= 2 else _CONTROL).search(value):
        return f"{what} contains control characters"
    return None


def partition_problem(partition: str) -> str | None:
    """What the newest field rules refuse in a partition name (its length, control characters),
    or None: for writers that name the column before the rules refuse the commit."""
    return _check_text(partition, "partition", version=2)


def _check_path_v1(path: str) -> str | None:
    problem = _check_text(path, "segment path", MAX_PATH_LENGTH)
    if problem:
        return problem
    if _URI.match(path):
        return None
    if path.startswith("/") or "\\" in path:
        return f"segment path {path!r} must be relative to the table root or an absolute URI"
    if any(part in ("", ".", "..") for part in path.split("/")):
        return f"segment path {path!r} has empty, '.' or '..' components"
    return None


def _check_path_v2(path: str) -> str | None:
    problem = _check_text(path, "segment path", MAX_PATH_LENGTH, 2)
    if problem:
        return problem
    if locations.is_absolute_uri(path):
        problem = locations.uri_problem(path)
        return None if problem is None else f"segment path {problem}"
    return locations.relative_problem(path)


def _check_segment(segment: Segment, version: int) -> str | None:
    text = _check_text(segment.segment_id, "segment_id", version=version)
    problem = text or (_check_path_v2(segment.path) if version >= 2 else _check_path_v1(segment.path))
    if problem:
        return problem
    if segment.partition is not None and (p := _check_text(segment.partition, "partition", version=version)):
        return p
    if version >= 2 and (p := _check_text(segment.format, "format", version=version)):
        return f"segment {segment.segment_id}: {p}"
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
        if version >= 2 and (problem := _check_stats_v2(stats, segment.row_count)):
            return f"segment {segment.segment_id}: {problem}"
        if stats.min is not None and stats.max is not None:
            try:
                if stats.min > stats.max:  # type: ignore[operator]
                    return f"segment {segment.segment_id}: min > max for column {stats.column!r}"
            except TypeError:
                return f"segment {segment.segment_id}: min and max of {stats.column!r} differ in type"
    bloom = segment.bloom
    if bloom is not None and (bloom.num_hashes < 1 or not bloom.bits):
        return f"segment {segment.segment_id}: empty Bloom filter"
    if bloom is not None and version >= 2:
        if bloom.num_hashes > MAX_BLOOM_HASHES:
            return f"segment {segment.segment_id}: Bloom filter has more than {MAX_BLOOM_HASHES} hashes"
        if p := _check_text(bloom.column, "Bloom filter column", version=version):
            return f"segment {segment.segment_id}: {p}"
    if version >= 2 and (p := _check_json(segment.schema, f"segment {segment.segment_id}: schema")):
        return p
    return None


def _check_stats_v2(stats: ColumnStats, row_count: int) -> str | None:
    """v2: typed stats mean what they say (no NaN bounds, no untyped bounds, NaN counts on floats)."""
    if problem := _check_text(stats.column, "stats column", version=2):
        return problem
    if stats.type is ColumnType.OTHER and (stats.min is not None or stats.max is not None):
        return f"stats of {stats.column!r} are OTHER: they carry no min or max"
    bounds = (stats.min, stats.max)
    if stats.type is ColumnType.FLOAT and any(isinstance(v, float) and math.isnan(v) for v in bounds):
        return f"FLOAT stats of {stats.column!r} hold NaN as min or max (count NaN in nan_count)"
    if stats.nan_count is not None:
        if stats.type is not ColumnType.FLOAT:
            return f"nan_count of {stats.column!r} on a {stats.type.value} column (FLOAT only)"
        if not 0 <= stats.nan_count <= row_count - (stats.null_count or 0):
            return f"nan_count of {stats.column!r} out of range"
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
    except RecursionError:
        return f"{what} nests JSON too deeply"
    return None


def malformation(
    commit: Commit, offset: int, table: str, version: int = versions.LEGACY_VERSION
) -> str | None:
    """Why ``commit`` breaks the field rules of protocol ``version`` (rule 2), or None.

    Context-free: only the commit, its offset and the table's name are looked at
    (``contextual_malformation`` checks what depends on the table's state).
    """
    if commit.table != table:
        return f"commit is for table {commit.table!r}, not {table!r}"
    if not _UUID.fullmatch(commit.commit_id):
        return f"commit_id {commit.commit_id[:60]!r} is not a UUID in canonical lowercase form"
    if commit.operation is Operation.UNKNOWN:
        return "unknown operation (written by a newer protocol version)"
    if not -1 <= commit.base_version < offset:
        return f"base_version {commit.base_version} is not in [-1, {offset})"
    if problem := _check_text(commit.writer_id, "writer_id", version=version):
        return problem
    add_ids = {s.segment_id for s in commit.adds}
    if len(add_ids) != len(commit.adds):
        return "the same segment_id is added twice"
    if commit.drops:  # (no drops: nothing to repeat or to clash with an add)
        if len(set(commit.drops)) != len(commit.drops):
            return "the same segment_id is dropped twice"
        if not add_ids.isdisjoint(commit.drops):
            return "a segment is both added and dropped"
    for segment in commit.adds:
        if problem := _check_segment(segment, version):
            return problem
    for drop in commit.drops:
        if problem := _check_text(drop, "dropped segment_id", version=version):
            return problem
    for tomb in commit.tombstones:
        if problem := _check_text(tomb.predicate, "tombstone predicate", MAX_PREDICATE_LENGTH, version):
            return problem
    for key, value in commit.table_properties.items():
        if problem := _check_text(key, "table property key", version=version):
            return problem
        if value is not None and (
            problem := _check_text(value, "table property value", MAX_PREDICATE_LENGTH, version)
        ):
            return problem
    for scope in commit.replace_scope:
        if problem := _check_text(scope, "replace_scope partition", version=version):
            return problem
    if problem := _check_json(commit.schema, "schema"):
        return problem
    if problem := _protocol_field_malformation(commit):
        return problem
    if problem := lifecycle.field_problem(commit):
        return problem
    if version >= 2 and (problem := _malformation_v2(commit, version)):
        return problem
    return _operation_malformation(commit)


def _protocol_field_malformation(commit: Commit) -> str | None:
    """The UPGRADE_PROTOCOL operation and its ``protocol`` field (every version judges these)."""
    upgrade = commit.operation is Operation.UPGRADE_PROTOCOL
    if commit.protocol is None:
        return "UPGRADE_PROTOCOL carries no protocol" if upgrade else None
    if not upgrade:
        return "only UPGRADE_PROTOCOL carries a protocol"
    if commit.protocol.version < 1:
        return f"protocol version {commit.protocol.version} is not ≥ 1"
    features = commit.protocol.features
    if len(features) > versions.MAX_FEATURES or len(set(features)) != len(features):
        return "protocol features repeat, or there are more than 64"
    for feature in features:
        if problem := _check_text(feature, "protocol feature", version=2):
            return problem
    if commit.adds or commit.drops or commit.tombstones or commit.replace_scope or commit.schema is not None:
        return "UPGRADE_PROTOCOL changes the protocol (and table properties) only"
    return None


def _malformation_v2(commit: Commit, version: int) -> str | None:
    """The field rules protocol 2 adds (docs/PROTOCOL.md §4, "v2"); from protocol 3 (v3) a
    tombstone parses in the grammar exactly, protocol 2 read it leniently (§4a.1)."""
    if len({s.path for s in commit.adds}) != len(commit.adds):
        return "two added segments have the same path"
    types: dict[str, ColumnType] = {}
    for segment in commit.adds:
        for stats in segment.stats:
            if types.setdefault(stats.column, stats.type) is not stats.type:
                return f"added segments disagree on the stats type of column {stats.column!r}"
    for i, tomb in enumerate(commit.tombstones):
        try:
            parse_predicate(tomb.predicate, lenient=version < 3)
        except InvalidPredicate as exc:
            return f"tombstones[{i}]: {exc}"
    if commit.isolation is Isolation.SERIALIZABLE and commit.operation is not Operation.REPLACE:
        return "isolation SERIALIZABLE only applies to REPLACE"
    allowed = commit.table_properties.get(ALLOWED_LOCATIONS_PROPERTY)
    if allowed is not None:
        try:
            locations.parse_allowed(allowed)
        except ValueError as exc:
            return str(exc)
    location = commit.table_properties.get(LOCATION_PROPERTY)
    if location is not None and (problem := locations.location_problem(location)):
        return f"{LOCATION_PROPERTY}: {problem}"
    return _operation_fields_v2(commit)


_V2_FIELDS: dict[Operation, frozenset[str]] = {
    Operation.APPEND: frozenset({"adds"}),
    Operation.COMPACT: frozenset({"adds", "drops"}),
    Operation.REPLACE: frozenset({"adds", "drops", "replace_scope"}),
    Operation.DELETE: frozenset({"adds", "drops", "tombstones"}),
    Operation.SET_PROPERTIES: frozenset({"table_properties"}),
    Operation.SET_SCHEMA: frozenset({"schema"}),
    Operation.UPGRADE_PROTOCOL: frozenset({"protocol", "table_properties"}),
    Operation.INTENT: frozenset(),
}
"""v2: the fields each operation may carry (``properties``, the commit info, goes with any)."""


def _operation_fields_v2(commit: Commit) -> str | None:
    carried = set()
    if commit.adds:
        carried.add("adds")
    if commit.drops:
        carried.add("drops")
    if commit.tombstones:
        carried.add("tombstones")
    if commit.replace_scope:
        carried.add("replace_scope")
    if commit.table_properties:
        carried.add("table_properties")
    if commit.schema is not None:
        carried.add("schema")
    if commit.protocol is not None:
        carried.add("protocol")
    allowed = _V2_FIELDS[commit.operation]
    extra = [] if carried <= allowed else sorted(carried - allowed)
    if extra:
        return f"{commit.operation.value} may not carry {', '.join(extra)}"
    if commit.operation is Operation.REPLACE and not (commit.adds or commit.drops):
        return "REPLACE adds or drops nothing"
    return None


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


def contextual_malformation(state: TableState, commit: Commit) -> str | None:
    """Rule 2 checks that need S(o−1): the protocol's steps, locations and no-op changes."""
    upgrade = commit.protocol if commit.operation is Operation.UPGRADE_PROTOCOL else None
    if upgrade is not None and (problem := _upgrade_malformation(state, upgrade, commit)):
        return problem
    if problem := lifecycle.contextual_problem(
        state.protocol, state.properties, state.location, state.version, commit
    ):
        return problem
    if problem := lifecycle.purge_problem(state.protocol, state.properties, state.purging_version, commit):
        return problem
    if state.protocol.version < 2:
        return None
    location = state.location
    if LOCATION_PROPERTY in commit.table_properties and location is not None:
        return f"{LOCATION_PROPERTY} is fixed when the table is created ({location!r})"
    try:
        allowed = locations.parse_allowed(state.properties.get(ALLOWED_LOCATIONS_PROPERTY))
    except ValueError:
        allowed = ()  # set under protocol 1, when nothing checked it: it allows nothing
    for segment in commit.adds:
        if locations.is_absolute_uri(segment.path) and (
            problem := locations.allowed_problem(segment.path, location, allowed)
        ):
            return problem
    if commit.operation is Operation.SET_PROPERTIES and all(
        state.properties.get(key) == value for key, value in commit.table_properties.items()
    ):
        return "SET_PROPERTIES changes nothing"
    if commit.operation is Operation.SET_SCHEMA and commit.schema == state.schema:
        return "SET_SCHEMA sets the schema the table already has"
    if state.protocol.version >= 3:
        return _contextual_v3(state, commit)
    return None


def _contextual_v3(state: TableState, commit: Commit) -> str | None:
    """v3, step 6: two added segments naming one file under two spellings (their path keys, §2).

    Protocol 2 compared the added paths literally (step 4), so ``data/e1.parquet`` and
    ``file://<root>/data/e1.parquet`` went live together and their rows counted twice."""
    return same_file_added_twice(commit.adds, state.location)


def same_file_added_twice(adds: tuple[Segment, ...], location: str | None) -> str | None:
    """Why two of ``adds`` name one file (equal path keys under ``location``), or None."""
    if len(adds) < 2:
        return None
    # relative paths under one root name one file each: only an absolute URI can alias one
    spelled = any(locations.is_absolute_uri(s.path) for s in adds)
    seen: dict[str, str] = {}
    for segment in adds:
        key = path_key(segment.path, location) if spelled else segment.path
        other = seen.setdefault(key, segment.segment_id)
        if other != segment.segment_id:
            return f"added segments {other!r} and {segment.segment_id!r} name the same file {key!r}"
    return None


def _upgrade_malformation(state: TableState, wanted: Protocol, commit: Commit) -> str | None:
    current = state.protocol
    if wanted.version < current.version:
        return f"protocol versions only go up (the table is at {current.version})"
    if not set(current.features) <= set(wanted.features):
        return "an upgrade keeps every feature the table already uses"
    if wanted.version == current.version and set(wanted.features) == set(current.features):
        return f"the table already is at protocol {current.version} with these features"
    has_location = state.location is not None or LOCATION_PROPERTY in commit.table_properties
    if wanted.version >= 2 and not has_location:
        return f"protocol 2 needs the table's location ({LOCATION_PROPERTY}) recorded"
    recorded = commit.table_properties.get(LOCATION_PROPERTY, state.location)
    if state.location is not None and recorded != state.location:
        return f"{LOCATION_PROPERTY} is already recorded ({state.location!r})"
    if wanted.version >= 3:
        return _upgrade_to_v3(state, wanted, commit)
    return None


def _upgrade_to_v3(state: TableState, wanted: Protocol, commit: Commit) -> str | None:
    """The upgrade rules of a target version ≥ 3 (docs/PROTOCOL.md §3b), judged at any protocol.

    An upgrade records the protocol and, once, the location; nothing else. Protocol 1 and 2 let
    it carry any table property, unchecked by §3c when the feature arrived with it (a drop, a
    log start), and protocol 1 took any text, even null, as the location."""
    extra = sorted(set(commit.table_properties) - {LOCATION_PROPERTY})
    if extra:
        return (
            f"an upgrade to protocol {wanted.version} carries no table property but {LOCATION_PROPERTY} "
            f"({extra[0]!r}: set it with SET_PROPERTIES)"
        )
    if LOCATION_PROPERTY in commit.table_properties:
        location = commit.table_properties[LOCATION_PROPERTY]
        problem = "null is not a location" if location is None else locations.location_problem(location)
        if problem is not None:
            return f"{LOCATION_PROPERTY}: {problem}"
    if versions.has_lifecycle(wanted) and not versions.has_lifecycle(state.protocol):
        held = lifecycle.held_as_text(state.properties)
        if held:
            return (
                f"the table holds {held[0]!r}, set as plain text before it had the feature "
                f"'{versions.LIFECYCLE}': remove it (SET_PROPERTIES with null) before this upgrade"
            )
    return None


def unsupported_upgrade(commit: Commit) -> str | None:
    """For an UPGRADE_PROTOCOL: why this code could not judge the log after it, or None."""
    if commit.operation is not Operation.UPGRADE_PROTOCOL or commit.protocol is None:
        return None
    return versions.unsupported(commit.protocol)


# ---------------------------------------------------------------------------- judging


def judge(state: TableState, offset: int, commit: Commit, prechecked: Prechecked | None = None) -> Verdict:
    """The verdict on ``commit`` at ``offset`` given ``state`` = S(offset-1). Pure.

    Raises ``UnsupportedProtocol`` for a well-formed upgrade to a protocol this code does
    not know (and when ``state`` itself is at such a protocol). ``prechecked`` (of this very
    commit) spares the field rules when its pass still holds; the verdict is the same.
    """
    protocol = state.protocol
    if protocol not in _SUPPORTED:
        versions.check_supported(protocol, state.table, offset)
        _SUPPORTED.add(protocol)  # (a protocol this code judges stays one)
    version = protocol.version
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
    if prechecked is not None and prechecked.commit is commit and prechecked.holds(state, offset):
        problem = None
    else:
        problem = malformation(commit, offset, state.table, version)
    if problem is None and unsupported_upgrade(commit) is not None:
        versions.check_supported(commit.protocol or state.protocol, state.table, offset)
    problem = problem or contextual_malformation(state, commit)
    if problem:
        return Verdict(Outcome.INVALID, offset, cid, Rule.MALFORMED, problem)
    if state.dropped_version >= 0 and state.dropped and (verdict := _judge_dropped(state, offset, commit)):
        return verdict
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
    if version >= 2 and (verdict := _judge_adds_v2(state, offset, commit)) is not None:
        return verdict
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


def _judge_dropped(state: TableState, offset: int, commit: Commit) -> Verdict | None:
    """Step 6b on a dropped table: rule 7 rejects all but the undrop (and, v3, the purge fence);
    v3: rule 7b rejects the undrop once the fence is in (the purge has begun)."""
    cid = commit.commit_id
    if lifecycle.undrops(commit):
        if state.purging_version < 0:
            return None
        return Verdict(
            Outcome.REJECTED,
            offset,
            cid,
            Rule.TABLE_PURGING,
            "the table is being purged: it can no longer be undropped",
            state.purging_version,
        )
    if lifecycle.fences_purge(state.protocol, commit):
        return None
    return Verdict(
        Outcome.REJECTED,
        offset,
        cid,
        Rule.TABLE_DROPPED,
        "the table is dropped (undrop it first: segcat table undrop)",
        state.dropped_version,
    )


def _judge_adds_v2(state: TableState, offset: int, commit: Commit) -> Verdict | None:
    """Rules 4b-4d (protocol 2): a live path, a dropped id or a column's stats type comes back."""
    cid = commit.commit_id
    dropped_here = set(commit.drops)
    location = state.location
    for segment in commit.adds:
        holders = [h for h in state.paths.get(path_key(segment.path, location), ()) if h not in dropped_here]
        if holders:  # the oldest live holder (a protocol-1 log may have left several)
            holder = min(holders, key=lambda h: (state.segments[h].added_version, h))
            return Verdict(
                Outcome.REJECTED,
                offset,
                cid,
                Rule.DUPLICATE_PATH,
                f"path {segment.path!r} is already live as segment {holder!r}",
                state.segments[holder].added_version,
            )
        dropped_at = state.recently_dropped.get(segment.segment_id)
        if dropped_at is not None:
            return Verdict(
                Outcome.REJECTED,
                offset,
                cid,
                Rule.SEGMENT_ID_REUSED,
                f"segment {segment.segment_id!r} was dropped at version {dropped_at}; ids never return",
                dropped_at,
            )
        for stats in segment.stats:
            fixed = state.column_types.get(stats.column)
            if fixed is not None and fixed[0] is not stats.type:
                return Verdict(
                    Outcome.REJECTED,
                    offset,
                    cid,
                    Rule.COLUMN_TYPE_CHANGE,
                    f"stats of column {stats.column!r} are {fixed[0].value} in this table, "
                    f"not {stats.type.value}",
                    fixed[1],
                )
    return None


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


@dataclass(frozen=True, slots=True)
class Applied:
    """One record after judgment: what it was, what the rules said, when the broker took it, and
    for an accepted commit the delta the image applied."""

    verdict: Verdict
    commit: Commit | None
    timestamp_ms: int
    delta: CommitDelta | None = None


def apply(state: TableState, offset: int, timestamp_ms: int, commit: Commit) -> Verdict:
    """Judge ``commit`` at ``offset`` and, if ACCEPTED, fold its delta into ``state``."""
    return apply_commit(state, offset, timestamp_ms, commit)[0]


def apply_commit(
    state: TableState, offset: int, timestamp_ms: int, commit: Commit, prechecked: Prechecked | None = None
) -> tuple[Verdict, CommitDelta | None]:
    """``apply``, also handing out the delta of an accepted commit (with what the image learned)."""
    if offset <= state.version:
        raise ValueError(f"offset {offset} is not after the state's version {state.version}")
    verdict = judge(state, offset, commit, prechecked)
    state.version = offset
    if verdict.outcome is Outcome.ACCEPTED and commit.operation is Operation.INTENT:
        state.note_intent(commit, offset, timestamp_ms)
        return replace(verdict, outcome=Outcome.NOTED), None
    if verdict.outcome is Outcome.ACCEPTED:
        return verdict, state.apply(CommitDelta(offset, timestamp_ms, commit))
    _count(state, verdict.outcome)
    return verdict, None


def apply_record(state: TableState, record: LogRecord, own: OwnRecords | None = None) -> Applied:
    """Decode a raw log record and apply it; garbage is INVALID and changes nothing.

    ``own`` recognises a writer's own records (the very key and value bytes it produced, at the
    offset its delivery report named): such a record is judged by the commit the writer holds,
    which is what it decodes to, instead of decoding it.
    """
    if record.offset <= state.version:
        raise ValueError(f"offset {record.offset} is not after the state's version {state.version}")
    if own is not None and (held := own(record)) is not None:
        verdict, delta = apply_commit(state, record.offset, record.timestamp_ms, held.commit, held)
        return Applied(verdict, held.commit, record.timestamp_ms, delta)
    if record.value is None:
        state.version = record.offset
        return Applied(Verdict(Outcome.PRUNED, record.offset, _text(record.key)), None, record.timestamp_ms)
    try:
        commit = codec.decode_commit(record.value)
    except DecodeError as exc:
        return Applied(_invalid(state, record, str(exc)), None, record.timestamp_ms)
    if record.key is None or _text(record.key) != commit.commit_id:
        verdict = _invalid(state, record, "record key is not the commit_id", commit.commit_id)
        return Applied(verdict, commit, record.timestamp_ms)
    verdict, delta = apply_commit(state, record.offset, record.timestamp_ms, commit)
    return Applied(verdict, commit, record.timestamp_ms, delta)


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
