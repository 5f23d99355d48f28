"""The public handle: ``segcat.load_catalog()`` → ``Catalog`` → ``Table``.

The top layer of the core: it composes the read side (``catalog.read.table``) and the write
side (``catalog.write.writer``) into one object per table, as pyiceberg's ``load_catalog`` /
``load_table`` do. Everything below it is internal (docs/ARCHITECTURE.md, "Public API").
"""

from segcat.catalog.client.catalog import Catalog, load_catalog
from segcat.catalog.client.table import Table

__all__ = ["Catalog", "Table", "load_catalog"]
