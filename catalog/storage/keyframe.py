"""Key frames: a whole ``TableState`` as one Arrow table, as Parquet or as Arrow IPC.

A key frame holds two views of the live segments: ``segment_avro`` (each segment in
Avro, lossless, what a materializer recovers its image from) and the wide, typed columns
of ``segments_arrow`` (what readers list and prune on without decoding anything). The
rest of the state (windows, tombstones, schema, properties, counters) travels as JSON in
the schema metadata. A SHA-256 over that JSON and the Avro column is stored beside it
and checked on every load, so a flipped byte or a truncated object is always detected.

The Redis copy (``to_ipc``, Redis key-frame format 2) is *lean*: the wide columns and the
metadata only, because no reader uses ``segment_avro`` and the materializer recovers from
object storage, never from Redis. Its bytes are guarded by the store's CRC-32 instead.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import fastavro
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from segcat.catalog.errors import CorruptKeyFrame
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.column_types import arrow_type
from segcat.catalog.protocol.model import ColumnType, Segment
from segcat.catalog.protocol.state import LiveSegment, TableState
from segcat.catalog.storage import parquet_objects
from segcat.catalog.storage.segments_arrow import AVRO_COLUMN, BASE_SCHEMA, segments_table

FORMAT_VERSION = 3
"""3: the image's fields as ``TableState.to_meta`` writes them. 2: protocol, column types and the
segments' Avro layout in the metadata, ``nans:`` columns. Format 1 frames (segments in commit
layout v2, no protocol: a protocol-1 table) still load."""
READABLE_FORMATS = (1, 2, 3)
_LAYOUT_V2 = bytes.fromhex("dcb115706142297a")
"""The commit layout format-1 key frames encoded their segments with."""
META_KEY = b"segcat.keyframe"
CHECKSUM_KEY = b"segcat.checksum"
META_CHECKSUM_KEY = b"segcat.meta_checksum"
"""SHA-256 over the metadata JSON and the names and types of the columns but ``segment_avro``: what
a lean read (``from_parquet(lean=True)``) checks besides the pages' CRCs. Frames from before it
have none and are read whole."""
REDIS_FORMAT_KEY = b"segcat.redis_format"
REDIS_FORMAT = 2
"""The Redis copy's format: 2 = lean (no ``segment_avro``, no content checksum; the store's CRC-32
guards the bytes). Format 1 values (no ``segcat.redis_format``) are whole key frames and still load."""


@dataclass(frozen=True)
class KeyFrame:
    """A decoded key frame: the reader view (Arrow) and the metadata; state on demand."""

    table: pa.Table
    meta: dict[str, Any]

    @property
    def version(self) -> int:
        return int(self.meta["version"])

    @property
    def log_id(self) -> str | None:
        """The log (Kafka topic id) the frame was built from; None in frames written before the
        binding (docs/PROTOCOL.md §6, *Which log*)."""
        raw = self.meta.get("log_id")
        return raw if isinstance(raw, str) else None

    @property
    def lean(self) -> bool:
        """Whether this is a lean copy (Redis format 2): wide columns only, no lossless segments."""
        return AVRO_COLUMN not in self.table.column_names

    @property
    def layout(self) -> bytes:
        """The commit layout (schema fingerprint) of the ``segment_avro`` column."""
        return segment_layout(self.meta)

    def state(self) -> TableState:
        return state_from_keyframe(self)


def widened(frame: KeyFrame) -> KeyFrame | None:
    """The full frame of a lean one that holds no segments (the lean copy left nothing out: the
    empty table a materializer publishes to Redis before any key frame exists); None otherwise."""
    if not frame.lean or frame.table.num_rows:
        return None
    return KeyFrame(frame.table.append_column(AVRO_COLUMN, pa.array([], type=pa.binary())), frame.meta)


def segment_layout(meta: dict[str, Any]) -> bytes:
    raw = meta.get("segment_layout")
    return _LAYOUT_V2 if raw is None else bytes.fromhex(raw)


def encode_segment(segment: Segment, layout: bytes | None = None) -> bytes:
    """One segment in Avro (the current commit layout unless ``layout`` names another)."""
    out = io.BytesIO()
    fastavro.schemaless_writer(out, codec.parsed_segment_schema(layout), codec.segment_to_avro(segment))
    return out.getvalue()


def decode_segments(encoded: Iterable[bytes], layout: bytes | None = None) -> list[Segment]:
    """Segments from their Avro bytes written in ``layout``, resolved to the current model."""
    writer = codec.parsed_segment_schema(layout)
    current = codec.parsed_segment_schema()
    reader = None if writer is current else current  # same layout: nothing to resolve
    out = []
    for raw in encoded:
        decoded = fastavro.schemaless_reader(io.BytesIO(raw), writer, reader)
        assert isinstance(decoded, dict)
        out.append(codec.segment_from_avro(decoded))
    return out


def _meta(state: TableState, layout: bytes, log_id: str | None) -> dict[str, Any]:
    meta = {"format_version": FORMAT_VERSION, "segment_layout": layout.hex(), **state.to_meta()}
    if log_id is not None:
        meta["log_id"] = log_id
    return meta


def _meta_checksum(meta_json: bytes, schema: pa.Schema) -> str:
    digest = hashlib.sha256(meta_json)
    digest.update("\n".join(f"{f.name}:{f.type}" for f in schema if f.name != AVRO_COLUMN).encode())
    return digest.hexdigest()


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
    live: Iterable[LiveSegment],
    column_types: Mapping[str, ColumnType],
    layout: bytes | None = None,
    *,
    known: Mapping[str, bytes] | None = None,
) -> pa.Table:
    """Key-frame rows (wide reader columns + lossless ``segment_avro``), ordered by segment_id.
    ``known``: segments' Avro bytes in ``layout`` already at hand (cut from their records), by id."""
    schema = codec.parsed_segment_schema(layout)
    ordered = sorted(live, key=lambda item: item.segment.segment_id)
    view = segments_table(ordered, column_types)
    out = io.BytesIO()
    encoded = []
    have = known or {}
    for item in ordered:
        raw = have.get(item.segment.segment_id)
        if raw is not None:
            encoded.append(raw)
            continue
        out.seek(0)
        out.truncate()
        fastavro.schemaless_writer(out, schema, codec.segment_to_avro(item.segment))
        encoded.append(out.getvalue())
    return view.append_column("segment_avro", pa.array(encoded, type=pa.binary()))


