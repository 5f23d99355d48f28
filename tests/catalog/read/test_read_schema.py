"""Issue 20 items 8 and 20: the schema a table is read with, merged from every live file's.

The merge is pure (pyspark types, no session): which type is the table's depends on the set
of live files alone, not on their order, and a change no reader widens is a typed error
naming the column, both types and a file of each. Spark reading older files with the merged
schema is ``tests/spark_integration/test_spark_semantics.py``'s.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.types import (
    ArrayType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from segcat.catalog.errors import IncompatibleSchema
from segcat.spark_integration.schemas import Source, merged, parse_recorded

ATOMS: list[DataType] = [
    ByteType(),
    ShortType(),
    IntegerType(),
    LongType(),
    FloatType(),
    DoubleType(),
    DecimalType(5, 2),
    DecimalType(10, 0),
    DecimalType(20, 4),
    DecimalType(38, 10),
    DateType(),
    TimestampNTZType(),
    TimestampType(),
    StringType(),
]


MAP_DOUBLE = MapType(StringType(), DoubleType())


def _types(depth: int = 2) -> st.SearchStrategy[DataType]:
    atoms = st.sampled_from(ATOMS)
    if depth == 0:
        return atoms
    inner = _types(depth - 1)
    return st.one_of(
        atoms,
        atoms,
        st.builds(ArrayType, inner),
        st.builds(MapType, st.just(StringType()), inner),
        st.builds(lambda a, b: StructType([StructField("a", a), StructField("b", b)]), inner, inner),
        st.builds(lambda a: StructType([StructField("a", a)]), inner),
    )


def _file(kind: DataType, name: str = "x") -> Source:
    return Source(StructType([StructField("id", kind)]), name)


def _merge(*kinds: DataType) -> DataType | None:
    try:
        return merged([_file(k, f"f{i}") for i, k in enumerate(kinds)]).fields[0].dataType
    except IncompatibleSchema:
        return None


@pytest.mark.parametrize(
    ("left", "right", "table"),
    [
        (IntegerType(), LongType(), LongType()),
        (LongType(), IntegerType(), LongType()),  # a narrower write after a wider one reads wide too
        (ByteType(), ShortType(), ShortType()),
        (FloatType(), DoubleType(), DoubleType()),
        (IntegerType(), DoubleType(), DoubleType()),
        (IntegerType(), FloatType(), DoubleType()),
        (DateType(), TimestampNTZType(), TimestampNTZType()),
        (DecimalType(5, 2), DecimalType(10, 4), DecimalType(10, 4)),
        (DecimalType(5, 2), DecimalType(4, 0), DecimalType(6, 2)),
        (IntegerType(), DecimalType(5, 2), DecimalType(12, 2)),
        (LongType(), DecimalType(38, 20), None),  # 20 integer digits + 20 decimals: no decimal holds both
        (LongType(), DoubleType(), None),  # lossy: Spark does not read INT64 as a double
        (TimestampType(), TimestampNTZType(), None),  # an instant is not a wall clock
        (DateType(), TimestampType(), None),
        (StringType(), IntegerType(), None),
        (FloatType(), DecimalType(5, 2), None),
        (ArrayType(IntegerType()), ArrayType(LongType()), ArrayType(LongType())),
        (
            MapType(StringType(), FloatType()),
            MapType(StringType(), DoubleType()),
            MapType(StringType(), DoubleType()),
        ),
    ],
    ids=lambda t: t.simpleString() if isinstance(t, DataType) else str(t),
)
def test_safe_widening(left: DataType, right: DataType, table: DataType | None) -> None:
    assert _merge(left, right) == table


@settings(max_examples=400, deadline=None)
@given(st.lists(_types(), min_size=1, max_size=4), st.randoms())
def test_the_table_type_does_not_depend_on_the_order_of_the_files(kinds: list[DataType], rnd: object) -> None:
    shuffled = list(kinds)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    first, second = _merge(*kinds), _merge(*shuffled)
    if first is None or second is None:
        assert first is second is None
    else:  # struct fields may come in another order; everything else is the same type
        assert _canonical(first) == _canonical(second)
        for kind in kinds:  # every file's type widens to the table's
            assert _canonical(_merge(kind, first) or StringType()) == _canonical(first)


def _canonical(kind: DataType) -> str:
    if isinstance(kind, StructType):
        return "struct<" + ",".join(sorted(f"{f.name}:{_canonical(f.dataType)}" for f in kind.fields)) + ">"
    if isinstance(kind, ArrayType):
        return f"array<{_canonical(kind.elementType)}>"
    if isinstance(kind, MapType):
        return f"map<{_canonical(kind.keyType)},{_canonical(kind.valueType)}>"
    return kind.simpleString()


def test_columns_a_file_lacks_are_nullable_and_names_match_as_spark_resolves_them() -> None:
    old = StructType([StructField("id", IntegerType(), False), StructField("Name", StringType(), False)])
    new = StructType([StructField("ID", LongType(), False), StructField("z", StringType(), False)])
    table = merged([Source(old, "a"), Source(new, "b")])
    assert [(f.name, f.dataType, f.nullable) for f in table.fields] == [
        ("id", LongType(), False),
        ("Name", StringType(), True),
        ("z", StringType(), True),
    ]
    sensitive = merged([Source(old, "a"), Source(new, "b")], case_sensitive=True)
    assert sensitive.fieldNames() == ["id", "Name", "ID", "z"]


def test_a_change_no_reader_widens_names_the_column_the_types_and_a_file_of_each() -> None:
    nested = StructType([StructField("s", StructType([StructField("t", TimestampType())]))])
    other = StructType([StructField("s", StructType([StructField("t", TimestampNTZType())]))])
    plain = StructType([StructField("k", StringType())])
    sources = [
        Source(nested, "data/a.parquet (version 3)"),
        Source(plain, "data/b.parquet (version 4)"),
        Source(other, "data/c.parquet (version 5)"),
    ]
    with pytest.raises(IncompatibleSchema) as caught:
        merged(sources)
    message = str(caught.value)
    assert "'s.t'" in message and "timestamp" in message and "timestamp_ntz" in message
    assert "data/a.parquet (version 3)" in message and "data/c.parquet (version 5)" in message


def test_a_recorded_schema_that_is_not_spark_json_counts_as_none() -> None:
    assert parse_recorded(None) is None
    assert parse_recorded("not json") is None
    assert parse_recorded('{"type": "struct"}') is None
    assert parse_recorded("[1, 2]") is None
    good = StructType([StructField("id", LongType())])
    assert parse_recorded(good.json()) == good
