"""Helpers for the Iceberg tests: real Parquet files committed to a table, the rows segcat reads at
a version, and what pyiceberg reads from the published metadata."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from segcat import Table
from segcat.catalog.config import Config
from segcat.catalog.iceberg.pointer import IcebergPointer, read_pointer
from segcat.catalog.protocol import spark_types
from segcat.catalog.protocol.model import Segment
from segcat.catalog.protocol.names import TableName
from segcat.catalog.read.changes import arrow_schema, read_rows, reads_schema, snapshot_reads
from segcat.catalog.storage.parquet_stats import segment_from_parquet
from segcat.catalog.storage.redis import RedisStore


def parquet_segment(table: Table, sid: str, rows: pa.Table) -> Segment:
    """Write ``rows`` as ``data/<sid>.parquet`` under the table; its segment (stats and schema)."""
    relative = f"data/{sid}.parquet"
    path = Path(table.location()) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows, path)
    segment = segment_from_parquet(str(path), segment_id=sid, relative_path=relative)
    schema = json.dumps(spark_types.schema_from_arrow(rows.schema), separators=(",", ":"))
    return Segment(
        segment.segment_id,
        segment.path,
        segment.size_bytes,
        segment.row_count,
        None,
        "parquet",
        segment.stats,
        None,
        schema,
    )


def segcat_rows(table: Table, config: Config, version: int | None = None) -> list[dict[str, Any]]:
    """The rows segcat reads at ``version`` (its live files, tombstones applied), sorted."""
    snapshot = table.snapshot(version)
    reads = snapshot_reads(snapshot)
    if not reads:
        return []
    schema = reads_schema(reads, config)
    out: list[dict[str, Any]] = []
    for read in reads:
        for batch in read_rows(read, schema, config):
            out.extend(batch.to_pylist())
    return _sorted(out)


def _sorted(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))


def iceberg_rows(location: str, snapshot_id: int | None = None) -> list[dict[str, Any]]:
    """What pyiceberg reads from a metadata file (at ``snapshot_id``), sorted."""
    from pyiceberg.table import StaticTable

    static = StaticTable.from_metadata(location)
    scan = static.scan() if snapshot_id is None else static.scan(snapshot_id=snapshot_id)
    return _sorted(scan.to_arrow().to_pylist())


def wait_for_pointer(
    config: Config,
    table: str,
    log_id: str | None,
    version: int,
    *,
    published: bool = True,
    timeout_s: float = 60.0,
) -> IcebergPointer:
    """The table's Iceberg pointer once ``version`` is published (``published``), or once the
    materializer has applied it (the head is there: its Iceberg publisher ran before the head
    moved), whatever the pointer says then."""
    store = RedisStore.from_config(config)
    name = TableName.parse(table)
    deadline = time.monotonic() + timeout_s
    while True:
        pointer = read_pointer(store, name, log_id)
        if published:
            if pointer is not None and pointer.version >= version:
                return pointer
        else:
            head = store.head(name)
            if pointer is not None and head is not None and head.offset >= version:
                return pointer
        if time.monotonic() > deadline:
            raise AssertionError(f"the Iceberg pointer of {table} did not reach version {version}: {pointer}")
        time.sleep(0.05)


__all__ = ["arrow_schema", "iceberg_rows", "parquet_segment", "segcat_rows", "wait_for_pointer"]
