"""The Iceberg publisher: Iceberg (format v2) metadata of every accepted version, beside the key frames.

For each accepted version it writes, under the log's ``iceberg/metadata/`` (``catalog.iceberg.
layout``): the new manifests and the manifest list of the version's snapshot (when it moves
files), ``v<N>.metadata.json``, ``version-hint.text``, then the table's Iceberg pointer in Redis
(``catalog.iceberg.pointer``), which the REST catalog serves. What goes into them is
``catalog.iceberg.exporter``'s; this module follows the log: it keeps its own image of the table
(a ``ChangeTracker``) so it knows the files each version drops, and the files still live when
a version becomes publishable again after a gap.

A version that cannot be represented exactly (a tombstone no delete file can express, a column
type Iceberg lacks) is not published: the pointer keeps the last exact version and names the
first one blocked and why; versions after it are published again once nothing unrepresentable
is live. A table whose ``segcat.iceberg.enabled`` is ``false`` gets no metadata; a dropped one
gets none either (its pointer says so).

The publisher never stops the table: anything that fails while writing is logged and put in the
pointer, and the next version (or the next tick, after a pause) publishes again from the files
still live. So the Redis and key-frame publishers, which run before it, never wait on it.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from redis.exceptions import RedisError

from segcat.catalog.config import Config
from segcat.catalog.errors import IncompatibleSchema, SegcatError, ServiceUnavailable
from segcat.catalog.iceberg import layout
from segcat.catalog.iceberg.avro_files import DATA, FileEntry
from segcat.catalog.iceberg.exporter import IcebergExport, VersionChange
from segcat.catalog.iceberg.metadata import table_uuid
from segcat.catalog.iceberg.pointer import IcebergPointer, write_pointer
from segcat.catalog.iceberg.retention import metadata_versions
from segcat.catalog.iceberg.schema import FieldIds, UnrepresentableType, iceberg_schema
from segcat.catalog.iceberg.stats import metrics
from segcat.catalog.protocol import spark_types
from segcat.catalog.protocol import tags as tag_names
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.model import Segment
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read.changes import (
    ChangeTracker,
    FileRead,
    arrow_schema,
    file_schema,
    merged_schema,
    resolver,
)
from segcat.catalog.read.iceberg_deletes import Unrepresentable, write_deletes
from segcat.catalog.read.table import table_root
from segcat.catalog.storage.objectstore import filesystem
from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.table_files import TableFiles
from segcat.materializer.publisher import CaughtUp, Loaded, Publisher, RecordDelta, TableDelta, TableImage

log = logging.getLogger("segcat.materializer")

ENABLED_PROPERTY = "segcat.iceberg.enabled"
"""Table property: ``false`` turns the table's Iceberg metadata off (default on)."""
KEEP_SNAPSHOTS_PROPERTY = "segcat.iceberg.snapshots.keep"
"""Table property: how many snapshots (of versions still readable) the metadata lists."""
KEEP_SNAPSHOTS_DEFAULT = 100
RETRY_AFTER_S = 30.0
"""After a failure, the next attempt waits for a new version or this long."""

_REDIS_ERRORS = (ServiceUnavailable, RedisError)


class _SchemaUnknown(Exception):
    """A live file records no schema and its footer cannot be read; ``str(exc)`` says which."""


@dataclass(frozen=True)
class _Blocked:
    version: int
    reason: str


