"""Commit archives: the log between two key frames, as one Parquet object (docs/PROTOCOL.md §6).

An archive covers the offsets ``from_version ..= to_version`` (``from_version`` = the
previous key frame's version + 1) and holds every ACCEPTED commit in that range with its
raw record value, so the history survives pruning of the Kafka topic and key frames +
archives alone rebuild every version. Format 2 also holds every other record of the range
(rejected, invalid, duplicate, pruned) with its raw key and value: replaying an archive
through the rules gives exactly the verdicts the log gave, after Kafka has forgotten them.
The range is stored even where it holds no commit: it is what proves coverage. A SHA-256
over the range metadata and every column (computed on whole Arrow buffers, as for key
frames) is checked on every load; Parquet page checksums catch damage earlier where they can.
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
from segcat.catalog.protocol.model import LogRecord
from segcat.catalog.storage import parquet_objects

FORMAT_VERSION = 2
READABLE_FORMATS = (1, 2)
ACCEPTED = "ACCEPTED"
META_KEY = b"segcat.archive"
CHECKSUM_KEY = b"segcat.checksum"
HEADS_CHECKSUM_KEY = b"segcat.heads_checksum"
"""SHA-256 over the metadata JSON, the column names and types, and the ``HEAD_COLUMNS`` only: what
``decode_heads`` checks (besides the pages' CRCs) when it reads those columns alone. Archives
from before it have none and are read whole."""
HEAD_COLUMNS = ("version", "timestamp_ms", "outcome", "commit_id", "operation")

SCHEMA_V1 = pa.schema(
    [
        pa.field("version", pa.int64(), nullable=False),
        pa.field("timestamp_ms", pa.int64(), nullable=False),
        pa.field("commit_id", pa.string(), nullable=False),
        pa.field("operation", pa.string(), nullable=False),
        pa.field("value", pa.binary(), nullable=False),
    ]
)
SCHEMA = pa.schema(
    [
        pa.field("version", pa.int64(), nullable=False),
        pa.field("timestamp_ms", pa.int64(), nullable=False),
        pa.field("outcome", pa.string(), nullable=False),
        pa.field("commit_id", pa.string()),
        pa.field("operation", pa.string()),
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
    ]
)
"""Format 2: accepted rows carry commit_id, operation and value (the key is the commit id);
other rows carry the record's raw key and value (either may be null) and their outcome."""


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
class CommitHead:
    """An archived accepted commit without its record value: what time travel over appends reads."""

    version: int
    timestamp_ms: int
    commit_id: str
    operation: str


@dataclass(frozen=True, slots=True)
class ArchivedRecord:
    """A record of the range that was not accepted, as Kafka held it, with the rules' outcome."""

    version: int
    """Its offset."""
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
    outcome: str


@dataclass(frozen=True, slots=True)
class Archive:
    from_version: int
    to_version: int
    commits: tuple[ArchivedCommit, ...]
    table: str | None = None
    others: tuple[ArchivedRecord, ...] = ()
    """Format 2: the records that were not accepted (format 1 archives kept none)."""
    heads: tuple[CommitHead, ...] = ()
    """Only from ``decode_heads`` (then ``commits`` and ``others`` are empty): the accepted
    commits without their values."""
    log_id: str | None = None
    """The log (Kafka topic id) the records came from; None in archives written before the binding."""

    def log_records(self) -> list[LogRecord]:
        """Every record the archive holds, in offset order, as the log held it."""
        records = [LogRecord(c.version, c.timestamp_ms, c.commit_id.encode(), c.value) for c in self.commits]
        records += [LogRecord(o.version, o.timestamp_ms, o.key, o.value) for o in self.others]
        return sorted(records, key=lambda r: r.offset)


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
    from_version: int,
    to_version: int,
    commits: Iterable[ArchivedCommit],
    *,
    table: str | None = None,
    others: Iterable[ArchivedRecord] = (),
    log_id: str | None = None,
) -> bytes:
    """The Parquet bytes of the archive covering ``from_version ..= to_version`` (both inclusive):
    the accepted ``commits`` and the ``others`` records of the range, in one offset order."""
    accepted = list(commits)
    rest = list(others)
    if any(o.outcome == ACCEPTED for o in rest):
        raise ValueError("cannot archive: an accepted record among the others")
    rows: list[tuple[int, int, str, str | None, str | None, bytes | None, bytes | None]] = [
        (c.version, c.timestamp_ms, ACCEPTED, c.commit_id, str(c.operation), None, bytes(c.value))
        for c in accepted
    ]
    rows += [(o.version, o.timestamp_ms, str(o.outcome), None, None, o.key, o.value) for o in rest]
    problem = _check_range(from_version, to_version, [c.version for c in accepted])
    problem = problem or _check_range(from_version, to_version, [o.version for o in rest])
    rows.sort(key=lambda row: row[0])
    problem = problem or _check_range(from_version, to_version, [row[0] for row in rows])
    if problem:
        raise ValueError(f"cannot archive: {problem}")
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(SCHEMA)
    data = pa.table(
        {f.name: pa.array(list(values), f.type) for f, values in zip(SCHEMA, columns, strict=True)},
        schema=SCHEMA,
    )
    meta = {
        "format_version": FORMAT_VERSION,
        "from_version": from_version,
        "to_version": to_version,
        "count": len(rows),
        "accepted": len(accepted),
        "table": table,
    }
    if log_id is not None:
        meta["log_id"] = log_id
    meta_json = json.dumps(meta, separators=(",", ":"), sort_keys=True).encode()
    data = data.replace_schema_metadata(
        {
            META_KEY: meta_json,
            CHECKSUM_KEY: _checksum(meta_json, data).encode(),
            HEADS_CHECKSUM_KEY: _checksum(meta_json, data, HEAD_COLUMNS).encode(),
        }
    )
    return parquet_objects.to_parquet(data)


