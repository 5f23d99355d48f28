"""Hypothesis strategies for segcat: realistic logs of one table, and arbitrary commits.

``scenarios()`` plays a small population of writers against one table and returns the
records they would leave in its topic (docs/PROTOCOL.md §1–§4): appends of fresh segments and of
ids that are already live, compactions (including two racing over the same segments),
REPLACE with SNAPSHOT or SERIALIZABLE isolation and a scope, DELETE with tombstones,
concurrent schema changes, table property changes, re-sends of earlier commit ids,
records written with the v1 layout, malformed commits, undecodable values and pruning
tombstones (null values). Offsets strictly increase but are not dense, as in Kafka.

The planner only *believes* what it sent was accepted (as a writer that has not read its
verdicts yet would), so stale reads, races and conflicts arise naturally; which commits
are really accepted is for the rules to decide, and for the tests to check.

``commits()`` generates arbitrary (not necessarily valid) commits for codec round trips.
"""

from __future__ import annotations

import datetime as dt
import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib.resources.abc import Traversable
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from segcat.catalog.protocol import codec
from segcat.catalog.protocol.model import (
    BloomFilter,
    ColumnStats,
    ColumnType,
    Commit,
    Isolation,
    LogRecord,
    Operation,
    Protocol,
    Segment,
    StatValue,
    Tombstone,
)

TABLE = "ns.t"
OTHER_TABLE = "ns.other"
PARTITIONS: tuple[str, ...] = ("2024-01", "2024-02", "2024-03")
PREDICATES: tuple[str, ...] = ("id = 3", "country = 'NZ'", "ts < TIMESTAMP '2024-01-15 00:00:00'")
PROPERTY_KEYS: tuple[str, ...] = ("owner", "retention.days", "format-version")
V1_SCHEMA: Traversable = codec.SCHEMA_DIR / "history" / "segcat.Commit.v1.avsc"

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1

SAFE_TIMESTAMP_MS = st.integers(1_600_000_000_000, 2_000_000_000_000)
"""Client timestamps from 2020 to 2033. Outside roughly [2004-11, 2038-01] the codec loses a
millisecond on some values (see tests/catalog/protocol/test_codec.py, the xfail on timestamp_ms)."""

