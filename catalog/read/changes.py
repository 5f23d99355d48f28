"""The change feed in the core: what each accepted version did to the table's rows, and the rows.

Every version's effect on rows is known from the log alone (docs/PROTOCOL.md §3, §4a):

- the files it adds hold rows that appear at that version (no tombstone of the same version
  or earlier applies to them: a tombstone deletes only in data committed before it);
- each file it drops (except in a ``COMPACT``, whose adds hold exactly the rows its drops
  held) takes its rows away, minus those earlier tombstones had already deleted;
- each tombstone it carries deletes, from every file added before it that the version does
  not drop, the rows it matches and no earlier tombstone (nor an earlier tombstone of the
  same commit) matched.

So rows(a) plus the feed of (a, b] is rows(b), as a multiset, for every a < b. The feed is
``VersionFiles`` (plain values: they pickle to Spark executors) holding ``FileRead``\\ s, each
a file with the tombstone predicates that filter it; ``read_rows`` reads one as Arrow batches
conformed to the table's schema, applying them with ``row_filter`` (Spark's semantics at
UTC, the protocol's); ``change_batches`` adds ``_change_type``, ``_commit_version`` and
``_commit_timestamp``. ``ChangeTracker`` derives ``VersionFiles`` from the accepted deltas
in log order (a Follower's listener), keeping its own image so the files a version drops
are known although the state after it no longer lists them. ``Table.changes`` and the Spark
source and change feed (``spark_integration``) read through these same functions.
"""

from __future__ import annotations

import enum
import heapq
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from segcat.catalog.config import Config
from segcat.catalog.errors import (
    DataFileMissing,
    IncompatibleSchema,
    InvalidPredicate,
    UnsafeLocation,
    UnsupportedPredicate,
)
from segcat.catalog.protocol import locations, spark_types
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.expressions import Predicate
from segcat.catalog.protocol.model import Operation, Tombstone
from segcat.catalog.protocol.predicates import parse_predicate
from segcat.catalog.protocol.row_filter import matches
from segcat.catalog.protocol.state import ALLOWED_LOCATIONS_PROPERTY, LiveSegment, TableState
from segcat.catalog.read.snapshot import Snapshot
from segcat.catalog.storage.objectstore import filesystem

