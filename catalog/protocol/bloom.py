"""Bloom filters over one key column of a segment (Hudi RFC-37 style), hashing "segcat-bloom-v1".

**Keys.** A value is hashed in the canonical form of its *column's* type, never of its
Python type, so that a literal Spark would find equal to a stored value always probes the
same bits (``d == 5`` on a DOUBLE column must probe 5.0, not the integer 5):

=========  ================================================================
INT        8-byte little-endian signed int64
FLOAT      8-byte IEEE-754 little-endian double; -0.0 is folded to 0.0 and every NaN
           to the one quiet NaN ``0x7ff8000000000000`` (Spark: -0.0 = 0.0, NaN = NaN)
STRING     UTF-8
DATE       days since 1970-01-01 as 8-byte little-endian signed
TIMESTAMP  microseconds since the epoch (UTC) as 8-byte little-endian signed; a value
           with sub-microsecond digits, which no microsecond literal can equal, is
           hashed as 12 bytes of its nanoseconds instead
BOOLEAN    one byte, 0 or 1
BINARY     the bytes as they are
=========  ================================================================

**Bits.** The key is hashed with BLAKE2b-128, split into two little-endian 64-bit halves
h1, h2 (h2 forced odd), and bit ``(h1 + i*h2) mod m`` is set for ``i`` in ``0..k-1`` (bit j
lives in byte j // 8 at position j % 8). Writers (Spark executors) and readers share this
module.

**Older filters.** Writers before canonical keys hashed by the Python type of the values,
which agrees with the table above except for floats: whichever of -0.0 / 0.0 came first,
and raw NaN payloads. Probing 0.0 therefore also probes the raw -0.0 key, and NaN is never
probed (NaN is answered by the ``nan_count`` stats instead). A filter with no bits, no
hashes or more than ``MAX_HASHES`` hashes is treated as no filter at all.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import struct
from collections.abc import Iterable
from functools import lru_cache

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from segcat.catalog.protocol.column_types import column_type
from segcat.catalog.protocol.model import BloomFilter, ColumnType
from segcat.catalog.protocol.time_semantics import micros

MAX_HASHES = 64
"""More hashes than this is a hostile or broken filter: probing it would cost, not help."""

_EPOCH_DATE = dt.date(1970, 1, 1)
_QUIET_NAN = struct.pack("<Q", 0x7FF8000000000000)
_ZERO = struct.pack("<d", 0.0)
_NEGATIVE_ZERO = struct.pack("<d", -0.0)
_INT64 = (-(2**63), 2**63 - 1)


def _int_key(value: int) -> bytes:
    if _INT64[0] <= value <= _INT64[1]:
        return value.to_bytes(8, "little", signed=True)
    # outside int64 (a uint64 column): never probed (no INT literal outside int64 probes), never equal
    return value.to_bytes((value.bit_length() + 8) // 8 + 8, "little", signed=True)


def float_key(value: float) -> bytes:
    """The FLOAT key: -0.0 as 0.0, every NaN as the one quiet NaN."""
    if math.isnan(value):
        return _QUIET_NAN
    return struct.pack("<d", value + 0.0)  # -0.0 + 0.0 == +0.0 under round-to-nearest


def _nanos(value: dt.datetime) -> int | None:
    """Nanoseconds since the epoch (UTC) of a pandas Timestamp with sub-microsecond digits, else None."""
    if not getattr(value, "nanosecond", 0):
        return None
    return int(value.value)  # type: ignore[attr-defined]  # pandas: ns since the epoch, UTC


def value_key(kind: ColumnType, value: object) -> bytes:
    """The canonical key of one stored, non-null ``value`` of a ``kind`` column.

    Raises ``TypeError`` for a value that is not of the column's type (a writer bug: building
    a filter from such values could make a reader drop a file holding them).
    """
    if isinstance(value, np.generic):
        value = value.item()
    if kind is ColumnType.INT and isinstance(value, int) and not isinstance(value, bool):
        return _int_key(value)
    if kind is ColumnType.FLOAT and isinstance(value, int | float) and not isinstance(value, bool):
        return float_key(float(value))
    if kind is ColumnType.STRING and isinstance(value, str):
        return value.encode()
    if kind is ColumnType.BINARY and isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if kind is ColumnType.BOOLEAN and isinstance(value, bool):
        return b"\x01" if value else b"\x00"
    if kind is ColumnType.TIMESTAMP and isinstance(value, dt.datetime):
        nanos = _nanos(value)
        if nanos is not None:
            return nanos.to_bytes(12, "little", signed=True)
        return micros(value).to_bytes(8, "little", signed=True)
    if kind is ColumnType.DATE and isinstance(value, dt.date) and not isinstance(value, dt.datetime):
        return (value - _EPOCH_DATE).days.to_bytes(8, "little", signed=True)
    raise TypeError(f"no Bloom key for a {type(value).__name__} in a {kind.value} column")


def keys(kind: ColumnType, values: Iterable[object] | pa.Array | pa.ChunkedArray) -> set[bytes]:
    """The distinct canonical keys of the non-null ``values`` of a ``kind`` column.

    Arrow input is made distinct first (one Arrow call), so a writer hashes each value once.
    """
    if isinstance(values, pa.Array | pa.ChunkedArray):
        if pa.types.is_floating(values.type):
            values = pc.cast(values, pa.float64())  # float16 / float32 widen exactly
        values = pc.unique(values).to_pylist()
    return {value_key(kind, v) for v in values if v is not None}


def column_kind(kind: ColumnType | pa.DataType) -> ColumnType:
    """``kind`` as a segcat column type (an Arrow type maps as the footer stats map it)."""
    return kind if isinstance(kind, ColumnType) else column_type(kind)


def from_keys(column: str, found: set[bytes], *, fpp: float = 0.01) -> BloomFilter:
    """A filter over canonical ``found`` keys (``keys``), sized for false-positive rate ``fpp``."""
    n = max(len(found), 1)
    num_bits = max(64, math.ceil(-n * math.log(fpp) / math.log(2) ** 2))
    num_bits = (num_bits + 7) // 8 * 8
    num_hashes = min(MAX_HASHES, max(1, round(num_bits / n * math.log(2))))
    bits = bytearray(num_bits // 8)
    for key in found:
        for position in _positions(key, num_bits, num_hashes):
            bits[position // 8] |= 1 << (position % 8)
    return BloomFilter(column, num_hashes, bytes(bits))


def build(
    column: str,
    kind: ColumnType | pa.DataType,
    values: Iterable[object] | pa.Array | pa.ChunkedArray,
    *,
    fpp: float = 0.01,
) -> BloomFilter:
    """A filter over the non-null ``values`` of ``column``, whose type is ``kind`` (or its Arrow type)."""
    return from_keys(column, keys(column_kind(kind), values), fpp=fpp)


@lru_cache(maxsize=65_536)
def _digest(key: bytes) -> tuple[int, int]:
    digest = hashlib.blake2b(key, digest_size=16).digest()
    return int.from_bytes(digest[:8], "little"), int.from_bytes(digest[8:], "little") | 1


def _positions(key: bytes, num_bits: int, num_hashes: int) -> list[int]:
    h1, h2 = _digest(key)
    return [(h1 + i * h2) % num_bits for i in range(num_hashes)]


def usable(bloom: BloomFilter) -> bool:
    """Whether probing ``bloom`` can prove anything (empty or hostile filters cannot)."""
    return bool(bloom.bits) and 1 <= bloom.num_hashes <= MAX_HASHES


def might_contain_key(bloom: BloomFilter, key: bytes) -> bool:
    """False only if the canonical ``key`` is certainly absent from the filter."""
    if not usable(bloom):
        return True
    num_bits = len(bloom.bits) * 8
    return all(bloom.bits[p // 8] >> (p % 8) & 1 for p in _positions(key, num_bits, bloom.num_hashes))


def probe_keys(kind: ColumnType, value: object) -> tuple[bytes, ...] | None:
    """The keys to probe for a stored value equal to ``value`` (already of the column's type).

    None: the Bloom filter cannot answer for this value (NaN, a sub-microsecond time).
    """
    if kind is ColumnType.FLOAT and isinstance(value, float):
        if math.isnan(value):
            return None
        return (_ZERO, _NEGATIVE_ZERO) if value == 0.0 else (float_key(value),)
    if kind is ColumnType.TIMESTAMP and isinstance(value, dt.datetime) and _nanos(value) is not None:
        return None
    try:
        return (value_key(kind, value),)
    except TypeError:
        return None


def might_contain(bloom: BloomFilter, kind: ColumnType, value: object) -> bool:
    """False only if no stored value of the ``kind`` column equals ``value`` (of the column's type)."""
    probes = probe_keys(kind, value)
    if probes is None:
        return True
    return any(might_contain_key(bloom, key) for key in probes)


class FilterBatch:
    """The Bloom filters of many segments over one ``kind`` column, probed all at once.

    The same bits as ``might_contain_key`` tests one filter at a time, computed with numpy
    over every filter: ``(h1 + i*h2) mod m`` is ``(h1 mod m + i * (h2 mod m)) mod m``, which
    stays within 64 bits for any filter a record can hold. A key is hashed once per batch,
    however many filters there are. A filter that can prove nothing (``usable`` is false)
    answers True.
    """

    def __init__(self, kind: ColumnType, bits: pa.Array, num_hashes: pa.Array) -> None:
        self.kind = kind
        self.size = len(bits)
        wide = pc.cast(bits, pa.large_binary())
        buffers = wide.buffers()
        offsets = np.frombuffer(buffers[1], dtype=np.int64)[wide.offset : wide.offset + self.size + 1]
        lengths = np.diff(offsets)
        hashes = pc.fill_null(num_hashes, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        present = pc.fill_null(pc.is_valid(bits), False).to_numpy(zero_copy_only=False)
        usable = present & (lengths > 0) & (hashes >= 1) & (hashes <= MAX_HASHES)
        self._rows = np.flatnonzero(usable)
        self._start = offsets[:-1][self._rows]
        self._bits = (lengths[self._rows] * 8).astype(np.uint64)
        self._hashes = hashes[self._rows]
        data = buffers[2]
        self._data = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, np.uint8)

    def might_contain_key(self, key: bytes) -> np.ndarray:
        """Per filter: False only if the canonical ``key`` is certainly absent from it."""
        out = np.ones(self.size, dtype=bool)
        if not len(self._rows):
            return out
        h1, h2 = _digest(key)
        first = np.uint64(h1) % self._bits
        step = np.uint64(h2) % self._bits
        found = np.ones(len(self._rows), dtype=bool)
        for i in range(int(self._hashes.max())):
            position = (first + np.uint64(i) * step) % self._bits
            byte = self._data[self._start + (position >> np.uint64(3)).astype(np.int64)]
            bit = (byte >> (position & np.uint64(7)).astype(np.uint8)) & 1
            found &= (bit == 1) | (self._hashes <= i)
        out[self._rows] = found
        return out

    def might_contain(self, value: object) -> np.ndarray:
        """Per filter: False only if no stored value equals ``value`` (of the column's type)."""
        probes = probe_keys(self.kind, value)
        if probes is None:
            return np.ones(self.size, dtype=bool)
        out = np.zeros(self.size, dtype=bool)
        for key in probes:
            out |= self.might_contain_key(key)
        return out
