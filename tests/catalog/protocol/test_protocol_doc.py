"""docs/PROTOCOL.md §6 held to the code: what a second implementation reads from the document
alone (issue 20, item 10) must be what segcat writes — the commit archive's columns and digest,
the key-frame format and metadata, the Redis copy's Arrow IPC stream with LZ4 buffers."""

from __future__ import annotations

import hashlib
import json
import re
import struct
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from segcat.catalog.protocol import codec, rules
from segcat.catalog.protocol.model import Commit, Operation
from segcat.catalog.protocol.state import TableState
from segcat.catalog.storage import archive, keyframe
from segcat.catalog.storage.archive import ArchivedCommit, ArchivedRecord
from tests.factories import segment

PROTOCOL = (Path(__file__).resolve().parents[3] / "docs" / "PROTOCOL.md").read_text(encoding="utf-8")


def _table_after(heading: str) -> list[list[str]]:
    """The rows (cells stripped) of the first Markdown table after the line starting ``heading``."""
    lines = PROTOCOL.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    first = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))
    rows = []
    for line in lines[first + 2 :]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split(" | ")])
    return rows


def _archive_bytes() -> bytes:
    commit = Commit(Commit.new_id(), "ns.t", Operation.APPEND, -1, "w", 0, adds=(segment("a"),))
    commits = [ArchivedCommit(3, 1_000, commit.commit_id, "APPEND", codec.encode_commit(commit))]
    others = [
        ArchivedRecord(4, 1_001, b"k", b"garbage", "INVALID"),
        ArchivedRecord(5, 1_002, b"old", None, "PRUNED"),
    ]
    return archive.encode_archive(2, 6, commits, table="ns.t", others=others)


def test_the_archive_columns_are_the_documented_ones() -> None:
    rows = _table_after("**Commit archive columns**")
    documented = [(re.sub(r"`", "", name), kind) for name, kind, *_ in rows]
    written = list(archive.SCHEMA)
    assert [name for name, _ in documented] == [f.name for f in written]
    for (name, kind), field in zip(documented, written, strict=True):
        assert kind.split(",")[0] == str(field.type), name
        assert ("not null" in kind) == (not field.nullable), name
    v1 = {re.sub(r"`", "", r[0]) for r in rows if r[3] != "(absent)" and "absent" not in r[3]}
    assert v1 == set(archive.SCHEMA_V1.names)


def _doc_digest(meta_json: bytes, table: pa.Table, names: list[str]) -> str:
    """The digest exactly as §6 words it (not as archive.py computes it)."""
    digest = hashlib.sha256(meta_json)
    digest.update("\n".join(f"{n}:{table.schema.field(n).type}" for n in names).encode())
    for name in names:
        values = table.column(name).to_pylist()
        digest.update(f"\n{name}:{len(values)}\n".encode())
        if not values:
            continue
        if any(v is None for v in values):
            digest.update(b"validity:" + bytes(0 if v is None else 1 for v in values))
        if pa.types.is_integer(table.schema.field(name).type):
            digest.update(b"".join(struct.pack("<q", v or 0) for v in values))
            continue
        raw = [b"" if v is None else v.encode() if isinstance(v, str) else v for v in values]
        digest.update(b"".join(struct.pack("<i", len(v)) for v in raw))
        digest.update(b"".join(raw))
    return digest.hexdigest()


def test_the_archive_digests_are_computable_from_the_document() -> None:
    data = _archive_bytes()
    table = pq.read_table(pa.BufferReader(data))
    meta = table.schema.metadata
    meta_json = meta[b"segcat.archive"]
    assert json.loads(meta_json) == {
        "format_version": 2,
        "from_version": 2,
        "to_version": 6,
        "count": 3,
        "accepted": 1,
        "table": "ns.t",
    }
    assert meta_json == json.dumps(json.loads(meta_json), separators=(",", ":"), sort_keys=True).encode()
    assert table.column("outcome").to_pylist() == ["ACCEPTED", "INVALID", "PRUNED"]
    assert meta[b"segcat.checksum"].decode() == _doc_digest(meta_json, table, table.column_names)
    heads = list(archive.HEAD_COLUMNS)
    assert meta[b"segcat.heads_checksum"].decode() == _doc_digest(meta_json, table, heads)
    assert "`version`, `timestamp_ms`, `outcome`, `commit_id` and `operation` only" in PROTOCOL


def _frame() -> pa.Table:
    state = TableState("ns.t")
    append = Commit(Commit.new_id(), "ns.t", Operation.APPEND, -1, "w", 0, adds=(segment("a"), segment("b")))
    assert rules.apply(state, 0, 1_000, append).accepted
    return keyframe.build(state)


def test_the_key_frame_format_and_metadata_are_the_documented_ones() -> None:
    assert f"A key frame (format **{keyframe.FORMAT_VERSION}**)" in PROTOCOL
    meta = json.loads(_frame().schema.metadata[b"segcat.keyframe"])
    assert meta["format_version"] == keyframe.FORMAT_VERSION
    assert set(meta) == {"format_version", "segment_layout", *TableState("ns.t").to_meta()}


def test_the_redis_copy_is_an_arrow_ipc_stream_with_lz4_buffers() -> None:
    data = keyframe.to_ipc(_frame())
    assert data[:4] == b"\xff\xff\xff\xff"  # the stream format's continuation marker, not b"ARROW1"
    with pytest.raises(pa.ArrowInvalid):
        pa.ipc.open_file(pa.BufferReader(data))
    reader = pa.ipc.MessageReader.open_stream(pa.BufferReader(data))
    kinds, bodies = [], []
    for message in reader:
        kinds.append(message.type)
        bodies.append(message.body.to_pybytes() if message.body is not None else b"")
    assert kinds == ["schema", "record batch"]  # one batch
    assert b"\x04\x22\x4d\x18" in bodies[1]  # the LZ4 frame magic number, buffer after buffer
    uncompressed = struct.unpack("<q", bodies[1][:8])[0]
    assert uncompressed == -1 or uncompressed > 0  # each buffer: its length, then one LZ4 frame
    schema = pa.ipc.open_stream(pa.BufferReader(data)).schema
    assert schema.metadata[b"segcat.redis_format"] == b"2" and "segment_avro" not in schema.names
    assert "Arrow IPC **stream**" in PROTOCOL and "`LZ4_FRAME`" in PROTOCOL
