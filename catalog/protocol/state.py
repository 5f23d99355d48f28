"""The table image: everything the rules need to judge the next commit.

A ``TableState`` is the state of one table after every record up to ``version``. The rules
judge each record against it; an accepted commit's ``CommitDelta`` is folded in by
``apply`` (the one fold), non-accepted records only move ``version`` and a counter. It is
exactly what a key frame stores (``to_meta`` / ``from_meta``, the one place that lists how
each field is written), so a replay that starts from a key frame decides every later
commit as a replay from offset 0 would.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any

from segcat.catalog.protocol import lifecycle, locations
from segcat.catalog.protocol.delta import CommitDelta, apply_properties
from segcat.catalog.protocol.model import ColumnType, Commit, Protocol, Segment, Tombstone

DEDUP_WINDOW = 20_000
"""How many recent ACCEPTED commit ids are remembered for DUPLICATE detection (rule 1)."""

DROP_MEMORY = 20_000
"""How many recently dropped segment ids keep the version that dropped them (rule 3's error;
from protocol v2 also rule 4c: a dropped id never returns)."""

LOCATION_PROPERTY = "segcat.location"
"""Table property: the table's root, recorded once when the table is created (protocol v2)."""
ALLOWED_LOCATIONS_PROPERTY = "segcat.locations.allowed"
"""Table property: a JSON array of further absolute URIs segments may live under (protocol v2)."""


@dataclass(frozen=True, slots=True)
class LiveSegment:
    segment: Segment
    added_version: int


@dataclass(frozen=True, slots=True)
class OpenIntent:
    """A write intent in force: who writes under which prefix, until when (broker time, ms)."""

    intent_id: str
    writer_id: str
    prefix: str
    expires_ms: int
    version: int
    """The version that opened or last renewed it."""