SETTINGS = settings(
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""Base settings for segcat's property tests: no example database on disk, no deadline."""


# ------------------------------------------------------------------------ values and segments

UTC_DATETIMES = st.datetimes(
    min_value=dt.datetime(1, 1, 1), max_value=dt.datetime(9999, 12, 31, 23, 59, 59, 999_999)
).map(lambda d: d.replace(tzinfo=dt.UTC))

OFFSET_DATETIMES = st.builds(
    lambda d, minutes: d.replace(tzinfo=dt.timezone(dt.timedelta(minutes=minutes))),
    st.datetimes(min_value=dt.datetime(1900, 1, 1), max_value=dt.datetime(2200, 1, 1)),
    st.integers(-23 * 60 - 59, 23 * 60 + 59),
)
"""Aware datetimes with a fixed non-UTC offset (stored as the same instant in UTC)."""


def stat_values(kind: ColumnType) -> st.SearchStrategy[StatValue]:
    """Values a ColumnStats of ``kind`` may hold losslessly."""
    by_kind: dict[ColumnType, st.SearchStrategy[StatValue]] = {
        ColumnType.INT: st.integers(INT64_MIN, INT64_MAX),
        ColumnType.FLOAT: st.floats(allow_nan=False),
        ColumnType.STRING: st.text(max_size=20),
        ColumnType.DATE: st.dates(),
        ColumnType.TIMESTAMP: st.one_of(UTC_DATETIMES, OFFSET_DATETIMES),
        ColumnType.BOOLEAN: st.booleans(),
        ColumnType.BINARY: st.binary(max_size=20),
        ColumnType.OTHER: st.one_of(st.text(max_size=10), st.integers(INT64_MIN, INT64_MAX)),
    }
    return st.one_of(st.none(), by_kind[kind])


@st.composite
def column_stats(draw: st.DrawFn, column: str | None = None) -> ColumnStats:
    kind = draw(st.sampled_from(ColumnType))
    return ColumnStats(
        column=column if column is not None else draw(st.text(min_size=1, max_size=8)),
        type=kind,
        min=draw(stat_values(kind)),
        max=draw(stat_values(kind)),
        null_count=draw(st.one_of(st.none(), st.integers(INT64_MIN, INT64_MAX))),
    )


@st.composite
def segments(draw: st.DrawFn) -> Segment:
    """Arbitrary segments (not necessarily valid for the rules): for the codec."""
    columns = draw(st.lists(st.text(min_size=1, max_size=6), max_size=4, unique=True))
    bloom = draw(
        st.one_of(
            st.none(),
            st.builds(
                BloomFilter,
                column=st.text(max_size=6),
                num_hashes=st.integers(-(2**31), 2**31 - 1),
                bits=st.binary(max_size=32),
            ),
        )
    )
    return Segment(
        segment_id=draw(st.text(max_size=12)),
        path=draw(st.text(max_size=30)),
        size_bytes=draw(st.integers(INT64_MIN, INT64_MAX)),
        row_count=draw(st.integers(INT64_MIN, INT64_MAX)),
        partition=draw(st.one_of(st.none(), st.text(max_size=10))),
        format=draw(st.sampled_from(["parquet", "orc", ""])),
        stats=tuple(draw(column_stats(column=c)) for c in columns),
        bloom=bloom,
        schema=draw(st.one_of(st.none(), st.text(max_size=20))),
    )


@st.composite
def commits(draw: st.DrawFn) -> Commit:
    """Arbitrary commits (any operation, any field values the Avro schema can hold)."""
    return Commit(
        commit_id=draw(st.one_of(st.uuids().map(str), st.text(max_size=40))),
        table=draw(st.text(max_size=20)),
        operation=draw(st.sampled_from(Operation)),
        base_version=draw(st.integers(INT64_MIN, INT64_MAX)),
        writer_id=draw(st.text(max_size=12)),
        timestamp_ms=draw(SAFE_TIMESTAMP_MS),
        adds=tuple(draw(st.lists(segments(), max_size=3))),
        drops=tuple(draw(st.lists(st.text(max_size=10), max_size=3))),
        tombstones=tuple(Tombstone(p) for p in draw(st.lists(st.text(max_size=30), max_size=2))),
        replace_scope=tuple(draw(st.lists(st.text(max_size=10), max_size=3))),
        isolation=draw(st.sampled_from(Isolation)),
        properties=draw(st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=3)),
        table_properties=draw(
            st.dictionaries(st.text(max_size=8), st.one_of(st.none(), st.text(max_size=8)), max_size=3)
        ),
        schema=draw(st.one_of(st.none(), st.text(max_size=30))),
    )


def encode_v1(commit: Commit) -> bytes:
    """``commit`` written by a v1 writer (schemas/history/segcat.Commit.v1.avsc).

    Only commits that v1 can express: no v2-only fields, no v2-only enum symbols.
    """
    raw = codec.commit_to_avro(commit)
    for name in ("replace_scope", "isolation", "table_properties", "schema"):
        raw.pop(name)
    for segment in raw["adds"]:
        segment.pop("bloom")
        segment.pop("schema")
    return codec.encode_with_schema(raw, V1_SCHEMA)


# ------------------------------------------------------------------------ logs of one table


@dataclass(frozen=True)
class Scenario:
    """A table's log as a consumer would read it, plus what the generator meant by it."""

    table: str
    records: tuple[LogRecord, ...]
    intended: tuple[Commit | None, ...]
    """For each record, the commit its value encodes; None for null or undecodable values."""
    kinds: tuple[str, ...]
    """For each record, which generator step produced it (for failure reports and coverage)."""

    def __len__(self) -> int:
        return len(self.records)


KINDS: tuple[str, ...] = (
    # sampled uniformly; repetition is the weight. "append" first: hypothesis shrinks towards it.
    *("append",) * 6,
    *("append_live",) * 2,
    "append_v1",
    *("compact",) * 3,
    "compact_race",
    *("replace",) * 3,
    *("replace_race",) * 3,
    *("delete",) * 2,
    "rewrite_after_delete",
    *("set_schema",) * 2,
    "schema_race",
    "append_schema",
    "set_properties",
    "append_same_path",
    "append_dropped",
    "append_type_change",
    *("append_absolute",) * 2,
    "append_with_props",
    "delete_free_text",
    "set_properties_noop",
    "set_allowed",
    "append_float",
    *("upgrade",) * 2,
    "append_two_spellings",
    *("resend",) * 3,
    *("malformed",) * 3,
    *("garbage",) * 2,
    "null",
)


