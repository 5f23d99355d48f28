"""segcat: an event-sourced table catalog on Kafka with materialized key-frame snapshots.

The public API is this module's ``__all__``::

    import segcat

    with segcat.load_catalog() as catalog:           # env / TOML, or keyword overrides
        table = catalog.load_table("sales.orders")
        version = table.append([segcat.Segment(...)])
        snap = table.snapshot(as_of="2026-11-22T10:00:00Z")

Errors are importable from here (``segcat.CommitConflict``, ``segcat.TableNotFound``, ...),
as are the model types a program builds (``Segment``, ``ColumnStats``, ``Commit``, ...) and
the predicate helpers (``col``, ``parse_predicate``). Everything else is internal
(docs/ARCHITECTURE.md, "Public API"). The project's folders install as one namespace:
``segcat.catalog`` (the core library), ``segcat.producers``, ``segcat.materializer``,
``segcat.spark_integration``, ``segcat.cli`` and ``segcat.local_stack``.

Names other than the errors load on first use, so ``import segcat`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from segcat.catalog.errors import (
    ArchiveGap,
    CheckpointConflict,
    ColumnTypeConflict,
    CommitConflict,
    CommitTooLarge,
    ConfigError,
    CorruptArchive,
    CorruptKeyFrame,
    DataFileMissing,
    DecodeError,
    IncompatibleSchema,
    InvalidArgument,
    InvalidCommit,
    InvalidPredicate,
    InvalidTableName,
    LogPruned,
    MalformedChange,
    MalformedCommit,
    MisconfiguredTable,
    MissingExtra,
    NotAuthorized,
    PurgeStopped,
    RuleRefusal,
    SegcatError,
    ServiceUnavailable,
    StreamChangeCommit,
    StreamDataLoss,
    StreamSchemaChanged,
    TableAlreadyExists,
    TableDropped,
    TableNotFound,
    TablePurging,
    UnknownSchema,
    UnsafeLocation,
    UnsupportedPredicate,
    UnsupportedProtocol,
    VersionExpired,
    VersionNotFound,
    exit_code,
)

if TYPE_CHECKING:
    from segcat.catalog.client.catalog import Catalog, load_catalog
    from segcat.catalog.client.table import Table
    from segcat.catalog.config import Config
    from segcat.catalog.log.pipeline import CommitFuture
    from segcat.catalog.protocol.expressions import Predicate, col
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
    from segcat.catalog.protocol.names import TableName
    from segcat.catalog.protocol.predicates import parse_predicate
    from segcat.catalog.protocol.version_change import VersionChange
    from segcat.catalog.read.change_feed import ChangeFeed
    from segcat.catalog.read.changes import FileRead, VersionFiles, VersionKind
    from segcat.catalog.read.lease import HeldLease
    from segcat.catalog.read.log_pruning import PruneResult
    from segcat.catalog.read.purge import PurgeReport
    from segcat.catalog.read.scan import Scan
    from segcat.catalog.read.snapshot import Snapshot, SnapshotDiff
    from segcat.catalog.read.table import HistoryEntry
    from segcat.catalog.read.vacuum import VacuumReport
    from segcat.catalog.read.watch import Watcher
    from segcat.catalog.storage.parquet_stats import segment_from_parquet
    from segcat.catalog.write.intent import WriteIntent
    from segcat.producers.arrow_writer import write

_LAZY = {
    "VersionChange": "segcat.catalog.protocol.version_change",
    "load_catalog": "segcat.catalog.client.catalog",
    "Catalog": "segcat.catalog.client.catalog",
    "Table": "segcat.catalog.client.table",
    "Config": "segcat.catalog.config",
    "CommitFuture": "segcat.catalog.log.pipeline",
    "Predicate": "segcat.catalog.protocol.expressions",
    "col": "segcat.catalog.protocol.expressions",
    "parse_predicate": "segcat.catalog.protocol.predicates",
    "BloomFilter": "segcat.catalog.protocol.model",
    "ColumnStats": "segcat.catalog.protocol.model",
    "ColumnType": "segcat.catalog.protocol.model",
    "Commit": "segcat.catalog.protocol.model",
    "Isolation": "segcat.catalog.protocol.model",
    "Operation": "segcat.catalog.protocol.model",
    "Protocol": "segcat.catalog.protocol.model",
    "Segment": "segcat.catalog.protocol.model",
    "Tombstone": "segcat.catalog.protocol.model",
    "TableName": "segcat.catalog.protocol.names",
    "ChangeFeed": "segcat.catalog.read.change_feed",
    "FileRead": "segcat.catalog.read.changes",
    "VersionFiles": "segcat.catalog.read.changes",
    "VersionKind": "segcat.catalog.read.changes",
    "HeldLease": "segcat.catalog.read.lease",
    "PruneResult": "segcat.catalog.read.log_pruning",
    "PurgeReport": "segcat.catalog.read.purge",
    "Scan": "segcat.catalog.read.scan",
    "Snapshot": "segcat.catalog.read.snapshot",
    "SnapshotDiff": "segcat.catalog.read.snapshot",
    "HistoryEntry": "segcat.catalog.read.table",
    "VacuumReport": "segcat.catalog.read.vacuum",
    "Watcher": "segcat.catalog.read.watch",
    "segment_from_parquet": "segcat.catalog.storage.parquet_stats",
    "WriteIntent": "segcat.catalog.write.intent",
    "write": "segcat.producers.arrow_writer",
}

__all__ = [
    "ArchiveGap",
    "BloomFilter",
    "Catalog",
    "ChangeFeed",
    "CheckpointConflict",
    "ColumnStats",
    "ColumnType",
    "ColumnTypeConflict",
    "Commit",
    "CommitConflict",
    "CommitFuture",
    "CommitTooLarge",
    "Config",
    "ConfigError",
    "CorruptArchive",
    "CorruptKeyFrame",
    "DataFileMissing",
    "DecodeError",
    "FileRead",
    "HeldLease",
    "HistoryEntry",
    "IncompatibleSchema",
    "InvalidArgument",
    "InvalidCommit",
    "InvalidPredicate",
    "InvalidTableName",
    "Isolation",
    "LogPruned",
    "MalformedChange",
    "MalformedCommit",
    "MisconfiguredTable",
    "MissingExtra",
    "NotAuthorized",
    "Operation",
    "Predicate",
    "Protocol",
    "PruneResult",
    "PurgeReport",
    "PurgeStopped",
    "RuleRefusal",
    "Scan",
    "SegcatError",
    "Segment",
    "ServiceUnavailable",
    "Snapshot",
    "SnapshotDiff",
    "StreamChangeCommit",
    "StreamDataLoss",
    "StreamSchemaChanged",
    "Table",
    "TableAlreadyExists",
    "TableDropped",
    "TableName",
    "TableNotFound",
    "TablePurging",
    "Tombstone",
    "UnknownSchema",
    "UnsafeLocation",
    "UnsupportedPredicate",
    "UnsupportedProtocol",
    "VacuumReport",
    "VersionChange",
    "VersionExpired",
    "VersionFiles",
    "VersionKind",
    "VersionNotFound",
    "Watcher",
    "WriteIntent",
    "col",
    "exit_code",
    "load_catalog",
    "parse_predicate",
    "segment_from_parquet",
    "write",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'segcat' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
