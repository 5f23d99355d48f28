"""The materializer's pipeline: per-record script calls queued and sent in one round trip.

Each call is still its own atomic script run, in order; only the round trips are shared, so
catching up over thousands of records costs a few round trips, not one per record (on a
Redis Cluster one per node: each table's calls go, in order, to the node of its slot).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from segcat.catalog.protocol.version_change import VersionChange
from segcat.catalog.storage.redis import keys
from segcat.catalog.storage.redis.keys import TableRef
from segcat.catalog.storage.redis.types import Head

if TYPE_CHECKING:
    from segcat.catalog.storage.redis.store import RedisStore


class RecordBatch:
    """``publish_commit`` / ``advance_head`` calls of a ``RedisStore``, queued."""

    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self._calls: list[tuple[list[str], list[str | int | bytes]]] = []

    def __len__(self) -> int:
        return len(self._calls)

    def publish_commit(
        self, table: TableRef, head: Head, *, prev_version: int, value: bytes, event: VersionChange | None
    ) -> None:
        """Queue what :meth:`RedisStore.publish_commit` does (validated the same way)."""
        self._calls.append(keys.record_call(table, head, delta=(prev_version, value), event=event))

    def advance_head(self, table: TableRef, head: Head) -> None:
        """Queue what :meth:`RedisStore.advance_head` does."""
        self._calls.append(keys.record_call(table, head))

    def flush(self) -> None:
        """Send everything queued (ServiceUnavailable if Redis is gone; the queue is dropped)."""
        if not self._calls:
            return
        calls, self._calls = self._calls, []
        with self._store.guarded(f"flush {len(calls)} records"):
            self._store.run_pipelined(keys.RECORD_LUA, calls)