class IcebergPublisher(Publisher):
    """One table's Iceberg metadata. ``state`` hands the loader's image on ``Loaded`` (read only:
    the publisher's ``ChangeTracker`` takes its own copy)."""

    name = "iceberg"

    def __init__(
        self,
        table: TableName,
        config: Config,
        redis: RedisStore | None,
        files: TableFiles,
        state: Callable[[], TableState],
    ) -> None:
        self._table = table
        self._label = table.qualified
        self._config = config
        self._redis = redis
        self.files = files
        self._state = state
        self.tracker: ChangeTracker | None = None
        self.export: IcebergExport | None = None
        self._resolve: Callable[[str], str] = lambda p: p
        self._blocked: dict[int, str] = {}
        """Tombstone version → why it cannot be exported (live while an older file is)."""
        self._exported: set[int] = set()
        """Versions whose tombstones have delete files (written, maybe not yet published)."""
        self._pending_deletes: list[FileEntry] = []
        """Delete files written for versions not yet published (a gap)."""
        self._behind = False
        """The metadata is older than the tracker: the next publication diffs the live files."""
        self._failed_at = 0.0
        self._pointer: IcebergPointer | None = None
        self._pointer_dirty = False
        self._log_id: str | None = None
        self._schema_cache: tuple[str | None, int] | None = None
        self._hint_due = False
        """Versions were published during a backlog: hint and pointer are written at its end."""
        self._footers: dict[str, str | _SchemaUnknown] = {}
        """A live file without a recorded schema → its footer's (or why it is unreadable)."""
        self.catching_up = False

    # ------------------------------------------------------------------ publisher

    def publish(self, delta: TableDelta, image: TableImage) -> None:
        if isinstance(delta, Loaded):
            self._loaded(delta, image)
        elif isinstance(delta, RecordDelta):
            self.catching_up = not delta.live
            if delta.commit is not None and self.tracker is not None:
                self._commit(delta.commit, image)
        elif isinstance(delta, CaughtUp):
            self.catching_up = False
            if self._hint_due:
                self._guarded(self._announce, image)

    def _announce(self) -> None:
        """The hint and the pointer of the newest version published (the end of a backlog)."""
        self._hint_due = False
        export = self.export
        version, location = self._published()
        if export is not None and version >= 0:
            export.write_hint()
            current = self._pointer
            if current is None or current.version != version or current.blocked_version is None:
                self._set_pointer(version, location, None, None)

    def tick(self, image: TableImage) -> None:
        if self._behind and self._failed_at and time.monotonic() - self._failed_at >= RETRY_AFTER_S:
            self._guarded(lambda: self._catch_up(image.version, image.timestamp_ms or 0, "", ""), image)
        if self._pointer_dirty and self._pointer is not None:
            self._send_pointer(self._pointer)

    def due(self, image: TableImage) -> float | None:
        """The retry after a failure, and a pointer Redis did not take (sent again at once)."""
        deadlines = []
        if self._behind and self._failed_at:
            deadlines.append(self._failed_at + RETRY_AFTER_S)
        if self._pointer_dirty and self._pointer is not None:
            deadlines.append(time.monotonic())
        return min(deadlines, default=None)

    # ------------------------------------------------------------------ loading

    def _loaded(self, delta: Loaded, image: TableImage) -> None:
        self.files = delta.files
        self._log_id = image.log_id
        state = self._state()
        root = state.location or table_root(self._config, self._table)
        self._root = root
        tracker = ChangeTracker(state, root=root)
        self._resolve = resolver(root, lambda: tracker.state.properties)
        self.tracker = tracker
        self.export = None
        self._blocked = {}
        self._exported = set()
        self._pending_deletes = []
        self._schema_cache = None
        self._footers = {}
        self._hint_due = False
        self.catching_up = False
        self._behind = True
        self._failed_at = 0.0
        if image.version < 0:
            return
        self._guarded(lambda: self._recover(image), image)

    def _recover(self, image: TableImage) -> None:
        """The newest metadata at or before the image's version, brought up to it."""
        found = self._newest_metadata(image.version)
        if found is not None:
            self.export = IcebergExport.load(self.files.store, self.files, found)
            self._behind = self.export.version != image.version
        if self._behind:
            self._catch_up(image.version, image.timestamp_ms or 0, image.commit_id or "", "")

    def _newest_metadata(self, at_most: int) -> str | None:
        try:
            names = self.files.store.list(layout.metadata_dir(self.files))
        except FileNotFoundError:
            return None
        versions = [v for v in metadata_versions(names) if v <= at_most]
        return layout.metadata_path(self.files, versions[-1]) if versions else None

    # ------------------------------------------------------------------ versions

    def _commit(self, commit: CommitDelta, image: TableImage) -> None:
        tracker = self.tracker
        assert tracker is not None
        drops = [self._resolve(tracker.state.segments[sid].segment.path) for sid in commit.dropped]
        files = tracker.observe(commit)

        def step() -> None:
            if commit.tombstones:
                self._tombstones(commit, files.deleted)
            self._version(commit, drops)

        self._guarded(step, image)

    def _version(self, commit: CommitDelta, drops: Sequence[str]) -> None:
        tracker = self.tracker
        assert tracker is not None
        version = commit.version
        if self._failed_at and time.monotonic() - self._failed_at < RETRY_AFTER_S:
            return  # the pointer says why; tried again after the pause (``tick``)
        blocked = self._why_blocked(version)
        if blocked is not None:
            self._block(blocked)
            return
        if self._behind or self.export is None:
            self._catch_up(version, commit.timestamp_ms, commit.commit_id, commit.operation.value)
            return
        export = self.export
        schema_id = self._schema_id()
        columns = self._columns()
        adds = [self._entry(s, version, columns) for s in commit.added]
        deletes, self._pending_deletes = self._pending_deletes, []
        change = VersionChange(
            version,
            commit.timestamp_ms,
            commit.operation.value,
            commit.commit_id,
            adds=adds,
            drops=drops,
            deletes=deletes,
            snapshot=commit.changes_data,
        )
        self._write(export, change, schema_id)

    def _catch_up(self, version: int, timestamp_ms: int, commit_id: str, operation: str) -> None:
        """Publish ``version`` from the live files (after a gap: a restart, a blocked stretch, a
        failure): one snapshot adding what the metadata lacks and deleting what is gone."""
        tracker = self.tracker
        assert tracker is not None
        blocked = self._why_blocked(version)
        if blocked is not None:
            self._block(blocked)
            return
        if self.export is None:
            uuid = table_uuid(self._log_id, self._label)
            self.export = IcebergExport(self.files.store, self.files, uuid, self._root)
        export = self.export
        if tracker.state.tombstones and self._tombstones_live(tracker.state, after=export.version):
            self._block(_Blocked(version, "tombstones not exported across a gap in the Iceberg metadata"))
            return
        schema_id = self._schema_id()
        live = {
            self._resolve(live.segment.path): (live.segment, live.added_version)
            for live in tracker.state.segments.values()
        }
        known = export.live_uris
        columns = self._columns()
        adds = [
            self._entry(segment, added, columns, snapshot_id=version)
            for uri, (segment, added) in sorted(live.items(), key=lambda p: (p[1][1], p[0]))
            if uri not in known
        ]
        drops = sorted(known - live.keys())
        deletes, self._pending_deletes = self._pending_deletes, []
        change = VersionChange(
            version,
            timestamp_ms,
            operation,
            commit_id,
            adds=adds,
            drops=drops,
            deletes=deletes,
            snapshot=bool(adds or drops or deletes) or (export.current_snapshot is None and bool(live)),
        )
        self._write(export, change, schema_id)
        self._behind = False

    def _write(self, export: IcebergExport, change: VersionChange, schema_id: int) -> None:
        tracker = self.tracker
        assert tracker is not None
        properties = dict(tracker.state.properties)
        location = export.commit(
            change,
            schema_id=schema_id,
            properties=properties,
            tags=tag_names.tags_of(properties),
            keep_snapshots=_keep(properties),
            oldest_readable=tracker.state.log_start,
        )
        self._failed_at = 0.0
        if self.catching_up:  # a backlog: the hint and the pointer once, at its end
            self._hint_due = True
            return
        export.write_hint()
        self._set_pointer(export.version, location, None, None)

    # ------------------------------------------------------------------ blocking

    def _why_blocked(self, version: int) -> _Blocked | None:
        tracker = self.tracker
        assert tracker is not None
        state = tracker.state
        if state.dropped:
            return _Blocked(version, "the table is dropped")
        if state.properties.get(ENABLED_PROPERTY, "true").lower() == "false":
            return _Blocked(version, f"Iceberg metadata is turned off ({ENABLED_PROPERTY}=false)")
        if self._blocked:
            oldest = min((live.added_version for live in state.segments.values()), default=None)
            self._blocked = {t: r for t, r in self._blocked.items() if oldest is not None and oldest < t}
            if self._blocked:
                first = min(self._blocked)
                return _Blocked(first, self._blocked[first])
        try:
            self._schema_id()
        except (UnrepresentableType, _SchemaUnknown, IncompatibleSchema) as exc:
            return _Blocked(version, str(exc))
        return None

    def _block(self, blocked: _Blocked) -> None:
        self._behind = True
        version, location = self._published()
        current = self._pointer
        first = blocked.version
        if current is not None and current.blocked_version is not None and current.version == version:
            first = min(first, current.blocked_version) if current.reason == blocked.reason else first
        self._set_pointer(version, location, first, blocked.reason)

    def _tombstones(self, commit: CommitDelta, reads: Sequence[FileRead]) -> None:
        """Export the version's tombstones as delete files, or note why they cannot be."""
        affected = [r for r in reads if r.include is not None]
        if not affected:
            return
        try:
            schema = self._arrow_schema()
            field_ids = {f.name: self._ids().id_of((f.name,)) for f in schema}
            wanted = {r.uri for r in affected}
            tracker = self.tracker
            assert tracker is not None
            segments = {  # their stats and Bloom filters spare reading files a tombstone cannot match
                uri: live.segment
                for live in tracker.state.segments.values()
                if (uri := self._resolve(live.segment.path)) in wanted
            }
            written = write_deletes(
                self.files.store,
                self.files,
                commit.version,
                commit.tombstones,
                affected,
                schema,
                field_ids,
                self._config,
                segments=segments,
            )
        except Unrepresentable as exc:
            self._blocked[commit.version] = str(exc)
            return
        self._exported.add(commit.version)
        for d in written:
            self._pending_deletes.append(
                FileEntry(
                    uri=d.uri,
                    content=1 if d.content == "position" else 2,
                    record_count=d.record_count,
                    size_bytes=d.size_bytes,
                    snapshot_id=commit.version,
                    sequence_number=commit.version + 1,
                    equality_ids=tuple(d.equality_field_ids),
                    referenced_data_file=d.referenced_data_files[0]
                    if len(d.referenced_data_files) == 1
                    else None,
                )
            )

    def _tombstones_live(self, state: TableState, *, after: int) -> bool:
        """Whether a tombstone newer than ``after`` deletes in a live file (its delete files were
        not written: they are written only as each tombstone's version is published)."""
        oldest = min((live.added_version for live in state.segments.values()), default=None)
        return oldest is not None and any(
            t.version > after and t.version > oldest and t.version not in self._exported
            for t in state.tombstones
        )

    # ------------------------------------------------------------------ schema and entries

    def _ids(self) -> FieldIds:
        return FieldIds() if self.export is None else self.export.ids

    def _schema_json(self) -> str | None:
        """The table schema now (Spark's JSON; None: no file is live): the live files' recorded
        schemas merged, a file that records none read from its footer (once per file).
        ``_SchemaUnknown`` when a footer cannot be read."""
        tracker = self.tracker
        assert tracker is not None
        raw = tracker.schema()
        if raw is not None or not tracker.state.segments:
            return raw
        sources = []
        for live in tracker.state.segments.values():
            uri = self._resolve(live.segment.path)
            recorded = live.segment.schema or self._footer_schema(uri, live.added_version)
            sources.append((uri, live.added_version, recorded))
        return merged_schema(sources)

    def _footer_schema(self, uri: str, added_version: int) -> str:
        known = self._footers.get(uri)
        if known is None:
            try:
                fs, path = filesystem(uri, self._config.s3_endpoint, self._config.s3_region)
                with fs.open_input_file(path) as handle:
                    footer = file_schema(pq.ParquetFile(handle, coerce_int96_timestamp_unit="us"))
                known = json.dumps(spark_types.schema_from_arrow(footer), separators=(",", ":"))
            except (OSError, pa.ArrowException, spark_types.UnknownType) as exc:
                known = _SchemaUnknown(
                    f"the schema of {uri} (version {added_version}) is neither recorded nor readable: {exc}"
                )
            self._footers[uri] = known
        if isinstance(known, _SchemaUnknown):
            raise known
        return known

    def _arrow_schema(self) -> pa.Schema:
        raw = self._schema_json()
        return pa.schema([]) if raw is None else arrow_schema(raw)

    def _schema_id(self) -> int:
        """The id of the table schema now (added to the metadata when new)."""
        tracker = self.tracker
        export = self.export
        assert tracker is not None
        raw = self._schema_json()
        if self._schema_cache is not None and self._schema_cache[0] == raw and raw is not None:
            return self._schema_cache[1]
        if export is None:  # nothing published yet: only check that Iceberg has the types
            iceberg_schema(self._arrow_schema(), FieldIds(), 0)
            return 0
        if raw is None and export.schemas:
            # no file live: the last schema stays (an Iceberg table always has one, and DuckDB
            # refuses a table of no column), with no row
            return export.current_schema_id
        schema = iceberg_schema(pa.schema([]) if raw is None else arrow_schema(raw), export.ids, 0)
        schema_id = export.schema_id_for(schema)
        self._schema_cache = (raw, schema_id)
        return schema_id

    def _columns(self) -> dict[str, tuple[int, str]]:
        """Top-level primitive column (lower case) → (field id, Iceberg type), of the schema now."""
        export = self.export
        assert export is not None
        schema_id = self._schema_id()
        empty: dict[str, Any] = {"fields": []}
        current = next((s for s in export.schemas if s["schema-id"] == schema_id), empty)
        return {
            str(f["name"]).lower(): (int(f["id"]), f["type"])
            for f in current["fields"]
            if isinstance(f["type"], str)
        }

    def _entry(
        self,
        segment: Segment,
        added_version: int,
        columns: Mapping[str, tuple[int, str]],
        *,
        snapshot_id: int | None = None,
    ) -> FileEntry:
        values, nulls, lower, upper = metrics(segment, columns)
        return FileEntry(
            uri=self._resolve(segment.path),
            content=DATA,
            record_count=segment.row_count,
            size_bytes=segment.size_bytes,
            snapshot_id=added_version if snapshot_id is None else snapshot_id,
            sequence_number=added_version + 1,
            value_counts=values,
            null_counts=nulls,
            lower_bounds=lower,
            upper_bounds=upper,
        )

    # ------------------------------------------------------------------ failures and the pointer

    def _guarded(self, step: Callable[[], None], image: TableImage) -> None:
        """Run ``step``; a failure is the pointer's, never the table's (see the module's docstring)."""
        try:
            step()
        except Exception as exc:  # any failure here is the pointer's, never the table's
            self._behind = True
            self._failed_at = time.monotonic()
            expected = isinstance(exc, SegcatError | OSError | ValueError)
            log.warning(
                "iceberg metadata not written",
                extra={"table": self._label, "version": image.version, "error": str(exc)},
                exc_info=not expected,
            )
            version, location = self._published()
            self._set_pointer(version, location, image.version, f"writing the Iceberg metadata failed: {exc}")

    def _published(self) -> tuple[int, str | None]:
        """The newest version published (-1: none) and its metadata's URI."""
        export = self.export
        if export is None or export.version < 0:
            return -1, None
        return export.version, self.files.store.uri(layout.metadata_path(self.files, export.version))

    def _set_pointer(
        self, version: int, location: str | None, blocked: int | None, reason: str | None
    ) -> None:
        pointer = IcebergPointer(self._log_id, version, location, blocked, reason, int(time.time() * 1000))
        previous = self._pointer
        if (
            previous is not None
            and (previous.version, previous.location, previous.blocked_version, previous.reason)
            == (
                version,
                location,
                blocked,
                reason,
            )
            and not self._pointer_dirty
        ):
            return
        self._pointer = pointer
        self._send_pointer(pointer)

    def _send_pointer(self, pointer: IcebergPointer) -> None:
        if self._redis is None:
            return
        try:
            write_pointer(self._redis, self._table, pointer)
        except _REDIS_ERRORS as exc:
            self._pointer_dirty = True  # Redis is a cache: written again on a tick
            log.debug("iceberg pointer not written", extra={"table": self._label, "error": str(exc)})
            return
        self._pointer_dirty = False


def _keep(properties: Mapping[str, str]) -> int:
    raw = properties.get(KEEP_SNAPSHOTS_PROPERTY)
    if raw is None or not raw.isdigit() or int(raw) < 1:
        return KEEP_SNAPSHOTS_DEFAULT
    return int(raw)