_ONE_TO_THREE = st.integers(1, 3)
_ONE_IN_TEN = st.integers(0, 9)
_TICK = st.integers(0, 50)
_ROWS = st.integers(0, 1_000)
_PARTITION = st.sampled_from((*PARTITIONS, None))
_KIND = st.sampled_from(KINDS)
_UPGRADE_TARGET = st.sampled_from((Protocol(2, ()), Protocol(3, ()), Protocol(3, ("lifecycle",))))


TABLE_ROOT = "s3://lake/wh/ns/t"
"""The location generated protocol-2 logs record."""


@dataclass
class _Planner:
    draw: st.DrawFn
    table: str
    salt: int
    last_offset: int
    timestamp_ms: int
    next_commit: int = 0
    next_segment: int = 0
    next_schema: int = 0
    ever_added: list[Segment] = field(default_factory=list)
    believed_live: dict[str, Segment] = field(default_factory=dict)
    believed_dropped: list[str] = field(default_factory=list)
    offsets: list[int] = field(default_factory=list)
    sent: list[tuple[LogRecord, Commit]] = field(default_factory=list)
    records: list[LogRecord] = field(default_factory=list)
    intended: list[Commit | None] = field(default_factory=list)
    kinds: list[str] = field(default_factory=list)

    # -------------------------------------------------------------- building blocks

    def commit_id(self) -> str:
        self.next_commit += 1
        return str(uuid.UUID(int=(self.salt << 32) | self.next_commit))

    def allocate_offset(self) -> int:
        """The next record's offset: increasing, with gaps (other records, aborted batches)."""
        self.last_offset += self.draw(_ONE_TO_THREE)
        return self.last_offset

    def base_version(self) -> int:
        """What the writer had read: usually the newest offset, sometimes a stale one, or -1."""
        if not self.offsets:
            return -1
        pick = self.draw(_ONE_IN_TEN)
        if pick < 6:
            return self.offsets[-1]
        if pick < 9:
            return self.draw(st.sampled_from(self.offsets[-6:]))
        return -1

    def partition(self) -> str | None:
        return self.draw(_PARTITION)

    def new_segment(self, partition: str | None) -> Segment:
        self.next_segment += 1
        n = self.next_segment
        rows = self.draw(_ROWS)
        low = (n * 7_919) % 2_000 - 1_000
        return Segment(
            segment_id=f"seg-{n:04d}",
            path=f"data/{partition or 'all'}/part-{n:05d}.parquet",
            size_bytes=rows * 40 + 1_000 + n,
            row_count=rows,
            partition=partition,
            stats=(ColumnStats("id", ColumnType.INT, low, low + rows, 0),),
        )

    def commit(self, offset: int, operation: Operation, **fields: object) -> Commit:
        values: dict[str, object] = {
            "commit_id": self.commit_id(),
            "table": self.table,
            "operation": operation,
            "base_version": self.base_version(),
            "writer_id": f"writer-{self.next_commit % 4}",
            "timestamp_ms": self.timestamp_ms,
        }
        values.update(fields)
        return Commit(**values)  # type: ignore[arg-type]

    def emit(
        self,
        offset: int,
        kind: str,
        value: bytes | None,
        intended: Commit | None,
        key: bytes | None,
    ) -> LogRecord:
        self.timestamp_ms += self.draw(_TICK)
        record = LogRecord(offset, self.timestamp_ms, key, value)
        self.records.append(record)
        self.intended.append(intended)
        self.kinds.append(kind)
        self.offsets.append(offset)
        return record

    def send(self, offset: int, kind: str, commit: Commit, *, value: bytes | None = None) -> None:
        """Emit a well-formed commit and believe it was accepted."""
        record = self.emit(
            offset,
            kind,
            value if value is not None else codec.encode_commit(commit),
            commit,
            commit.commit_id.encode(),
        )
        self.sent.append((record, commit))
        for drop in commit.drops:
            self.believed_live.pop(drop, None)
            self.believed_dropped.append(drop)
        for segment in commit.adds:
            self.believed_live[segment.segment_id] = segment
            self.ever_added.append(segment)

    def live_sample(self, candidates: list[str], max_size: int = 3) -> tuple[str, ...]:
        picked = st.lists(st.sampled_from(candidates), min_size=1, max_size=max_size, unique=True)
        return tuple(self.draw(picked))

    # -------------------------------------------------------------- steps

    def step(self, kind: str) -> None:
        getattr(self, f"step_{kind}")()

    def step_upgrade(self) -> None:
        """An UPGRADE_PROTOCOL to 2 or 3 (maybe with ``lifecycle``): with the location (the creation
        of a table), sometimes without, with a bad one, or carrying another table property."""
        offset = self.allocate_offset()
        props: dict[str, str | None] = {"segcat.location": TABLE_ROOT}
        pick = self.draw(_ONE_IN_TEN)
        if pick == 0:
            props = {}
        elif pick <= 3:
            props["owner"] = "upgrader"
        elif pick <= 5:
            props["segcat.location"] = self.draw(st.sampled_from([None, "relative/root"]))
        protocol = self.draw(_UPGRADE_TARGET)
        commit = self.commit(offset, Operation.UPGRADE_PROTOCOL, protocol=protocol, table_properties=props)
        self.send(offset, "upgrade", commit)

    def step_append_two_spellings(self) -> None:
        """One new file added twice in one commit: relative and absolute (protocol 3: INVALID)."""
        offset = self.allocate_offset()
        segment = self.new_segment(self.partition())
        twin = replace(self.new_segment(segment.partition), path=f"{TABLE_ROOT}/{segment.path}")
        commit = self.commit(offset, Operation.APPEND, adds=(segment, twin))
        self.send(offset, "append_two_spellings", commit)

    def step_append_same_path(self) -> None:
        """A new segment id naming a file another (maybe still live) segment names."""
        if not self.ever_added:
            return self.step_append()
        offset = self.allocate_offset()
        old = self.draw(st.sampled_from(self.ever_added))
        fresh = replace(self.new_segment(old.partition), path=old.path)
        self.send(offset, "append_same_path", self.commit(offset, Operation.APPEND, adds=(fresh,)))
        return None

    def step_append_dropped(self) -> None:
        """A segment id that was dropped comes back (a late retry of an append that was compacted)."""
        if not self.believed_dropped:
            return self.step_append()
        offset = self.allocate_offset()
        gone = self.draw(st.sampled_from(self.believed_dropped))
        segment = replace(self.new_segment(self.partition()), segment_id=gone)
        self.send(offset, "append_dropped", self.commit(offset, Operation.APPEND, adds=(segment,)))
        return None

    def step_append_type_change(self) -> None:
        offset = self.allocate_offset()
        text_id = (ColumnStats("id", ColumnType.STRING, "a", "b", 0),)
        segment = replace(self.new_segment(self.partition()), stats=text_id)
        self.send(offset, "append_type_change", self.commit(offset, Operation.APPEND, adds=(segment,)))

    def step_append_absolute(self) -> None:
        offset = self.allocate_offset()
        segment = self.new_segment(self.partition())
        name = segment.path.rsplit("/", 1)[-1]
        path = self.draw(
            st.sampled_from(
                [
                    f"{TABLE_ROOT}/data/{name}",
                    f"s3a://lake/wh/ns/t/data/{name}",
                    f"s3://shared/lake/{name}",
                    f"file:///etc/{name}",
                    f"{TABLE_ROOT}/data/%2e%2e/{name}",
                    f"{TABLE_ROOT}-other/{name}",
                ]
            )
        )
        commit = self.commit(offset, Operation.APPEND, adds=(replace(segment, path=path),))
        self.send(offset, "append_absolute", commit)

    def step_append_with_props(self) -> None:
        offset = self.allocate_offset()
        commit = replace(self.fresh_append(offset), table_properties={"owner": "appender"})
        self.send(offset, "append_with_props", commit)

    def step_delete_free_text(self) -> None:
        offset = self.allocate_offset()
        free = ["1=1; DROP TABLE x", "lower(country) = 'nz'", "id = NULL", "d = DATE '20240115'"]
        predicate = self.draw(st.sampled_from(free))  # (the last: protocol 2 read it, protocol 3 does not)
        commit = self.commit(offset, Operation.DELETE, tombstones=(Tombstone(predicate),))
        self.send(offset, "delete_free_text", commit)

    def step_set_properties_noop(self) -> None:
        offset = self.allocate_offset()
        commit = self.commit(offset, Operation.SET_PROPERTIES, table_properties={"never-set": None})
        self.send(offset, "set_properties_noop", commit)

    def step_set_allowed(self) -> None:
        offset = self.allocate_offset()
        value = self.draw(st.sampled_from(['["s3://shared/lake"]', "s3://shared/lake", '["relative"]']))
        change = {"segcat.locations.allowed": value}
        commit = self.commit(offset, Operation.SET_PROPERTIES, table_properties=change)
        self.send(offset, "set_allowed", commit)

    def step_append_float(self) -> None:
        """FLOAT stats with a NaN count; sometimes a count out of range, or a NaN count on an INT."""
        offset = self.allocate_offset()
        segment = self.new_segment(self.partition())
        rows = segment.row_count
        variants = [(0.5, 0, ColumnType.FLOAT), (-0.0, rows + 1, ColumnType.FLOAT), (None, 0, ColumnType.INT)]
        low, nan_count, kind = self.draw(st.sampled_from(variants))
        stats = ColumnStats("score", kind, low, None if kind is ColumnType.INT else 2.5, 0, nan_count)
        adds = (replace(segment, stats=(stats,)),)
        self.send(offset, "append_float", self.commit(offset, Operation.APPEND, adds=adds))

    def fresh_append(self, offset: int) -> Commit:
        count = self.draw(_ONE_TO_THREE)
        adds = tuple(self.new_segment(self.partition()) for _ in range(count))
        return self.commit(offset, Operation.APPEND, adds=adds)

    def step_append(self) -> None:
        offset = self.allocate_offset()
        self.send(offset, "append", self.fresh_append(offset))

    def step_append_live(self) -> None:
        """A writer re-using a segment id that was added before (live or not any more)."""
        if not self.ever_added:
            return self.step_append()
        offset = self.allocate_offset()
        old = self.draw(st.sampled_from(self.ever_added))
        reused = replace(old, path=f"data/reused/{old.segment_id}-{offset}.parquet")
        adds = (reused,) if self.draw(st.booleans()) else (self.new_segment(self.partition()), reused)
        self.send(offset, "append_live", self.commit(offset, Operation.APPEND, adds=adds))
        return None

    def step_append_v1(self) -> None:
        """An APPEND written by a segcat that still used layout v1."""
        offset = self.allocate_offset()
        commit = self.fresh_append(offset)
        self.send(offset, "append_v1", commit, value=encode_v1(commit))

    def step_append_schema(self) -> None:
        """An APPEND that evolves the schema (a schema change carried by a data commit)."""
        offset = self.allocate_offset()
        commit = replace(self.fresh_append(offset), schema=self.new_schema())
        self.send(offset, "append_schema", commit)

    def compaction(self, offset: int, drops: tuple[str, ...], base_version: int | None = None) -> Commit:
        first = self.believed_live.get(drops[0])
        outputs = self.draw(st.integers(0, 1))
        adds = tuple(self.new_segment(first.partition if first else None) for _ in range(outputs))
        commit = self.commit(offset, Operation.COMPACT, drops=drops, adds=adds)
        return commit if base_version is None else replace(commit, base_version=base_version)

    def step_compact(self) -> None:
        """Compact believed-live segments; sometimes one that was already dropped, or never existed."""
        offset = self.allocate_offset()
        candidates = list(self.believed_live)
        if self.believed_dropped and (not candidates or self.draw(st.integers(0, 4)) == 0):
            candidates.append(self.draw(st.sampled_from(self.believed_dropped)))
        if not candidates:
            candidates = [f"ghost-{offset}"]
        self.send(offset, "compact", self.compaction(offset, self.live_sample(candidates)))

    def step_compact_race(self) -> None:
        """Two compactors read the same version and compact the same segments."""
        if not self.believed_live:
            return self.step_compact()
        drops = self.live_sample(list(self.believed_live))
        base = self.base_version()
        first_offset = self.allocate_offset()
        first = self.compaction(first_offset, drops, base)
        second_offset = self.allocate_offset()
        second = self.compaction(second_offset, drops, base)
        self.send(first_offset, "compact_race", first)
        self.send(second_offset, "compact_race", second)
        return None

    def step_replace(self) -> None:
        offset = self.allocate_offset()
        scope = tuple(self.draw(st.lists(st.sampled_from(PARTITIONS), max_size=2, unique=True)))
        isolation = self.draw(st.sampled_from(Isolation))
        in_scope = [s for s, seg in self.believed_live.items() if not scope or seg.partition in scope]
        drops: tuple[str, ...] = ()
        if in_scope:
            drops = tuple(in_scope) if self.draw(st.booleans()) else self.live_sample(in_scope)
        count = self.draw(st.integers(0 if drops else 1, 2))
        targets: tuple[str | None, ...] = scope or (*PARTITIONS, None)
        adds = tuple(self.new_segment(self.draw(st.sampled_from(targets))) for _ in range(count))
        commit = self.commit(
            offset, Operation.REPLACE, adds=adds, drops=drops, replace_scope=scope, isolation=isolation
        )
        self.send(offset, "replace", commit)

    def step_replace_race(self) -> None:
        """A REPLACE planned on version B while another writer commits into (or next to) its scope."""
        scope = tuple(self.draw(st.lists(st.sampled_from(PARTITIONS), max_size=1)))
        base = self.offsets[-1] if self.offsets else -1
        offset = self.allocate_offset()
        in_scope = [s for s, seg in self.believed_live.items() if not scope or seg.partition in scope]
        racer = self.draw(st.sampled_from(RACERS))
        if racer in ("compact_in_scope", "drop_in_scope") and not in_scope:
            racer = "tombstone"
        target = scope[0] if scope and racer != "append_elsewhere" else self.partition()
        if racer in ("append_in_scope", "append_elsewhere"):
            adds = (self.new_segment(target),)
            concurrent = self.commit(offset, Operation.APPEND, adds=adds)
        elif racer in ("compact_in_scope", "drop_in_scope"):
            drops = (self.draw(st.sampled_from(in_scope)),)
            op = Operation.COMPACT if racer == "compact_in_scope" else Operation.DELETE
            concurrent = self.commit(offset, op, drops=drops)
        elif racer == "properties":
            concurrent = self.commit(offset, Operation.SET_PROPERTIES, table_properties={"owner": "racer"})
        else:
            concurrent = self.commit(offset, Operation.DELETE, tombstones=(Tombstone(PREDICATES[0]),))
        self.send(offset, f"replace_race:{racer}", concurrent)
        # The replace drops what it saw in its scope that is still there (else rule 3 would decide).
        offset = self.allocate_offset()
        still = [s for s in in_scope if s in self.believed_live]
        commit = self.commit(
            offset,
            Operation.REPLACE,
            adds=(self.new_segment(scope[0] if scope else self.partition()),),
            drops=tuple(still),
            replace_scope=scope,
            isolation=self.draw(st.sampled_from(Isolation)),
            base_version=base,
        )
        self.send(offset, "replace_race", commit)

    def step_delete(self) -> None:
        offset = self.allocate_offset()
        predicates = self.draw(st.lists(st.sampled_from(PREDICATES), max_size=2, unique=True))
        drops: tuple[str, ...] = ()
        if self.believed_live and (not predicates or self.draw(st.booleans())):
            drops = self.live_sample(list(self.believed_live), max_size=1)
        if not predicates and not drops:
            predicates = [PREDICATES[0]]
        commit = self.commit(
            offset, Operation.DELETE, drops=drops, tombstones=tuple(Tombstone(p) for p in predicates)
        )
        self.send(offset, "delete", commit)

    def step_rewrite_after_delete(self) -> None:
        """A compactor that read the table before a soft delete commits after it (rule 3b)."""
        if not self.believed_live:
            return self.step_delete()
        base = self.offsets[-1] if self.offsets else -1
        delete_offset = self.allocate_offset()
        tombstone = (Tombstone(self.draw(st.sampled_from(PREDICATES))),)
        self.send(
            delete_offset,
            "rewrite_after_delete",
            self.commit(delete_offset, Operation.DELETE, tombstones=tombstone),
        )
        offset = self.allocate_offset()
        drops = self.live_sample(list(self.believed_live), max_size=1)
        rewrite = replace(self.compaction(offset, drops, base), adds=(self.new_segment(self.partition()),))
        self.send(offset, "rewrite_after_delete", rewrite)
        return None

    def new_schema(self) -> str:
        self.next_schema += 1
        columns = [{"name": f"c{i}", "type": "long"} for i in range(self.next_schema)]
        return json.dumps({"type": "struct", "fields": columns})

    def step_set_schema(self) -> None:
        offset = self.allocate_offset()
        self.send(offset, "set_schema", self.commit(offset, Operation.SET_SCHEMA, schema=self.new_schema()))

    def step_schema_race(self) -> None:
        """Two writers change the schema from the same base version."""
        base = self.base_version()
        for _ in range(2):
            offset = self.allocate_offset()
            commit = self.commit(offset, Operation.SET_SCHEMA, schema=self.new_schema(), base_version=base)
            self.send(offset, "schema_race", commit)

    def step_set_properties(self) -> None:
        offset = self.allocate_offset()
        changes = self.draw(
            st.dictionaries(
                st.sampled_from(PROPERTY_KEYS), st.sampled_from(["a", "b", None]), min_size=1, max_size=2
            )
        )
        commit = self.commit(offset, Operation.SET_PROPERTIES, table_properties=changes)
        self.send(offset, "set_properties", commit)

    def step_resend(self) -> None:
        """A writer (or an idempotent producer after a lost ack) re-sends an earlier record."""
        if not self.sent:
            return self.step_append()
        record, commit = self.draw(st.sampled_from(self.sent))
        self.emit(self.allocate_offset(), "resend", record.value, commit, record.key)
        return None

    def step_malformed(self) -> None:
        offset = self.allocate_offset()
        valid = self.fresh_append(offset)
        name = self.draw(st.sampled_from(sorted(MALFORMATIONS)))
        commit = MALFORMATIONS[name](valid, offset)
        self.emit(offset, f"malformed:{name}", codec.encode_commit(commit), commit, commit.commit_id.encode())

    def step_garbage(self) -> None:
        offset = self.allocate_offset()
        commit = self.fresh_append(offset)
        good = codec.encode_commit(commit)
        how = self.draw(
            st.sampled_from(
                ["random", "magic", "fingerprint", "truncated", "trailing", "key_mismatch", "key_none"]
            )
        )
        intended: Commit | None = None
        value: bytes
        key: bytes | None = commit.commit_id.encode()
        if how == "random":
            value = self.draw(st.binary(max_size=40))
        elif how == "magic":
            value = b"\xc3\x02" + good[2:]
        elif how == "fingerprint":
            known = set(codec.known_fingerprints())
            fp = self.draw(st.binary(min_size=8, max_size=8).filter(lambda b: b not in known))
            value = good[:2] + fp + good[10:]
        elif how == "truncated":
            value = good[: self.draw(st.integers(0, len(good) - 1))]
        elif how == "trailing":
            value = good + self.draw(st.binary(min_size=1, max_size=4))
        elif how == "key_mismatch":
            value, intended, key = good, commit, self.commit_id().encode()
        else:
            value, intended, key = good, commit, None
        self.emit(offset, f"garbage:{how}", value, intended, key)

    def step_null(self) -> None:
        """A pruning tombstone (docs/PROTOCOL.md §2) for an earlier commit key, or for an unknown key."""
        offset = self.allocate_offset()
        reuse = bool(self.sent) and self.draw(st.booleans())
        key = self.draw(st.sampled_from(self.sent))[0].key if reuse else self.commit_id().encode()
        self.emit(offset, "null", None, None, key)

    def scenario(self) -> Scenario:
        return Scenario(self.table, tuple(self.records), tuple(self.intended), tuple(self.kinds))