def build(state: TableState, *, log_id: str | None = None) -> pa.Table:
    """The key-frame table for ``state``, with metadata and checksum attached."""
    return seal(segment_rows(state.segments.values(), state.stats_types()), state, log_id=log_id)


def seal(
    rows: pa.Table,
    state: TableState,
    layout: bytes | None = None,
    *,
    log_id: str | None = None,
    live_count: int | None = None,
) -> pa.Table:
    """Attach ``state``'s metadata and the checksum to key-frame rows (sorted by segment_id).

    Lets a materializer keep its rows up to date incrementally instead of rebuilding
    every segment for every key frame. ``layout`` is the commit layout the rows'
    ``segment_avro`` was written in (default: the current one). ``log_id``: the log (Kafka
    topic id) the state was judged from, recorded so no other log's reader takes the frame.
    ``live_count``: how many rows there must be, when ``state`` is a copy of the image taken
    without its segments (the rows carry those; default: ``state.live_count``).
    """
    expected = state.live_count if live_count is None else live_count
    if rows.num_rows != expected:
        raise ValueError(f"{rows.num_rows} rows for {expected} live segments")
    rows = canonical_columns(rows.replace_schema_metadata(None))
    if rows.num_rows:
        rows = rows.sort_by("segment_id")
    layout = codec.current_fingerprint() if layout is None else layout
    meta_json = json.dumps(_meta(state, layout, log_id), separators=(",", ":"), sort_keys=True).encode()
    checksum = _checksum(meta_json, rows.schema, rows.column("segment_avro")).encode()
    return rows.replace_schema_metadata(
        {
            META_KEY: meta_json,
            CHECKSUM_KEY: checksum,
            META_CHECKSUM_KEY: _meta_checksum(meta_json, rows.schema).encode(),
        }
    )


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
    return KeyFrame(table, _readable_meta(meta_json))


def _readable_meta(meta_json: bytes) -> dict[str, Any]:
    meta: dict[str, Any] = json.loads(meta_json)
    if meta.get("format_version") not in READABLE_FORMATS:
        raise CorruptKeyFrame(f"unsupported key frame format {meta.get('format_version')!r}; upgrade segcat")
    return meta


def _verify_lean(table: pa.Table) -> KeyFrame | None:
    """A key frame read without ``segment_avro``, checked by its metadata checksum; None for a
    frame written before that checksum existed (it must be read whole)."""
    metadata = table.schema.metadata or {}
    meta_json, checksum = metadata.get(META_KEY), metadata.get(META_CHECKSUM_KEY)
    if meta_json is None or checksum is None:
        return None
    if _meta_checksum(meta_json, table.schema).encode() != checksum:
        raise CorruptKeyFrame("key frame metadata checksum mismatch")
    return KeyFrame(table, _readable_meta(meta_json))


