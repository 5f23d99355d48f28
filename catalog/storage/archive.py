"""Commit archives: the accepted commits between two key frames, as one Parquet object (docs/PROTOCOL.md §6).

An archive covers the versions ``from_version ..= to_version`` (``from_version`` = the
previous key frame's version + 1) and holds every ACCEPTED commit in that range with its
raw record value, so the history survives pruning of the Kafka topic and key frames +
archives alone rebuild every version. The range is stored even where it holds no commit:
it is what proves coverage (rejected records also take offsets). A SHA-256 over the range
metadata and every column (computed on whole Arrow buffers, as for key frames) is checked
on every load; Parquet page checksums catch damage earlier where they can.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from segcat.catalog.errors import CorruptArchive
from segcat.catalog.storage import parquet_objects

FORMAT_VERSION = 1
META_KEY = b"segcat.archive"
CHECKSUM_KEY = b"segcat.checksum"

SCHEMA = pa.schema(
    [
        pa.field("version", pa.int64(), nullable=False),
        pa.field("timestamp_ms", pa.int64(), nullable=False),
        pa.field("commit_id", pa.string(), nullable=False),
        pa.field("operation", pa.string(), nullable=False),
        pa.field("value", pa.binary(), nullable=False),
    ]
)


@dataclass(frozen=True, slots=True)
class ArchivedCommit:
    """One accepted commit as the log holds it: offset, broker time and the raw record value."""

    version: int
    timestamp_ms: int
    commit_id: str
    operation: str
    value: bytes
    """The record value (Avro single-object encoding): ``catalog.codec.decode_commit(value)``."""


@dataclass(frozen=True, slots=True)
class Archive:
    from_version: int
    to_version: int
    commits: tuple[ArchivedCommit, ...]
    table: str | None = None


def _check_range(from_version: int, to_version: int, versions: list[int]) -> str | None:
    """Why the range or the versions are not a valid archive, or None."""
    if from_version < 0 or to_version < from_version:
        return f"bad range {from_version}..{to_version}"
    if versions and (versions[0] < from_version or versions[-1] > to_version):
        return f"versions {versions[0]}..{versions[-1]} fall outside the range {from_version}..{to_version}"
    if any(b <= a for a, b in itertools.pairwise(versions)):
        return "versions are not strictly increasing"
    return None


def encode_archive(
    from_version: int, to_version: int, commits: Iterable[ArchivedCommit], *, table: str | None = None
) -> bytes:
    """The Parquet bytes of the archive covering ``from_version ..= to_version`` (both inclusive)."""
    rows = list(commits)
    problem = _check_range(from_version, to_version, [c.version for c in rows])
    if problem:
        raise ValueError(f"cannot archive: {problem}")
    data = pa.table(
        {
            "version": pa.array([c.version for c in rows], pa.int64()),
            "timestamp_ms": pa.array([c.timestamp_ms for c in rows], pa.int64()),
            "commit_id": pa.array([c.commit_id for c in rows], pa.string()),
            "operation": pa.array([str(c.operation) for c in rows], pa.string()),
            "value": pa.array([bytes(c.value) for c in rows], pa.binary()),
        },
        schema=SCHEMA,
    )
    meta = {
        "format_version": FORMAT_VERSION,
        "from_version": from_version,
        "to_version": to_version,
        "count": len(rows),
        "table": table,
    }
    meta_json = json.dumps(meta, separators=(",", ":"), sort_keys=True).encode()
    data = data.replace_schema_metadata(
        {META_KEY: meta_json, CHECKSUM_KEY: _checksum(meta_json, data).encode()}
    )
    return parquet_objects.to_parquet(data)


def decode_archive(data: bytes) -> Archive:
    """Load and verify an archive; ``CorruptArchive`` on any damage, never a silently different one."""
    table = parquet_objects.read_parquet(data, "commit archive", CorruptArchive)
    metadata = table.schema.metadata or {}
    meta_json, checksum = metadata.get(META_KEY), metadata.get(CHECKSUM_KEY)
    if meta_json is None or checksum is None:
        raise CorruptArchive("not a segcat commit archive (metadata missing)")
    if not table.schema.remove_metadata().equals(SCHEMA):
        raise CorruptArchive(f"unexpected archive columns: {table.schema.remove_metadata()}")
    if any(column.null_count for column in table.columns):
        raise CorruptArchive("null values in a commit archive")
    if _checksum(meta_json, table).encode() != checksum:
        raise CorruptArchive("commit archive checksum mismatch")
    try:
        meta: dict[str, Any] = json.loads(meta_json)
        if meta.get("format_version") != FORMAT_VERSION:
            raise CorruptArchive(
                f"unsupported commit archive format {meta.get('format_version')!r}; upgrade segcat"
            )
        from_version, to_version, count = (
            int(meta["from_version"]),
            int(meta["to_version"]),
            int(meta["count"]),
        )
        table_name = meta.get("table")
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptArchive(f"bad commit archive metadata: {exc}") from exc
    columns = {name: table.column(name).to_pylist() for name in SCHEMA.names}
    versions: list[int] = columns["version"]
    problem = _check_range(from_version, to_version, versions)
    if problem or count != len(versions):
        raise CorruptArchive(f"inconsistent commit archive: {problem or 'row count differs from metadata'}")
    commits = tuple(
        ArchivedCommit(*row)
        for row in zip(
            versions,
            columns["timestamp_ms"],
            columns["commit_id"],
            columns["operation"],
            columns["value"],
            strict=True,
        )
    )
    return Archive(from_version, to_version, commits, table_name if isinstance(table_name, str) else None)


def _checksum(meta_json: bytes, table: pa.Table) -> str:
    """SHA-256 over the metadata JSON, the column names and types, and every column's bytes."""
    digest = hashlib.sha256(meta_json)
    digest.update("\n".join(f"{f.name}:{f.type}" for f in table.schema).encode())
    for name in table.column_names:
        _digest_column(digest, name, table.column(name))
    return digest.hexdigest()


def _digest_column(digest: Any, name: str, column: pa.ChunkedArray) -> None:
    """Feed one column's values to ``digest`` from its Arrow buffers (no per-value Python work)."""
    values = pa.concat_arrays(column.chunks) if column.num_chunks else pa.array([], column.type)
    digest.update(f"\n{name}:{len(values)}\n".encode())
    if not len(values):
        return
    if pa.types.is_integer(values.type):
        width = values.type.bit_width // 8
        digest.update(
            memoryview(values.buffers()[1])[values.offset * width : (values.offset + len(values)) * width]
        )
        return
    if not (pa.types.is_binary(values.type) or pa.types.is_string(values.type)):
        raise TypeError(f"no checksum rule for column type {values.type}")
    offsets = pa.Array.from_buffers(pa.int32(), len(values) + 1, [None, values.buffers()[1]], values.offset)
    start, end = offsets[0].as_py(), offsets[-1].as_py()
    lengths = pc.subtract(offsets[1:], offsets[:-1]).cast(pa.int32())
    digest.update(memoryview(lengths.buffers()[1])[lengths.offset * 4 : (lengths.offset + len(values)) * 4])
    digest.update(memoryview(values.buffers()[2])[start:end])