RACERS: tuple[str, ...] = (
    "append_in_scope",
    "append_elsewhere",
    "compact_in_scope",
    "drop_in_scope",
    "tombstone",
    "properties",
)

# A malformation turns a valid APPEND (at ``offset``) into a commit that breaks one field rule.
Malformation = Callable[[Commit, int], Commit]


def _with_segment(commit: Commit, **changes: Any) -> Commit:
    return replace(commit, adds=(replace(commit.adds[0], **changes), *commit.adds[1:]))


def _with_stats(commit: Commit, stats: ColumnStats) -> Commit:
    return _with_segment(commit, stats=(stats,))


MALFORMATIONS: dict[str, Malformation] = {
    "wrong_table": lambda c, o: replace(c, table=OTHER_TABLE),
    "bad_uuid": lambda c, o: replace(c, commit_id=f"not-a-uuid-{o}"),
    "base_at_offset": lambda c, o: replace(c, base_version=o),
    "base_after_offset": lambda c, o: replace(c, base_version=o + 7),
    "base_below_minus_one": lambda c, o: replace(c, base_version=-2),
    "unknown_operation": lambda c, o: replace(c, operation=Operation.UNKNOWN),
    "empty_writer": lambda c, o: replace(c, writer_id=""),
    "append_with_drops": lambda c, o: replace(c, drops=("seg-0001",)),
    "append_with_tombstone": lambda c, o: replace(c, tombstones=(Tombstone("id = 1"),)),
    "append_nothing": lambda c, o: replace(c, adds=()),
    "compact_without_drops": lambda c, o: replace(c, operation=Operation.COMPACT),
    "compact_with_tombstone": lambda c, o: replace(
        c, operation=Operation.COMPACT, drops=(f"gone-{o}",), tombstones=(Tombstone("id = 1"),)
    ),
    "delete_nothing": lambda c, o: replace(c, operation=Operation.DELETE),
    "set_properties_with_data": lambda c, o: replace(
        c, operation=Operation.SET_PROPERTIES, table_properties={"owner": "x"}
    ),
    "set_schema_without_schema": lambda c, o: replace(c, operation=Operation.SET_SCHEMA, adds=()),
    "replace_outside_scope": lambda c, o: replace(
        _with_segment(c, partition="2024-02"), operation=Operation.REPLACE, replace_scope=("2024-01",)
    ),
    "scope_on_append": lambda c, o: replace(c, replace_scope=(PARTITIONS[0],)),
    "same_add_twice": lambda c, o: replace(c, adds=(c.adds[0], c.adds[0])),
    "add_and_drop": lambda c, o: replace(c, operation=Operation.COMPACT, drops=(c.adds[0].segment_id,)),
    "negative_size": lambda c, o: _with_segment(c, size_bytes=-1),
    "path_traversal": lambda c, o: _with_segment(c, path="../../etc/passwd"),
    "absolute_path": lambda c, o: _with_segment(c, path="/data/x.parquet"),
    "control_in_id": lambda c, o: _with_segment(c, segment_id=f"seg\n{o}"),
    "null_count_above_rows": lambda c, o: _with_stats(
        c, ColumnStats("id", ColumnType.INT, 0, 1, c.adds[0].row_count + 1)
    ),
    "min_above_max": lambda c, o: _with_stats(c, ColumnStats("id", ColumnType.INT, 5, 4, 0)),
    "schema_not_json": lambda c, o: replace(c, schema="{not json"),
    "empty_predicate": lambda c, o: replace(
        c, operation=Operation.DELETE, adds=(), tombstones=(Tombstone(""),)
    ),
}


