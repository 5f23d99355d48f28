"""Avro single-object encoding of commits (magic ``C3 01`` + 8-byte fingerprint + body).

The reader keeps every schema version it knows (``schemas/`` and ``schemas/history/``)
and resolves a record written with an older one to the current reader schema, so logs
written by older segcat versions stay readable.
"""

from __future__ import annotations

import datetime as dt
import io
import json
from dataclasses import dataclass
from fnmatch import fnmatch
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from typing import Any

import fastavro
from fastavro.schema import fingerprint, to_parsing_canonical_form

from segcat.catalog.errors import DecodeError, UnknownSchema
from segcat.catalog.protocol.model import (
    BloomFilter,
    ColumnStats,
    ColumnType,
    Commit,
    Intent,
    Isolation,
    Operation,
    Protocol,
    Segment,
    StatValue,
    Tombstone,
)

MAGIC = b"\xc3\x01"
HEADER_SIZE = len(MAGIC) + 8
SCHEMA_DIR: Traversable = resources.files("segcat.schemas")
"""schemas/ (package data): the current layouts, and the older ones under ``history/``."""
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


@dataclass(frozen=True)
class _Schema:
    fingerprint: bytes
    parsed: Any
    source: str


def _inline(node: Any, named: dict[str, Any]) -> Any:
    """Replace the first reference to each named type with its definition."""
    if isinstance(node, str) and node in named:
        return named.pop(node)
    if isinstance(node, list):
        return [_inline(item, named) for item in node]
    if isinstance(node, dict):
        return {key: _inline(value, named) for key, value in node.items()}
    return node


def _load(path: Traversable, named: dict[str, Any]) -> _Schema:
    raw = _inline(json.loads(path.read_text()), dict(named))
    parsed = fastavro.parse_schema(raw)
    fp = bytes.fromhex(fingerprint(to_parsing_canonical_form(parsed), "CRC-64-AVRO"))
    return _Schema(fp, parsed, path.name)


@cache
def _schemas() -> tuple[_Schema, dict[bytes, _Schema]]:
    segment = json.loads((SCHEMA_DIR / "segcat.Segment.avsc").read_text())
    current = _load(SCHEMA_DIR / "segcat.Commit.avsc", {"segcat.Segment": segment})
    known = {current.fingerprint: current}
    history = [p for p in (SCHEMA_DIR / "history").iterdir() if fnmatch(p.name, "segcat.Commit.v*.avsc")]
    for path in sorted(history, key=lambda p: p.name):
        old = _load(path, {})
        known[old.fingerprint] = old
    return current, known


def current_fingerprint() -> bytes:
    return _schemas()[0].fingerprint


def known_fingerprints() -> dict[bytes, str]:
    return {fp: schema.source for fp, schema in _schemas()[1].items()}


def segment_schema(layout: bytes | None = None) -> Any:
    """The parsed Avro schema of one segment in the commit layout ``layout`` (a fingerprint;
    default: the current layout). Key frames record the layout their segments were written in."""
    current, known = _schemas()
    chosen = current if layout is None else known.get(layout)
    if chosen is None:
        raise UnknownSchema(f"unknown commit layout {layout.hex() if layout else layout}; upgrade segcat")
    adds = next(f for f in chosen.parsed["fields"] if f["name"] == "adds")
    return adds["type"]["items"]


def parsed_segment_schema(layout: bytes | None = None) -> Any:
    """``segment_schema(layout)`` parsed by fastavro once (one object per layout). A sub-schema cut
    out of a parsed commit schema is re-parsed by every fastavro call (most of the cost of encoding
    or decoding one segment); a layout whose segment schema cannot stand alone (a named type defined
    before it) stays as it is."""
    return _parsed_segment_schema(current_fingerprint() if layout is None else layout)


@cache
def _parsed_segment_schema(layout: bytes) -> Any:
    schema = segment_schema(layout)
    try:
        return fastavro.parse_schema(schema)
    except Exception:  # fastavro raises several kinds for a type it cannot resolve alone
        return schema


# ---------------------------------------------------------------------------- encode


