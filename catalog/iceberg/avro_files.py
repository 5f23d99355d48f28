"""Iceberg's Avro files (manifests and manifest lists, format v2), written and read with fastavro.

The schemas are the spec's (apache/iceberg ``format/spec.md``, *Manifests* and *Manifest
Lists*), field ids included: readers project Avro files by field id, not by name. The
partition struct is empty (segcat tables are unpartitioned in Iceberg, docs/ICEBERG.md).

The files are deterministic: the Avro sync marker is derived from the file's own path and the
codec is deflate, so a restarted publisher writing a version again writes the same bytes.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fastavro

from segcat.catalog.storage.objectstore import ObjectStore


def _map(key_id: int, value_id: int, value_type: str) -> list[Any]:
    return [
        "null",
        {
            "type": "array",
            "logicalType": "map",
            "items": {
                "type": "record",
                "name": f"k{key_id}_v{value_id}",
                "fields": [
                    {"name": "key", "type": "int", "field-id": key_id},
                    {"name": "value", "type": value_type, "field-id": value_id},
                ],
            },
        },
    ]


def _optional(name: str, field_id: int, kind: Any) -> dict[str, Any]:
    return {
        "name": name,
        "field-id": field_id,
        "type": kind if isinstance(kind, list) else ["null", kind],
        "default": None,
    }


DATA_FILE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "r2",
    "fields": [
        {"name": "content", "field-id": 134, "type": "int"},
        {"name": "file_path", "field-id": 100, "type": "string"},
        {"name": "file_format", "field-id": 101, "type": "string"},
        {"name": "partition", "field-id": 102, "type": {"type": "record", "name": "r102", "fields": []}},
        {"name": "record_count", "field-id": 103, "type": "long"},
        {"name": "file_size_in_bytes", "field-id": 104, "type": "long"},
        _optional("column_sizes", 108, _map(117, 118, "long")),
        _optional("value_counts", 109, _map(119, 120, "long")),
        _optional("null_value_counts", 110, _map(121, 122, "long")),
        _optional("nan_value_counts", 137, _map(138, 139, "long")),
        _optional("lower_bounds", 125, _map(126, 127, "bytes")),
        _optional("upper_bounds", 128, _map(129, 130, "bytes")),
        _optional("key_metadata", 131, "bytes"),
        _optional("split_offsets", 132, {"type": "array", "element-id": 133, "items": "long"}),
        _optional("equality_ids", 135, {"type": "array", "element-id": 136, "items": "int"}),
        _optional("sort_order_id", 140, "int"),
        _optional("referenced_data_file", 143, "string"),
    ],
}

MANIFEST_ENTRY_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "manifest_entry",
    "fields": [
        {"name": "status", "field-id": 0, "type": "int"},
        _optional("snapshot_id", 1, "long"),
        _optional("sequence_number", 3, "long"),
        _optional("file_sequence_number", 4, "long"),
        {"name": "data_file", "field-id": 2, "type": DATA_FILE_SCHEMA},
    ],
}

MANIFEST_FILE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "manifest_file",
    "fields": [
        {"name": "manifest_path", "field-id": 500, "type": "string"},
        {"name": "manifest_length", "field-id": 501, "type": "long"},
        {"name": "partition_spec_id", "field-id": 502, "type": "int"},
        {"name": "content", "field-id": 517, "type": "int"},
        {"name": "sequence_number", "field-id": 515, "type": "long"},
        {"name": "min_sequence_number", "field-id": 516, "type": "long"},
        {"name": "added_snapshot_id", "field-id": 503, "type": "long"},
        {"name": "added_files_count", "field-id": 504, "type": "int"},
        {"name": "existing_files_count", "field-id": 505, "type": "int"},
        {"name": "deleted_files_count", "field-id": 506, "type": "int"},
        {"name": "added_rows_count", "field-id": 512, "type": "long"},
        {"name": "existing_rows_count", "field-id": 513, "type": "long"},
        {"name": "deleted_rows_count", "field-id": 514, "type": "long"},
        _optional(
            "partitions",
            507,
            {
                "type": "array",
                "element-id": 508,
                "items": {
                    "type": "record",
                    "name": "r508",
                    "fields": [
                        {"name": "contains_null", "field-id": 509, "type": "boolean"},
                        _optional("contains_nan", 518, "boolean"),
                        _optional("lower_bound", 510, "bytes"),
                        _optional("upper_bound", 511, "bytes"),
                    ],
                },
            },
        ),
        _optional("key_metadata", 519, "bytes"),
    ],
}

_PARSED_ENTRY = fastavro.parse_schema(MANIFEST_ENTRY_SCHEMA)
_PARSED_LIST = fastavro.parse_schema(MANIFEST_FILE_SCHEMA)

# manifest entry status and content codes (spec: *Manifests*)
EXISTING, ADDED, DELETED = 0, 1, 2
DATA, POSITION_DELETES, EQUALITY_DELETES = 0, 1, 2
MANIFEST_DATA, MANIFEST_DELETES = 0, 1


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One data or delete file as a manifest lists it (the spec's ``data_file`` struct)."""

    uri: str
    content: int
    """DATA, POSITION_DELETES or EQUALITY_DELETES."""
    record_count: int
    size_bytes: int
    snapshot_id: int
    """The snapshot (segcat version) that added the file."""
    sequence_number: int
    """Its data sequence number (the adding version + 1)."""
    value_counts: tuple[tuple[int, int], ...] = ()
    null_counts: tuple[tuple[int, int], ...] = ()
    lower_bounds: tuple[tuple[int, bytes], ...] = ()
    upper_bounds: tuple[tuple[int, bytes], ...] = ()
    equality_ids: tuple[int, ...] = ()
    referenced_data_file: str | None = None


