"""The tables the server answers for: their names, kept and refreshed at most every
``NAMES_TTL_S``, and the tables it opened (each open asks Kafka to describe a topic).

**Decision — freshness of the table list.** Listing the catalog's tables costs one metadata
request over every topic of the cluster; the server makes it at most once per ``NAMES_TTL_S``,
shared by every request that needs the names (``/api/tables`` pages, the Iceberg listings, the
all-tables stream), so a page costs nothing in proportion to the catalog. A table created
appears within ``NAMES_TTL_S`` (at once when the materializer announces one of its versions on
the global channel while an all-tables stream is open, or when a request opens it by name); a
deleted topic leaves the list at the next refresh, or at once when a page finds it missing.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left, insort
from collections.abc import Callable

from segcat import TableName, TableNotFound
from segcat.catalog.protocol.names import table_name
from segcat.catalog.read.table import TableReader, Tables

OPEN_TTL_S = 30.0
"""How long an opened table is reused before its topic is described again (a deleted topic shows)."""
NAMES_TTL_S = 2.0
"""How old the list of table names may be when a request uses it."""


class TableDirectory:
    def __init__(self, catalog: Tables, clock: Callable[[], float] = time.monotonic) -> None:
        self.catalog = catalog
        self._clock = clock
        self._opened: dict[str, tuple[float, TableReader]] = {}
        self._lock = threading.Lock()
        self._names: list[TableName] = []
        self._names_at: float | None = None
        """When the metadata request behind ``_names`` was sent (None: never)."""
        self._refreshing = threading.Lock()
        self.refreshes = 0
        """Metadata requests made for the names (tests: they do not follow the requests)."""

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
            self.forget(parsed)
            raise
        with self._lock:
            self._opened[parsed.qualified] = (now, table)
        self.add(parsed)
        return table

    def names(self) -> list[TableName]:
        """Every table, sorted (namespace, then table), as of at most ``NAMES_TTL_S`` ago."""
        asked = self._clock()
        with self._lock:
            if self._names_at is not None and asked - self._names_at < NAMES_TTL_S:
                return self._names
        return self.refresh(asked)

    def refresh(self, asked: float | None = None) -> list[TableName]:
        """Ask Kafka for the names now, unless a request sent since ``asked`` answered already
        (one request at a time; the others wait for its answer)."""
        asked = self._clock() if asked is None else asked
        with self._refreshing:
            with self._lock:
                if self._names_at is not None and self._names_at >= asked:
                    return self._names
            sent = self._clock()
            found = self.catalog.list_tables()
            self.refreshes += 1
            with self._lock:
                self._names, self._names_at = sorted(found), sent
                return self._names

    def add(self, name: TableName) -> None:
        """A table known to exist (opened, or announced on the global channel) joins the list now."""
        with self._lock:
            if self._names_at is None:
                return
            i = bisect_left(self._names, name)
            if i == len(self._names) or self._names[i] != name:
                names = list(self._names)  # a list handed out is never changed
                insort(names, name)
                self._names = names

    def forget(self, name: TableName) -> None:
        """A table found missing leaves the list now."""
        with self._lock:
            if name in self._names:
                self._names = [n for n in self._names if n != name]
