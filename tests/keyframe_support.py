"""Redis key-frame values as segcat wrote them before Redis key-frame format 2, for fallback tests."""

from __future__ import annotations

import hashlib

import pyarrow as pa


def ipc_format1(table: pa.Table) -> bytes:
    """A sealed key frame as a format-1 Redis value: the whole table (``segment_avro`` and content
    checksum included) as LZ4-compressed Arrow IPC, exactly as the old ``keyframe.to_ipc`` wrote it."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def sha256_digest(data: bytes) -> str:
    """The digest a format-1 value was stored with."""
    return hashlib.sha256(data).hexdigest()