@dataclass
class TableState:
    """The image of one table at ``version`` (the last offset applied, -1 = empty)."""

    table: str
    version: int = -1
    last_accepted_version: int = -1
    last_accepted_timestamp_ms: int = -1
    last_commit_id: str | None = None
    segments: dict[str, LiveSegment] = field(default_factory=dict)
    tombstones: list[Tombstone] = field(default_factory=list)
    schema: str | None = None
    schema_version: int = -1
    properties: dict[str, str] = field(default_factory=dict)
    partition_touched: dict[str | None, int] = field(default_factory=dict)
    """Partition → last version whose commit added or dropped a segment in it (rule 5)."""
    last_data_version: int = -1
    """Last version that added/dropped a segment or wrote a tombstone (rule 5, whole table)."""
    last_tombstone_version: int = -1
    recent_commits: OrderedDict[str, int] = field(default_factory=OrderedDict)
    """Recent accepted commit ids → their version, oldest first (rule 1)."""
    recently_dropped: OrderedDict[str, int] = field(default_factory=OrderedDict)
    live_bytes: int = 0
    live_rows: int = 0
    accepted: int = 0
    rejected: int = 0
    invalid: int = 0
    duplicates: int = 0
    protocol: Protocol = field(default_factory=Protocol)
    """The rules version (and features) the next record is judged by; 1 until an UPGRADE_PROTOCOL."""
    column_types: dict[str, tuple[ColumnType, int]] = field(default_factory=dict)
    """Stats column → (type, version that fixed it): the first accepted segment with stats decides."""
    intents: dict[str, OpenIntent] = field(default_factory=dict)
    """Write intents opened and not closed (feature ``lifecycle``); expired ones stay until closed."""
    dropped_version: int = -1
    """The version that dropped the table (``segcat.dropped``), -1 when it is not dropped."""
    dropped_timestamp_ms: int = -1
    """The broker time of the drop's record (-1 when not dropped, or in a key frame written
    before this field: then the log knows it). Retention of a dropped table counts from it."""
    purging_version: int = -1
    """The version of the purge fence (``segcat.purge``, protocol ≥ 3); -1 while none is in."""
    paths: dict[str, list[str]] = field(default_factory=dict, compare=False)
    """``path_key`` of each live segment's path → its segment_id; derived from ``segments`` and the
    location, never stored (rule 4b)."""

    def __post_init__(self) -> None:
        self.index_paths()

    def index_paths(self) -> None:
        """Rebuild ``paths`` from ``segments`` (after loading a key frame or recording a location)."""
        location = self.location
        paths: dict[str, list[str]] = {}
        for sid, live in self.segments.items():
            paths.setdefault(path_key(live.segment.path, location), []).append(sid)
        self.paths = paths

    def stats_types(self) -> dict[str, ColumnType]:
        return {column: kind for column, (kind, _) in self.column_types.items()}

    @property
    def location(self) -> str | None:
        """Where the table's data lives (the ``segcat.location`` property), if recorded."""
        return self.properties.get(LOCATION_PROPERTY)

    @property
    def dropped(self) -> bool:
        """Whether the table is dropped (feature ``lifecycle``; undrop brings it back)."""
        return lifecycle.is_dropped(self.protocol, self.properties)

    @property
    def log_start(self) -> int:
        """The first version still in Kafka: every version before it lives on object storage only."""
        return lifecycle.log_start(self.protocol, self.properties)

    def live_intents(self, now_ms: int) -> list[OpenIntent]:
        """The intents open and not expired at ``now_ms``."""
        return [i for i in self.intents.values() if i.expires_ms > now_ms]

    def copy(self) -> TableState:
        """An independent image: its containers are copied, the immutable values shared."""
        values = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "paths"}
        for name, value in values.items():
            if isinstance(value, dict | list):
                values[name] = type(value)(value)  # OrderedDict stays ordered
        return TableState(**values)

    def apply(self, delta: CommitDelta) -> CommitDelta:
        """Fold one accepted commit in (the only place an image changes); the delta, with what the
        image learned on the way (rows and bytes it changed, the live count after)."""
        version = delta.version
        location = self.location
        judged_at = self.protocol
        before_rows, before_bytes = self.live_rows, self.live_bytes
        for drop in delta.dropped:
            gone = self.segments.pop(drop).segment
            self.live_bytes -= gone.size_bytes
            self.live_rows -= gone.row_count
            self.partition_touched[gone.partition] = version
            self._unindex(path_key(gone.path, location), drop)
            _remember(self.recently_dropped, drop, version, DROP_MEMORY)
        for segment in delta.added:
            self.segments[segment.segment_id] = LiveSegment(segment, version)
            self.live_bytes += segment.size_bytes
            self.live_rows += segment.row_count
            self.partition_touched[segment.partition] = version
            self.paths.setdefault(path_key(segment.path, location), []).append(segment.segment_id)
            for stats in segment.stats:
                self.column_types.setdefault(stats.column, (stats.type, version))
        commit = delta.commit
        if commit.tombstones:
            self.tombstones.extend(delta.tombstones)
            self.last_tombstone_version = version
        if commit.adds or commit.drops or commit.tombstones:  # delta.changes_data
            self.last_data_version = version
        if commit.schema is not None:
            self.schema = commit.schema
            self.schema_version = version
        if commit.table_properties:
            apply_properties(self.properties, commit.table_properties)
        if commit.protocol is not None:
            self.protocol = delta.protocol  # type: ignore[assignment]  # normalised, not None
        self._apply_lifecycle(delta, judged_at)
        if self.location != location:
            self.index_paths()
        _remember(self.recent_commits, delta.commit_id, version, DEDUP_WINDOW)
        prev_version = self.last_accepted_version
        self.last_accepted_version = version
        self.last_accepted_timestamp_ms = delta.timestamp_ms
        self.last_commit_id = delta.commit_id
        self.accepted += 1
        self.version = max(self.version, version)
        return CommitDelta(  # what dataclasses.replace would build, without its introspection
            delta.version,
            delta.timestamp_ms,
            delta.commit,
            prev_version,
            self.live_rows - before_rows,
            self.live_bytes - before_bytes,
            len(self.segments),
        )

    def note_intent(self, commit: Commit, offset: int, timestamp_ms: int) -> None:
        """An ``INTENT`` record the rules found valid: open, renew or close the intent.

        Not a version (its outcome is NOTED): nothing a reader lists changes, and the rules
        never look at intents, so images rebuilt from accepted deltas alone judge the same."""
        intent = commit.intent
        assert intent is not None
        if intent.ttl_ms > 0:
            self.intents[intent.intent_id] = OpenIntent(
                intent.intent_id, commit.writer_id, intent.prefix, timestamp_ms + intent.ttl_ms, offset
            )
        else:
            self.intents.pop(intent.intent_id, None)
        self.version = max(self.version, offset)

    def _apply_lifecycle(self, delta: CommitDelta, judged_at: Protocol) -> None:
        """A data commit closes its intent; the drop's version and broker time, the purge fence's
        version (the rules admitted only legal ones; ``judged_at``: the protocol in force)."""
        commit = delta.commit
        if commit.intent is not None:
            self.intents.pop(commit.intent.intent_id, None)
        if lifecycle.DROPPED_PROPERTY in commit.table_properties and lifecycle.has_feature(self.protocol):
            dropping = commit.table_properties[lifecycle.DROPPED_PROPERTY] is not None
            self.dropped_version = delta.version if dropping else -1
            self.dropped_timestamp_ms = delta.timestamp_ms if dropping else -1
        if lifecycle.fences_purge(judged_at, commit):
            self.purging_version = delta.version

    def _unindex(self, key: str, segment_id: str) -> None:
        holders = self.paths.get(key, [])
        if segment_id in holders:
            holders.remove(segment_id)
            if not holders:
                del self.paths[key]

    # ------------------------------------------------------------------ key-frame metadata

    def to_meta(self) -> dict[str, Any]:
        """Everything but the segments, as JSON-able values (a key frame's metadata)."""
        meta: dict[str, Any] = {}
        for f in fields(self):
            if f.name in _NOT_IN_META:
                continue
            encode = _META_CODECS.get(f.name, (_same, _same))[0]
            meta[f.name] = encode(getattr(self, f.name))
        return meta

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any], segments: dict[str, LiveSegment]) -> TableState:
        """The image a key frame's metadata and segments describe (also metadata written by
        older segcat: packed counters, no protocol or column types = a protocol-1 table)."""
        values: dict[str, Any] = {"segments": segments}
        for f in fields(cls):
            if f.name in _NOT_IN_META or f.name not in meta:
                continue
            decode = _META_CODECS.get(f.name, (_same, _same))[1]
            values[f.name] = decode(meta[f.name])
        if "counts" in meta:  # key-frame formats 1 and 2
            values["accepted"], values["rejected"], values["invalid"], values["duplicates"] = meta["counts"]
        return cls(**values)

    @property
    def live_count(self) -> int:
        return len(self.segments)

    def live_ids(self) -> frozenset[str]:
        return frozenset(self.segments)

    def fingerprint(self) -> str:
        """A digest of the live content (segments, tombstones, schema, properties).

        Two parties that agree on a version's content produce the same digest; used by
        the concurrency checker and by key-frame verification.
        """
        digest = hashlib.blake2b(digest_size=16)
        for segment_id in sorted(self.segments):
            live = self.segments[segment_id]
            digest.update(json.dumps([segment_id, live.added_version, live.segment.path]).encode())
        digest.update(json.dumps([[t.predicate, t.version] for t in self.tombstones]).encode())
        digest.update(
            json.dumps([self.schema_version, self.schema, sorted(self.properties.items())]).encode()
        )
        digest.update(json.dumps([self.protocol.version, list(self.protocol.features)]).encode())
        return digest.hexdigest()


