"""Accepted commits straight from their record bytes into Arrow rows, for readers.

A reader catching a key frame up over the deltas after it needs the added segments as wide
Arrow columns, never as ``Segment`` objects, and never their Avro re-encoded. Decoding the
record with fastavro and filling the columns from its dicts skips both: the commit's other
parts (drops, tombstones, schema, properties, protocol) still become a ``CommitDelta`` (with
no adds) so they are applied by exactly the code the image uses. The rows built here equal
``segments_arrow.segments_table`` on the same segments (tests/catalog/storage/test_delta_arrow.py proves it).
"""

from __future__ import annotations

import datetime as dt
import io
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import fastavro
import pyarrow as pa

from segcat.catalog.errors import DecodeError, UnknownSchema
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.column_types import arrow_type
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.model import ColumnType
from segcat.catalog.storage import add_columns
from segcat.catalog.storage.add_columns import AddColumns
from segcat.catalog.storage.segments_arrow import BASE_SCHEMA

_EPOCH_DATE = dt.date(1970, 1, 1)
_DAYS = ((dt.date.min - _EPOCH_DATE).days, (dt.date.max - _EPOCH_DATE).days)
"""DATE stats (days since the epoch) a Python ``date`` holds: outside, the exact path raises."""
_MICROS = (-62_135_596_800_000_000, 253_402_300_799_999_999)
"""TIMESTAMP stats (µs since the epoch) a Python ``datetime`` holds."""


@dataclass(frozen=True, slots=True)
class EncodedCommit:
    """An accepted commit as the log holds it: version, broker time, record value."""

    version: int
    timestamp_ms: int
    value: bytes


@dataclass(frozen=True, slots=True)
class ArrowCommit:
    """One decoded accepted commit: everything but its adds as a ``CommitDelta``, the adds as columns."""

    delta: CommitDelta
    """The commit's delta with ``adds`` empty (drops, tombstones, schema, properties, protocol)."""
    adds: AddColumns

    @property
    def version(self) -> int:
        return self.delta.version


@dataclass(frozen=True)
class _Split:
    """The current commit schema cut around ``adds``: what fastavro reads before and after it."""

    head: Any
    tail: Any


@cache
def _split() -> _Split | None:
    """None when the current segment layout is not the one ``add_columns.parse`` knows."""
    if not add_columns.current_layout_parses():
        return None
    current, _ = codec._schemas()
    fields = current.parsed["fields"]
    at = [f["name"] for f in fields].index("adds")
    return _Split(
        fastavro.parse_schema({"type": "record", "name": "segcat.CommitHead", "fields": fields[:at]}),
        fastavro.parse_schema({"type": "record", "name": "segcat.CommitTail", "fields": fields[at + 1 :]}),
    )


def decode(commit: EncodedCommit) -> ArrowCommit:
    """The commit in ``commit.value``; ``DecodeError`` / ``UnknownSchema`` as ``codec.decode_commit``.

    The current layout's adds are parsed by ``add_columns``; the fields around them, and whole
    records of older layouts, by fastavro.
    """
    value = commit.value
    if len(value) < codec.HEADER_SIZE or value[:2] != codec.MAGIC:
        raise DecodeError("not an Avro single-object encoded record (bad magic)")
    # codec has no public lookup of a commit schema by fingerprint; its cache is the one truth
    current, known = codec._schemas()
    fingerprint = bytes(value[2 : codec.HEADER_SIZE])
    writer = known.get(fingerprint)
    if writer is None:
        raise UnknownSchema(
            f"unknown schema fingerprint {fingerprint.hex()}; the record was written by a newer segcat"
        )
    split = _split() if writer is current else None
    try:
        if split is None:
            body = io.BytesIO(value[codec.HEADER_SIZE :])
            raw = fastavro.schemaless_reader(body, writer.parsed, current.parsed)
            if not isinstance(raw, dict):
                raise DecodeError("the Avro body is not a record")
            adds = add_columns.from_dicts(raw["adds"])
            end = codec.HEADER_SIZE + body.tell()
        else:
            data = bytes(value)
            body = io.BytesIO(data)
            body.seek(codec.HEADER_SIZE)
            head = fastavro.schemaless_reader(body, split.head, None)
            adds, at = add_columns.parse(data, body.tell())
            body.seek(at)
            tail = fastavro.schemaless_reader(body, split.tail, None)
            if not isinstance(head, dict) or not isinstance(tail, dict):
                raise DecodeError("the Avro body is not a record")
            raw = {**head, **tail}
            end = body.tell()
        if end != len(value):
            raise DecodeError("trailing bytes after the Avro body")
        raw["adds"] = []
        header = codec.commit_from_avro(raw)
    except DecodeError:
        raise
    except Exception as exc:  # fastavro raises many kinds on garbage bodies
        raise DecodeError(f"undecodable commit body: {type(exc).__name__}: {exc}") from exc
    return ArrowCommit(CommitDelta(commit.version, commit.timestamp_ms, header), adds)


