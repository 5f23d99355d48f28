"""Key frames: a whole ``TableState`` as one Arrow table, as Parquet or as Arrow IPC.

A key frame holds two views of the live segments: ``segment_avro`` (each segment in
Avro, lossless, what a materializer recovers its image from) and the wide, typed columns
of ``segments_arrow`` (what readers list and prune on without decoding anything). The
rest of the state (windows, tombstones, schema, properties, counters) travels as JSON in
the schema metadata. A SHA-256 over that JSON and the Avro column is stored beside it
and checked on every load, so a flipped byte or a truncated object is always detected.
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.compute as pc

from segcat.catalog.errors import CorruptKeyFrame
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.column_types import arrow_type
from segcat.catalog.protocol.model import ColumnType, Segment
from segcat.catalog.protocol.state import LiveSegment, TableState
from segcat.catalog.storage import parquet_objects
from segcat.catalog.storage.segments_arrow import BASE_SCHEMA, segments_table

FORMAT_VERSION = 3
"""3: the image's fields as ``TableState.to_meta`` writes them. 2: protocol, column types and the
segments' Avro layout in the metadata, ``nans:`` columns. Format 1 frames (segments in commit
layout v2, no protocol: a protocol-1 table) still load."""
READABLE_FORMATS = (1, 2, 3)
_LAYOUT_V2 = bytes.fromhex("dcb115706142297a")
"""The commit layout format-1 key frames encoded their segments with."""
META_KEY = b"segcat.keyframe"
CHECKSUM_KEY = b"segcat.checksum"


@dataclass(frozen=True)
class KeyFrame:
    """A decoded key frame: the reader view (Arrow) and the metadata; state on demand."""

    table: pa.Table
    meta: dict[str, Any]

    @property
    def version(self) -> int:
        return int(self.meta["version"])

    @property
    def layout(self) -> bytes:
        """The commit layout (schema fingerprint) of the ``segment_avro`` column."""
        return segment_layout(self.meta)

    def state(self) -> TableState:
        return state_from_keyframe(self)


def segment_layout(meta: dict[str, Any]) -> bytes:
    raw = meta.get("segment_layout")
    return _LAYOUT_V2 if raw is None else bytes.fromhex(raw)


def encode_segment(segment: Segment, layout: bytes | None = None) -> bytes:
    """One segment in Avro (the current commit layout unless ``layout`` names another)."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, codec.segment_schema(layout), codec.segment_to_avro(segment))
    return out.getvalue()


def decode_segments(encoded: Iterable[bytes], layout: bytes | None = None) -> list[Segment]:
    """Segments from their Avro bytes written in ``layout``, resolved to the current model."""
    writer = codec.segment_schema(layout)
    reader = codec.segment_schema()
    out = []
    for raw in encoded:
        decoded = fastavro.schemaless_reader(io.BytesIO(raw), writer, reader)
        assert isinstance(decoded, dict)
        out.append(codec.segment_from_avro(decoded))
    return out


def _meta(state: TableState, layout: bytes) -> dict[str, Any]:
    return {"format_version": FORMAT_VERSION, "segment_layout": layout.hex(), **state.to_meta()}


def _checksum(meta_json: bytes, schema: pa.Schema, avro_column: pa.ChunkedArray) -> str:
    """SHA-256 over the metadata JSON, the columns' names and types, and the Avro segments.

    Computed on whole Arrow buffers, so verifying a million segments costs milliseconds.
    """
    digest = hashlib.sha256(meta_json)
    digest.update("\n".join(f"{f.name}:{f.type}" for f in schema).encode())
    values = pa.concat_arrays(avro_column.chunks) if avro_column.num_chunks else pa.array([], pa.binary())
    if len(values):
        offsets_buffer = values.buffers()[1]
        offsets = pa.Array.from_buffers(pa.int32(), len(values) + 1, [None, offsets_buffer], values.offset)
        start, end = offsets[0].as_py(), offsets[-1].as_py()
        lengths = pc.subtract(offsets[1:], offsets[:-1]).cast(pa.int32())
        digest.update(memoryview(lengths.buffers()[1])[: 4 * len(values)])
        digest.update(memoryview(values.buffers()[2])[start:end])
    return digest.hexdigest()


def segment_rows(
    live: Iterable[LiveSegment], column_types: Mapping[str, ColumnType], layout: bytes | None = None
) -> pa.Table:
    """Key-frame rows (wide reader columns + lossless ``segment_avro``), ordered by segment_id."""
    schema = codec.segment_schema(layout)
    ordered = sorted(live, key=lambda item: item.segment.segment_id)
    view = segments_table(ordered, column_types)
    out = io.BytesIO()
    encoded = []
    for item in ordered:
        out.seek(0)
        out.truncate()
        fastavro.schemaless_writer(out, schema, codec.segment_to_avro(item.segment))
        encoded.append(out.getvalue())
    return view.append_column("segment_avro", pa.array(encoded, type=pa.binary()))


def build(state: TableState) -> pa.Table:
    """The key-frame table for ``state``, with metadata and checksum attached."""
    return seal(segment_rows(state.segments.values(), state.stats_types()), state)