def encode_commit(commit: Commit) -> bytes:
    """The record value for ``commit``, written with the current schema."""
    current, _ = _schemas()
    out = io.BytesIO()
    out.write(MAGIC)
    out.write(current.fingerprint)
    fastavro.schemaless_writer(out, current.parsed, commit_to_avro(commit))
    return out.getvalue()


def encode_with_schema(record: dict[str, Any], schema_path: Traversable) -> bytes:
    """Encode a raw Avro dict with an explicit (e.g. historical) schema file; for tests/tools."""
    schema = _load(schema_path, {})
    out = io.BytesIO()
    out.write(MAGIC)
    out.write(schema.fingerprint)
    fastavro.schemaless_writer(out, schema.parsed, record)
    return out.getvalue()


def commit_to_avro(commit: Commit) -> dict[str, Any]:
    return {
        "commit_id": commit.commit_id,
        "table": commit.table,
        "operation": commit.operation.value,
        "base_version": commit.base_version,
        "writer_id": commit.writer_id,
        "timestamp_ms": commit.timestamp_ms,
        "adds": [segment_to_avro(s) for s in commit.adds],
        "drops": list(commit.drops),
        "tombstones": [{"predicate": t.predicate} for t in commit.tombstones],
        "replace_scope": list(commit.replace_scope),
        "isolation": commit.isolation.value,
        "properties": dict(commit.properties),
        "table_properties": dict(commit.table_properties),
        "schema": commit.schema,
        "protocol": None
        if commit.protocol is None
        else {"version": commit.protocol.version, "features": list(commit.protocol.features)},
        "intent": None
        if commit.intent is None
        else {
            "intent_id": commit.intent.intent_id,
            "prefix": commit.intent.prefix,
            "ttl_ms": commit.intent.ttl_ms,
        },
    }


def segment_to_avro(segment: Segment) -> dict[str, Any]:
    return {
        "segment_id": segment.segment_id,
        "path": segment.path,
        "partition": segment.partition,
        "format": segment.format,
        "size_bytes": segment.size_bytes,
        "row_count": segment.row_count,
        "stats": [
            {
                "column": s.column,
                "type": s.type.value,
                "min": stat_to_avro(s.type, s.min),
                "max": stat_to_avro(s.type, s.max),
                "null_count": s.null_count,
                "nan_count": s.nan_count,
            }
            for s in segment.stats
        ],
        "bloom": None
        if segment.bloom is None
        else {
            "column": segment.bloom.column,
            "num_hashes": segment.bloom.num_hashes,
            "bits": segment.bloom.bits,
        },
        "schema": segment.schema,
    }


def stat_to_avro(kind: ColumnType, value: StatValue) -> StatValue:
    """Map a typed stat to the Avro union member that holds it losslessly."""
    if value is None:
        return None
    if kind is ColumnType.DATE and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return (value - _EPOCH_DATE).days
    if kind is ColumnType.TIMESTAMP and isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        delta = aware - _EPOCH
        return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    if kind is ColumnType.FLOAT and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is ColumnType.INT and isinstance(value, int) and not -(2**63) <= value < 2**63:
        raise ValueError(f"INT stat {value} does not fit in a signed 64-bit long")
    return value


# ---------------------------------------------------------------------------- exactness


_EXACT_STATS: dict[ColumnType, tuple[type, ...]] = {
    ColumnType.INT: (int,),
    ColumnType.FLOAT: (float,),
    ColumnType.STRING: (str,),
    ColumnType.DATE: (dt.date,),
    ColumnType.TIMESTAMP: (dt.datetime,),
    ColumnType.BOOLEAN: (bool,),
    ColumnType.BINARY: (bytes,),
    ColumnType.OTHER: (int, float, str, bool, bytes),
}
"""The Python types ``decode_commit`` hands out for a stat of each column type."""


def _texts(values: Any) -> bool:
    return type(values) is tuple and all(type(v) is str for v in values)


def _long(value: Any) -> bool:
    return type(value) is int and -(2**63) <= value < 2**63


