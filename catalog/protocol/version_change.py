"""``VersionChange``: one accepted version as everyone who announces or follows versions sees it.

The materializer publishes it on Redis Pub/Sub, ``Table.watch()`` yields it, the server's SSE
feeds send it and the Spark version source builds its rows from it: one type, one serialiser
(``to_json`` / ``from_json``), so the four can never drift apart.

The JSON is a flat object with the fields in declaration order, written compactly:
``table``, ``version``, ``prev_version``, ``timestamp_ms``, ``commit_id``, ``operation``,
``added``, ``dropped``, ``rows_delta``, ``bytes_delta``, then ``log_id`` when the change
names its log (the Pub/Sub events do; ``watch()`` and the SSE events, which follow one table's
current log, do not). ``source`` says how a reader learnt of the change and is never written.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from segcat.catalog.errors import MalformedChange
from segcat.catalog.protocol.delta import CommitDelta

SOURCES = ("pubsub", "stream", "kafka")
"""How a reader learnt of a change: a Pub/Sub event, the Redis stream of deltas, the log itself."""


@dataclass(frozen=True, slots=True)
class VersionChange:
    """One accepted version. ``rows_delta`` / ``bytes_delta`` are None when the party that built
    the change had no image holding the segments it dropped (a gap filled from the Redis stream)."""

    table: str
    version: int
    prev_version: int
    """The accepted version before this one (-1: none): followers chain these to see a gap."""
    timestamp_ms: int
    """The broker's time of the version (LogAppendTime)."""
    commit_id: str
    operation: str
    added: tuple[str, ...] = ()
    """The ids of the segments the version added."""
    dropped: tuple[str, ...] = ()
    """The ids of the segments it dropped."""
    rows_delta: int | None = None
    bytes_delta: int | None = None
    log_id: str | None = None
    """The log (Kafka topic id) the version is of, where logs of one name may meet (Pub/Sub);
    None where the reader already checked that it follows the table's current log."""
    source: str = "pubsub"
    """How the reader learnt of it (``SOURCES``); not part of the JSON."""

    def to_dict(self) -> dict[str, Any]:
        """The JSON object (``to_json`` writes exactly this, compactly)."""
        # the fields by hand: ``asdict`` deep-copies every value, on the path of every publish
        out: dict[str, Any] = {
            "table": self.table,
            "version": self.version,
            "prev_version": self.prev_version,
            "timestamp_ms": self.timestamp_ms,
            "commit_id": self.commit_id,
            "operation": self.operation,
            "added": list(self.added),
            "dropped": list(self.dropped),
            "rows_delta": self.rows_delta,
            "bytes_delta": self.bytes_delta,
        }
        if self.log_id is not None:
            out["log_id"] = self.log_id
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes, *, source: str = "pubsub") -> VersionChange:
        """Read a change ``to_json`` wrote; ``MalformedChange`` (a ``ValueError``) naming the field
        otherwise. Types are checked, never coerced (``"7"`` is no version)."""
        try:
            data = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise MalformedChange(f"not a version change (not JSON): {raw[:200]!r}") from exc
        if not isinstance(data, dict):
            raise MalformedChange(f"not a version change (not a JSON object): {raw[:200]!r}")
        return cls(
            table=_text(data, "table"),
            version=_integer(data, "version"),
            prev_version=_integer(data, "prev_version"),
            timestamp_ms=_integer(data, "timestamp_ms"),
            commit_id=_text(data, "commit_id"),
            operation=_text(data, "operation"),
            added=_ids(data, "added"),
            dropped=_ids(data, "dropped"),
            rows_delta=_integer(data, "rows_delta", optional=True),
            bytes_delta=_integer(data, "bytes_delta", optional=True),
            log_id=_text(data, "log_id", optional=True),
            source=source,
        )


def change_from_delta(
    table: str, prev_version: int, delta: CommitDelta, source: str, *, log_id: str | None = None
) -> VersionChange:
    """The change an accepted version makes, ``prev_version`` being the accepted version before it."""
    return VersionChange(
        table,
        delta.version,
        prev_version,
        delta.timestamp_ms,
        delta.commit_id,
        delta.operation.value,
        tuple(s.segment_id for s in delta.added),
        delta.dropped,
        delta.rows_delta,
        delta.bytes_delta,
        log_id,
        source,
    )


def _integer(data: dict[str, Any], key: str, *, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    if type(value) is not int:  # bool is an int to Python, never to this format
        raise MalformedChange(f"version change field {key!r} must be an integer, not {value!r:.80}")
    return value


def _text(data: dict[str, Any], key: str, *, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise MalformedChange(f"version change field {key!r} must be a string, not {value!r:.80}")
    return value


def _ids(data: dict[str, Any], key: str) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise MalformedChange(f"version change field {key!r} must be a list of strings")
    return tuple(value)
