"""``segcat.write``: Arrow and pandas rows as segment files and one commit, read back with
``Table.scan``, on the real stack."""

from __future__ import annotations

import datetime as dt
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import segcat
from segcat import Catalog, ColumnTypeConflict, IncompatibleSchema, InvalidArgument, Operation, Table, col
from segcat.catalog.protocol.parquet_field_ids import FIELD_ID, stamped
from segcat.catalog.protocol.row_filter import matches
from segcat.catalog.protocol.rules import partition_problem
from segcat.producers.segment_files import value_text


def _sorted_rows(data: pa.Table) -> list[tuple[Any, ...]]:
    names = sorted(data.column_names)
    rows = zip(*(data.column(n).to_pylist() for n in names), strict=True)
    return sorted((tuple(_key(v) for v in row) for row in rows), key=repr)


def _key(value: Any) -> Any:
    return "NaN" if isinstance(value, float) and math.isnan(value) else value


def _local(uri: str) -> str:
    return uri[len("file://") :] if uri.startswith("file://") else uri


def test_append_then_overwrite(table: Table) -> None:
    first = pa.table({"id": pa.array([1, 2, 3], pa.int64()), "day": ["a", "a", "b"], "v": [1.5, None, 3.0]})
    v1 = segcat.write(table, first, partition_by="day", bloom_column="id", properties={"job": "t"})
    commit = table.history()[-1]
    assert commit.version == v1
    scan = table.scan()
    assert _sorted_rows(scan.to_arrow()) == _sorted_rows(first)
    assert {f.uri.rsplit("/", 2)[-2] for f in scan.files()} == {"day=a", "day=b"}
    segments = table.snapshot().segment_list()
    assert all(s.bloom is not None and s.bloom.column == "id" for s in segments)
    assert {s.partition for s in segments} == {"a", "b"}
    assert all({st.column for st in s.stats} == {"id", "day", "v"} for s in segments)
    assert len(table.scan(col("id") == 3).files()) == 1  # pruned by stats and the Bloom filter

    v2 = segcat.write(table, pa.table({"id": [7], "day": ["c"], "v": [0.5]}), mode="overwrite")
    assert v2 > v1
    (record,) = [r for r in table.records(v2, v2 + 1)]
    assert record.commit is not None and record.commit.operation is Operation.REPLACE
    assert table.scan().to_arrow().to_pylist() == [{"id": 7, "day": "c", "v": 0.5}]
    assert _sorted_rows(table.scan(version=v1).to_arrow()) == _sorted_rows(first)


def test_inputs_batches_reader_pandas(table: Table) -> None:
    schema = pa.schema([("k", pa.int32()), ("s", pa.string())])
    batch = pa.record_batch([pa.array([1, 2], pa.int32()), pa.array(["x", None])], schema=schema)
    segcat.write(table, [batch, batch])
    segcat.write(table, pa.RecordBatchReader.from_batches(schema, [batch]))
    segcat.write(table, batch)
    import pandas as pd

    segcat.write(table, pd.DataFrame({"k": pd.array([3], dtype="int32"), "s": ["y"]}))
    got = table.scan().to_arrow()
    assert got.schema == pa.schema([("k", pa.int32()), ("s", pa.string())])
    assert sorted(got.column("k").to_pylist()) == [1, 1, 1, 1, 2, 2, 2, 2, 3]
    before = table.snapshot().version
    assert segcat.write(table, []) == before  # nothing to append: no commit
    assert segcat.write(table, schema.empty_table()) == before
    assert segcat.write(table, [], partition_by="day") == before
    assert table.snapshot().version == before


def test_field_ids_and_types_as_spark_reads_them(table: Table) -> None:
    data = pa.table(
        {
            "u": pa.array([1, 2], pa.uint8()),
            "ts": pa.array([dt.datetime(2024, 1, 1, 12)] * 2, pa.timestamp("ns", tz="Europe/Paris")),
            "cat": pa.array(["a", "b"]).dictionary_encode(),
            "nested": pa.array([{"x": 1, "y": [1.0]}, None]),
        }
    )
    segcat.write(table, data)
    (read,) = table.scan().files()
    schema = pq.read_schema(_local(read.uri))
    # nothing is published as Iceberg here: the file carries no field id (tests/iceberg/test_field_ids.py)
    assert all(FIELD_ID not in (f.metadata or {}) for f in schema)
    got = table.scan().to_arrow()
    assert got.schema.field("u").type == pa.int16()
    assert got.schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert got.schema.field("cat").type == pa.string()
    assert got.column("ts")[0].as_py() == data.column("ts")[0].as_py()  # the same instant


