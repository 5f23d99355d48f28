"""The segments a commit adds, as columns: parsed straight from the record's Avro bytes.

fastavro builds a dict per segment that a reader throws away; the ``adds`` array of the
current commit layout is parsed here straight into plain lists instead, one field after
another exactly as Avro's binary encoding lays them out. Only the layout whose
segment schema has ``LAYOUT_FINGERPRINT`` is parsed by hand (checked against the codec's
schema when this module loads); any other layout goes through fastavro and ``from_dicts``.
tests/catalog/storage/test_delta_arrow.py checks both against the codec on random commits.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from fastavro.schema import fingerprint, to_parsing_canonical_form

from segcat.catalog.errors import DecodeError
from segcat.catalog.protocol import codec

LAYOUT_FINGERPRINT = "90ec921628d0b47b"
"""CRC-64-AVRO of the parsing canonical form of the segment schema ``parse`` is written for."""
_COLUMN_TYPES = ("INT", "FLOAT", "STRING", "DATE", "TIMESTAMP", "BOOLEAN", "BINARY", "OTHER")
_DOUBLE = struct.Struct("<d")

Stat = tuple[int, str, str, Any, Any, Any, Any]
"""(row, column, type symbol, min, max, null_count, nan_count) of one stats entry."""


def current_layout_parses() -> bool:
    """Whether the codec's current segment schema is the one ``parse`` knows."""
    canonical = to_parsing_canonical_form(codec.segment_schema())
    return bool(fingerprint(canonical, "CRC-64-AVRO") == LAYOUT_FINGERPRINT)


@dataclass(slots=True)
class AddColumns:
    """One commit's added segments, a list per field; ``stats`` holds every stats entry in order."""

    ids: list[str] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)
    partitions: list[str | None] = field(default_factory=list)
    formats: list[str] = field(default_factory=list)
    sizes: list[int] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)
    bloom_columns: list[str | None] = field(default_factory=list)
    bloom_hashes: list[int | None] = field(default_factory=list)
    bloom_bits: list[bytes | None] = field(default_factory=list)
    stats: list[Stat] = field(default_factory=list)
    avro: list[bytes] = field(default_factory=list)
    """Each segment's bytes as the record carries them (``parse`` only; ``from_dicts`` leaves it
    empty): a segment record of the current layout, what a key frame's ``segment_avro`` holds."""

    def __len__(self) -> int:
        return len(self.ids)


def from_dicts(adds: list[dict[str, Any]]) -> AddColumns:
    """The columns of segments fastavro decoded (current reader schema)."""
    out = AddColumns()
    for row, add in enumerate(adds):
        out.ids.append(add["segment_id"])
        out.paths.append(add["path"])
        out.partitions.append(add["partition"])
        out.formats.append(add["format"])
        out.sizes.append(add["size_bytes"])
        out.counts.append(add["row_count"])
        bloom = add["bloom"]
        out.bloom_columns.append(None if bloom is None else bloom["column"])
        out.bloom_hashes.append(None if bloom is None else bloom["num_hashes"])
        out.bloom_bits.append(None if bloom is None else bloom["bits"])
        for s in add["stats"]:
            out.stats.append(
                (row, s["column"], s["type"], s["min"], s["max"], s["null_count"], s.get("nan_count"))
            )
    return out


def parse(buf: bytes, pos: int) -> tuple[AddColumns, int]:
    """The ``adds`` array starting at ``buf[pos]`` in the layout of ``LAYOUT_FINGERPRINT``, and
    the position after it. ``DecodeError`` on bytes that are not such an array."""
    try:
        return _parse(buf, pos)
    except DecodeError:
        raise
    except (IndexError, UnicodeDecodeError, struct.error) as exc:
        raise DecodeError(f"undecodable adds: {type(exc).__name__}: {exc}") from exc


def _varint(buf: bytes, pos: int, first: int) -> tuple[int, int]:
    """The zigzag-decoded long whose first byte ``first`` (≥ 0x80) was read; the position after it."""
    n = first & 0x7F
    shift = 7
    b = first
    while b & 0x80:
        if shift > 63:
            raise DecodeError("varint longer than 10 bytes")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
    return (n >> 1) ^ -(n & 1), pos