def _exact_stat(kind: ColumnType, value: Any) -> bool:
    if value is None:
        return True
    if type(value) not in _EXACT_STATS[kind]:
        return False
    if type(value) is float:
        return value == value  # NaN survives, but is never equal to itself
    if type(value) is int:
        return -(2**63) <= value < 2**63
    if type(value) is dt.datetime:  # an instant in UTC, as decoded
        return value.tzinfo is dt.UTC and kind is ColumnType.TIMESTAMP
    return True


def _exact_segment(segment: Any) -> bool:
    if type(segment) is not Segment:
        return False
    s = segment
    if not (
        type(s.segment_id) is str
        and type(s.path) is str
        and type(s.format) is str
        and (s.partition is None or type(s.partition) is str)
        and (s.schema is None or type(s.schema) is str)
        and _long(s.size_bytes)
        and _long(s.row_count)
        and type(s.stats) is tuple
    ):
        return False
    for stats in s.stats:
        if not (
            type(stats) is ColumnStats
            and type(stats.column) is str
            and type(stats.type) is ColumnType
            and (stats.null_count is None or _long(stats.null_count))
            and (stats.nan_count is None or _long(stats.nan_count))
            and _exact_stat(stats.type, stats.min)
            and _exact_stat(stats.type, stats.max)
        ):
            return False
    bloom = s.bloom
    return bloom is None or (
        type(bloom) is BloomFilter
        and type(bloom.column) is str
        and type(bloom.num_hashes) is int
        and -(2**31) <= bloom.num_hashes < 2**31
        and type(bloom.bits) is bytes
    )


def _exact_mapping(value: Any, nullable: bool) -> bool:
    return type(value) is dict and all(
        type(k) is str and (type(v) is str or (nullable and v is None)) for k, v in value.items()
    )


def round_trips_exactly(commit: Commit) -> bool:
    """For a commit ``encode_commit`` took: whether decoding its record gives ``commit`` back
    field by field, with the same Python types (tests/catalog/protocol/test_codec.py proves it
    for every commit this accepts): then a writer may judge its own record by the commit it
    holds instead of decoding it.

    False for what the encoding normalises: a list for a tuple, an integral FLOAT stat, a
    naive or non-UTC timestamp, a tombstone that names its version, NaN (never equal to itself),
    a mapping that is not a plain ``dict``.
    """
    c = commit
    protocol, intent = c.protocol, c.intent
    return (
        type(c) is Commit
        and type(c.commit_id) is str
        and type(c.table) is str
        and type(c.writer_id) is str
        and type(c.operation) is Operation
        and type(c.isolation) is Isolation
        and _long(c.base_version)
        and _long(c.timestamp_ms)
        and type(c.adds) is tuple
        and all(_exact_segment(s) for s in c.adds)
        and _texts(c.drops)
        and _texts(c.replace_scope)
        and type(c.tombstones) is tuple
        and all(type(t) is Tombstone and type(t.predicate) is str and t.version == -1 for t in c.tombstones)
        and _exact_mapping(c.properties, False)
        and _exact_mapping(c.table_properties, True)
        and (c.schema is None or type(c.schema) is str)
        and (
            protocol is None
            or (
                type(protocol) is Protocol
                and type(protocol.version) is int
                and -(2**31) <= protocol.version < 2**31
                and _texts(protocol.features)
            )
        )
        and (
            intent is None
            or (
                type(intent) is Intent
                and type(intent.intent_id) is str
                and type(intent.prefix) is str
                and _long(intent.ttl_ms)
            )
        )
    )


# ---------------------------------------------------------------------------- decode


