"""Bloom filters ("segcat-bloom-v1"): canonical keys per column type, old filters, hostile filters."""

from __future__ import annotations

import datetime as dt
import math
import struct

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segcat.catalog.protocol import bloom, rules
from segcat.catalog.protocol.expressions import col
from segcat.catalog.protocol.model import BloomFilter, ColumnStats, ColumnType, Commit, Operation, Segment
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read.snapshot import Snapshot

UTC = dt.UTC
T0 = dt.datetime(2024, 1, 1, tzinfo=UTC)


def test_the_hashing_is_pinned() -> None:
    """Writers and readers of every segcat version must agree on these bits."""
    keys = {bloom.value_key(ColumnType.INT, 42), bloom.value_key(ColumnType.STRING, "segcat")}
    flt = bloom.from_keys("c", keys)
    assert (flt.num_hashes, flt.bits.hex()) == (22, "95eaab1e0af5573d")
    assert bloom.value_key(ColumnType.INT, -1) == b"\xff" * 8
    assert bloom.value_key(ColumnType.DATE, dt.date(1970, 1, 2)) == (1).to_bytes(8, "little")
    one_second = dt.datetime(1970, 1, 1, 0, 0, 1)
    assert bloom.value_key(ColumnType.TIMESTAMP, one_second) == (10**6).to_bytes(8, "little")
    assert bloom.value_key(ColumnType.FLOAT, 1.5) == struct.pack("<d", 1.5)


def test_float_keys_fold_zeros_and_nans() -> None:
    negative_nan = struct.unpack("<d", struct.pack("<Q", 0xFFF8000000000001))[0]
    assert bloom.value_key(ColumnType.FLOAT, -0.0) == bloom.value_key(ColumnType.FLOAT, 0.0)
    assert bloom.value_key(ColumnType.FLOAT, negative_nan) == bloom.value_key(ColumnType.FLOAT, math.nan)
    assert bloom.keys(ColumnType.FLOAT, pa.array([0.0, -0.0, math.nan, negative_nan, None])) == {
        bloom.value_key(ColumnType.FLOAT, 0.0),
        bloom.value_key(ColumnType.FLOAT, math.nan),
    }


@pytest.mark.parametrize(
    ("arrow", "values", "probe"),
    [
        (pa.float64(), [1.0, 5.0], 5.0),
        (pa.float32(), [0.5, 5.0], 5.0),
        (pa.float16(), [0.5, 5.0], 5.0),
        (pa.int32(), [1, 5], 5),
        (pa.date32(), [dt.date(2024, 1, 1)], dt.date(2024, 1, 1)),
        (pa.timestamp("ms", tz="UTC"), [T0], T0),
        (pa.timestamp("ns"), [pd.Timestamp("2024-01-01 00:00:00.000001")], T0 + dt.timedelta(microseconds=1)),
        (pa.string(), ["a", "é"], "é"),
        (pa.binary(), [b"\x00", b"\xff"], b"\xff"),
        (pa.bool_(), [True], True),
    ],
)
def test_a_filter_built_from_arrow_finds_each_value(
    arrow: pa.DataType, values: list[object], probe: object
) -> None:
    kind = bloom.column_kind(arrow)
    flt = bloom.build("c", arrow, pa.array(values, arrow))
    assert bloom.might_contain(flt, kind, probe)
    assert bloom.build("c", kind, values) == flt  # Python values hash like Arrow's


def test_values_of_another_type_are_a_writer_bug() -> None:
    with pytest.raises(TypeError):
        bloom.build("c", ColumnType.INT, ["5"])
    with pytest.raises(TypeError):
        bloom.build("c", ColumnType.DATE, [dt.datetime(2024, 1, 1)])


def test_values_no_literal_can_equal_are_hashed_without_crashing() -> None:
    uint64 = pa.array([2**64 - 1, 3], pa.uint64())
    flt = bloom.build("u", uint64.type, uint64)
    assert bloom.might_contain(flt, ColumnType.INT, 3)
    nanos = pa.array([1_700_000_000_123_456_789], pa.timestamp("ns", tz="UTC"))
    flt = bloom.build("t", nanos.type, nanos)
    assert bloom.probe_keys(ColumnType.TIMESTAMP, pd.Timestamp(1_700_000_000_123_456_789, tz="UTC")) is None


def test_probing_zero_also_finds_a_negative_zero_an_old_writer_hashed() -> None:
    old = bloom.from_keys("d", {struct.pack("<d", -0.0)})  # old writers hashed the raw bytes
    assert bloom.might_contain(old, ColumnType.FLOAT, 0.0)
    assert bloom.might_contain(old, ColumnType.FLOAT, -0.0)
    assert bloom.probe_keys(ColumnType.FLOAT, math.nan) is None  # NaN: the nan_count answers


@pytest.mark.parametrize(
    "flt",
    [BloomFilter("i", 1000, b"\x00" * 8), BloomFilter("i", 0, b"\x00" * 8), BloomFilter("i", 3, b"")],
    ids=["too many hashes", "no hashes", "no bits"],
)
def test_hostile_filters_prove_nothing(flt: BloomFilter) -> None:
    assert not bloom.usable(flt)
    assert bloom.might_contain(flt, ColumnType.INT, 5)


def test_prune_ignores_a_filter_with_too_many_hashes() -> None:
    """An all-zero filter would rule everything out; with 1000 hashes it is no filter at all."""
    segment = Segment(
        "s",
        "data/s.parquet",
        1,
        2,
        stats=(ColumnStats("i", ColumnType.INT, 1, 9, 0),),
        bloom=BloomFilter("i", 1000, b"\x00" * 8),
    )
    state = TableState("ns.t")
    commit = Commit(Commit.new_id(), "ns.t", Operation.APPEND, -1, "w", 0, adds=(segment,))
    verdict = rules.apply(state, 0, 0, commit)
    assert verdict.outcome.value == "ACCEPTED"  # protocol 1 takes it; protocol 2 refuses > 64 hashes
    assert Snapshot(state, "/r").prune(col("i") == 5).live_count == 1
    assert Snapshot(state, "/r").prune(col("i") == np.int64(5)).live_count == 1


keys_st = st.lists(st.binary(max_size=9), min_size=1, max_size=4)
filters_st = st.lists(
    st.tuples(st.one_of(st.none(), st.binary(max_size=24)), st.one_of(st.none(), st.integers(-2, 70))),
    min_size=1,
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(filters=filters_st, keys=keys_st, skip=st.integers(0, 2))
def test_a_batch_probe_sets_the_same_bits_as_one_filter_at_a_time(
    filters: list[tuple[bytes | None, int | None]], keys: list[bytes], skip: int
) -> None:
    """``FilterBatch`` (numpy over every filter) answers exactly as ``might_contain_key`` per filter,
    for hostile filters (no bits, no or too many hashes, none at all) and sliced Arrow arrays too."""
    filters = [(None, None)] * skip + filters
    bits = pa.array([b for b, _ in filters], pa.binary()).slice(skip)
    hashes = pa.array([k for _, k in filters], pa.int32()).slice(skip)
    batch = bloom.FilterBatch(ColumnType.BINARY, bits, hashes)
    for key in keys:
        expected = [
            b is None or k is None or bloom.might_contain_key(BloomFilter("c", k, b), key)
            for b, k in filters[skip:]
        ]
        assert batch.might_contain_key(key).tolist() == expected
    written = bloom.build("c", ColumnType.BINARY, keys)
    batch = bloom.FilterBatch(ColumnType.BINARY, pa.array([written.bits]), pa.array([written.num_hashes]))
    assert all(batch.might_contain(key).tolist() == [True] for key in keys)
