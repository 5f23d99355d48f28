"""One log's Iceberg metadata, version after version: manifests, snapshots, schemas, field ids.

``IcebergExport.commit`` turns one segcat version (the data files it adds and drops, the delete
files it adds, the table schema after it) into ``v<N>.metadata.json`` and, for a version that
changes files, a snapshot: its manifest list and the few manifests it needs. The cost follows
the change (docs/ICEBERG.md, *Manifests*):

- the files a version adds go into new manifests of at most ``MANIFEST_ENTRIES`` entries;
- a manifest holding a dropped file is rewritten (its other files EXISTING, the dropped ones
  DELETED); every other manifest is reused as it is;
- when more than ``MAX_SMALL_MANIFESTS`` manifests hold fewer than ``SMALL_ENTRIES`` live files,
  they are merged into one (a rule over the manifests alone, which are a function of the log:
  a restarted publisher writes the same files);
- a manifest left with no live file is listed by the snapshot that emptied it, then forgotten.

Every output name is a function of the version (``layout``) and every byte a function of the
log, so writing a version twice is harmless.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from segcat.catalog.iceberg import layout
from segcat.catalog.iceberg.avro_files import (
    MANIFEST_DATA,
    MANIFEST_DELETES,
    FileEntry,
    ManifestRef,
    read_manifest,
    read_manifest_list,
    write_manifest,
    write_manifest_list,
)
from segcat.catalog.iceberg.metadata import MetadataInputs, SnapshotInfo, document, to_bytes
from segcat.catalog.iceberg.schema import FieldIds
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.table_files import TableFiles

MANIFEST_ENTRIES = 10_000
"""The most entries a manifest of new files gets (a bigger version writes several)."""
SMALL_ENTRIES = 2_500
"""A manifest with fewer live files than this is small (a candidate for merging)."""
MAX_SMALL_MANIFESTS = 16
"""More small manifests than this are merged into one."""
METADATA_LOG_MAX = 100
"""Earlier metadata files named in ``metadata-log`` (Iceberg's ``write.metadata.previous-versions-max``)."""

OPERATIONS = {"APPEND": "append", "COMPACT": "replace", "DELETE": "delete", "REPLACE": "overwrite"}
"""segcat operation → Iceberg snapshot operation (anything else that moves files: overwrite)."""


@dataclass(frozen=True)
class VersionChange:
    """What one segcat version does, as the exporter needs it."""

    version: int
    timestamp_ms: int
    operation: str
    """segcat's operation ("": a catch-up over several versions, published as ``overwrite``)."""
    commit_id: str
    adds: Sequence[FileEntry] = ()
    drops: Sequence[str] = ()
    """URIs of the data files it drops."""
    deletes: Sequence[FileEntry] = ()
    """Delete files it adds (its tombstones)."""
    snapshot: bool = True
    """Whether it is a snapshot (it changes files); False: metadata only."""


@dataclass
class IcebergExport:
    """The Iceberg state of one log after ``version`` (the last version written)."""

    store: ObjectStore
    files: TableFiles
    table_uuid: str
    location: str
    version: int = -1
    data: list[ManifestRef] = field(default_factory=list)
    """The current snapshot's data manifests holding live files."""
    deletes: list[ManifestRef] = field(default_factory=list)
    snapshots: list[SnapshotInfo] = field(default_factory=list)
    schemas: list[dict[str, Any]] = field(default_factory=list)
    current_schema_id: int = 0
    ids: FieldIds = field(default_factory=FieldIds)
    metadata_log: list[tuple[str, int]] = field(default_factory=list)
    last_updated_ms: int = 0
    _schema_json: str = "{}"
    _where: dict[str, str] = field(default_factory=dict)
    """Live data file URI → the path of the manifest holding it."""

    def __post_init__(self) -> None:
        self._index()

    def _index(self) -> None:
        self._where = {e.uri: m.path for m in self.data for e in m.live}

    def _reindex(self, before: Sequence[ManifestRef]) -> None:
        """Move ``_where`` from the manifests of ``before`` to ``self.data``, touching only the
        manifests that changed (a version's cost follows its change, not the table's size)."""
        now = {m.path for m in self.data}
        was = {m.path for m in before}
        for manifest in before:
            if manifest.path not in now:
                for entry in manifest.live:
                    if self._where.get(entry.uri) == manifest.path:
                        del self._where[entry.uri]
        for manifest in self.data:
            if manifest.path not in was:
                for entry in manifest.live:
                    self._where[entry.uri] = manifest.path

    # ------------------------------------------------------------------ reading

    @property
    def live_uris(self) -> frozenset[str]:
        return frozenset(self._where)

    @property
    def current_snapshot(self) -> SnapshotInfo | None:
        return self.snapshots[-1] if self.snapshots else None

    def schema_id_for(self, schema: Mapping[str, Any]) -> int:
        """The id of ``schema`` (an Iceberg struct without its id), added when new."""
        body = {k: v for k, v in schema.items() if k != "schema-id"}
        for known in self.schemas:
            if {k: v for k, v in known.items() if k != "schema-id"} == body:
                return int(known["schema-id"])
        new_id = max((int(s["schema-id"]) for s in self.schemas), default=-1) + 1
        self.schemas.append({**body, "schema-id": new_id})
        return new_id

    # ------------------------------------------------------------------ writing

    def commit(
        self,
        change: VersionChange,
        *,
        schema_id: int,
        properties: Mapping[str, str],
        tags: Mapping[str, int],
        keep_snapshots: int,
        oldest_readable: int,
    ) -> str:
        """Write ``change``'s manifests, manifest list and ``v<N>.metadata.json``; its URI. The
        state moves to the version only once everything is written."""
        self._schema_json = json.dumps(
            next((s for s in self.schemas if s["schema-id"] == schema_id), {}), separators=(",", ":")
        )
        data, deletes = list(self.data), list(self.deletes)
        snapshots = list(self.snapshots)
        if change.snapshot:
            data, listed = self._data_manifests(change)
            deletes_listed = deletes
            if change.deletes:
                written = self._chunks(change, change.deletes, MANIFEST_DELETES, start=len(listed))
                deletes = [*deletes, *written]
                deletes_listed = deletes
            sequence = change.version + 1
            parent = snapshots[-1].snapshot_id if snapshots else None
            manifest_list = write_manifest_list(
                self.store,
                layout.manifest_list_path(self.files, change.version),
                snapshot_id=change.version,
                parent_snapshot_id=parent,
                sequence_number=sequence,
                manifests=[*listed, *deletes_listed],
            )
            summary = self._summary(change, data, deletes)
            snapshots.append(
                SnapshotInfo(
                    change.version, parent, sequence, change.timestamp_ms, manifest_list, schema_id, summary
                )
            )
            data = [m for m in data if m.live]
        snapshots = _retained(snapshots, tags, keep_snapshots, oldest_readable)
        metadata_log = list(self.metadata_log)
        if self.version >= 0:
            metadata_log.append(
                (self.store.uri(layout.metadata_path(self.files, self.version)), self.last_updated_ms)
            )
        metadata_log = metadata_log[-METADATA_LOG_MAX:]
        current = snapshots[-1] if snapshots else None
        refs = _tag_refs(tags, snapshots)
        doc = document(
            MetadataInputs(
                table_uuid=self.table_uuid,
                location=self.location,
                version=change.version,
                last_updated_ms=change.timestamp_ms,
                schemas=self.schemas,
                current_schema_id=schema_id,
                last_column_id=self.ids.last,
                snapshots=snapshots,
                current_snapshot_id=None if current is None else current.snapshot_id,
                last_sequence_number=0 if current is None else current.sequence_number,
                properties=properties,
                refs=refs,
                metadata_log=metadata_log,
            )
        )
        path = layout.metadata_path(self.files, change.version)
        self.store.put(path, to_bytes(doc))
        before = self.data
        self.data, self.deletes, self.snapshots = data, deletes, snapshots
        self.metadata_log = metadata_log
        self.current_schema_id = schema_id
        self.version = change.version
        self.last_updated_ms = change.timestamp_ms
        self._reindex(before)
        return self.store.uri(path)

    def write_hint(self) -> None:
        """``version-hint.text``: the newest version, for readers given the directory alone."""
        self.store.put(layout.version_hint_path(self.files), f"{self.version}\n".encode())

    def _data_manifests(self, change: VersionChange) -> tuple[list[ManifestRef], list[ManifestRef]]:
        """The data manifests after ``change`` (the empty ones it wrote included) and the list
        its snapshot names, in order: reused, rewritten, merged, then new."""
        dropped = set(change.drops)
        touched = {self._where[u] for u in dropped if u in self._where}
        index = 0
        kept: list[ManifestRef] = []
        for manifest in self.data:
            if manifest.path not in touched:
                kept.append(manifest)
                continue
            existing = [e for e in manifest.live if e.uri not in dropped]
            gone = [e for e in manifest.live if e.uri in dropped]
            kept.append(self._write(change, index, MANIFEST_DATA, [], existing, gone))
            index += 1
        small = [
            m
            for m in kept
            if m.live and len(m.live) < SMALL_ENTRIES and m.added_snapshot_id != change.version
        ]
        if len(small) > MAX_SMALL_MANIFESTS:
            merged_paths = {m.path for m in small}
            entries = [e for m in small for e in m.live]
            merged = self._write(change, index, MANIFEST_DATA, [], entries, [])
            index += 1
            first = next(i for i, m in enumerate(kept) if m.path in merged_paths)
            kept = [m for m in kept if m.path not in merged_paths]
            kept.insert(first, merged)
        new = self._chunks(change, change.adds, MANIFEST_DATA, start=index)
        after = [*kept, *new]
        return after, after

    def _chunks(
        self, change: VersionChange, entries: Sequence[FileEntry], content: int, *, start: int
    ) -> list[ManifestRef]:
        out: list[ManifestRef] = []
        for k in range(0, len(entries), MANIFEST_ENTRIES):
            out.append(
                self._write(change, start + len(out), content, entries[k : k + MANIFEST_ENTRIES], [], [])
            )
        return out

    def _write(
        self,
        change: VersionChange,
        index: int,
        content: int,
        added: Sequence[FileEntry],
        existing: Sequence[FileEntry],
        deleted: Sequence[FileEntry],
    ) -> ManifestRef:
        return write_manifest(
            self.store,
            layout.manifest_path(self.files, change.version, index),
            content=content,
            snapshot_id=change.version,
            sequence_number=change.version + 1,
            added=added,
            existing=existing,
            deleted=deleted,
            schema_json=self._schema_json,
        )

    def _summary(
        self, change: VersionChange, data: Sequence[ManifestRef], deletes: Sequence[ManifestRef]
    ) -> dict[str, str]:
        removed_rows = sum(m.deleted_rows for m in data if m.added_snapshot_id == change.version)
        removed_files = sum(m.deleted_files for m in data if m.added_snapshot_id == change.version)
        live = [m for m in data if m.live]  # per manifest: the cost follows the manifests, not the files
        delete_files = [e for m in deletes for e in m.live]
        summary = {
            "operation": OPERATIONS.get(change.operation, "overwrite"),
            "added-data-files": str(len(change.adds)),
            "added-records": str(sum(e.record_count for e in change.adds)),
            "added-files-size": str(sum(e.size_bytes for e in change.adds)),
            "deleted-data-files": str(removed_files),
            "deleted-records": str(removed_rows),
            "added-delete-files": str(len(change.deletes)),
            "total-data-files": str(sum(len(m.live) for m in live)),
            "total-records": str(sum(m.live_rows for m in live)),
            "total-files-size": str(
                sum(m.live_bytes for m in live) + sum(e.size_bytes for e in delete_files)
            ),
            "total-delete-files": str(len(delete_files)),
            "total-position-deletes": str(sum(e.record_count for e in delete_files if e.content == 1)),
            "total-equality-deletes": str(sum(e.record_count for e in delete_files if e.content == 2)),
            "segcat.version": str(change.version),
        }
        if change.operation:
            summary["segcat.operation"] = change.operation
        if change.commit_id:
            summary["segcat.commit-id"] = change.commit_id
        return summary

    # ------------------------------------------------------------------ recovery

    @classmethod
    def load(cls, store: ObjectStore, files: TableFiles, path: str) -> IcebergExport:
        """The state a metadata file (and its current snapshot's manifests) describes."""
        doc = json.loads(store.get(path))
        version = int(doc["properties"]["segcat.version"])
        export = cls(store, files, str(doc["table-uuid"]), str(doc["location"]), version)
        export.schemas = [dict(s) for s in doc["schemas"]]
        export.current_schema_id = int(doc["current-schema-id"])
        for schema in export.schemas:
            export.ids.learn(schema)
        export.ids.last = max(export.ids.last, int(doc.get("last-column-id", 0)))
        export.snapshots = [SnapshotInfo.from_json(s) for s in doc.get("snapshots", [])]
        export.metadata_log = [
            (str(m["metadata-file"]), int(m["timestamp-ms"])) for m in doc.get("metadata-log", [])
        ]
        export.last_updated_ms = int(doc["last-updated-ms"])
        current = export.current_snapshot
        if current is not None:
            listed = read_manifest_list(store.get(_relative(store, current.manifest_list)))
            for record in listed:
                mpath = _relative(store, record["manifest_path"])
                manifest = read_manifest(store.get(mpath), record, mpath)
                if not manifest.live:
                    continue
                (export.data if manifest.content == MANIFEST_DATA else export.deletes).append(manifest)
        export._index()
        return export


def _relative(store: ObjectStore, uri: str) -> str:
    root = store.root.rstrip("/") + "/"
    if not uri.startswith(root):
        raise ValueError(f"{uri} is not under the warehouse {store.root}")
    return uri[len(root) :]


def _retained(
    snapshots: Sequence[SnapshotInfo], tags: Mapping[str, int], keep: int, oldest_readable: int
) -> list[SnapshotInfo]:
    """The snapshots the metadata keeps: the newest ``keep`` of versions still readable (the
    current one always), and the one each tag names."""
    if not snapshots:
        return []
    tagged = {_tagged(snapshots, v) for v in tags.values()}
    readable = [s for s in snapshots if s.snapshot_id >= oldest_readable]
    newest = {s.snapshot_id for s in readable[-max(1, keep) :]} | {snapshots[-1].snapshot_id}
    return [s for s in snapshots if s.snapshot_id in newest or s.snapshot_id in tagged]


def _tagged(snapshots: Iterable[SnapshotInfo], version: int) -> int | None:
    """The newest snapshot at or before ``version`` (None: none)."""
    found = None
    for s in snapshots:
        if s.snapshot_id <= version:
            found = s.snapshot_id
    return found


def _tag_refs(tags: Mapping[str, int], snapshots: Sequence[SnapshotInfo]) -> dict[str, int]:
    """Tag → the snapshot it names: the newest at or before its version, when the metadata shows
    it is (the tagged version's own snapshot; the parent of the first kept snapshot after the
    version; the current one); a tag whose snapshot is no longer listed gets no ref."""
    refs = {}
    for name, version in tags.items():
        candidate = _tagged(snapshots, version)
        if candidate is None:
            continue
        later = next((s for s in snapshots if s.snapshot_id > version), None)
        if candidate == version or later is None or later.parent_snapshot_id == candidate:
            refs[name] = candidate
    return refs