def _parse(buf: bytes, pos: int) -> tuple[AddColumns, int]:
    """The fields one after another, varints and lengths read inline (a call each would double
    the cost); union branches are their one-byte zigzag indexes (0 = null, 2 = the second)."""
    out = AddColumns()
    ids, paths, partitions, formats = out.ids, out.paths, out.partitions, out.formats
    sizes, counts, stats = out.sizes, out.counts, out.stats
    b_cols, b_hashes, b_bits = out.bloom_columns, out.bloom_hashes, out.bloom_bits
    avros = out.avro
    varint, symbols, unpack_double = _varint, _COLUMN_TYPES, _DOUBLE.unpack_from
    low: Any
    high: Any
    end = len(buf)
    row = 0
    b = buf[pos]
    pos += 1
    if b < 0x80:
        count = (b >> 1) ^ -(b & 1)
    else:
        count, pos = varint(buf, pos, b)
    while count:
        if count < 0:  # a block with its size in bytes
            count = -count
            b = buf[pos]
            pos += 1
            if b < 0x80:
                _ = (b >> 1) ^ -(b & 1)
            else:
                _, pos = varint(buf, pos, b)
        for _ in range(count):
            first = pos
            b = buf[pos]
            pos += 1
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
            else:
                n, pos = varint(buf, pos, b)
            if n < 0:
                raise DecodeError(f"negative length {n}")
            text = buf[pos : pos + n].decode()
            pos += n
            ids.append(text)
            b = buf[pos]
            pos += 1
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
            else:
                n, pos = varint(buf, pos, b)
            if n < 0:
                raise DecodeError(f"negative length {n}")
            text = buf[pos : pos + n].decode()
            pos += n
            paths.append(text)
            index = buf[pos]
            pos += 1
            if index == 2:
                b = buf[pos]
                pos += 1
                if b < 0x80:
                    n = (b >> 1) ^ -(b & 1)
                else:
                    n, pos = varint(buf, pos, b)
                if n < 0:
                    raise DecodeError(f"negative length {n}")
                text = buf[pos : pos + n].decode()
                pos += n
                partitions.append(text)
            elif index == 0:
                partitions.append(None)
            else:
                raise DecodeError(f"partition union branch byte {index}")
            b = buf[pos]
            pos += 1
            if b < 0x80:
                n = (b >> 1) ^ -(b & 1)
            else:
                n, pos = varint(buf, pos, b)
            if n < 0:
                raise DecodeError(f"negative length {n}")
            text = buf[pos : pos + n].decode()
            pos += n
            formats.append(text)
            b = buf[pos]
            pos += 1
            if b < 0x80:
                number = (b >> 1) ^ -(b & 1)
            else:
                number, pos = varint(buf, pos, b)
            sizes.append(number)
            b = buf[pos]
            pos += 1
            if b < 0x80:
                number = (b >> 1) ^ -(b & 1)
            else:
                number, pos = varint(buf, pos, b)
            counts.append(number)
            b = buf[pos]
            pos += 1
            if b < 0x80:
                entries = (b >> 1) ^ -(b & 1)
            else:
                entries, pos = varint(buf, pos, b)
            while entries:
                if entries < 0:
                    entries = -entries
                    b = buf[pos]
                    pos += 1
                    if b < 0x80:
                        _ = (b >> 1) ^ -(b & 1)
                    else:
                        _, pos = varint(buf, pos, b)
                for _ in range(entries):
                    b = buf[pos]
                    pos += 1
                    if b < 0x80:
                        n = (b >> 1) ^ -(b & 1)
                    else:
                        n, pos = varint(buf, pos, b)
                    if n < 0:
                        raise DecodeError(f"negative length {n}")
                    column = buf[pos : pos + n].decode()
                    pos += n
                    b = buf[pos]
                    pos += 1
                    if b < 0x80:
                        kind = (b >> 1) ^ -(b & 1)
                    else:
                        kind, pos = varint(buf, pos, b)
                    if not 0 <= kind < 8:
                        raise DecodeError(f"column type {kind}")
                    index = buf[pos]
                    pos += 1
                    if index == 0:
                        low = None
                    elif index == 2:  # long
                        b = buf[pos]
                        pos += 1
                        if b < 0x80:
                            low = (b >> 1) ^ -(b & 1)
                        else:
                            low, pos = varint(buf, pos, b)
                    elif index == 4:  # double
                        low = unpack_double(buf, pos)[0]
                        pos += 8
                    elif index == 6:  # string
                        b = buf[pos]
                        pos += 1
                        if b < 0x80:
                            n = (b >> 1) ^ -(b & 1)
                        else:
                            n, pos = varint(buf, pos, b)
                        if n < 0:
                            raise DecodeError(f"negative length {n}")
                        low = buf[pos : pos + n].decode()
                        pos += n
                    elif index == 8:  # boolean
                        if buf[pos] > 1:
                            raise DecodeError(f"boolean byte {buf[pos]}")
                        low = buf[pos] == 1
                        pos += 1
                    elif index == 10:  # bytes
                        b = buf[pos]
                        pos += 1
                        if b < 0x80:
                            n = (b >> 1) ^ -(b & 1)
                        else:
                            n, pos = varint(buf, pos, b)
                        if n < 0:
                            raise DecodeError(f"negative length {n}")
                        low = buf[pos : pos + n]
                        pos += n
                    else:
                        raise DecodeError(f"stats value union branch byte {index}")
                    index = buf[pos]
                    pos += 1
                    if index == 0:
                        high = None
                    elif index == 2:  # long
                        b = buf[pos]
                        pos += 1
                        if b < 0x80:
                            high = (b >> 1) ^ -(b & 1)
                        else:
                            high, pos = varint(buf, pos, b)
                    elif index == 4:  # double
                        high = unpack_double(buf, pos)[0]
                        pos += 8
                    elif index == 6:  # string
                        b = buf[pos]
                        pos += 1
                        if b < 0x80:
                            n = (b >> 1) ^ -(b & 1)
                        else:
                            n, pos = varint(buf, pos, b)
                        if n < 0:
                            raise DecodeError(f"negative length {n}")
                        high = buf[pos : pos + n].decode()
                        pos += n
                    elif index == 8:  # boolean
                        if buf[pos] > 1:
                            raise DecodeError(f"boolean byte {buf[pos]}")
                        high = buf[pos] == 1
                        pos += 1
                    elif index == 10:  # bytes
                        b = buf[pos]
                        pos += 1
                        if b < 0x80:
                            n = (b >> 1) ^ -(b & 1)
                        else:
                            n, pos = varint(buf, pos, b)
                        if n < 0:
                            raise DecodeError(f"negative length {n}")
                        high = buf[pos : pos + n]
                        pos += n
                    else:
                        raise DecodeError(f"stats value union branch byte {index}")
                    index = buf[pos]
                    pos += 1
                    if index == 2:
                        b = buf[pos]
                        pos += 1
                        if b < 0x80:
                            nulls = (b >> 1) ^ -(b & 1)
                        else:
                            nulls, pos = varint(buf, pos, b)
                    elif index == 0:
                        nulls = None
                    else:
                        raise DecodeError(f"null_count union branch byte {index}")
                    index = buf[pos]
                    pos += 1
                    if index == 2:
                        b = buf[pos]
                        pos += 1
                        if b < 0x80:
                            nans = (b >> 1) ^ -(b & 1)
                        else:
                            nans, pos = varint(buf, pos, b)
                    elif index == 0:
                        nans = None
                    else:
                        raise DecodeError(f"nan_count union branch byte {index}")
                    stats.append((row, column, symbols[kind], low, high, nulls, nans))
                b = buf[pos]
                pos += 1
                if b < 0x80:
                    entries = (b >> 1) ^ -(b & 1)
                else:
                    entries, pos = varint(buf, pos, b)
            index = buf[pos]
            pos += 1
            if index == 2:
                b = buf[pos]
                pos += 1
                if b < 0x80:
                    n = (b >> 1) ^ -(b & 1)
                else:
                    n, pos = varint(buf, pos, b)
                if n < 0:
                    raise DecodeError(f"negative length {n}")
                text = buf[pos : pos + n].decode()
                pos += n
                b_cols.append(text)
                b = buf[pos]
                pos += 1
                if b < 0x80:
                    number = (b >> 1) ^ -(b & 1)
                else:
                    number, pos = varint(buf, pos, b)
                if not -(2**31) <= number < 2**31:
                    raise DecodeError(f"num_hashes {number} is not an int")
                b_hashes.append(number)
                b = buf[pos]
                pos += 1
                if b < 0x80:
                    n = (b >> 1) ^ -(b & 1)
                else:
                    n, pos = varint(buf, pos, b)
                if n < 0:
                    raise DecodeError(f"negative length {n}")
                bits = buf[pos : pos + n]
                pos += n
                b_bits.append(bits)
            elif index == 0:
                b_cols.append(None)
                b_hashes.append(None)
                b_bits.append(None)
            else:
                raise DecodeError(f"bloom union branch byte {index}")
            index = buf[pos]
            pos += 1
            if index == 2:  # the segment's schema: checked as the codec would, never kept
                b = buf[pos]
                pos += 1
                if b < 0x80:
                    n = (b >> 1) ^ -(b & 1)
                else:
                    n, pos = varint(buf, pos, b)
                if n < 0:
                    raise DecodeError(f"negative length {n}")
                text = buf[pos : pos + n].decode()
                pos += n
            elif index != 0:
                raise DecodeError(f"schema union branch byte {index}")
            if pos > end:
                raise DecodeError("a segment runs past the record")
            avros.append(buf[first:pos])
            row += 1
        b = buf[pos]
        pos += 1
        if b < 0x80:
            count = (b >> 1) ^ -(b & 1)
        else:
            count, pos = varint(buf, pos, b)
    return out, pos
