"""A whole Arrow table as one Parquet object and back, with page checksums both ways.

Key frames and commit archives are written and read this way, so a flipped byte anywhere
in either is caught by Parquet's own page CRCs before their content checksums are even read.
"""

from __future__ import annotations

import io
from collections.abc import Collection

import pyarrow as pa
import pyarrow.parquet as pq


def to_parquet(table: pa.Table) -> bytes:
    out = io.BytesIO()
    pq.write_table(table, out, compression="zstd", write_page_checksum=True, store_schema=True)
    return out.getvalue()


def read_parquet(data: bytes, what: str, error: type[Exception], *, skip: Collection[str] = ()) -> pa.Table:
    """The table in ``data`` (without the columns in ``skip``, which are never read); ``error``
    (naming ``what``) when it is not readable Parquet."""
    try:
        if not skip:
            return pq.read_table(pa.BufferReader(data), page_checksum_verification=True)
        source = pq.ParquetFile(pa.BufferReader(data), page_checksum_verification=True)
        wanted = [name for name in source.schema_arrow.names if name not in skip]
        return source.read(columns=wanted)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise error(f"unreadable {what}: {exc}") from exc
