"""``v<N>.metadata.json``: an Iceberg (format v2) table metadata document, built and read back.

The document is a pure function of what the exporter holds (``MetadataInputs``), so a
restarted publisher writes the same document for the same version. Times are the log's (the
broker time of each version), never a clock's.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from segcat.catalog.iceberg.schema import name_mapping

TABLE_UUID_NAMESPACE = uuid.UUID("6c1b8e0a-4f2d-5e3a-9b7c-2d1e0f3a4b5c")
"""The namespace of the uuid5 that names a log's Iceberg table (``table_uuid``)."""

NAME_MAPPING_PROPERTY = "schema.name-mapping.default"
VERSION_PROPERTY = "segcat.version"


def table_uuid(log_id: str | None, table: str) -> str:
    """The Iceberg ``table-uuid`` of a log: derived from its id, so every materializer (and every
    restart) names the same log's table alike, and a re-created table gets another."""
    return str(uuid.uuid5(TABLE_UUID_NAMESPACE, f"{table}\x00{log_id or ''}"))


@dataclass(frozen=True, slots=True)
class SnapshotInfo:
    """One snapshot as the metadata lists it."""

    snapshot_id: int
    parent_snapshot_id: int | None
    sequence_number: int
    timestamp_ms: int
    manifest_list: str
    schema_id: int
    summary: Mapping[str, str]

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "snapshot-id": self.snapshot_id,
            "sequence-number": self.sequence_number,
            "timestamp-ms": self.timestamp_ms,
            "manifest-list": self.manifest_list,
            "summary": dict(self.summary),
            "schema-id": self.schema_id,
        }
        if self.parent_snapshot_id is not None:
            doc["parent-snapshot-id"] = self.parent_snapshot_id
        return doc

    @staticmethod
    def from_json(doc: Mapping[str, Any]) -> SnapshotInfo:
        return SnapshotInfo(
            int(doc["snapshot-id"]),
            None if doc.get("parent-snapshot-id") is None else int(doc["parent-snapshot-id"]),
            int(doc["sequence-number"]),
            int(doc["timestamp-ms"]),
            str(doc["manifest-list"]),
            int(doc.get("schema-id", 0)),
            {str(k): str(v) for k, v in doc.get("summary", {}).items()},
        )


@dataclass(frozen=True)
class MetadataInputs:
    """Everything ``v<N>.metadata.json`` says."""

    table_uuid: str
    location: str
    version: int
    """The segcat version the document describes."""
    last_updated_ms: int
    schemas: Sequence[Mapping[str, Any]]
    current_schema_id: int
    last_column_id: int
    snapshots: Sequence[SnapshotInfo]
    """Those kept, oldest first; the current one last (when there is one)."""
    current_snapshot_id: int | None
    last_sequence_number: int
    properties: Mapping[str, str]
    refs: Mapping[str, int] = field(default_factory=dict)
    """Tag name → snapshot id (``main`` is added for the current snapshot)."""
    metadata_log: Sequence[tuple[str, int]] = ()
    """(URI, timestamp) of earlier metadata files kept in the log, oldest first."""


def document(inputs: MetadataInputs) -> dict[str, Any]:
    """The metadata document (JSON-ready)."""
    current = next(s for s in inputs.schemas if s["schema-id"] == inputs.current_schema_id)
    properties = dict(inputs.properties)
    properties[NAME_MAPPING_PROPERTY] = json.dumps(name_mapping(current), separators=(",", ":"))
    properties[VERSION_PROPERTY] = str(inputs.version)
    refs: dict[str, Any] = {
        name: {"snapshot-id": snapshot_id, "type": "tag"} for name, snapshot_id in sorted(inputs.refs.items())
    }
    if inputs.current_snapshot_id is not None:
        refs["main"] = {"snapshot-id": inputs.current_snapshot_id, "type": "branch"}
    return {
        "format-version": 2,
        "table-uuid": inputs.table_uuid,
        "location": inputs.location,
        "last-sequence-number": inputs.last_sequence_number,
        "last-updated-ms": inputs.last_updated_ms,
        "last-column-id": inputs.last_column_id,
        "current-schema-id": inputs.current_schema_id,
        "schemas": [dict(s) for s in inputs.schemas],
        "default-spec-id": 0,
        "partition-specs": [{"spec-id": 0, "fields": []}],
        "last-partition-id": 999,
        "default-sort-order-id": 0,
        "sort-orders": [{"order-id": 0, "fields": []}],
        "properties": properties,
        "current-snapshot-id": inputs.current_snapshot_id if inputs.current_snapshot_id is not None else -1,
        "refs": refs,
        "snapshots": [s.to_json() for s in inputs.snapshots],
        "statistics": [],
        "partition-statistics": [],
        "snapshot-log": [
            {"snapshot-id": s.snapshot_id, "timestamp-ms": s.timestamp_ms}
            for s in inputs.snapshots
            if s.snapshot_id <= (inputs.current_snapshot_id if inputs.current_snapshot_id is not None else -1)
        ],
        "metadata-log": [{"metadata-file": uri, "timestamp-ms": ts} for uri, ts in inputs.metadata_log],
    }


def to_bytes(doc: Mapping[str, Any]) -> bytes:
    return json.dumps(doc, indent=1, sort_keys=False).encode() + b"\n"