def test_field_ids_are_stamped_on_every_field_or_none() -> None:
    schema = pa.schema(
        [
            ("a", pa.struct([("b", pa.int64())])),
            ("m", pa.map_(pa.string(), pa.int64())),
            ("l", pa.list_(pa.int8())),
        ]
    )
    ids = {
        ("a",): 1,
        ("a", "b"): 4,
        ("m",): 2,
        ("m", "key"): 5,
        ("m", "value"): 6,
        ("l",): 3,
        ("l", "element"): 7,
    }
    got = stamped(schema, ids)
    assert [f.metadata[FIELD_ID] for f in got] == [b"1", b"2", b"3"]
    assert got.field("a").type.field("b").metadata[FIELD_ID] == b"4"
    assert got.field("m").type.key_field.metadata[FIELD_ID] == b"5"
    assert got.field("m").type.item_field.metadata[FIELD_ID] == b"6"
    assert got.field("l").type.value_field.metadata[FIELD_ID] == b"7"
    # one path without an id: no field gets one (a file with some ids is read wrongly)
    partial = {k: v for k, v in ids.items() if k != ("l", "element")}
    assert stamped(schema, partial) is schema


def test_bad_input_is_typed_and_writes_nothing(table: Table, tmp_path: Path) -> None:
    good = pa.table({"k": [1], "p": ["a"]})
    cases: list[tuple[dict[str, Any], str]] = [
        ({"data": {"k": [1]}}, "data is a pyarrow"),
        ({"data": "text"}, "data is a pyarrow"),
        ({"data": [1, 2]}, "RecordBatch"),
        ({"data": good, "mode": "upsert"}, "mode"),
        ({"data": good, "partition_by": "nope"}, "partition_by: 'nope'"),
        ({"data": good, "partition_by": []}, "partition_by"),
        ({"data": good, "partition_by": ["k", "K"]}, "twice"),
        ({"data": good, "bloom_column": "nope"}, "bloom_column: 'nope'"),
        ({"data": good, "properties": {"a": 1}}, "properties"),
        ({"data": good, "max_rows_per_file": 0}, "max_rows_per_file"),
        ({"data": pa.table({"k": [1], "K": [2]})}, "differ only in case"),
        ({"data": pa.table({"k": pa.nulls(2)})}, "no type"),
        ({"data": pa.table({"k": pa.array([2**63], pa.uint64())})}, "'k'"),
        ({"data": pa.table({"t": pa.array([1], pa.timestamp("ns"))})}, "'t'"),  # below a microsecond
    ]
    for kwargs, message in cases:
        with pytest.raises(InvalidArgument, match=message):
            segcat.write(table, **kwargs)
    other = pa.record_batch({"k": pa.array(["x"])})
    with pytest.raises(InvalidArgument, match="batch 1"):
        segcat.write(table, [good.to_batches()[0], other])
    with pytest.raises(InvalidArgument, match="table"):
        segcat.write(42, good)  # type: ignore[arg-type]
    assert [h.version for h in table.history()] == [0]  # nothing but the table's creation


def test_a_partition_value_with_control_characters_is_refused_naming_the_column(table: Table) -> None:
    """The rules refuse such a partition name; the writer says which column holds the value."""
    with pytest.raises(InvalidArgument, match=r"partition column p .*control characters"):
        segcat.write(table, pa.table({"k": [1, 2], "p": ["ok", "bad\x1fvalue"]}), partition_by="p")
    assert [h.version for h in table.history()] == [0]


