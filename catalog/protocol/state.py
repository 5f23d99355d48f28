"""The table image: everything the rules need to judge the next commit.

A ``TableState`` is the state of one table after every record up to ``version``. It is
only ever changed by ``segcat.catalog.protocol.rules`` (the one place where commits are applied), and it
is exactly what a key frame stores, so a replay that starts from a key frame decides
every later commit as a replay from offset 0 would.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass, field

from segcat.catalog.protocol import locations
from segcat.catalog.protocol.model import ColumnType, Protocol, Segment, Tombstone

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

    def copy(self) -> TableState:
        return TableState(
            table=self.table,
            version=self.version,
            last_accepted_version=self.last_accepted_version,
            last_accepted_timestamp_ms=self.last_accepted_timestamp_ms,
            last_commit_id=self.last_commit_id,
            segments=dict(self.segments),
            tombstones=list(self.tombstones),
            schema=self.schema,
            schema_version=self.schema_version,
            properties=dict(self.properties),
            partition_touched=dict(self.partition_touched),
            last_data_version=self.last_data_version,
            last_tombstone_version=self.last_tombstone_version,
            recent_commits=OrderedDict(self.recent_commits),
            recently_dropped=OrderedDict(self.recently_dropped),
            live_bytes=self.live_bytes,
            live_rows=self.live_rows,
            accepted=self.accepted,
            rejected=self.rejected,
            invalid=self.invalid,
            duplicates=self.duplicates,
            protocol=self.protocol,
            column_types=dict(self.column_types),
        )

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


def path_key(path: str, location: str | None) -> str:
    """One spelling per file: relative paths resolved under ``location``, URIs canonicalised."""
    if locations.is_absolute_uri(path):
        return locations.canonical(path)
    return path if location is None else locations.canonical(locations.resolve(location, path))
