"""Bloom filters over one key column of a segment (Hudi RFC-37 style), hashing "segcat-bloom-v1".

A value is canonicalised to bytes (int / date / timestamp: 8-byte little-endian signed
of the integer, days or microseconds; float: 8-byte IEEE-754 LE; str: UTF-8; bytes: as
is; bool: one byte), hashed with BLAKE2b-128, split into two little-endian 64-bit
halves h1, h2, and bit ``(h1 + i*h2) mod m`` is set for ``i`` in ``0..k-1`` (bit j lives in
byte j // 8 at position j % 8). Writers (Spark executors) and readers share this module.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import math
import struct
from collections.abc import Iterable

from catalog.model import BloomFilter, StatValue

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_EPOCH_DATE = dt.date(1970, 1, 1)


def canonical(value: StatValue) -> bytes:
    if isinstance(value, bool):
        return b"\x01" if value else b"\x00"
    if isinstance(value, int):
        return value.to_bytes(8, "little", signed=True)
    if isinstance(value, float):
        return struct.pack("<d", value)
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytes):
        return value
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        delta = aware - _EPOCH
        micros = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
        return micros.to_bytes(8, "little", signed=True)
    if isinstance(value, dt.date):
        return (value - _EPOCH_DATE).days.to_bytes(8, "little", signed=True)
    raise TypeError(f"no Bloom hashing for {type(value).__name__}")


def _positions(value: StatValue, num_bits: int, num_hashes: int) -> list[int]:
    digest = hashlib.blake2b(canonical(value), digest_size=16).digest()
    h1 = int.from_bytes(digest[:8], "little")
    h2 = int.from_bytes(digest[8:], "little") | 1
    return [(h1 + i * h2) % num_bits for i in range(num_hashes)]


def build(column: str, values: Iterable[StatValue], *, fpp: float = 0.01) -> BloomFilter:
    """A filter sized for the distinct non-null ``values`` at false-positive rate ``fpp``."""
    distinct = {v for v in values if v is not None}
    n = max(len(distinct), 1)
    num_bits = max(64, math.ceil(-n * math.log(fpp) / math.log(2) ** 2))
    num_bits = (num_bits + 7) // 8 * 8
    num_hashes = max(1, round(num_bits / n * math.log(2)))
    bits = bytearray(num_bits // 8)
    for value in distinct:
        for position in _positions(value, num_bits, num_hashes):
            bits[position // 8] |= 1 << (position % 8)
    return BloomFilter(column, num_hashes, bytes(bits))


def might_contain(bloom: BloomFilter, value: StatValue) -> bool:
    """False only if ``value`` is certainly absent from the segment's column."""
    num_bits = len(bloom.bits) * 8
    return all(bloom.bits[p // 8] >> (p % 8) & 1 for p in _positions(value, num_bits, bloom.num_hashes))