def decode_heads(data: bytes) -> Archive:
    """The archive without record values: its accepted commits as ``heads``, reading the
    ``HEAD_COLUMNS`` alone (checked by their own checksum and the pages' CRCs); an archive from
    before that checksum is read and verified whole."""
    table = parquet_objects.read_parquet(data, "commit archive", CorruptArchive, skip=("key", "value"))
    metadata = table.schema.metadata or {}
    meta_json, checksum = metadata.get(META_KEY), metadata.get(HEADS_CHECKSUM_KEY)
    if meta_json is None or checksum is None:
        whole = decode_archive(data)
        heads = tuple(CommitHead(c.version, c.timestamp_ms, c.commit_id, c.operation) for c in whole.commits)
        return Archive(
            whole.from_version, whole.to_version, (), whole.table, heads=heads, log_id=whole.log_id
        )
    if any(name not in table.column_names for name in HEAD_COLUMNS):
        raise CorruptArchive(f"unexpected archive columns: {table.schema.remove_metadata()}")
    if _checksum(meta_json, table, HEAD_COLUMNS).encode() != checksum:
        raise CorruptArchive("commit archive checksum mismatch")
    from_version, to_version, count, table_name, log_id = _range(meta_json)
    columns = {name: table.column(name).to_pylist() for name in HEAD_COLUMNS}
    versions: list[int] = columns["version"]
    problem = _check_range(from_version, to_version, versions)
    if problem or count != len(versions):
        raise CorruptArchive(f"inconsistent commit archive: {problem or 'row count differs from metadata'}")
    found: list[CommitHead] = []
    for version, timestamp, outcome, cid, operation in zip(*columns.values(), strict=True):
        if outcome == ACCEPTED:
            if cid is None or operation is None:
                raise CorruptArchive(f"accepted record at version {version} lacks its commit")
            found.append(CommitHead(version, timestamp, cid, operation))
    return Archive(from_version, to_version, (), table_name, heads=tuple(found), log_id=log_id)


