"""Whose is the flat layout: objects written before the binding, checked against the log.

Key frames and archives written since the binding live under ``_catalog/logs/<topic id>/``
(``storage.table_files``). What segcat wrote before sits in the flat layout
(``_catalog/keyframes/...``) with nothing saying which log it came from: the table's current
topic, or a topic of the same name deleted without a purge. ``settle_flat_layout`` decides it
once, comparing what those objects say about offsets Kafka still holds with the records there,
and records the verdict in ``_catalog/_log``; until then no reader takes a flat object as the
log's (they read the log's own directory, then Kafka).

The comparison (docs/PROTOCOL.md §6, *Which log*): the outputs are a function of the log, so
they cannot reach past its end; the newest key frame's version V is an accepted commit whose
record key is the frame's ``last_commit_id``; an archived record is the log's record at its
offset, key and value. Commit ids are random (version-4 UUIDs), so one record that agrees
proves the same log and one that disagrees proves another.
"""

from __future__ import annotations

import logging
from itertools import islice

from segcat.catalog.config import Config
from segcat.catalog.errors import ArchiveGap, CorruptArchive
from segcat.catalog.log.reader import LogReader
from segcat.catalog.protocol.model import LogRecord
from segcat.catalog.storage.table_files import FlatClaim, TableFiles

log = logging.getLogger("segcat.ownership")

CHECKPOINTS = 8
"""At most this many archived records are compared (the first that Kafka still holds decides)."""


def settle_flat_layout(config: Config, files: TableFiles) -> FlatClaim | None:
    """The claim on the flat layout, decided now if nobody has (a materializer's recovery does
    this; readers never write). None: nothing to decide (no flat objects, or an unbound log), or
    the objects could not be checked against the log (they stay unread, and a warning says so)."""
    if files.log_id is None:
        return None
    claim = files.read_claim()
    if claim is not None:
        return claim
    flat = files.flat()
    if not flat.holds_history():
        return None
    with LogReader(config, files.name) as reader:
        verdict, reason = _judge(reader, flat)
    if verdict is None:
        log.warning(
            "%s: the key frames and archives written before segcat bound them to their log cannot be "
            "checked against the log (%s); they stay unread (docs/OPERATIONS.md: adopting them by hand)",
            files.name,
            reason,
            extra={"table": files.name.qualified, "log_id": files.log_id, "reason": reason},
        )
        return None
    claim = FlatClaim(files.log_id if verdict else None, reason)
    files.write_claim(claim)
    log.info(
        "flat layout settled",
        extra={"table": files.name.qualified, "log_id": files.log_id, "ours": verdict, "reason": reason},
    )
    return claim


def _judge(reader: LogReader, flat: TableFiles) -> tuple[bool | None, str]:
    """(whether the flat objects are this log's, why); None when nothing decides it."""
    low, high = reader.watermarks()
    end = high - 1
    frame = flat.newest_valid_keyframe(lean=True)
    try:
        archived = flat.archived_upto()
    except (ArchiveGap, CorruptArchive):
        archived = -1
    reach = max(-1 if frame is None else frame.version, archived)
    if reach < 0:
        return None, "no key frame or archive in it loads"
    if reach > end:
        return False, f"its objects reach version {reach}, and this log ends at offset {end}"
    if frame is not None and frame.version >= low and isinstance(frame.meta.get("last_commit_id"), str):
        commit_id = str(frame.meta["last_commit_id"])
        found = _record_at(reader, frame.version)
        if found is not None:
            same = found.key == commit_id.encode()
            return same, (
                f"the log's record at offset {frame.version} is "
                + ("" if same else "not ")
                + f"commit {commit_id}, which key frame {frame.version} ends with"
            )
    if archived >= low:
        try:
            archived_records = list(islice(flat.records_between(max(low, 0) - 1, archived), CHECKPOINTS))
        except (ArchiveGap, CorruptArchive):
            archived_records = []
        for archived_record in archived_records:
            found = _record_at(reader, archived_record.offset)
            if found is not None:
                same = (found.key, found.value) == (archived_record.key, archived_record.value)
                return same, (
                    f"the log's record at offset {archived_record.offset} "
                    + ("equals" if same else "differs from")
                    + " the archived one"
                )
    if reach == low - 1:
        return True, f"the log starts at offset {low}, right after its objects end (pruned up to them)"
    return None, f"the log (offsets {low}..{end}) holds no record its objects (up to {reach}) name"


def _record_at(reader: LogReader, offset: int) -> LogRecord | None:
    """The log's record at ``offset``, or None when Kafka no longer holds it (compacted)."""
    for record in reader.read(offset, offset + 1):
        return record if record.offset == offset else None
    return None
