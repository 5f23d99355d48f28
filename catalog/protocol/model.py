"""The event model: segments, commits and the values they carry.

Plain frozen dataclasses, so that every party (writer, materializer, reader) holds the
same immutable facts; the codec turns them into Avro and back.
"""

from __future__ import annotations

import datetime as dt
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

StatValue = int | float | str | bool | bytes | dt.date | dt.datetime | None


class Operation(StrEnum):
    APPEND = "APPEND"
    COMPACT = "COMPACT"
    REPLACE = "REPLACE"
    DELETE = "DELETE"
    SET_PROPERTIES = "SET_PROPERTIES"
    SET_SCHEMA = "SET_SCHEMA"
    UPGRADE_PROTOCOL = "UPGRADE_PROTOCOL"
    """Moves the table to a newer protocol (rules) version or enables features (layout v3)."""
    INTENT = "INTENT"
    """Opens, renews or closes a write intent (layout v4, feature ``lifecycle``)."""
    UNKNOWN = "UNKNOWN"
    """A symbol written by a newer protocol version; such a commit is judged INVALID."""


class Isolation(StrEnum):
    SNAPSHOT = "SNAPSHOT"
    SERIALIZABLE = "SERIALIZABLE"


class ColumnType(StrEnum):
    INT = "INT"
    FLOAT = "FLOAT"
    STRING = "STRING"
    DATE = "DATE"
    TIMESTAMP = "TIMESTAMP"
    BOOLEAN = "BOOLEAN"
    BINARY = "BINARY"
    OTHER = "OTHER"


@dataclass(frozen=True, slots=True)
class ColumnStats:
    """Min / max / null count of one column in one segment, typed and lossless."""

    column: str
    type: ColumnType
    min: StatValue = None
    max: StatValue = None
    null_count: int | None = None
    nan_count: int | None = None
    """FLOAT only: how many values are NaN (min/max never hold NaN); None = unknown."""


@dataclass(frozen=True, slots=True)
class BloomFilter:
    """A Bloom filter over one key column of a segment (hashing: docs/PROTOCOL.md)."""

    column: str
    num_hashes: int
    bits: bytes


@dataclass(frozen=True, slots=True)
class Segment:
    """One immutable data file of a table."""

    segment_id: str
    path: str
    size_bytes: int
    row_count: int
    partition: str | None = None
    format: str = "parquet"
    stats: tuple[ColumnStats, ...] = ()
    bloom: BloomFilter | None = None
    schema: str | None = None


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A soft delete: rows matching ``predicate`` in data committed before ``version``."""

    predicate: str
    version: int = -1
    """The version of the commit that carried it; -1 while still unpublished."""


@dataclass(frozen=True, slots=True)
class Protocol:
    """The rules version a table is judged by, and the named features it uses (docs/PROTOCOL.md §3a)."""

    version: int = 1
    features: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Intent:
    """A writer's announcement that it is writing files under ``prefix`` (feature ``lifecycle``).

    On an ``INTENT`` commit ``ttl_ms > 0`` opens (or renews) it until the record's broker time
    + ``ttl_ms``, and ``ttl_ms == 0`` closes it (an abort); a data commit carrying it (with
    ``ttl_ms == 0``) closes it by committing the files. Vacuum never deletes files under the
    prefix of an intent that is open and not expired.
    """

    intent_id: str
    prefix: str
    ttl_ms: int = 0


@dataclass(frozen=True, slots=True)
class Commit:
    """One proposed change of a table: exactly one Kafka record."""

    commit_id: str
    table: str
    operation: Operation
    base_version: int
    writer_id: str
    timestamp_ms: int
    adds: tuple[Segment, ...] = ()
    drops: tuple[str, ...] = ()
    tombstones: tuple[Tombstone, ...] = ()
    replace_scope: tuple[str, ...] = ()
    isolation: Isolation = Isolation.SNAPSHOT
    properties: Mapping[str, str] = field(default_factory=dict)
    table_properties: Mapping[str, str | None] = field(default_factory=dict)
    schema: str | None = None
    protocol: Protocol | None = None
    """UPGRADE_PROTOCOL only: the protocol the table moves to."""
    intent: Intent | None = None
    """INTENT: the intent opened, renewed or closed; a data commit: the intent it closes."""

    @staticmethod
    def new_id() -> str:
        return str(uuid.uuid4())


@dataclass(frozen=True, slots=True)
class LogRecord:
    """A record as read from the table's topic, before decoding."""

    offset: int
    timestamp_ms: int
    key: bytes | None
    value: bytes | None