def seal(rows: pa.Table, state: TableState, layout: bytes | None = None) -> pa.Table:
    """Attach ``state``'s metadata and the checksum to key-frame rows (sorted by segment_id).

    Lets a materializer keep its rows up to date incrementally instead of rebuilding
    every segment for every key frame. ``layout`` is the commit layout the rows'
    ``segment_avro`` was written in (default: the current one).
    """
    if rows.num_rows != state.live_count:
        raise ValueError(f"{rows.num_rows} rows for {state.live_count} live segments")
    rows = canonical_columns(rows.replace_schema_metadata(None))
    if rows.num_rows:
        rows = rows.sort_by("segment_id")
    layout = codec.current_fingerprint() if layout is None else layout
    meta_json = json.dumps(_meta(state, layout), separators=(",", ":"), sort_keys=True).encode()
    checksum = _checksum(meta_json, rows.schema, rows.column("segment_avro")).encode()
    return rows.replace_schema_metadata({META_KEY: meta_json, CHECKSUM_KEY: checksum})


def canonical_columns(rows: pa.Table) -> pa.Table:
    """Base columns, then stats columns by name, then ``segment_avro``: one layout however built."""
    base = list(BASE_SCHEMA.names)
    stats = sorted(name for name in rows.column_names if name not in base and name != "segment_avro")
    return rows.select([*base, *stats, "segment_avro"])


def _column_types(meta: dict[str, Any], table: pa.Table) -> dict[str, tuple[ColumnType, int]]:
    """The table's stats column types: from the metadata, or (format 1) from the typed columns."""
    if "column_types" in meta:
        return {c: (ColumnType(t), v) for c, t, v in meta["column_types"]}
    by_arrow = {str(arrow_type(kind)): kind for kind in ColumnType if arrow_type(kind) is not None}
    found: dict[str, tuple[ColumnType, int]] = {}
    for field in table.schema:
        if field.name.startswith("min:") and str(field.type) in by_arrow:
            found[field.name[4:]] = (by_arrow[str(field.type)], -1)
    return found


def header(frame: KeyFrame) -> TableState:
    """The frame's image without its segments (what a reader's view needs beside the rows)."""
    return _state_from_meta(frame.meta, {}, frame.table)


def light_state(frame: KeyFrame) -> TableState:
    """The image the rules need, built fast from the wide columns (segments carry no stats).

    Enough to judge later records (membership, sizes, partitions); not for writing key frames.
    """
    columns = frame.table.select(
        ["segment_id", "path", "size_bytes", "row_count", "partition", "added_version"]
    )
    data = columns.to_pydict()
    segments = {
        sid: LiveSegment(Segment(sid, path, size, rows, partition), added)
        for sid, path, size, rows, partition, added in zip(
            data["segment_id"],
            data["path"],
            data["size_bytes"],
            data["row_count"],
            data["partition"],
            data["added_version"],
            strict=True,
        )
    }
    return _state_from_meta(frame.meta, segments, frame.table)


def verify(table: pa.Table) -> KeyFrame:
    """Check the checksum and format of a loaded key-frame table."""
    metadata = table.schema.metadata or {}
    meta_json, checksum = metadata.get(META_KEY), metadata.get(CHECKSUM_KEY)
    if meta_json is None or checksum is None or "segment_avro" not in table.column_names:
        raise CorruptKeyFrame("not a segcat key frame (metadata or segment_avro column missing)")
    if _checksum(meta_json, table.schema, table.column("segment_avro")).encode() != checksum:
        raise CorruptKeyFrame("key frame checksum mismatch")
    meta = json.loads(meta_json)
    if meta.get("format_version") not in READABLE_FORMATS:
        raise CorruptKeyFrame(f"unsupported key frame format {meta.get('format_version')!r}; upgrade segcat")
    return KeyFrame(table, meta)


def to_parquet(table: pa.Table) -> bytes:
    return parquet_objects.to_parquet(table)


def from_parquet(data: bytes) -> KeyFrame:
    return verify(parquet_objects.read_parquet(data, "key frame", CorruptKeyFrame))


def to_ipc(table: pa.Table) -> bytes:
    """Arrow IPC with LZ4-compressed buffers: ~6x smaller, so Redis hands it over in a few ms."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def from_ipc(data: bytes, *, verified_bytes: bool = False) -> KeyFrame:
    """Decode an IPC key frame. ``verified_bytes``: the caller already checked a digest of these
    exact bytes (Redis stores a SHA-256 beside them), so the content checksum is not recomputed."""
    try:
        with pa.ipc.open_stream(pa.BufferReader(data)) as reader:
            table = reader.read_all()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptKeyFrame(f"unreadable key frame: {exc}") from exc
    if verified_bytes:
        meta_json = (table.schema.metadata or {}).get(META_KEY)
        if meta_json is None:
            raise CorruptKeyFrame("not a segcat key frame (metadata missing)")
        return KeyFrame(table, json.loads(meta_json))
    return verify(table)


def state_from_keyframe(frame: KeyFrame) -> TableState:
    """Rebuild the full image (for a materializer or writer to go on applying rules)."""
    versions = frame.table.column("added_version").to_pylist()
    decoded = decode_segments(frame.table.column("segment_avro").to_pylist(), frame.layout)
    segments = {
        segment.segment_id: LiveSegment(segment, added)
        for segment, added in zip(decoded, versions, strict=True)
    }
    return _state_from_meta(frame.meta, segments, frame.table)


def _state_from_meta(meta: dict[str, Any], segments: dict[str, LiveSegment], table: pa.Table) -> TableState:
    state = TableState.from_meta(meta, segments)
    if "column_types" not in meta:  # format 1: the typed columns say what the types were
        state.column_types = _column_types(meta, table)
    return state
