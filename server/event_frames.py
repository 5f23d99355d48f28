"""Each version's SSE frame encoded once, however many clients it goes to.

The event loop encodes a change's data (``VersionChange.to_json``, the one serialiser) once per
version, not once per client, and the per-table frame (whose id is the version) once per version
too. Only the all-tables stream, whose id is each client's own cursor, builds its frame per
client, from the shared data. The changes reach the feeds from ``watch()`` and the log, which
name no log (``log_id`` None), so the data is the public event of docs/HTTP_API.md.
"""

from __future__ import annotations

from collections import OrderedDict

from segcat.catalog.protocol.version_change import VersionChange

_Key = tuple[str, int, int, str]


class EventFrames:
    def __init__(self, keep: int = 20_000) -> None:
        self._keep = keep
        self._data: OrderedDict[_Key, str] = OrderedDict()
        self._frames: OrderedDict[_Key, bytes] = OrderedDict()

    def data(self, change: VersionChange) -> str:
        key = (change.table, change.version, change.prev_version, change.commit_id)
        found = self._data.get(key)
        if found is None:
            found = change.to_json()
            _remember(self._data, key, found, self._keep)
        return found

    def size(self, change: VersionChange) -> int:
        """The bytes of ``change``'s event data (what a client's queue budget counts)."""
        return len(self.data(change))

    def frame(self, change: VersionChange, event_id: str | None = None) -> bytes:
        """The whole ``id:`` / ``event:`` / ``data:`` frame; the id is the version unless given."""
        if event_id is not None:
            return _encode(event_id, self.data(change))
        key = (change.table, change.version, change.prev_version, change.commit_id)
        found = self._frames.get(key)
        if found is None:
            found = _encode(str(change.version), self.data(change))
            _remember(self._frames, key, found, self._keep)
        return found


def _encode(event_id: str, data: str) -> bytes:
    # ids are versions or cursors of table names and numbers, data is one line of compact JSON
    return f"id: {event_id}\r\nevent: version\r\ndata: {data}\r\n\r\n".encode()


def _remember(
    cache: OrderedDict[_Key, str] | OrderedDict[_Key, bytes], key: _Key, value: object, keep: int
) -> None:
    cache[key] = value  # type: ignore[assignment]
    while len(cache) > keep:
        cache.popitem(last=False)
