"""What white-box tests reach behind the public handle (``segcat.Table`` / ``segcat.Catalog``).

The handle composes the read side (``TableReader``), the writer (``Writer``) and the catalog's
shared clients (``Tables``); tests of those parts — the lookup chain's sources, the writer's
image, the full-replay oracle ``state()`` — take them from the handle here, in one place.
"""

from __future__ import annotations

from segcat import Catalog, Table
from segcat.catalog.read.table import TableReader, Tables
from segcat.catalog.write.writer import Writer


def reader_of(table: Table) -> TableReader:
    """The handle's read side: bound to the same log, sharing the catalog's clients."""
    return table._reader


def writer_of(table: Table) -> Writer:
    """The handle's writer (opened now if it was not yet): its image is ``.state``."""
    return table._write()


def tables_of(catalog: Catalog) -> Tables:
    """The catalog's shared clients: ``admin``, ``redis``, ``store``."""
    return catalog._tables