def test_an_append_of_another_type_is_refused_before_any_file(table: Table) -> None:
    segcat.write(table, pa.table({"k": [1]}))
    files_before = set(Path(table.location()).rglob("*.parquet"))
    with pytest.raises(IncompatibleSchema, match="'k'"):
        segcat.write(table, pa.table({"k": ["text"]}))
    assert set(Path(table.location()).rglob("*.parquet")) == files_before
    with pytest.raises(ColumnTypeConflict, match="'k'"):  # the log's rule 4d: a type never changes
        segcat.write(table, pa.table({"k": ["text"]}), mode="overwrite")


def test_by_name(catalog: Catalog, table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    config = catalog.config
    monkeypatch.setenv("SEGCAT_BOOTSTRAP_SERVERS", config.bootstrap_servers)
    monkeypatch.setenv("SEGCAT_REDIS_URL", config.redis_url or "")
    monkeypatch.setenv("SEGCAT_WAREHOUSE", config.warehouse)
    v = segcat.write(table.name.qualified, pa.table({"k": [1]}))
    assert table.scan().version == v


# ---------------------------------------------------------------------------- round trips

_TYPES: dict[str, tuple[pa.DataType, st.SearchStrategy[Any]]] = {
    "i": (pa.int64(), st.integers(-(2**63), 2**63 - 1)),
    "s": (pa.int16(), st.integers(-(2**15), 2**15 - 1)),
    "f": (pa.float64(), st.floats(allow_nan=True, allow_infinity=True)),
    "t": (pa.string(), st.text(max_size=5)),
    "d": (pa.date32(), st.dates(dt.date(1, 1, 1), dt.date(9999, 12, 31))),
    "ts": (pa.timestamp("us"), st.datetimes(dt.datetime(1, 1, 2), dt.datetime(9999, 12, 30))),
    "tz": (
        pa.timestamp("us", tz="UTC"),
        st.datetimes(dt.datetime(1, 1, 2), dt.datetime(9999, 12, 30), timezones=st.just(dt.UTC)),
    ),
    "b": (pa.bool_(), st.booleans()),
}


@st.composite
def _tables(draw: st.DrawFn) -> tuple[pa.Table, str | None]:
    names = draw(st.lists(st.sampled_from(sorted(_TYPES)), min_size=1, max_size=4, unique=True))
    rows = draw(st.integers(0, 12))
    columns = {}
    for name in names:
        kind, values = _TYPES[name]
        columns[name] = pa.array(draw(st.lists(st.none() | values, min_size=rows, max_size=rows)), kind)
    key = draw(st.sampled_from([None, *[n for n in names if n in ("s", "t", "d", "b")]]))
    return pa.table(columns), key


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_tables())
def test_write_then_scan_round_trips(catalog: Catalog, data: tuple[pa.Table, str | None]) -> None:
    rows, key = data
    import uuid

    with catalog.create_table(f"test.roundtrip_{uuid.uuid4().hex[:12]}") as table:
        refused = key is not None and any(
            partition_problem(value_text(v)) for v in rows.column(key).to_pylist()
        )
        if refused:  # a value no partition name can hold (control characters): named, nothing committed
            with pytest.raises(InvalidArgument, match=f"partition column {key}"):
                segcat.write(table, rows, partition_by=key)
            return
        segcat.write(table, rows, partition_by=key, max_rows_per_file=3)  # several files: pruning matters
        scanned = table.scan().to_arrow()
        if rows.num_rows == 0:
            assert scanned.num_rows == 0
            return
        assert scanned.schema.equals(rows.schema.remove_metadata()) or scanned.schema == pa.schema(
            [f.with_nullable(True) for f in rows.schema]
        )
        assert _sorted_rows(scanned) == _sorted_rows(rows)
        name = rows.column_names[0]
        value = next((v for v in rows.column(name).to_pylist() if v is not None and v == v), None)
        if value is not None:
            expected = sorted(repr(v) for v in rows.column(name).to_pylist() if v == value)
            got = table.scan(col(name) == value).to_arrow().column(name).to_pylist()
            assert sorted(repr(v) for v in got) == expected
            for predicate in (col(name) >= value, col(name) < value, col(name).is_null()):
                # pruning never drops a matching row: the pruned scan is the filter of the whole
                expected_rows = scanned.filter(pa.array(matches(predicate, scanned)))
                assert _sorted_rows(table.scan(predicate).to_arrow()) == _sorted_rows(expected_rows)
