"""One JSON rendering of a snapshot for every interface (``segcat show --json``, the HTTP API).

A reader outside Python (Java, Go, DuckDB over the API) must be able to apply a version exactly
from what it is given: the live segments, each with the version that added it, and the table's
tombstones. A tombstone deletes the rows matching its predicate in every segment added *before*
it (``tombstone.version > segment.added_version``; docs/PROTOCOL.md, rule 3b's decision), so
without ``added_version`` a client cannot tell which files a delete covers, and without the
tombstones it returns deleted rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc

from segcat.catalog.errors import SegcatError
from segcat.catalog.protocol.jsonio import segment_to_json
from segcat.catalog.protocol.model import Segment
from segcat.catalog.protocol.rules import Applied, Outcome
from segcat.catalog.read.snapshot import Snapshot


class _Records(Protocol):
    """A table that lists its records with their verdicts (the public handle, or its read side)."""

    def records(self, start: int = 0, end: int | None = None) -> Iterable[Applied]: ...


def tombstones(snap: Snapshot) -> list[dict[str, Any]]:
    """The table's tombstones at the snapshot's version, oldest first."""
    return [{"predicate": t.predicate, "version": t.version} for t in snap.tombstones]


def added_versions(snap: Snapshot, segment_ids: Sequence[str]) -> dict[str, int]:
    """The version that added each of ``segment_ids`` (live segments of ``snap``)."""
    if not segment_ids:
        return {}
    rows = snap.segments.select(["segment_id", "added_version"])
    picked = rows.filter(pc.is_in(rows.column("segment_id"), value_set=pa.array(segment_ids, pa.string())))
    return dict(
        zip(picked.column("segment_id").to_pylist(), picked.column("added_version").to_pylist(), strict=True)
    )


def segments(snap: Snapshot, listed: Sequence[Segment]) -> list[dict[str, Any]]:
    """``listed`` (live segments of ``snap``) as JSON, each with its ``added_version``."""
    added = added_versions(snap, [s.segment_id for s in listed])
    return [{**segment_to_json(s), "added_version": added[s.segment_id]} for s in listed]


def tombstones_apply(snap: Snapshot) -> bool:
    """Whether some tombstone covers some live segment: then ``live_rows`` counts rows a reader
    will not see (how many, only reading the files can tell)."""
    if not snap.tombstones or snap.live_count == 0:
        return False
    oldest = pc.min(snap.segments.column("added_version")).as_py()
    return oldest is not None and max(t.version for t in snap.tombstones) > oldest


def version_note(table: _Records, asked: int | None, snap: Snapshot) -> str | None:
    """Why the snapshot of offset ``asked`` is of another version (the record there was not
    accepted: rejected, invalid, a duplicate, an intent...); None when it is the version asked."""
    if asked is None or asked == snap.version:
        return None
    answered = f"this is version {snap.version}, the last accepted version before it"
    try:
        found = next(iter(table.records(asked, asked + 1)), None)
    except SegcatError:
        found = None
    if found is None or found.verdict.offset != asked:
        return f"offset {asked} is not an accepted version: {answered}"
    verdict = found.verdict
    what = verdict.outcome.value
    if verdict.outcome is Outcome.NOTED:
        what = "NOTED (a write intent, which is not a version)"
    elif verdict.rule is not None:
        what = f"{what} ({verdict.rule})"
    return f"offset {asked} is not a version: its record is {what}; {answered}"


def document(
    snap: Snapshot, listed: Sequence[Segment], note: str | None = None, applies: bool | None = None
) -> dict[str, Any]:
    """What every snapshot answer carries: the version, why it is the one answered, the
    tombstones and the listed segments (with ``added_version``). ``applies``: ``tombstones_apply``
    of the whole snapshot when ``snap`` is a pruned one."""
    return {**_facts(snap, note, applies), "segments": segments(snap, listed)}


def arrow_metadata(
    snap: Snapshot, note: str | None = None, applies: bool | None = None
) -> dict[bytes, bytes]:
    """The same facts for an Arrow IPC stream of ``snap.segments`` (schema metadata; the segments
    carry ``added_version`` as a column)."""
    facts = _facts(snap, note, applies)
    return {f"segcat.{key}".encode(): json.dumps(value).encode() for key, value in facts.items()}


def _facts(snap: Snapshot, note: str | None, applies: bool | None) -> dict[str, Any]:
    """The version answered, why, and the soft deletes a reader applies to it."""
    return {
        "table": snap.table,
        "version": snap.version,
        "timestamp_ms": snap.timestamp_ms,
        "note": note if note is not None else snap.note,
        "tombstones": tombstones(snap),
        "tombstones_apply": tombstones_apply(snap) if applies is None else applies,
    }