@dataclass(frozen=True, slots=True)
class ManifestRef:
    """A written manifest as the manifest list names it, with the live files it holds."""

    path: str
    """Relative to the object store's root."""
    uri: str
    length: int
    content: int
    """MANIFEST_DATA or MANIFEST_DELETES."""
    added_snapshot_id: int
    sequence_number: int
    min_sequence_number: int
    added_files: int
    existing_files: int
    deleted_files: int
    added_rows: int
    existing_rows: int
    deleted_rows: int
    live: tuple[FileEntry, ...]
    """The ADDED and EXISTING entries (what a later snapshot reusing it still holds)."""
    live_bytes: int = 0
    """The size of the live files."""

    @property
    def live_rows(self) -> int:
        return self.added_rows + self.existing_rows


def _pairs(items: Iterable[tuple[int, Any]]) -> list[dict[str, Any]] | None:
    out = [{"key": k, "value": v} for k, v in items]
    return out or None


def _entry_record(status: int, entry: FileEntry) -> dict[str, Any]:
    return {
        "status": status,
        "snapshot_id": entry.snapshot_id,
        "sequence_number": entry.sequence_number,
        "file_sequence_number": entry.sequence_number,
        "data_file": {
            "content": entry.content,
            "file_path": entry.uri,
            "file_format": "PARQUET",
            "partition": {},
            "record_count": entry.record_count,
            "file_size_in_bytes": entry.size_bytes,
            "column_sizes": None,
            "value_counts": _pairs(entry.value_counts),
            "null_value_counts": _pairs(entry.null_counts),
            "nan_value_counts": None,
            "lower_bounds": _pairs(entry.lower_bounds),
            "upper_bounds": _pairs(entry.upper_bounds),
            "key_metadata": None,
            "split_offsets": None,
            "equality_ids": list(entry.equality_ids) or None,
            "sort_order_id": None,
            "referenced_data_file": entry.referenced_data_file,
        },
    }


def _sync(path: str) -> bytes:
    return hashlib.sha256(path.encode()).digest()[:16]


def _avro(schema: Any, records: Sequence[dict[str, Any]], path: str, meta: Mapping[str, str]) -> bytes:
    out = io.BytesIO()
    fastavro.writer(
        out, schema, records, codec="deflate", sync_marker=_sync(path), metadata=dict(meta), validator=False
    )
    return out.getvalue()


def write_manifest(
    store: ObjectStore,
    path: str,
    *,
    content: int,
    snapshot_id: int,
    sequence_number: int,
    added: Sequence[FileEntry],
    existing: Sequence[FileEntry],
    deleted: Sequence[FileEntry],
    schema_json: str,
) -> ManifestRef:
    """Write one manifest of snapshot ``snapshot_id``: ``added`` files (added by it), ``existing``
    ones (kept from earlier snapshots, with their snapshot and sequence numbers) and ``deleted``
    ones (removed by it)."""
    records = [
        *(_entry_record(ADDED, e) for e in added),
        *(_entry_record(EXISTING, e) for e in existing),
        *(_entry_record(DELETED, _deleted_by(e, snapshot_id)) for e in deleted),
    ]
    meta = {
        "schema": schema_json,
        "partition-spec": "[]",
        "partition-spec-id": "0",
        "format-version": "2",
        "content": "data" if content == MANIFEST_DATA else "deletes",
    }
    data = _avro(_PARSED_ENTRY, records, path, meta)
    store.put(path, data)
    live = (*added, *existing)
    return ManifestRef(
        path=path,
        uri=store.uri(path),
        length=len(data),
        content=content,
        added_snapshot_id=snapshot_id,
        sequence_number=sequence_number,
        min_sequence_number=min((e.sequence_number for e in live), default=sequence_number),
        added_files=len(added),
        existing_files=len(existing),
        deleted_files=len(deleted),
        added_rows=sum(e.record_count for e in added),
        existing_rows=sum(e.record_count for e in existing),
        deleted_rows=sum(e.record_count for e in deleted),
        live=live,
        live_bytes=sum(e.size_bytes for e in live),
    )