def to_parquet(table: pa.Table) -> bytes:
    """The key frame as Parquet: LZ4, no dictionary pages, page checksums.

    Ids and paths are unique, so dictionary pages only cost: without them, and with LZ4 instead
    of zstd, a frame is larger and reads faster, and readers read frames far more often than the
    materializer writes them.
    Any Parquet reader reads it; key frames written with other settings load the same.
    """
    out = io.BytesIO()
    pq.write_table(
        table, out, compression="lz4", use_dictionary=False, write_page_checksum=True, store_schema=True
    )
    return out.getvalue()


def from_parquet(data: bytes, *, lean: bool = False) -> KeyFrame:
    """The key frame in ``data``, verified. ``lean`` (readers that list and prune): without
    ``segment_avro``, which is then neither read nor hashed; the metadata is checked by its own
    checksum and every page by its CRC. A frame older than that checksum is read whole."""
    if lean:
        table = parquet_objects.read_parquet(data, "key frame", CorruptKeyFrame, skip=(AVRO_COLUMN,))
        frame = _verify_lean(table)
        if frame is not None:
            return frame
    full = verify(parquet_objects.read_parquet(data, "key frame", CorruptKeyFrame))
    return KeyFrame(full.table.drop_columns([AVRO_COLUMN]), full.meta) if lean else full


def to_ipc(table: pa.Table) -> bytes:
    """The Redis copy of a sealed key frame: Arrow IPC, LZ4-compressed, lean (Redis format 2).

    ``segment_avro`` and the content checksum over it are left out (readers never use it; the
    materializer recovers from object storage): fewer bytes to move, hash and decode.
    """
    metadata = dict(table.schema.metadata or {})
    metadata.pop(CHECKSUM_KEY, None)
    metadata[REDIS_FORMAT_KEY] = str(REDIS_FORMAT).encode()
    if AVRO_COLUMN in table.column_names:
        table = table.drop_columns([AVRO_COLUMN])
    # one record batch: a frame kept up by many small appends has a chunk per append, and a
    # reader pays a fixed cost per batch it decodes, however few rows the batch holds
    with contextlib.suppress(pa.ArrowInvalid):  # a column past 2 GiB stays chunked
        table = table.combine_chunks()
    table = table.replace_schema_metadata(metadata)
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="lz4")) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def from_ipc(data: bytes, *, verified_bytes: bool = False) -> KeyFrame:
    """Decode a Redis key frame: format 2 (lean) or format 1 (a whole key frame).

    ``verified_bytes``: the caller already checked a digest of these exact bytes (the store keeps
    a CRC-32, or for format 1 a SHA-256, beside them), so a format-1 frame's content checksum is
    not recomputed. A lean frame has no content checksum: it is only taken with verified bytes.
    """
    try:
        with pa.ipc.open_stream(pa.BufferReader(data)) as reader:
            table = reader.read_all()
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptKeyFrame(f"unreadable key frame: {exc}") from exc
    metadata = table.schema.metadata or {}
    redis_format = metadata.get(REDIS_FORMAT_KEY)
    if redis_format is not None:
        if redis_format != str(REDIS_FORMAT).encode():
            raise CorruptKeyFrame(f"unsupported Redis key frame format {redis_format!r}; upgrade segcat")
        if not verified_bytes:
            raise CorruptKeyFrame("a lean Redis key frame is only trusted with its bytes verified")
        if AVRO_COLUMN in table.column_names:
            raise CorruptKeyFrame("a lean Redis key frame must not carry segment_avro")
    if verified_bytes:
        meta_json = metadata.get(META_KEY)
        if meta_json is None:
            raise CorruptKeyFrame("not a segcat key frame (metadata missing)")
        meta = json.loads(meta_json)
        if meta.get("format_version") not in READABLE_FORMATS:
            raise CorruptKeyFrame(f"unsupported key frame format {meta.get('format_version')!r}")
        return KeyFrame(table, meta)
    return verify(table)


def state_from_keyframe(frame: KeyFrame) -> TableState:
    """Rebuild the full image (for a materializer or writer to go on applying rules)."""
    if frame.lean:
        raise ValueError("a lean key frame (the Redis copy) holds no lossless segments")
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