CHANGE_TYPE = "_change_type"
COMMIT_VERSION = "_commit_version"
COMMIT_TIMESTAMP = "_commit_timestamp"
CHANGE_COLUMNS = pa.schema(
    [
        pa.field(CHANGE_TYPE, pa.string(), nullable=False),
        pa.field(COMMIT_VERSION, pa.int64(), nullable=False),
        pa.field(COMMIT_TIMESTAMP, pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
"""The columns the change feed adds to the table's, as Delta's Change Data Feed names them."""
INSERT, DELETE = "insert", "delete"


class VersionKind(enum.Enum):
    """What one accepted version did to the rows (the streaming source's admission decides on it)."""

    APPEND = "append"
    """Adds rows, removes none (``APPEND``)."""
    COMPACT = "compact"
    """Rewrites rows: its adds hold exactly the rows its drops held (``COMPACT``)."""
    DELETE_ONLY = "delete"
    """Removes rows, adds none (a ``DELETE`` of files or by tombstones; a drop of partitions)."""
    CHANGE = "change"
    """Adds and removes rows: ``REPLACE`` (even of an empty table) and a ``DELETE`` that rewrites
    files (copy-on-write adds)."""
    METADATA = "metadata"
    """No rows move (properties, schema, protocol; the table's drop and undrop)."""


def classify(operation: Operation, adds: int, drops: int, tombstones: int) -> VersionKind:
    """The kind of an accepted commit (docs/PROTOCOL.md §4 "Field rules": what each operation carries).

    **Decision — by operation, then content.** ``REPLACE`` is always a change, as Delta's
    overwrite is even of an empty table (a stream that refuses changes must not accept an
    overwrite because the table happened to be empty); a ``DELETE`` that also adds files
    rewrote rows and is a change, not a delete-only version."""
    if operation is Operation.COMPACT:
        return VersionKind.COMPACT
    if not (adds or drops or tombstones):
        return VersionKind.METADATA
    if operation is Operation.REPLACE:
        return VersionKind.CHANGE
    if operation is Operation.DELETE:
        return VersionKind.CHANGE if adds else VersionKind.DELETE_ONLY
    if drops or tombstones:  # protocol 1 admitted data on other operations: judge by content
        return VersionKind.CHANGE if adds else VersionKind.DELETE_ONLY
    return VersionKind.APPEND


@dataclass(frozen=True)
class FileRead:
    """One data file to read, and which of its rows: plain values (pickles to Spark executors)."""

    uri: str
    """Absolute (the table's root + a relative path, or the segment's URI)."""
    row_count: int
    size_bytes: int
    added_version: int
    file_schema: str | None
    """The schema the file was written with (``Segment.schema``, Spark's JSON), if recorded."""
    exclude: tuple[str, ...] = ()
    """Tombstone predicates (protocol text): rows matching any are not read."""
    include: str | None = None
    """If set, only rows matching this tombstone predicate are read."""


@dataclass(frozen=True)
class VersionFiles:
    """One accepted version: what it did to the rows, as files to read."""

    version: int
    timestamp_ms: int
    """The broker's time of the version."""
    operation: str
    kind: VersionKind
    inserted: tuple[FileRead, ...]
    """Files whose rows appear at this version (a ``COMPACT``'s adds too: ``kind`` says skip)."""
    deleted: tuple[FileRead, ...]
    """Reads whose rows disappear at this version: each dropped file (not in a ``COMPACT``) minus
    the rows earlier tombstones removed; each new tombstone on each file added before it that
    the version keeps (``include`` = the tombstone, ``exclude`` = the tombstones before it)."""
    schema: str | None
    """The table schema after this version (Spark's JSON): the live files' recorded schemas,
    merged (``spark_types``); None when a live file records none or there is no file."""

    @property
    def changes_rows(self) -> bool:
        """Whether rows appear or disappear at this version (a ``COMPACT`` moves none)."""
        return self.kind not in (VersionKind.COMPACT, VersionKind.METADATA)


# ---------------------------------------------------------------------------- building reads


def _file_read(live: LiveSegment, uri: str, exclude: tuple[str, ...], include: str | None = None) -> FileRead:
    segment = live.segment
    return FileRead(
        uri, segment.row_count, segment.size_bytes, live.added_version, segment.schema, exclude, include
    )


def _newer(tombstones: Sequence[Tombstone], added_version: int) -> tuple[str, ...]:
    """The predicates of the tombstones that delete in a file added at ``added_version``."""
    return tuple(t.predicate for t in tombstones if t.version > added_version)


def resolver(root: str, properties: Callable[[], dict[str, str]]) -> Callable[[str], str]:
    """A segment path as the file it names, as ``Snapshot.resolve`` does: relative paths under
    ``root``, absolute URIs only under the root or an allowed location (``UnsafeLocation``)."""

    def resolve(path: str) -> str:
        if not locations.is_absolute_uri(path):
            return f"{root}/{path}"
        try:
            allowed = locations.parse_allowed(properties().get(ALLOWED_LOCATIONS_PROPERTY))
        except ValueError:
            allowed = ()
        problem = locations.allowed_problem(path, root, allowed)
        if problem is not None:
            raise UnsafeLocation(problem)
        return path

    return resolve


def snapshot_reads(
    source: Snapshot | TableState, resolve: Callable[[str], str] | None = None
) -> tuple[FileRead, ...]:
    """The live files of a version, each minus the rows the tombstones newer than it delete.

    A ``Snapshot`` resolves its own paths; a ``TableState`` needs ``resolve`` (``resolver``)."""
    if isinstance(source, Snapshot):
        segments = {s.segment_id: s for s in source.segment_list()}
        table = source.segments
        ids = table.column("segment_id").to_pylist() if table.num_rows else []
        added = table.column("added_version").to_pylist() if table.num_rows else []
        ordered = sorted(source.tombstones, key=lambda t: t.version)
        return tuple(
            _file_read(
                LiveSegment(segments[sid], int(v)),
                source.resolve(segments[sid].path),
                _newer(ordered, int(v)),
            )
            for sid, v in sorted(zip(ids, added, strict=True), key=lambda p: (p[1], p[0]))
        )
    if resolve is None:
        raise TypeError("snapshot_reads(TableState) needs resolve= (catalog.read.changes.resolver)")
    ordered = sorted(source.tombstones, key=lambda t: t.version)
    lives = sorted(source.segments.items(), key=lambda p: (p[1].added_version, p[0]))
    return tuple(
        _file_read(live, resolve(live.segment.path), _newer(ordered, live.added_version)) for _, live in lives
    )


class ChangeTracker:
    """Fed each accepted ``CommitDelta`` in log order, starting from a ``TableState``; answers the
    ``VersionFiles`` of each.

    It keeps its own image (``state``, a copy of ``start`` advanced by ``TableState.apply``, the
    one fold), so the files a version drops are known although the state after it no longer
    lists them. ``resolve`` turns a segment path into the file it names; default: under the
    image's recorded location (else ``root``), as ``Snapshot.resolve`` does.
    """

    def __init__(
        self, start: TableState, resolve: Callable[[str], str] | None = None, *, root: str | None = None
    ) -> None:
        self.state = start.copy()
        if resolve is None:
            base = self.state.location or root
            if base is None:
                raise TypeError("ChangeTracker needs resolve= or root= for a table without a location")
            resolve = resolver(base, lambda: self.state.properties)
        self._resolve = resolve
        self._schemas: dict[str, list[tuple[int, str]]] = {}
        """Recorded schema JSON ("" for none) → a heap of (added version, segment id) of the live
        segments carrying it (dropped ones leave lazily): the oldest file of each, cheaply."""
        self._merged: tuple[tuple[tuple[str, int, str], ...], str | None] | None = None
        for sid, live in self.state.segments.items():
            self._add_schema(sid, live)

    @property
    def version(self) -> int:
        """The last version observed (the start's, before any)."""
        return self.state.version

    def _add_schema(self, sid: str, live: LiveSegment) -> None:
        heapq.heappush(self._schemas.setdefault(live.segment.schema or "", []), (live.added_version, sid))

    def _oldest(self) -> list[tuple[str, int, str]]:
        """(segment id, added version, schema) of the oldest live segment of each recorded schema."""
        out = []
        for raw in list(self._schemas):
            heap = self._schemas[raw]
            while heap and heap[0][1] not in self.state.segments:
                heapq.heappop(heap)
            if not heap:
                del self._schemas[raw]
                continue
            out.append((heap[0][1], heap[0][0], raw))
        return out

    def observe(self, delta: CommitDelta) -> VersionFiles:
        """The rows ``delta`` (the next accepted version) inserts and deletes; then apply it."""
        if delta.version <= self.state.version:
            raise ValueError(f"version {delta.version} is not after the tracker's {self.state.version}")
        commit = delta.commit
        kind = classify(commit.operation, len(commit.adds), len(commit.drops), len(commit.tombstones))
        before = sorted(self.state.tombstones, key=lambda t: t.version)
        dropped_ids = set(commit.drops)
        deleted: list[FileRead] = []
        if kind is not VersionKind.COMPACT:
            for sid in commit.drops:
                live = self.state.segments[sid]
                deleted.append(
                    _file_read(live, self._resolve(live.segment.path), _newer(before, live.added_version))
                )
            new = [t.predicate for t in delta.tombstones]
            if new:
                kept = sorted(
                    (p for p in self.state.segments.items() if p[0] not in dropped_ids),
                    key=lambda p: (p[1].added_version, p[0]),
                )
                for _, live in kept:
                    earlier = _newer(before, live.added_version)
                    uri = self._resolve(live.segment.path)
                    for k, predicate in enumerate(new):
                        deleted.append(_file_read(live, uri, (*earlier, *new[:k]), predicate))
        self.state.apply(delta)
        for segment in commit.adds:
            self._add_schema(segment.segment_id, self.state.segments[segment.segment_id])
        inserted = tuple(
            _file_read(LiveSegment(s, delta.version), self._resolve(s.path), ()) for s in commit.adds
        )
        return VersionFiles(
            delta.version,
            delta.timestamp_ms,
            commit.operation.value,
            kind,
            inserted,
            tuple(deleted),
            self.schema(),
        )

    def live_reads(self) -> tuple[FileRead, ...]:
        """The live files now, each minus the tombstones newer than it (``snapshot_reads``)."""
        return snapshot_reads(self.state, self._resolve)

    def schema(self) -> str | None:
        """The table schema of the live files now (``VersionFiles.schema``): their recorded
        schemas merged, oldest first (as ``si.read`` orders them); None if one records none."""
        found = [
            (self._resolve(self.state.segments[sid].segment.path), v, raw) for sid, v, raw in self._oldest()
        ]
        oldest = tuple(sorted(found, key=lambda item: (item[1], item[0])))
        if not oldest or any(raw == "" for _, _, raw in oldest):
            return None
        if self._merged is None or self._merged[0] != oldest:
            self._merged = (oldest, merged_schema(oldest))
        return self._merged[1]


# ---------------------------------------------------------------------------- schemas


def merged_schema(files: Iterable[tuple[str, int, str | None]]) -> str | None:
    """The table schema (Spark's JSON) of files given as (uri, added version, recorded schema);
    None when one records none. ``IncompatibleSchema`` names a file of each side of a conflict."""
    sources: list[spark_types.Source] = []
    seen: set[str] = set()
    for uri, version, raw in sorted(files, key=lambda f: (f[1], f[0])):
        if raw is None:
            return None
        if raw in seen:
            continue
        seen.add(raw)
        parsed = spark_types.parse_schema(raw)
        if parsed is None:
            return None
        sources.append(spark_types.Source(parsed, f"{uri} (version {version})"))
    if not sources:
        return None
    return json.dumps(_merge(sources), separators=(",", ":"))


def _merge(sources: Sequence[spark_types.Source]) -> dict[str, Any]:
    try:
        return spark_types.merged(sources)
    except spark_types.Conflict as conflict:
        other = getattr(conflict, "other", sources[0])
        source = getattr(conflict, "source", sources[-1])
        raise IncompatibleSchema(
            f"column {conflict.path!r} is {spark_types.simple_string(conflict.left)} in {other.first} and "
            f"{spark_types.simple_string(conflict.right)} in {source.first}; no reader widens one to the "
            'other (docs/PROTOCOL.md §4a, "Schemas"): rewrite or drop one side\'s files to read the table'
        ) from None


def arrow_schema(table_schema: str) -> pa.Schema:
    """The table's columns (Spark's JSON, ``VersionFiles.schema``) as Arrow types, as Spark maps them."""
    parsed = spark_types.parse_schema(table_schema)
    if parsed is None:
        raise IncompatibleSchema(f"not a table schema (Spark's StructType JSON): {table_schema[:80]!r}")
    try:
        return spark_types.schema_to_arrow(parsed)
    except spark_types.UnknownType as exc:
        raise IncompatibleSchema(str(exc)) from None


def reads_schema(reads: Iterable[FileRead], config: Config) -> pa.Schema:
    """The schema to read ``reads`` with: their files' schemas merged (recorded, else the footer's)."""
    sources: dict[str, spark_types.Source] = {}
    for read in sorted(reads, key=lambda r: (r.added_version, r.uri)):
        raw = read.file_schema
        parsed = spark_types.parse_schema(raw)
        key = raw if parsed is not None and raw is not None else f"file:{read.uri}"
        if key in sources:
            continue
        if parsed is None:
            footer = file_schema(_open(read, config))
            try:
                parsed = spark_types.schema_from_arrow(footer)
            except spark_types.UnknownType as exc:
                raise IncompatibleSchema(f"{read.uri} (version {read.added_version}): {exc}") from None
        sources[key] = spark_types.Source(parsed, f"{read.uri} (version {read.added_version})")
    if not sources:
        return pa.schema([])
    try:
        return spark_types.schema_to_arrow(_merge(list(sources.values())))
    except spark_types.UnknownType as exc:
        raise IncompatibleSchema(str(exc)) from None


# ---------------------------------------------------------------------------- reading rows


def _open(read: FileRead, config: Config) -> pq.ParquetFile:
    fs, path = filesystem(read.uri, config.s3_endpoint, config.s3_region)
    try:
        handle = fs.open_input_file(path)
    except FileNotFoundError:
        raise DataFileMissing(
            f"{read.uri} (added at version {read.added_version}) is gone from storage: vacuumed, or "
            "deleted by hand; hold a version lease while reading (Table.lease)"
        ) from None
    try:
        return pq.ParquetFile(handle, coerce_int96_timestamp_unit="us")
    except (pa.ArrowInvalid, OSError) as exc:
        raise IncompatibleSchema(
            f"{read.uri} (version {read.added_version}) is not a readable Parquet file: {exc}"
        ) from None


def file_schema(parquet: pq.ParquetFile) -> pa.Schema:
    """The columns of a Parquet file as Spark reads them: an INT96 timestamp (Spark's legacy
    encoding, which pyarrow reads without a zone) is Spark's TIMESTAMP, an instant."""
    schema = parquet.schema_arrow
    for name in _int96_columns(parquet):
        index = schema.get_field_index(name)
        schema = schema.set(index, schema.field(index).with_type(pa.timestamp("us", tz="UTC")))
    return schema


def _int96_columns(parquet: pq.ParquetFile) -> list[str]:
    columns = parquet.schema
    return [
        columns.column(i).name
        for i in range(len(columns))
        if columns.column(i).physical_type == "INT96" and "." not in columns.column(i).path
    ]


@lru_cache(maxsize=1024)
def _predicate(text: str) -> Predicate:
    try:  # lenient: what protocols 1 and 2 accepted (a protocol-3 tombstone parses either way)
        return parse_predicate(text, lenient=True)
    except InvalidPredicate as exc:
        raise UnsupportedPredicate(
            f"tombstone {text[:80]!r} is protocol-1 free text outside the predicate grammar ({exc}); "
            "only Spark applies it: read this table with Spark"
        ) from None


def check_predicates(reads: Iterable[FileRead], schema: pa.Schema) -> None:
    """``UnsupportedPredicate`` now for a tombstone no Arrow reader can apply to ``reads`` read
    with ``schema`` (before any row is read): each is evaluated once on no rows, with the columns
    each file recorded (a file without a recorded schema: all of them)."""
    empty = pa.RecordBatch.from_arrays([pa.array([], f.type) for f in schema], schema=schema)
    seen: set[tuple[str, tuple[str, ...] | None]] = set()
    for read in reads:
        recorded = spark_types.parse_schema(read.file_schema)
        present = None if recorded is None else tuple(sorted(f["name"] for f in recorded["fields"]))
        for text in (*read.exclude, *(() if read.include is None else (read.include,))):
            if (text, present) not in seen:
                seen.add((text, present))
                matches(_predicate(text), empty, present)


def read_rows(
    read: FileRead, schema: pa.Schema, config: Config, batch_rows: int = 65_536
) -> Iterator[pa.RecordBatch]:
    """The rows of ``read``'s file conformed to ``schema``, its ``exclude`` / ``include`` applied.

    A column the file lacks reads as nulls; a narrower type as the wider (the widenings of
    ``spark_types``); any other difference is ``IncompatibleSchema`` naming the file and the
    column. Tombstones are evaluated by ``row_filter`` with the protocol's meaning (UTC), on the
    table's types, a column the file lacks reading as a NULL literal, exactly as Spark's filter
    (``si.read``) would. ``DataFileMissing`` when the file is gone."""
    for rows, keep in read_masks(read, schema, config, batch_rows):
        yield rows if keep is None else rows.filter(pa.array(keep))


def read_masks(
    read: FileRead, schema: pa.Schema, config: Config, batch_rows: int = 65_536
) -> Iterator[tuple[pa.RecordBatch, np.ndarray | None]]:
    """Every row of ``read``'s file in the file's order, batch by batch, conformed to ``schema``,
    each batch with the mask of the rows ``read_rows`` keeps (None: all of them). A row's index
    in this sequence is its position in the file, the position Iceberg's position deletes name."""
    excludes = [_predicate(t) for t in read.exclude]
    include = None if read.include is None else _predicate(read.include)
    parquet = _open(read, config)
    instants = _int96_columns(parquet)
    file_columns = {name.lower(): name for name in reversed(parquet.schema_arrow.names)}
    wanted = [file_columns[f.name.lower()] for f in schema if f.name.lower() in file_columns]
    present = [f.name for f in schema if f.name.lower() in file_columns]
    for batch in parquet.iter_batches(batch_size=batch_rows, columns=wanted or None, use_threads=False):
        for name in instants:
            index = batch.schema.get_field_index(name)
            if index >= 0:
                batch = batch.set_column(
                    index, name, pc.cast(batch.column(index), pa.timestamp("us", tz="UTC"))
                )
        rows = conform(batch, schema, read)
        keep: np.ndarray | None = None
        if include is not None:
            keep = matches(include, rows, present)
        for predicate in excludes:
            gone = matches(predicate, rows, present)
            keep = ~gone if keep is None else keep & ~gone
        yield rows, keep


def conform(batch: pa.RecordBatch, schema: pa.Schema, read: FileRead) -> pa.RecordBatch:
    """``batch`` (a file's columns) as ``schema``: columns matched by name as Spark does (case-
    insensitively), missing ones null, narrower types cast to the wider ones."""
    by_name = {name.lower(): i for i, name in reversed(list(enumerate(batch.schema.names)))}
    arrays = []
    for field in schema:
        index = by_name.get(field.name.lower())
        if index is None:
            arrays.append(pa.nulls(batch.num_rows, field.type))
            continue
        arrays.append(_widened(batch.column(index), field, read))
    return pa.RecordBatch.from_arrays(arrays, schema=schema.remove_metadata())


def _widened(values: pa.Array, field: pa.Field, read: FileRead) -> pa.Array:
    if values.type.equals(field.type):
        return values
    if pa.types.is_struct(values.type) and pa.types.is_struct(field.type):
        return _struct(values, field, read)
    try:
        source = spark_types.from_arrow(values.type)
        target = spark_types.from_arrow(field.type)
        allowed = spark_types.widen(source, target, field.name) == target
    except (spark_types.UnknownType, spark_types.Conflict):
        allowed = False
    if allowed or _same_kind(values.type, field.type):
        try:
            return values.cast(field.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
    raise IncompatibleSchema(
        f"column {field.name!r} is {values.type} in {read.uri} (version {read.added_version}) and "
        f'{field.type} in the table; no reader widens one to the other (docs/PROTOCOL.md §4a, "Schemas")'
    )


def _struct(values: pa.StructArray, field: pa.Field, read: FileRead) -> pa.Array:
    """A struct by field, as Spark reads it: fields matched by name, missing ones null, each widened."""
    target = field.type
    by_name = {values.type.field(i).name.lower(): i for i in reversed(range(values.type.num_fields))}
    children = []
    for k in range(target.num_fields):
        child = target.field(k)
        index = by_name.get(child.name.lower())
        if index is None:
            children.append(pa.nulls(len(values), child.type))
        else:
            inner = values.field(index)  # the child without the parent's validity
            children.append(_widened(inner, child.with_name(f"{field.name}.{child.name}"), read))
    fields = [target.field(k) for k in range(target.num_fields)]
    return pa.StructArray.from_arrays(children, fields=fields, mask=values.is_null())


def _same_kind(source: pa.DataType, target: pa.DataType) -> bool:
    """Encodings of one Spark type (large vs plain strings, timestamp units and INT96)."""
    if pa.types.is_timestamp(source) and pa.types.is_timestamp(target):
        return (source.tz is None) == (target.tz is None)
    text = (pa.types.is_string, pa.types.is_large_string)
    data = (pa.types.is_binary, pa.types.is_large_binary)
    return (any(a(source) for a in text) and any(b(target) for b in text)) or (
        any(a(source) for a in data) and any(b(target) for b in data)
    )


def change_batches(
    vf: VersionFiles, schema: pa.Schema, config: Config, batch_rows: int = 65_536
) -> Iterator[pa.RecordBatch]:
    """``vf``'s rows with ``_change_type`` (``insert`` / ``delete``), ``_commit_version`` and
    ``_commit_timestamp`` (µs, UTC) appended; nothing for a ``COMPACT`` or metadata version."""
    if not vf.changes_rows:
        return
    for change, reads in ((DELETE, vf.deleted), (INSERT, vf.inserted)):
        for read in reads:
            for rows in read_rows(read, schema, config, batch_rows):
                if rows.num_rows:
                    yield with_change_columns(rows, change, vf.version, vf.timestamp_ms)


def with_change_columns(rows: pa.RecordBatch, change: str, version: int, timestamp_ms: int) -> pa.RecordBatch:
    """``rows`` with the change feed's three columns appended."""
    n = rows.num_rows
    extra = [
        pa.array([change] * n, pa.string()),
        pa.array(np.full(n, version, dtype=np.int64)),
        pc.cast(pa.array(np.full(n, timestamp_ms * 1000, dtype=np.int64)), pa.timestamp("us", tz="UTC")),
    ]
    return pa.RecordBatch.from_arrays(
        [*rows.columns, *extra], schema=pa.schema([*rows.schema, *CHANGE_COLUMNS])
    )
