"""The core library: the protocol, the log, storage and reading (docs/ARCHITECTURE.md).

It imports nothing above it (writers, services, Spark, the command line, the local stack).
The names most programs need are here: ``from segcat.catalog import Catalog, Config, col``;
they are loaded on first use, so importing one small module (``segcat.catalog.errors``)
does not load them all.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from segcat.catalog.config import Config
    from segcat.catalog.protocol.expressions import col
    from segcat.catalog.protocol.model import (
        BloomFilter,
        ColumnStats,
        ColumnType,
        Commit,
        Isolation,
        Operation,
        Protocol,
        Segment,
    )
    from segcat.catalog.read.snapshot import Snapshot
    from segcat.catalog.read.table import Catalog, Table

_PUBLIC = {
    "Catalog": "segcat.catalog.read.table",
    "Table": "segcat.catalog.read.table",
    "Snapshot": "segcat.catalog.read.snapshot",
    "Config": "segcat.catalog.config",
    "col": "segcat.catalog.protocol.expressions",
    "BloomFilter": "segcat.catalog.protocol.model",
    "ColumnStats": "segcat.catalog.protocol.model",
    "ColumnType": "segcat.catalog.protocol.model",
    "Commit": "segcat.catalog.protocol.model",
    "Isolation": "segcat.catalog.protocol.model",
    "Operation": "segcat.catalog.protocol.model",
    "Protocol": "segcat.catalog.protocol.model",
    "Segment": "segcat.catalog.protocol.model",
}

__all__ = [
    "BloomFilter",
    "Catalog",
    "ColumnStats",
    "ColumnType",
    "Commit",
    "Config",
    "Isolation",
    "Operation",
    "Protocol",
    "Segment",
    "Snapshot",
    "Table",
    "col",
]


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'segcat.catalog' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