def _deleted_by(entry: FileEntry, snapshot_id: int) -> FileEntry:
    """A DELETED entry names the snapshot that deleted the file; its sequence numbers stay."""
    return FileEntry(
        entry.uri,
        entry.content,
        entry.record_count,
        entry.size_bytes,
        snapshot_id,
        entry.sequence_number,
        entry.value_counts,
        entry.null_counts,
        entry.lower_bounds,
        entry.upper_bounds,
        entry.equality_ids,
        entry.referenced_data_file,
    )


def write_manifest_list(
    store: ObjectStore,
    path: str,
    *,
    snapshot_id: int,
    parent_snapshot_id: int | None,
    sequence_number: int,
    manifests: Sequence[ManifestRef],
) -> str:
    """Write a snapshot's manifest list; its URI."""
    records: list[dict[str, Any]] = [
        {
            "manifest_path": m.uri,
            "manifest_length": m.length,
            "partition_spec_id": 0,
            "content": m.content,
            "sequence_number": m.sequence_number,
            "min_sequence_number": m.min_sequence_number,
            "added_snapshot_id": m.added_snapshot_id,
            "added_files_count": m.added_files,
            "existing_files_count": m.existing_files,
            "deleted_files_count": m.deleted_files,
            "added_rows_count": m.added_rows,
            "existing_rows_count": m.existing_rows,
            "deleted_rows_count": m.deleted_rows,
            "partitions": [],
            "key_metadata": None,
        }
        for m in manifests
    ]
    meta = {
        "snapshot-id": str(snapshot_id),
        "parent-snapshot-id": "null" if parent_snapshot_id is None else str(parent_snapshot_id),
        "sequence-number": str(sequence_number),
        "format-version": "2",
    }
    store.put(path, _avro(_PARSED_LIST, records, path, meta))
    return store.uri(path)


def read_manifest_list(data: bytes) -> list[dict[str, Any]]:
    """The records of a manifest list."""
    return list(fastavro.reader(io.BytesIO(data)))  # type: ignore[arg-type]


def read_manifest(data: bytes, ref: dict[str, Any], path: str) -> ManifestRef:
    """A manifest read back (recovery): its list record ``ref`` and its live entries."""
    live: list[FileEntry] = []
    for record in fastavro.reader(io.BytesIO(data)):
        assert isinstance(record, dict)
        if record["status"] == DELETED:
            continue
        df = record["data_file"]
        live.append(
            FileEntry(
                uri=df["file_path"],
                content=df["content"],
                record_count=df["record_count"],
                size_bytes=df["file_size_in_bytes"],
                snapshot_id=record["snapshot_id"],
                sequence_number=record["sequence_number"],
                value_counts=_unpairs(df.get("value_counts")),
                null_counts=_unpairs(df.get("null_value_counts")),
                lower_bounds=_unpairs(df.get("lower_bounds")),
                upper_bounds=_unpairs(df.get("upper_bounds")),
                equality_ids=tuple(df.get("equality_ids") or ()),
                referenced_data_file=df.get("referenced_data_file"),
            )
        )
    return ManifestRef(
        path=path,
        uri=ref["manifest_path"],
        length=ref["manifest_length"],
        content=ref["content"],
        added_snapshot_id=ref["added_snapshot_id"],
        sequence_number=ref["sequence_number"],
        min_sequence_number=ref["min_sequence_number"],
        added_files=ref["added_files_count"],
        existing_files=ref["existing_files_count"],
        deleted_files=ref["deleted_files_count"],
        added_rows=ref["added_rows_count"],
        existing_rows=ref["existing_rows_count"],
        deleted_rows=ref["deleted_rows_count"],
        live=tuple(live),
        live_bytes=sum(e.size_bytes for e in live),
    )


def _unpairs(items: list[dict[str, Any]] | None) -> tuple[tuple[int, Any], ...]:
    return tuple((item["key"], item["value"]) for item in items or ())