def decode_commit(value: bytes) -> Commit:
    """Decode a record value; raises ``DecodeError`` / ``UnknownSchema`` on anything else."""
    if len(value) < HEADER_SIZE or value[:2] != MAGIC:
        raise DecodeError("not an Avro single-object encoded record (bad magic)")
    current, known = _schemas()
    writer = known.get(bytes(value[2:HEADER_SIZE]))
    if writer is None:
        raise UnknownSchema(
            f"unknown schema fingerprint {bytes(value[2:HEADER_SIZE]).hex()}; "
            "the record was written by a newer segcat, upgrade to read it"
        )
    body = io.BytesIO(value[HEADER_SIZE:])
    try:
        raw = fastavro.schemaless_reader(body, writer.parsed, current.parsed)
        if not isinstance(raw, dict):
            raise DecodeError("the Avro body is not a record")
        if body.tell() != len(value) - HEADER_SIZE:
            raise DecodeError("trailing bytes after the Avro body")
        return commit_from_avro(raw)
    except DecodeError:
        raise
    except Exception as exc:  # fastavro raises many kinds on garbage bodies
        raise DecodeError(f"undecodable commit body: {type(exc).__name__}: {exc}") from exc


_OPERATIONS = {member.value: member for member in Operation}
_ISOLATIONS = {member.value: member for member in Isolation}
_COLUMN_TYPES = {member.value: member for member in ColumnType}
"""Enum members by value: a dict lookup instead of ``Enum(value)`` (8 calls per commit decoded);
a value not in them still goes through the enum, which raises as it always did."""


def _member(members: dict[Any, Any], enum: Any, value: Any) -> Any:
    found = members.get(value) if isinstance(value, str) else None
    return enum(value) if found is None else found


def commit_from_avro(raw: dict[str, Any]) -> Commit:
    ts = raw["timestamp_ms"]
    if isinstance(ts, dt.datetime):  # layout v1 declared timestamp-millis; fastavro hands a datetime
        aware = ts if ts.tzinfo else ts.replace(tzinfo=dt.UTC)
        ts = (aware - _EPOCH) // dt.timedelta(milliseconds=1)
    return Commit(
        commit_id=raw["commit_id"],
        table=raw["table"],
        operation=_member(_OPERATIONS, Operation, raw["operation"]),
        base_version=raw["base_version"],
        writer_id=raw["writer_id"],
        timestamp_ms=ts,
        adds=tuple([segment_from_avro(s) for s in raw["adds"]]),
        drops=tuple(raw["drops"]),
        tombstones=tuple([Tombstone(t["predicate"]) for t in raw["tombstones"]]),
        replace_scope=tuple(raw["replace_scope"]),
        isolation=_member(_ISOLATIONS, Isolation, raw["isolation"]),
        properties=raw["properties"],
        table_properties=raw["table_properties"],
        schema=raw["schema"],
        protocol=None
        if raw.get("protocol") is None
        else Protocol(raw["protocol"]["version"], tuple(raw["protocol"]["features"])),
        intent=None
        if raw.get("intent") is None
        else Intent(raw["intent"]["intent_id"], raw["intent"]["prefix"], raw["intent"]["ttl_ms"]),
    )


def segment_from_avro(raw: dict[str, Any]) -> Segment:
    bloom = raw["bloom"]
    return Segment(
        raw["segment_id"],
        raw["path"],
        raw["size_bytes"],
        raw["row_count"],
        raw["partition"],
        raw["format"],
        tuple([_stats_from_avro(s) for s in raw["stats"]]),
        None if bloom is None else BloomFilter(bloom["column"], bloom["num_hashes"], bloom["bits"]),
        raw["schema"],
    )


def _stats_from_avro(raw: dict[str, Any]) -> ColumnStats:
    kind: ColumnType = _member(_COLUMN_TYPES, ColumnType, raw["type"])
    low, high = raw["min"], raw["max"]
    if kind is ColumnType.DATE or kind is ColumnType.TIMESTAMP:  # stat_from_avro keeps the others
        low, high = stat_from_avro(kind, low), stat_from_avro(kind, high)
    return ColumnStats(raw["column"], kind, low, high, raw["null_count"], raw.get("nan_count"))


def stat_from_avro(kind: ColumnType, value: StatValue) -> StatValue:
    if value is None or isinstance(value, bool):
        return value
    if kind is ColumnType.DATE and isinstance(value, int):
        return _EPOCH_DATE + dt.timedelta(days=value)
    if kind is ColumnType.TIMESTAMP and isinstance(value, int):
        return _EPOCH + dt.timedelta(microseconds=value)
    return value
