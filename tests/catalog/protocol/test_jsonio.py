"""``segcat commit FILE`` / ``segcat log --json``: commits survive a JSON round trip exactly, and
anything that is not a commit document is refused with the field's path, never coerced."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from segcat.catalog.errors import MalformedCommit
from segcat.catalog.protocol.jsonio import (
    COMMIT_SCHEMA,
    commit_from_json,
    commit_to_json,
    dumps,
    parse_json,
    schema_text,
    segment_from_json,
    segment_to_json,
)
from segcat.catalog.protocol.model import (
    BloomFilter,
    ColumnStats,
    ColumnType,
    Commit,
    Isolation,
    Operation,
    Protocol,
    Segment,
    Tombstone,
)

SCHEMA_FILE = Path(__file__).resolve().parents[3] / "docs" / "commit.schema.json"


def read(doc: Any, **kwargs: Any) -> Commit:
    args: dict[str, Any] = {"table": "ns.t", "writer_id": "w", "base_version": -1, "now_ms": 0, **kwargs}
    return commit_from_json(doc, **args)


def segment(**changes: Any) -> dict[str, Any]:
    return {"segment_id": "a", "path": "data/a.parquet", "size_bytes": 10, "row_count": 2, **changes}


def with_stats(**entry: Any) -> dict[str, Any]:
    return {"operation": "APPEND", "adds": [segment(stats=[{"column": "c", **entry}])]}


def test_every_field_and_stat_type_round_trips() -> None:
    stats = (
        ColumnStats("i", ColumnType.INT, -(2**63), 2**63 - 1, 0),
        ColumnStats("f", ColumnType.FLOAT, -1.5, 2.25, 1, nan_count=3),
        ColumnStats("s", ColumnType.STRING, "a", "zz", None),
        ColumnStats("d", ColumnType.DATE, dt.date(1900, 1, 1), dt.date(2100, 12, 31), 0),
        ColumnStats(
            "t",
            ColumnType.TIMESTAMP,
            dt.datetime(2020, 1, 1, tzinfo=dt.UTC),
            dt.datetime(2020, 1, 1, 0, 0, 0, 7, tzinfo=dt.UTC),
            0,
        ),
        ColumnStats("b", ColumnType.BOOLEAN, False, True, 0),
        ColumnStats("x", ColumnType.BINARY, b"\x00", b"\xff\xfe", 0),
        ColumnStats("o", ColumnType.OTHER, None, None, 2),
    )
    commit = Commit(
        Commit.new_id(),
        "ns.t",
        Operation.REPLACE,
        7,
        "w",
        123,
        adds=(
            Segment(
                "s1",
                "data/s1.parquet",
                10,
                5,
                "p1",
                stats=stats,
                bloom=BloomFilter("s", 3, b"\x01\x80"),
                schema='{"a": 1}',
            ),
        ),
        drops=("old",),
        tombstones=(Tombstone("a = 1"),),
        replace_scope=("p1",),
        isolation=Isolation.SERIALIZABLE,
        properties={"job": "j"},
        table_properties={"k": "v", "gone": None},
        schema='{"b": 2}',
    )
    text = dumps(commit_to_json(commit))
    back = commit_from_json(json.loads(text), table="ns.t", writer_id="other", base_version=-1, now_ms=999)
    assert back == commit


def test_protocol_round_trips_on_upgrade_protocol() -> None:
    commit = Commit(
        Commit.new_id(),
        "ns.t",
        Operation.UPGRADE_PROTOCOL,
        4,
        "w",
        1,
        table_properties={"segcat.location": "s3://bucket/ns/t"},
        protocol=Protocol(2, ("feature-a", "feature-b")),
    )
    assert read(parse_json(dumps(commit_to_json(commit)))) == commit


def test_timestamp_ms_is_honoured_when_given_and_now_when_not() -> None:
    # old code silently dropped a file's timestamp_ms
    assert read({"operation": "APPEND", "adds": [segment()], "timestamp_ms": 42}, now_ms=7).timestamp_ms == 42
    assert read({"operation": "APPEND", "adds": [segment()]}, now_ms=7).timestamp_ms == 7


def test_non_finite_float_stats_are_written_as_strings_and_read_back() -> None:
    stats = ColumnStats("f", ColumnType.FLOAT, -math.inf, math.inf, 0, nan_count=1)
    nan_stats = ColumnStats("g", ColumnType.FLOAT, math.nan, math.nan, 0)
    seg = Segment("s", "data/s.parquet", 1, 3, stats=(stats, nan_stats))
    raw = segment_to_json(seg)
    text = dumps(raw)  # allow_nan=False: strict JSON or an exception
    assert "NaN" in text and '"Infinity"' in text and '"-Infinity"' in text
    back = segment_from_json(json.loads(text))
    assert back.stats[0] == stats
    assert math.isnan(back.stats[1].min) and math.isnan(back.stats[1].max)  # type: ignore[arg-type]


def test_the_published_schema_is_the_one_the_reader_uses() -> None:
    Draft202012Validator.check_schema(COMMIT_SCHEMA)
    assert json.loads(SCHEMA_FILE.read_text()) == COMMIT_SCHEMA, (
        "docs/commit.schema.json is stale: run `.venv/bin/python -m catalog.jsonio > docs/commit.schema.json`"
    )
    assert SCHEMA_FILE.read_text() == schema_text()


def test_written_commits_validate_against_the_published_schema_with_a_plain_validator() -> None:
    """A writer in another language, with any 2020-12 validator, accepts what segcat writes."""
    validator = Draft202012Validator(json.loads(SCHEMA_FILE.read_text()))
    seg = Segment(
        "s",
        "data/s.parquet",
        1,
        3,
        stats=(ColumnStats("f", ColumnType.FLOAT, math.nan, 1.0, 0, nan_count=2),),
        bloom=BloomFilter("k", 2, b"\x01"),
    )
    commit = Commit(Commit.new_id(), "ns.t", Operation.APPEND, -1, "w", 5, adds=(seg,))
    assert list(validator.iter_errors(json.loads(dumps(commit_to_json(commit))))) == []


# Issue 7, item 11: every one of these was coerced (or crashed) before.
COERCED = {
    "null path": ({"operation": "APPEND", "adds": [segment(path=None)]}, "adds[0].path: expected string"),
    "null segment_id": (
        {"operation": "APPEND", "adds": [segment(segment_id=None)]},
        "adds[0].segment_id: expected string",
    ),
    "fractional size": (
        {"operation": "APPEND", "adds": [segment(size_bytes=1.9)]},
        "adds[0].size_bytes: expected integer",
    ),
    "integral float size": (
        {"operation": "APPEND", "adds": [segment(row_count=2.0)]},
        "adds[0].row_count: expected integer",
    ),
    "boolean size": (
        {"operation": "APPEND", "adds": [segment(size_bytes=True)]},
        "adds[0].size_bytes: expected integer",
    ),
    "string size": (
        {"operation": "APPEND", "adds": [segment(row_count="12")]},
        "adds[0].row_count: expected integer",
    ),
    "bad base64": (
        with_stats(type="BINARY", min="!!not base64"),
        "adds[0].stats[0].min: expected standard base64",
    ),
    "non-canonical base64": (with_stats(type="BINARY", max="AB=="), "adds[0].stats[0].max"),
    "bad bloom base64": (
        {"operation": "APPEND", "adds": [segment(bloom={"column": "k", "num_hashes": 2, "bits": "@@"})]},
        "adds[0].bloom.bits",
    ),
    "nested table property": (
        {"operation": "SET_PROPERTIES", "table_properties": {"a": {"b": 1}}},
        "table_properties.a: expected string or null",
    ),
    "number as commit property": (
        {"operation": "APPEND", "adds": [segment()], "properties": {"job": 5}},
        "properties.job: expected string",
    ),
    "INT stat as string": (with_stats(type="INT", min="x"), "adds[0].stats[0].min: expected integer"),
    "INT stat as float": (with_stats(type="INT", max=1.5), "adds[0].stats[0].max: expected integer"),
    "INT stat beyond int64": (with_stats(type="INT", max=2**63), "adds[0].stats[0].max: must be at most"),
    "FLOAT stat as other text": (
        with_stats(type="FLOAT", min="nan"),
        "adds[0].stats[0].min: expected a number",
    ),
    "FLOAT stat inexact": (with_stats(type="FLOAT", min=2**53 + 1), "not exactly representable"),
    "DATE not a date": (with_stats(type="DATE", min="2020-02-30"), "is not a calendar date"),
    "DATE compact form": (with_stats(type="DATE", min="20200101"), "adds[0].stats[0].min: expected a date"),
    "TIMESTAMP nanoseconds": (
        with_stats(type="TIMESTAMP", min="2020-01-01T00:00:00.123456789Z"),
        "adds[0].stats[0].min: expected an ISO-8601 time",
    ),
    "BOOLEAN as number": (with_stats(type="BOOLEAN", min=0), "adds[0].stats[0].min: expected boolean"),
    "OTHER with a bound": (with_stats(type="OTHER", min=3), "adds[0].stats[0].min: expected null"),
    "nan_count on INT": (with_stats(type="INT", nan_count=1), "adds[0].stats[0].nan_count: expected null"),
    "unknown stats type": (with_stats(type="DECIMAL"), "adds[0].stats[0].type: expected one of"),
    "protocol on APPEND": (
        {"operation": "APPEND", "adds": [segment()], "protocol": {"version": 2}},
        "protocol: expected null",
    ),
    "UPGRADE_PROTOCOL without protocol": (
        {"operation": "UPGRADE_PROTOCOL"},
        "missing required field 'protocol'",
    ),
    "protocol version as text": (
        {"operation": "UPGRADE_PROTOCOL", "protocol": {"version": "2"}},
        "protocol.version: expected integer",
    ),
    "commit_id not canonical": (
        {"operation": "APPEND", "adds": [segment()], "commit_id": "ABC"},
        "commit_id: expected a UUID",
    ),
    "empty commit_id": ({"operation": "APPEND", "adds": [segment()], "commit_id": ""}, "commit_id"),
    "negative timestamp": ({"operation": "APPEND", "adds": [segment()], "timestamp_ms": -1}, "timestamp_ms"),
    "base_version below -1": (
        {"operation": "APPEND", "base_version": -2},
        "base_version: must be at least -1",
    ),
    "another table": ({"operation": "APPEND", "table": "ns.other"}, "table: the document is for table"),
    "UNKNOWN operation": ({"operation": "UNKNOWN"}, "operation: expected one of"),
}

# Issue 7, item 12: each of these raised a traceback (TypeError, ValueError, AttributeError) before.
CRASHED = {
    "adds as a string": ({"operation": "APPEND", "adds": "abc"}, "adds: expected array, got string"),
    "adds as an object": ({"operation": "APPEND", "adds": {"a": 1}}, "adds: expected array, got an object"),
    "segment as a string": ({"operation": "APPEND", "adds": ["abc"]}, "adds[0]: expected object"),
    "schema as an object": (
        {"operation": "SET_SCHEMA", "schema": {"a": 1}},
        "schema: expected string or null",
    ),
    "schema not JSON text": ({"operation": "SET_SCHEMA", "schema": "{oops"}, "schema is not valid JSON"),
    "size of 2**70": (
        {"operation": "APPEND", "adds": [segment(size_bytes=2**70)]},
        "adds[0].size_bytes: must be at most 9223372036854775807",
    ),
    "null_count as text": (
        with_stats(type="INT", null_count="3"),
        "adds[0].stats[0].null_count: expected integer",
    ),
    "stats as an object": (
        {"operation": "APPEND", "adds": [segment(stats={})]},
        "adds[0].stats: expected array",
    ),
    "properties as a list": ({"operation": "APPEND", "properties": []}, "properties: expected object"),
    "a JSON array": ([], "one JSON object, not an array"),
    "a JSON string": ("APPEND", "one JSON object, not string"),
    "NaN as a Python float": (with_stats(type="FLOAT", min=math.nan), "is not a JSON number"),
    "non-string key": ({"operation": "APPEND", 1: 2}, "object keys are strings"),
    "lone surrogate": (
        {"operation": "APPEND", "adds": [segment(path="a/\ud800")]},
        "adds[0].path: text holds",
    ),
    "a tuple": ({"operation": "APPEND", "adds": (segment(),)}, "adds: a tuple is not a JSON value"),
    "unknown field": ({"operation": "APPEND", "bogus": 1}, "unknown field 'bogus'"),
}


@pytest.mark.parametrize(("doc", "message"), [*COERCED.values(), *CRASHED.values()], ids=[*COERCED, *CRASHED])
def test_bad_documents_name_the_field(doc: Any, message: str) -> None:
    with pytest.raises(MalformedCommit) as caught:
        read(doc)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value) and len(str(caught.value)) < 400


def test_deeply_nested_values_are_refused_without_recursion() -> None:
    deep: Any = "x"
    for _ in range(5_000):
        deep = [deep]
    with pytest.raises(MalformedCommit, match="nested deeper than"):
        read({"operation": "APPEND", "properties": {"a": deep}})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"operation": NaN}', "NaN is not JSON"),
        ('{"a": Infinity}', "Infinity is not JSON"),
        ('{"a": -Infinity}', "-Infinity is not JSON"),
        ('{"a": 1e400}', "does not fit a double"),
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ("[" * 100_000 + "]" * 100_000, "nests deeper than"),
        ("[" * 40 + "]" * 40, "nested deeper than"),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "is not UTF-8 text"),
        ("{not json", "is not valid JSON"),
        ("1" * 5_000, "is not valid JSON"),
        ("", "is not valid JSON"),
    ],
    ids=[
        "nan",
        "inf",
        "-inf",
        "overflow",
        "duplicate",
        "deep-recursion",
        "deep",
        "binary",
        "broken",
        "digits",
        "empty",
    ],
)
def test_strict_json_text(text: str | bytes, message: str) -> None:
    with pytest.raises(MalformedCommit) as caught:
        parse_json(text, source="c.json")
    assert message in str(caught.value)
    assert len(str(caught.value)) < 400


def test_a_utf8_bom_is_fine() -> None:
    assert parse_json(b'\xef\xbb\xbf{"operation": "APPEND"}') == {"operation": "APPEND"}


def test_several_problems_are_counted_in_one_line() -> None:
    with pytest.raises(MalformedCommit, match=r"and \d+ more problem"):
        read({"operation": "APPEND", "adds": [segment(size_bytes="1", row_count="2", path=None)]})


def test_segment_from_json_validates_alone() -> None:
    assert segment_from_json(segment()) == Segment("a", "data/a.parquet", 10, 2)
    with pytest.raises(MalformedCommit, match=r"^segment\.size_bytes: expected integer"):
        segment_from_json(segment(size_bytes="10"))
