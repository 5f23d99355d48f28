"""Iceberg tables written by pyiceberg itself, for tests of what serves them (the REST catalog).

pyiceberg writes Iceberg tables only through a catalog; its SQL catalog needs SQLAlchemy, which
segcat does not install. ``FileCatalog`` is the smallest catalog pyiceberg's writer needs: the
metadata location of each table in a dict, everything else in pyiceberg's own ``MetastoreCatalog``.
``publish`` then does what the materializer's Iceberg publisher does for a version: the metadata
file at its place in the table's log directory (``catalog.iceberg.layout``) and the pointer.
"""

from __future__ import annotations

import time
from typing import Any

import pyarrow as pa
from pyiceberg.catalog import MetastoreCatalog
from pyiceberg.exceptions import NoSuchTableError
from pyiceberg.serializers import FromInputFile
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.typedef import Identifier

from segcat.catalog.iceberg.layout import iceberg_dir, metadata_path
from segcat.catalog.iceberg.pointer import IcebergPointer, write_pointer
from segcat.catalog.read.table import TableReader
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.redis import RedisStore


class FileCatalog(MetastoreCatalog):
    """Create, load and commit; nothing else (the abstract methods it leaves are never called)."""

    def __init__(self) -> None:
        super().__init__("segcat-test")
        self.locations: dict[Identifier, str] = {}

    def create_table(
        self, identifier: Any, schema: Any, location: Any = None, *args: Any, **kwargs: Any
    ) -> Table:
        staged = self._create_staged_table(identifier, schema, location, *args, **kwargs)
        self._write_metadata(staged.metadata, staged.io, staged.metadata_location)
        self.locations[self.identifier_to_tuple(identifier)] = staged.metadata_location
        return self.load_table(identifier)

    def load_table(self, identifier: Any) -> Table:
        key = self.identifier_to_tuple(identifier)
        if key not in self.locations:
            raise NoSuchTableError(str(identifier))
        location = self.locations[key]
        io = self._load_file_io(location=location)
        metadata = FromInputFile.table_metadata(io.new_input(location))
        return Table(key, metadata, location, io, self)

    def commit_table(self, table: Table, requirements: Any, updates: Any) -> CommitTableResponse:
        current = self.load_table(table.name())
        staged = self._update_and_stage_table(current, table.name(), requirements, updates)
        self._write_metadata(staged.metadata, staged.io, staged.metadata_location)
        self.locations[table.name()] = staged.metadata_location
        return CommitTableResponse(metadata=staged.metadata, metadata_location=staged.metadata_location)


FileCatalog.__abstractmethods__ = frozenset()  # the rest of Catalog's interface: unused here


def iceberg_table(opened: TableReader, store: ObjectStore, *appends: pa.Table) -> Table:
    """An Iceberg table in ``opened``'s log directory (``<log dir>/iceberg``) with ``appends``."""
    assert opened.files is not None and appends
    table = FileCatalog().create_table(
        opened.name.qualified, appends[0].schema, store.uri(iceberg_dir(opened.files))
    )
    for data in appends:
        table.append(data)
    return table


def publish(
    opened: TableReader,
    store: ObjectStore,
    redis: RedisStore,
    table: Table,
    version: int,
    *,
    blocked: tuple[int, str] | None = None,
) -> str:
    """Copy ``table``'s current metadata to ``v<version>.metadata.json`` and point at it."""
    assert opened.files is not None
    path = metadata_path(opened.files, version)
    store.put(path, table.io.new_input(table.metadata_location).open().read())
    location = store.uri(path)
    pointer = IcebergPointer(
        log_id=opened.log_id,
        version=version,
        location=location,
        blocked_version=None if blocked is None else blocked[0],
        reason=None if blocked is None else blocked[1],
        updated_ms=int(time.time() * 1000),
    )
    write_pointer(redis, opened.name, pointer)
    return location


def block_first(opened: TableReader, redis: RedisStore, version: int, reason: str) -> None:
    """A pointer saying that no version was published: ``version`` is the first, and blocked."""
    write_pointer(
        redis, opened.name, IcebergPointer(opened.log_id, -1, None, version, reason, int(time.time() * 1000))
    )