def _range(meta_json: bytes) -> tuple[int, int, int, str | None, str | None]:
    """``(from_version, to_version, count, table, log_id)`` of an archive's metadata (of a
    readable format)."""
    try:
        meta: dict[str, Any] = json.loads(meta_json)
        if meta.get("format_version") not in READABLE_FORMATS:
            raise CorruptArchive(
                f"unsupported commit archive format {meta.get('format_version')!r}; upgrade segcat"
            )
        table, log_id = meta.get("table"), meta.get("log_id")
        return (
            int(meta["from_version"]),
            int(meta["to_version"]),
            int(meta["count"]),
            table if isinstance(table, str) else None,
            log_id if isinstance(log_id, str) else None,
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise CorruptArchive(f"bad commit archive metadata: {exc}") from exc


def decode_archive(data: bytes) -> Archive:
    """Load and verify an archive; ``CorruptArchive`` on any damage, never a silently different one."""
    table = parquet_objects.read_parquet(data, "commit archive", CorruptArchive)
    metadata = table.schema.metadata or {}
    meta_json, checksum = metadata.get(META_KEY), metadata.get(CHECKSUM_KEY)
    if meta_json is None or checksum is None:
        raise CorruptArchive("not a segcat commit archive (metadata missing)")
    if _checksum(meta_json, table).encode() != checksum:
        raise CorruptArchive("commit archive checksum mismatch")
    try:
        meta: dict[str, Any] = json.loads(meta_json)
        if meta.get("format_version") not in READABLE_FORMATS:
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
    format_version = int(meta["format_version"])
    expected = SCHEMA if format_version == 2 else SCHEMA_V1
    if not table.schema.remove_metadata().equals(expected):
        raise CorruptArchive(f"unexpected archive columns: {table.schema.remove_metadata()}")
    columns = {name: table.column(name).to_pylist() for name in expected.names}
    versions: list[int] = columns["version"]
    problem = _check_range(from_version, to_version, versions)
    if problem or count != len(versions):
        raise CorruptArchive(f"inconsistent commit archive: {problem or 'row count differs from metadata'}")
    outcomes = columns.get("outcome") or [ACCEPTED] * len(versions)
    commits: list[ArchivedCommit] = []
    others: list[ArchivedRecord] = []
    for i, version in enumerate(versions):
        timestamp, cid, operation, value = (
            columns["timestamp_ms"][i],
            columns["commit_id"][i],
            columns["operation"][i],
            columns["value"][i],
        )
        if outcomes[i] == ACCEPTED:
            if cid is None or operation is None or value is None:
                raise CorruptArchive(f"accepted record at version {version} lacks its commit")
            commits.append(ArchivedCommit(version, timestamp, cid, operation, value))
        else:
            others.append(ArchivedRecord(version, timestamp, columns["key"][i], value, outcomes[i]))
    name = table_name if isinstance(table_name, str) else None
    log_id = meta.get("log_id")
    return Archive(
        from_version,
        to_version,
        tuple(commits),
        name,
        tuple(others),
        log_id=log_id if isinstance(log_id, str) else None,
    )


def _checksum(meta_json: bytes, table: pa.Table, columns: Iterable[str] | None = None) -> str:
    """SHA-256 over the metadata JSON, the column names and types, and the bytes of ``columns``
    (default: every column)."""
    digest = hashlib.sha256(meta_json)
    names = list(table.column_names if columns is None else columns)
    fields = table.schema if columns is None else [table.schema.field(n) for n in names]
    digest.update("\n".join(f"{f.name}:{f.type}" for f in fields).encode())
    for name in names:
        _digest_column(digest, name, table.column(name))
    return digest.hexdigest()


def _digest_column(digest: Any, name: str, column: pa.ChunkedArray) -> None:
    """Feed one column's values to ``digest`` from its Arrow buffers (no per-value Python work).

    A column with nulls adds its validity (one byte per value) and digests nulls as empty."""
    values = pa.concat_arrays(column.chunks) if column.num_chunks else pa.array([], column.type)
    digest.update(f"\n{name}:{len(values)}\n".encode())
    if not len(values):
        return
    if values.null_count:
        digest.update(
            b"validity:" + pc.is_valid(values).cast(pa.uint8()).to_numpy(zero_copy_only=False).tobytes()
        )
        values = pc.fill_null(values, pa.scalar(0 if pa.types.is_integer(values.type) else b"", values.type))
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
