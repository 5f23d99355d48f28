"""Field ids and column bounds, checked against pyiceberg's own reading of them."""

from __future__ import annotations

import datetime as dt
import json

import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from segcat.catalog.iceberg.schema import FieldIds, UnrepresentableType, iceberg_schema, name_mapping
from segcat.catalog.iceberg.stats import single_value

NAMES = ["a", "b", "c", "d", "e"]
TYPES = [pa.int32(), pa.int64(), pa.string(), pa.float64(), pa.date32(), pa.timestamp("us", tz="UTC")]


@given(st.lists(st.lists(st.sampled_from(NAMES), unique=True, min_size=1), min_size=1, max_size=6))
def test_ids_follow_names_and_are_never_reused(schemas: list[list[str]]) -> None:
    from pyiceberg.schema import Schema

    ids = FieldIds()
    first: dict[str, int] = {}
    for names in schemas:
        arrow = pa.schema([(n, pa.struct([("x", pa.int64())]) if n == "e" else pa.int64()) for n in names])
        doc = iceberg_schema(arrow, ids, 0)
        Schema.model_validate(doc)  # a schema pyiceberg accepts
        for field in doc["fields"]:
            assert first.setdefault(field["name"], field["id"]) == field["id"]
        every = [i for i in ids.ids.values()]
        assert len(every) == len(set(every)), "an id names two fields"
        mapping = name_mapping(doc)
        assert {m["names"][0]: m["field-id"] for m in mapping} == {f["name"]: f["id"] for f in doc["fields"]}


def test_nested_types_get_ids_and_others_are_refused() -> None:
    arrow = pa.schema(
        [
            ("l", pa.list_(pa.int32())),
            ("m", pa.map_(pa.string(), pa.float64())),
            ("d", pa.decimal128(12, 3)),
            ("t", pa.timestamp("us")),
        ]
    )
    doc = iceberg_schema(arrow, FieldIds(), 0)
    assert doc["fields"][0]["type"] == {
        "type": "list",
        "element-id": 2,
        "element": "int",
        "element-required": False,
    }
    assert doc["fields"][1]["type"]["key-id"] == 4 and doc["fields"][1]["type"]["value"] == "double"
    assert doc["fields"][2]["type"] == "decimal(12, 3)" and doc["fields"][3]["type"] == "timestamp"
    assert json.loads(json.dumps(name_mapping(doc)))[0]["fields"] == [{"field-id": 2, "names": ["element"]}]
    with pytest.raises(UnrepresentableType, match="'x'"):
        iceberg_schema(pa.schema([("x", pa.duration("s"))]), FieldIds(), 0)


@given(
    st.one_of(
        st.tuples(st.just("int"), st.integers(-(2**31), 2**31 - 1)),
        st.tuples(st.just("long"), st.integers(-(2**63), 2**63 - 1)),
        st.tuples(st.just("string"), st.text()),
        st.tuples(st.just("boolean"), st.booleans()),
        st.tuples(st.just("date"), st.dates()),
        st.tuples(
            st.just("timestamptz"),
            st.datetimes(min_value=dt.datetime(1, 1, 2), timezones=st.just(dt.UTC)),
        ),
    )
)
def test_bounds_are_iceberg_s_single_value_serialization(kind_value: tuple[str, object]) -> None:
    from pyiceberg.conversions import to_bytes
    from pyiceberg.types import BooleanType, DateType, IntegerType, LongType, StringType, TimestamptzType

    kind, value = kind_value
    types = {
        "int": IntegerType(),
        "long": LongType(),
        "string": StringType(),
        "boolean": BooleanType(),
        "date": DateType(),
        "timestamptz": TimestamptzType(),
    }
    expected_value = value
    if kind == "date":
        assert isinstance(value, dt.date)
        expected_value = (value - dt.date(1970, 1, 1)).days
    if kind == "timestamptz":
        assert isinstance(value, dt.datetime)
        delta = value - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
        expected_value = (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds
    assert single_value(kind, value) == to_bytes(types[kind], expected_value)  # type: ignore[arg-type]


def test_no_bounds_where_they_could_mislead() -> None:
    assert single_value("double", 1.5) is None
    assert single_value("int", 2**40) is None  # does not fit the column's type
    assert single_value("timestamp", dt.datetime(2024, 1, 1)) is None
    assert single_value("binary", b"x") is None
