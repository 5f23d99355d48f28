"""The JSON shapes of the API (docs/HTTP_API.md): heads, records, segments (a version event is
``VersionChange.to_json``, written by ``event_frames``)."""

from __future__ import annotations

from typing import Any

from segcat import Snapshot
from segcat.catalog.read.table import TimelineEntry
from segcat.catalog.storage.redis import Head


def materialized(head: Head | None, log_end: int | None) -> dict[str, Any]:
    """What the materializer has done for a table: its head's offset and key frame, and the lag."""
    if head is None:
        return {
            "materialized_offset": None,
            "materialized_version": None,
            "keyframe_version": None,
            "materializer_lag": None,
        }
    lag = None if log_end is None else max(log_end - head.offset, 0)
    return {
        "materialized_offset": head.offset,
        "materialized_version": head.version,
        "keyframe_version": head.keyframe_version,
        "materializer_lag": lag,
    }


def head_from_redis(name: str, head: Head | None, log_end: int | None) -> dict[str, Any]:
    """A table in the overview: the materialized head (cheap), numbers null until there is one."""
    return {
        "table": name,
        "version": None if head is None else head.version,
        "timestamp_ms": None if head is None else head.timestamp_ms,
        "live_segments": None if head is None else head.live_count,
        "live_rows": None if head is None else head.live_rows,
        "live_bytes": None if head is None else head.live_bytes,
        "log_end": log_end,
        **materialized(head, log_end),
    }


def _numbers(snap: Snapshot) -> dict[str, Any]:
    """The overview's fields of a snapshot the server read itself."""
    return {
        "table": snap.table,
        "version": snap.version,
        "timestamp_ms": snap.timestamp_ms,
        "live_segments": snap.live_count,
        "live_rows": snap.live_rows,
        "live_bytes": snap.live_bytes,
    }


def head_from_log(snap: Snapshot, log_end: int) -> dict[str, Any]:
    """A table in the overview read without Redis (object storage and the log): the overview's
    fields, nothing materialized."""
    return {**_numbers(snap), "log_end": log_end, **materialized(None, log_end)}


def head_from_snapshot(snap: Snapshot, head: Head | None, log_end: int) -> dict[str, Any]:
    """A table's exact head (the log's end judged) and what the materializer holds of it."""
    return {
        **_numbers(snap),
        "log_start": snap.log_start,
        "log_end": log_end,
        "dropped": snap.dropped,
        **materialized(head, log_end),
        "protocol": {"rules_version": snap.protocol.version, "features": list(snap.protocol.features)},
        "schema": snap.schema,
        "properties": snap.properties,
        "tombstones": [{"predicate": t.predicate, "version": t.version} for t in snap.tombstones],
    }


def record(entry: TimelineEntry) -> dict[str, Any]:
    applied = entry.applied
    verdict, commit = applied.verdict, applied.commit
    return {
        "offset": verdict.offset,
        "timestamp_ms": applied.timestamp_ms,
        "outcome": verdict.outcome.value,
        "rule": None if verdict.rule is None else str(verdict.rule),
        "detail": verdict.detail,
        "conflicting_version": verdict.conflicting_version,
        "original_version": verdict.original_version,
        "commit_id": None if commit is None else commit.commit_id,
        "operation": None if commit is None else commit.operation.value,
        "writer_id": None if commit is None else commit.writer_id,
        "base_version": None if commit is None else commit.base_version,
        "adds": 0 if commit is None else len(commit.adds),
        "drops": 0 if commit is None else len(commit.drops),
        "commit_properties": {} if commit is None else dict(commit.properties),
        "live_segments": entry.live_count,
        "live_rows": entry.live_rows,
        "live_bytes": entry.live_bytes,
    }
