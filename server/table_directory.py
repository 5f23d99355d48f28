"""The tables the server answers for: opened once and kept (each open asks Kafka to describe a topic)."""

from __future__ import annotations

import threading
import time

from segcat import TableName, TableNotFound
from segcat.catalog.protocol.names import table_name
from segcat.catalog.read.table import TableReader, Tables

OPEN_TTL_S = 30.0
"""How long an opened table is reused before its topic is described again (a deleted topic shows)."""


class TableDirectory:
    def __init__(self, catalog: Tables) -> None:
        self.catalog = catalog
        self._opened: dict[str, tuple[float, TableReader]] = {}
        self._lock = threading.Lock()

    def open(self, name: str) -> TableReader:
        """The table ``name`` (``InvalidTableName`` → 400, ``TableNotFound`` → 404)."""
        parsed = table_name(name)
        now = time.monotonic()
        with self._lock:
            cached = self._opened.get(parsed.qualified)
        if cached is not None and now - cached[0] < OPEN_TTL_S:
            return cached[1]
        try:
            table = self.catalog.open(parsed)
        except TableNotFound:
            with self._lock:
                self._opened.pop(parsed.qualified, None)
            raise
        with self._lock:
            self._opened[parsed.qualified] = (now, table)
        return table

    def names(self) -> list[TableName]:
        return self.catalog.list_tables()
