"""Small segment files for change-feed tests: written by ``producers.segment_files`` (no Spark)."""

from __future__ import annotations

import json

import pyarrow as pa

from segcat import Segment, Table
from segcat.catalog.protocol.jsonio import segment_from_json
from segcat.producers.segment_files import FileSpec, write_files

SCHEMA = pa.schema([("k", pa.int64()), ("p", pa.string()), ("x", pa.float64())])
SPARK_SCHEMA = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": "k", "type": "long", "nullable": True, "metadata": {}},
            {"name": "p", "type": "string", "nullable": True, "metadata": {}},
            {"name": "x", "type": "double", "nullable": True, "metadata": {}},
        ],
    },
    separators=(",", ":"),
)


def write_segments(
    table: Table, rows: list[tuple[int | None, str | None, float | None]], *, partitioned: bool = False
) -> list[Segment]:
    """``rows`` as segment files under the table's root (one per partition when ``partitioned``)."""
    data = pa.table(
        {
            "k": pa.array([r[0] for r in rows], pa.int64()),
            "p": pa.array([r[1] for r in rows], pa.string()),
            "x": pa.array([r[2] for r in rows], pa.float64()),
        },
        schema=SCHEMA,
    )
    return write_table(table, data, SPARK_SCHEMA, partitioned=partitioned)


def write_table(
    table: Table, data: pa.Table, schema_json: str, *, partitioned: bool = False
) -> list[Segment]:
    """``data`` as segment files recording ``schema_json`` (Spark's JSON of their columns)."""
    keys = ("p",) if partitioned else ()
    config = table.catalog.config
    spec = FileSpec(
        root=table.location(),
        s3_endpoint=config.s3_endpoint,
        s3_region=config.s3_region,
        key_columns=keys,
        schema_json=schema_json,
    )
    out: list[Segment] = []
    for batch in write_files(iter(data.to_batches()), spec):
        for text in batch.column("segment").to_pylist():
            out.append(segment_from_json(json.loads(text)))
    return out