def segment_bytes(value: bytes) -> AddColumns | None:
    """The adds of a record of the current layout, each segment's Avro bytes (``avro``) cut out of
    ``value`` as they are; None for a record of another layout or one the hand parser refuses
    (then the caller encodes the segments itself). Only the fields before ``adds`` are decoded."""
    if value[:2] != codec.MAGIC or bytes(value[2 : codec.HEADER_SIZE]) != codec.current_fingerprint():
        return None
    split = _split()
    if split is None:
        return None
    data = bytes(value)
    body = io.BytesIO(data)
    body.seek(codec.HEADER_SIZE)
    try:
        fastavro.schemaless_reader(body, split.head, None)
        adds, _ = add_columns.parse(data, body.tell())
    except Exception:  # fastavro raises many kinds on bytes it refuses; the caller has a way round
        return None
    return adds


def note_column_types(adds: AddColumns, column_types: dict[str, ColumnType]) -> None:
    """Fix the type of every stats column first seen in ``adds`` (as ``FrameView.apply`` does)."""
    for _, column, symbol, *_ in adds.stats:
        if column not in column_types:
            column_types[column] = ColumnType(symbol)


def rows(
    batch: Sequence[tuple[AddColumns, int]],
    selected: Sequence[tuple[int, int]] | None,
    column_types: Mapping[str, ColumnType],
) -> pa.Table:
    """Wide reader rows, ordered by segment_id, of the segments of ``batch`` (each commit's adds and
    version) that ``selected`` names as (commit index, row), every one when None. Every stats
    column must have its type in ``column_types`` (``note_column_types``, as ``FrameView`` does).

    Equal to ``segments_table`` over the same segments decoded to ``Segment`` objects.
    """
    out: dict[int, int] = {}
    """(commit index << 32 | row) → output row, for the stats of a selection."""
    starts: list[int] = []
    """Every commit's first output row, when every row is taken."""
    base: list[list[Any]] = [[] for _ in BASE_SCHEMA]
    ids, paths, partitions, formats, sizes, counts, versions, b_cols, b_hashes, b_bits = base
    if selected is None:
        for adds, version in batch:
            starts.append(len(ids))
            ids += adds.ids
            paths += adds.paths
            partitions += adds.partitions
            formats += adds.formats
            sizes += adds.sizes
            counts += adds.counts
            versions += [version] * len(adds)
            b_cols += adds.bloom_columns
            b_hashes += adds.bloom_hashes
            b_bits += adds.bloom_bits
    else:
        for ci, row in selected:
            adds, version = batch[ci]
            out[ci << 32 | row] = len(out)
            ids.append(adds.ids[row])
            paths.append(adds.paths[row])
            partitions.append(adds.partitions[row])
            formats.append(adds.formats[row])
            sizes.append(adds.sizes[row])
            counts.append(adds.counts[row])
            versions.append(version)
            b_cols.append(adds.bloom_columns[row])
            b_hashes.append(adds.bloom_hashes[row])
            b_bits.append(adds.bloom_bits[row])
    n = len(ids)
    stat_types: dict[str, str] = {}
    values: dict[str, tuple[list[Any], list[Any], list[Any], list[Any]]] = {}
    for ci, (adds, _) in enumerate(batch):
        key = ci << 32
        start = starts[ci] if starts else -1
        for row, column, symbol, low, high, nulls, nans in adds.stats:
            at = start + row if start >= 0 else out.get(key | row)
            if at is None:
                continue
            kind = stat_types.get(column)
            if kind is None:
                known = column_types.get(column)
                if known is None:
                    raise ValueError(f"stats column {column!r} has no type: note_column_types first")
                kind = stat_types[column] = known.value
                values[column] = ([None] * n, [None] * n, [None] * n, [None] * n)
            if symbol == kind:
                mins, maxs, nullss, nanss = values[column]
                mins[at], maxs[at], nullss[at], nanss[at] = low, high, nulls, nans
    arrays = [pa.array(v, type=f.type) for v, f in zip(base, BASE_SCHEMA, strict=True)]
    fields = list(BASE_SCHEMA)
    for column, symbol in sorted(stat_types.items()):
        kind = ColumnType(symbol)
        typed = arrow_type(kind)
        if typed is None:
            continue
        mins, maxs, nullss, nanss = values[column]
        arrays += [
            _stat_array(kind, typed, mins),
            _stat_array(kind, typed, maxs),
            pa.array(nullss, pa.int64()),
        ]
        fields += [
            pa.field(f"min:{column}", typed),
            pa.field(f"max:{column}", typed),
            pa.field(f"nulls:{column}", pa.int64()),
        ]
        if kind is ColumnType.FLOAT:
            arrays.append(pa.array(nanss, type=pa.int64()))
            fields.append(pa.field(f"nans:{column}", pa.int64()))
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    return table.sort_by("segment_id") if n > 1 else table


def _stat_array(kind: ColumnType, typed: pa.DataType, values: list[Any]) -> pa.Array:
    """One min or max column. DATE / TIMESTAMP travel as integers: cast whole when every value is
    an in-range integer, else converted one by one exactly as ``codec.stat_from_avro`` does."""
    if kind is ColumnType.DATE or kind is ColumnType.TIMESTAMP:
        low, high = _DAYS if kind is ColumnType.DATE else _MICROS
        if all(v is None or (type(v) is int and low <= v <= high) for v in values):
            raw = pa.array(values, type=pa.int32() if kind is ColumnType.DATE else pa.int64())
            return raw.cast(typed)
        return pa.array([codec.stat_from_avro(kind, v) for v in values], type=typed)
    return pa.array(values, type=typed)
