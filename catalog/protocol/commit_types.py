"""Strict Python types for a commit built in code, checked before anything is encoded.

Avro would coerce (``size_bytes=1.5`` becomes 1) or fail deep inside fastavro; the log's
own records are typed by their schema, so only commits a program builds need this check.
A problem names the field path, e.g. ``adds[3].stats[0].null_count: expected an integer``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from typing import Any

from segcat.catalog.protocol.model import (
    BloomFilter,
    ColumnStats,
    ColumnType,
    Commit,
    Isolation,
    Operation,
    Protocol,
    Segment,
    Tombstone,
)

_INT64 = (-(2**63), 2**63 - 1)
_INT32 = (-(2**31), 2**31 - 1)
_STAT_VALUE = (int, float, str, bool, bytes, dt.date)


class _Problem(Exception):
    pass


def _fail(path: str, message: str) -> None:
    raise _Problem(f"{path}: {message}")


def _text(value: Any, path: str, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if not isinstance(value, str):
        _fail(path, f"expected a string, got {type(value).__name__}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        _fail(path, "is not valid Unicode text (lone surrogate)")


def _integer(value: Any, path: str, bounds: tuple[int, int] = _INT64, *, optional: bool = False) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        _fail(path, f"expected an integer, got {type(value).__name__} {value!r:.40}")
    if not bounds[0] <= value <= bounds[1]:
        _fail(path, f"{value} does not fit in {64 if bounds == _INT64 else 32} bits")


def _sequence(value: Any, path: str, what: str) -> tuple[Any, ...]:
    if isinstance(value, str | bytes) or not isinstance(value, tuple | list):
        _fail(path, f"expected a collection of {what}, got {type(value).__name__}")
    return tuple(value)


def _mapping(value: Any, path: str, *, nullable_values: bool) -> None:
    if not isinstance(value, Mapping):
        _fail(path, f"expected a mapping of strings, got {type(value).__name__}")
    for key, item in value.items():
        _text(key, f"{path} key")
        _text(item, f"{path}[{key!r:.40}]", optional=nullable_values)


def _stats(stats: Any, path: str) -> None:
    if not isinstance(stats, ColumnStats):
        _fail(path, f"expected ColumnStats, got {type(stats).__name__}")
    _text(stats.column, f"{path}.column")
    if not isinstance(stats.type, ColumnType):
        _fail(f"{path}.type", f"expected a ColumnType, got {stats.type!r:.40}")
    for name in ("min", "max"):
        value = getattr(stats, name)
        if value is not None and not isinstance(value, _STAT_VALUE):
            _fail(f"{path}.{name}", f"expected a {stats.type.value} value, got {type(value).__name__}")
        if isinstance(value, str):
            _text(value, f"{path}.{name}")
    _integer(stats.null_count, f"{path}.null_count", optional=True)
    _integer(stats.nan_count, f"{path}.nan_count", optional=True)


def _segment(segment: Any, path: str) -> None:
    if not isinstance(segment, Segment):
        _fail(path, f"expected a Segment, got {type(segment).__name__}")
    _text(segment.segment_id, f"{path}.segment_id")
    _text(segment.path, f"{path}.path")
    _integer(segment.size_bytes, f"{path}.size_bytes")
    _integer(segment.row_count, f"{path}.row_count")
    _text(segment.partition, f"{path}.partition", optional=True)
    _text(segment.format, f"{path}.format")
    for i, stats in enumerate(_sequence(segment.stats, f"{path}.stats", "ColumnStats")):
        _stats(stats, f"{path}.stats[{i}]")
    bloom = segment.bloom
    if bloom is not None:
        if not isinstance(bloom, BloomFilter):
            _fail(f"{path}.bloom", f"expected a BloomFilter, got {type(bloom).__name__}")
        _text(bloom.column, f"{path}.bloom.column")
        _integer(bloom.num_hashes, f"{path}.bloom.num_hashes", _INT32)
        if not isinstance(bloom.bits, bytes):
            _fail(f"{path}.bloom.bits", f"expected bytes, got {type(bloom.bits).__name__}")
    _text(segment.schema, f"{path}.schema", optional=True)


def _check(commit: Any) -> None:
    if not isinstance(commit, Commit):
        _fail("commit", f"expected a Commit, got {type(commit).__name__}")
    for name in ("commit_id", "table", "writer_id"):
        _text(getattr(commit, name), name)
    if not isinstance(commit.operation, Operation):
        _fail("operation", f"expected an Operation, got {commit.operation!r:.40}")
    _integer(commit.base_version, "base_version")
    _integer(commit.timestamp_ms, "timestamp_ms")
    for i, segment in enumerate(_sequence(commit.adds, "adds", "Segment")):
        _segment(segment, f"adds[{i}]")
    for i, drop in enumerate(_sequence(commit.drops, "drops", "segment ids")):
        _text(drop, f"drops[{i}]")
    for i, tomb in enumerate(_sequence(commit.tombstones, "tombstones", "Tombstone")):
        if not isinstance(tomb, Tombstone):
            _fail(f"tombstones[{i}]", f"expected a Tombstone, got {type(tomb).__name__}")
        _text(tomb.predicate, f"tombstones[{i}].predicate")
    for i, scope in enumerate(_sequence(commit.replace_scope, "replace_scope", "partitions")):
        _text(scope, f"replace_scope[{i}]")
    if not isinstance(commit.isolation, Isolation):
        _fail("isolation", f"expected an Isolation, got {commit.isolation!r:.40}")
    _mapping(commit.properties, "properties", nullable_values=False)
    _mapping(commit.table_properties, "table_properties", nullable_values=True)
    _text(commit.schema, "schema", optional=True)
    if commit.protocol is not None:
        if not isinstance(commit.protocol, Protocol):
            _fail("protocol", f"expected a Protocol, got {type(commit.protocol).__name__}")
        _integer(commit.protocol.version, "protocol.version", _INT32)
        for i, feature in enumerate(_sequence(commit.protocol.features, "protocol.features", "names")):
            _text(feature, f"protocol.features[{i}]")


def type_problem(commit: object) -> str | None:
    """Why ``commit`` does not hold the Python types its fields declare, or None."""
    try:
        _check(commit)
    except _Problem as exc:
        return str(exc)
    return None


def id_collection(value: object, what: str) -> tuple[str, ...]:
    """``value`` as a tuple of text ids, refusing a bare string (which would iterate its letters)."""
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TypeError(f"{what} must be a collection of strings, not a single {type(value).__name__}")
    return tuple(value)
