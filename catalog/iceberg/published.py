"""What a writer may learn from the table's newest published Iceberg metadata: its field ids.

Iceberg readers match a data file's columns by the Parquet field ids the file carries, and use
the name mapping only for files without any. The publisher gives ids by name path in order of
first appearance over the whole log, never reusing one (``schema.FieldIds``); a writer sees only
the head, so it cannot number columns itself without ever disagreeing with the publisher (a
column dropped and written again, two writers adding columns at once). So a writer takes the ids
the publisher has already given, which never change: a file whose every field has one carries
them, any other file carries none and is read through the name mapping.
"""

from __future__ import annotations

import json
from typing import Any

from segcat.catalog.errors import ServiceUnavailable
from segcat.catalog.iceberg import layout
from segcat.catalog.iceberg.pointer import read_pointer
from segcat.catalog.iceberg.schema import FieldIds, Path
from segcat.catalog.protocol.names import TableName
from segcat.catalog.storage.redis.store import RedisStore
from segcat.catalog.storage.table_files import TableFiles


def published_field_ids(
    redis: RedisStore | None, files: TableFiles | None, table: TableName
) -> dict[Path, int]:
    """Name path → field id of every schema in the newest published metadata of ``files``' log;
    empty when none is published or it cannot be read now (the file then carries no ids)."""
    if redis is None or files is None:
        return {}
    try:
        pointer = read_pointer(redis, table, files.log_id)
        if pointer is None or pointer.version < 0:
            return {}
        doc: Any = json.loads(files.store.get(layout.metadata_path(files, pointer.version)))
        ids = FieldIds()
        for schema in doc.get("schemas", ()):
            ids.learn(schema)
    except (ServiceUnavailable, OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}
    return dict(ids.ids)