def _remember(window: OrderedDict[str, int], key: str, offset: int, limit: int) -> None:
    window[key] = offset
    window.move_to_end(key)
    if len(window) > limit:
        del window[next(iter(window))]


def _same(value: Any) -> Any:
    return value


def _pairs(mapping: Mapping[Any, int]) -> list[list[Any]]:
    return list(map(list, mapping.items()))


_NOT_IN_META = frozenset({"segments", "paths"})
"""The segments travel as the key frame's rows; the path index is derived from them."""

_META_CODECS: dict[str, tuple[Callable[[Any], Any], Callable[[Any], Any]]] = {
    "tombstones": (
        lambda tombstones: [[t.predicate, t.version] for t in tombstones],
        lambda raw: [Tombstone(p, v) for p, v in raw],
    ),
    "properties": (dict, dict),
    "partition_touched": (_pairs, lambda raw: {p: v for p, v in raw}),
    "recent_commits": (_pairs, lambda raw: OrderedDict((k, v) for k, v in raw)),
    "recently_dropped": (_pairs, lambda raw: OrderedDict((k, v) for k, v in raw)),
    "protocol": (
        lambda protocol: [protocol.version, list(protocol.features)],
        lambda raw: Protocol(raw[0], tuple(raw[1])),
    ),
    "intents": (
        lambda intents: [
            [i.intent_id, i.writer_id, i.prefix, i.expires_ms, i.version] for i in intents.values()
        ],
        lambda raw: {row[0]: OpenIntent(*row) for row in raw},
    ),
    "column_types": (
        lambda types: [[c, t.value, v] for c, (t, v) in sorted(types.items())],
        lambda raw: {c: (ColumnType(t), v) for c, t, v in raw},
    ),
}
"""How each field that is not a plain JSON value is written into key-frame metadata and read back."""


@lru_cache(maxsize=4096)
def path_key(path: str, location: str | None) -> str:
    """One spelling per file: relative paths resolved under ``location``, URIs canonicalised."""
    if locations.is_absolute_uri(path):
        return locations.canonical(path)
    return path if location is None else locations.canonical(locations.resolve(location, path))
