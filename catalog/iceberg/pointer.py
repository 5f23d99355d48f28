"""The pointer to a table's newest Iceberg metadata: written by the materializer's Iceberg
publisher, read by the Iceberg REST catalog (``segcat serve``) and the HTTP API.

One Redis hash per table, ``segcat:{<ns.table>}:iceberg``, bound to its log like the head (a
pointer of another log is no pointer). ``version`` is the newest segcat version published as
Iceberg; ``blocked_version`` / ``reason`` say why a newer version was not (it cannot be
represented exactly; docs/ICEBERG.md), so the catalog can say why instead of serving rows that
differ from segcat's own read.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from segcat.catalog.storage.redis.keys import TableRef, key
from segcat.catalog.storage.redis.store import RedisStore


def pointer_key(table: TableRef) -> str:
    return key(table, "iceberg")


@dataclass(frozen=True, slots=True)
class IcebergPointer:
    log_id: str | None
    """The log the metadata is of (None: a broker without topic ids)."""
    version: int
    """The newest segcat version published as Iceberg (-1: none yet)."""
    location: str | None
    """The URI of that version's ``v<version>.metadata.json`` (None: none yet)."""
    blocked_version: int | None
    """The first version after ``version`` that could not be published (None: none is blocked)."""
    reason: str | None
    """Why ``blocked_version`` is not published."""
    updated_ms: int
    """The publisher's clock when it wrote the pointer (informative only)."""


_FIELDS = ("log_id", "version", "location", "blocked_version", "reason", "updated_ms")


def write_pointer(store: RedisStore, table: TableRef, pointer: IcebergPointer) -> None:
    """Replace the table's pointer (the publisher writes versions in order, one log at a time)."""
    values: dict[str | bytes, bytes | float | int | str] = {
        "log_id": pointer.log_id or "",
        "version": str(pointer.version),
        "location": pointer.location or "",
        "blocked_version": "" if pointer.blocked_version is None else str(pointer.blocked_version),
        "reason": pointer.reason or "",
        "updated_ms": str(pointer.updated_ms),
    }
    name = pointer_key(table)
    with store.guarded("iceberg pointer"):
        pipe = store.client.pipeline(transaction=True)
        pipe.delete(name)
        pipe.hset(name, mapping=values)
        pipe.execute()


def read_pointer(store: RedisStore, table: TableRef, log_id: str | None) -> IcebergPointer | None:
    """The pointer of log ``log_id`` (None: absent, or another log's)."""
    with store.guarded("iceberg pointer"):
        raw = store.client.hmget(pointer_key(table), list(_FIELDS))
    return _parse_pointer(raw, log_id)


def read_pointers(
    store: RedisStore, tables: Sequence[tuple[TableRef, str | None]]
) -> list[IcebergPointer | None]:
    """``read_pointer`` of each (table, log id), in one pipelined round trip (a listing's page)."""
    if not tables:
        return []
    with store.guarded(f"iceberg pointers of {len(tables)} tables"):
        pipe = store.client.pipeline(transaction=False)
        for table, _ in tables:
            pipe.hmget(pointer_key(table), list(_FIELDS))
        raws = pipe.execute()
    return [_parse_pointer(raw, log_id) for raw, (_, log_id) in zip(raws, tables, strict=True)]


def _parse_pointer(raw: Sequence[bytes | str | None], log_id: str | None) -> IcebergPointer | None:
    if raw[1] is None:
        return None
    text = [None if v is None else (v.decode() if isinstance(v, bytes) else str(v)) for v in raw]
    stored_log = text[0] or None
    if stored_log != log_id:
        return None
    return IcebergPointer(
        log_id=stored_log,
        version=int(text[1] or -1),
        location=text[2] or None,
        blocked_version=int(text[3]) if text[3] else None,
        reason=text[4] or None,
        updated_ms=int(text[5] or 0),
    )


def delete_pointer(store: RedisStore, table: TableRef) -> None:
    """Forget the pointer (a dropped and purged table)."""
    with store.guarded("iceberg pointer"):
        store.client.delete(pointer_key(table))
