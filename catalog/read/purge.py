"""Purge a dropped table: its data, its ``_catalog/``, its Redis keys and finally its topic.

The topic goes last: until then the log still says "dropped", so a purge that stops midway
(killed, storage unreachable) is simply run again and finishes the job.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from segcat.catalog.errors import InvalidArgument, ServiceUnavailable
from segcat.catalog.read.table import Catalog, Table
from segcat.catalog.storage.objectstore import ObjectStore

log = logging.getLogger("segcat.purge")


@dataclass(frozen=True)
class PurgeReport:
    table: str
    data_files: int
    catalog_objects: int
    redis_keys: int
    topic_deleted: bool


def purge(catalog: Catalog, table: Table) -> PurgeReport:
    """Delete everything of a dropped table (``InvalidArgument`` if it is not dropped)."""
    head = table.snapshot(include_dropped=True)
    if not head.dropped:
        raise InvalidArgument(f"table {table.name} is not dropped; drop it first (segcat table drop)")
    config = table.config
    data = ObjectStore.from_uri(head.root, s3_endpoint=config.s3_endpoint, s3_region=config.s3_region)
    data_files = 0
    for key, _, _ in data.list_files("data"):
        data.delete(key)
        data_files += 1
    catalog_objects = 0
    if table.files is not None:
        store = table.files.store
        for key, _, _ in store.list_files(table.files.catalog_dir):  # every log's objects
            store.delete(key)
            catalog_objects += 1
    redis_keys = 0
    if catalog.redis is not None:
        try:
            redis_keys = catalog.redis.forget_table(table.name)
        except ServiceUnavailable as exc:
            raise ServiceUnavailable(f"purge stopped before deleting the topic: {exc}; run it again") from exc
    catalog.admin.delete(table.name)
    if catalog.redis is not None:  # a materializer may have rebuilt the keys before it lost the topic
        try:
            redis_keys += catalog.redis.forget_table(table.name)
        except ServiceUnavailable as exc:
            log.warning(
                "redis keys of a purged table remain",
                extra={"table": table.name.qualified, "error": str(exc)},
            )
    report = PurgeReport(table.name.qualified, data_files, catalog_objects, redis_keys, True)
    log.info("table purged", extra={"table": report.table, "data_files": data_files})
    return report