@st.composite
def scenarios(
    draw: st.DrawFn,
    *,
    table: str = TABLE,
    min_steps: int = 1,
    max_steps: int = 40,
    created_at: int | None = None,
) -> Scenario:
    """A log of one table: ``min_steps``..``max_steps`` writer steps (a step may emit 2 records).

    A third of the logs start with the UPGRADE_PROTOCOL that creates a protocol-2 table, a third
    with the one creating a protocol-3 table (with ``lifecycle``, as new tables are); the others
    are protocol-1 logs, which an ``upgrade`` step may move to protocol 2 or 3 midway.
    ``created_at`` chooses one of the three.
    """
    planner = _Planner(
        draw=draw,
        table=table,
        salt=draw(st.integers(0, 2**64 - 1)),
        last_offset=draw(st.integers(-1, 5)),
        timestamp_ms=draw(SAFE_TIMESTAMP_MS),
    )
    protocol = created_at if created_at is not None else draw(st.sampled_from((1, 2, 3)))
    if protocol >= 2:
        offset = planner.allocate_offset()
        creation = planner.commit(
            offset,
            Operation.UPGRADE_PROTOCOL,
            base_version=-1,
            protocol=Protocol(2, ()) if protocol == 2 else Protocol(protocol, ("lifecycle",)),
            table_properties={"segcat.location": TABLE_ROOT},
        )
        planner.send(offset, "create", creation)
    for _ in range(draw(st.integers(min_steps, max_steps))):
        planner.step(draw(_KIND))
    return planner.scenario()
