"""The Avro single-object codec (docs/PROTOCOL.md §2).

The header is checked against an independent Parsing Canonical Form and CRC-64-AVRO,
both written here from the Avro specification, so a codec that fingerprints the wrong
text, or writes the fingerprint in the wrong byte order, fails.
"""

from __future__ import annotations

import datetime as dt
import io
import json
import math
import types
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

import fastavro
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from segcat.catalog.errors import DecodeError, UnknownSchema
from segcat.catalog.protocol import codec, rules
from segcat.catalog.protocol.model import (
    BloomFilter,
    ColumnStats,
    ColumnType,
    Commit,
    Intent,
    Isolation,
    Operation,
    Protocol,
    Segment,
    StatValue,
    Tombstone,
)
from segcat.catalog.protocol.state import TableState
from tests.strategies import SETTINGS, commits

REPO = Path(__file__).resolve().parents[3]
SCHEMAS = REPO / "schemas"
V1_SCHEMA_FILE = SCHEMAS / "history" / "segcat.Commit.v1.avsc"
COMMIT_ID = "0f8fad5b-d9cb-469f-a165-70867728950e"


def a_commit(**changes: Any) -> Commit:
    base = Commit(
        commit_id=COMMIT_ID,
        table="ns.t",
        operation=Operation.APPEND,
        base_version=41,
        writer_id="spark-job-7",
        timestamp_ms=1_700_000_000_123,
        adds=(Segment("seg-1", "data/2024-01/part-0.parquet", 1_234, 10, "2024-01"),),
    )
    return replace(base, **changes)


# ---------------------------------------------------------------------- the Avro spec, independently


CRC64_EMPTY = 0xC15D213AA4D7A795
"""The CRC-64-AVRO polynomial / initial value, from the Avro specification."""


def _crc64_table() -> list[int]:
    table = []
    for i in range(256):
        fp = i
        for _ in range(8):
            fp = (fp >> 1) ^ (CRC64_EMPTY & -(fp & 1))
        table.append(fp)
    return table


_TABLE = _crc64_table()


def crc64_avro(data: bytes) -> int:
    """Table-driven, as in the specification's reference code."""
    fp = CRC64_EMPTY
    for byte in data:
        fp = (fp >> 8) ^ _TABLE[(fp ^ byte) & 0xFF]
    return fp


def crc64_avro_bitwise(data: bytes) -> int:
    """The same CRC, one bit at a time (a second, table-free implementation)."""
    fp = CRC64_EMPTY
    for byte in data:
        fp ^= byte
        for _ in range(8):
            fp = (fp >> 1) ^ (CRC64_EMPTY if fp & 1 else 0)
    return fp


PRIMITIVES = {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}


def _fullname(name: str, namespace: str) -> str:
    return name if "." in name or not namespace else f"{namespace}.{name}"


def canonical_form(schema: Any, namespace: str = "") -> str:
    """Avro "Parsing Canonical Form": PRIMITIVES, FULLNAMES, STRIP, ORDER, STRINGS, WHITESPACE."""
    if isinstance(schema, str):
        return json.dumps(schema if schema in PRIMITIVES else _fullname(schema, namespace))
    if isinstance(schema, list):
        return "[" + ",".join(canonical_form(branch, namespace) for branch in schema) + "]"
    kind = schema["type"]
    if isinstance(kind, (dict, list)):
        return canonical_form(kind, namespace)
    if kind in PRIMITIVES:  # logicalType and friends are stripped
        return json.dumps(kind)
    if kind == "array":
        return '{"type":"array","items":' + canonical_form(schema["items"], namespace) + "}"
    if kind == "map":
        return '{"type":"map","values":' + canonical_form(schema["values"], namespace) + "}"
    name = _fullname(schema["name"], schema.get("namespace", namespace))
    inner = name.rpartition(".")[0]
    parts = [f'"name":{json.dumps(name)}', f'"type":{json.dumps(kind)}']
    if kind in ("record", "error"):
        fields = ",".join(
            f'{{"name":{json.dumps(f["name"])},"type":{canonical_form(f["type"], inner)}}}'
            for f in schema["fields"]
        )
        parts.append(f'"fields":[{fields}]')
    elif kind == "enum":
        parts.append('"symbols":' + json.dumps(schema["symbols"], separators=(",", ":")))
    elif kind == "fixed":
        parts.append(f'"size":{int(schema["size"])}')
    return "{" + ",".join(parts) + "}"


def inline_first(node: Any, name: str, definition: Any) -> tuple[Any, bool]:
    """Replace the first reference to ``name`` by its definition (Commit.avsc refers to Segment)."""
    if node == name:
        return definition, True
    if isinstance(node, list):
        out, done = [], False
        for item in node:
            if not done:
                item, done = inline_first(item, name, definition)
            out.append(item)
        return out, done
    if isinstance(node, dict):
        result, done = {}, False
        for key, value in node.items():
            if not done:
                value, done = inline_first(value, name, definition)
            result[key] = value
        return result, done
    return node, False


def current_schema_json() -> Any:
    commit_schema = json.loads((SCHEMAS / "segcat.Commit.avsc").read_text())
    segment_schema = json.loads((SCHEMAS / "segcat.Segment.avsc").read_text())
    inlined, done = inline_first(commit_schema, "segcat.Segment", segment_schema)
    assert done
    return inlined


def expected_header(schema_json: Any) -> bytes:
    fp = crc64_avro(canonical_form(schema_json).encode())
    return b"\xc3\x01" + fp.to_bytes(8, "little")


# ---------------------------------------------------------------------- header layout


def test_crc64_avro_implementations_agree() -> None:
    assert crc64_avro(b"") == CRC64_EMPTY
    for data in (b'"int"', b'"null"', b"segcat", bytes(range(256))):
        assert crc64_avro(data) == crc64_avro_bitwise(data)
    assert crc64_avro(b'"int"') != crc64_avro(b'"long"')


def test_canonical_form_of_the_current_schema_starts_as_the_spec_says() -> None:
    pcf = canonical_form(current_schema_json())
    assert pcf.startswith(
        '{"name":"segcat.Commit","type":"record","fields":[{"name":"commit_id","type":"string"}'
    )
    assert '"name":"segcat.Segment","type":"record"' in pcf
    assert '{"name":"timestamp_ms","type":"long"}' in pcf  # logicalType stripped
    assert " " not in pcf and "doc" not in pcf and "default" not in pcf


def test_single_object_header_is_magic_plus_little_endian_crc64_of_the_canonical_form() -> None:
    value = codec.encode_commit(a_commit())
    header = expected_header(current_schema_json())
    assert value[:2] == b"\xc3\x01"
    assert value[: codec.HEADER_SIZE] == header
    assert codec.current_fingerprint() == header[2:]
    # The body is a plain Avro binary body that any Avro library can read with the schema.
    body = fastavro.schemaless_reader(io.BytesIO(value[10:]), fastavro.parse_schema(current_schema_json()))
    assert isinstance(body, dict) and body["commit_id"] == COMMIT_ID and body["base_version"] == 41


V2_SCHEMA_FILE = SCHEMAS / "history" / "segcat.Commit.v2.avsc"
V2_FINGERPRINT = bytes.fromhex("dcb115706142297a")
"""The fingerprint segcat wrote for layout v2 before layout v3 existed (pinned, not computed)."""


V3_SCHEMA_FILE = SCHEMAS / "history" / "segcat.Commit.v3.avsc"
V3_FINGERPRINT = bytes.fromhex("fca007a143673ffa")
"""The fingerprint segcat wrote for layout v3 before layout v4 (intents) existed (pinned)."""


def test_known_fingerprints_are_the_current_v3_v2_and_v1_layouts() -> None:
    v1 = expected_header(json.loads(V1_SCHEMA_FILE.read_text()))[2:]
    v2 = expected_header(json.loads(V2_SCHEMA_FILE.read_text()))[2:]
    v3 = expected_header(json.loads(V3_SCHEMA_FILE.read_text()))[2:]
    current = expected_header(current_schema_json())[2:]
    assert v2 == V2_FINGERPRINT  # the historical file is exactly the layout older segcat wrote
    assert v3 == V3_FINGERPRINT
    assert codec.known_fingerprints() == {
        current: "segcat.Commit.avsc",
        v3: "segcat.Commit.v3.avsc",
        v2: "segcat.Commit.v2.avsc",
        v1: "segcat.Commit.v1.avsc",
    }


def test_a_layout_v3_record_decodes_with_no_intent() -> None:
    raw = codec.commit_to_avro(a_commit())
    del raw["intent"]
    value = codec.encode_with_schema(raw, V3_SCHEMA_FILE)
    assert value[2:10] == V3_FINGERPRINT
    assert codec.decode_commit(value) == a_commit()


def test_a_layout_v2_record_decodes_with_no_nan_count_and_no_protocol() -> None:
    segment = Segment("s", "data/s.parquet", 1, 5, stats=(ColumnStats("d", ColumnType.FLOAT, 0.5, 2.5, 1),))
    raw = codec.commit_to_avro(a_commit(adds=(segment,)))
    del raw["protocol"]
    for stats in raw["adds"][0]["stats"]:
        del stats["nan_count"]
    value = codec.encode_with_schema(raw, V2_SCHEMA_FILE)
    assert value[2:10] == V2_FINGERPRINT
    decoded = codec.decode_commit(value)
    assert decoded.protocol is None
    assert decoded.adds[0].stats[0] == ColumnStats("d", ColumnType.FLOAT, 0.5, 2.5, 1, nan_count=None)


def test_protocol_and_nan_count_round_trip() -> None:
    stats = (ColumnStats("d", ColumnType.FLOAT, 0.5, 2.5, 1, 2),)
    segment = Segment("s", "data/s.parquet", 1, 5, stats=stats)
    upgrade = a_commit(operation=Operation.UPGRADE_PROTOCOL, protocol=Protocol(2, ("b", "a")))
    assert codec.decode_commit(codec.encode_commit(upgrade)).protocol == Protocol(2, ("b", "a"))
    appended = codec.decode_commit(codec.encode_commit(a_commit(adds=(segment,))))
    assert appended.adds[0].stats[0].nan_count == 2


def test_encoding_is_deterministic() -> None:
    assert codec.encode_commit(a_commit()) == codec.encode_commit(a_commit())


# ---------------------------------------------------------------------- round trips


def stats_round_trip(kind: ColumnType, low: StatValue, high: StatValue) -> ColumnStats:
    segment = Segment("s", "data/s.parquet", 1, 5, stats=(ColumnStats("c", kind, low, high, 0),))
    return codec.decode_commit(codec.encode_commit(a_commit(adds=(segment,)))).adds[0].stats[0]


UTC = dt.UTC
STATS: list[tuple[ColumnType, StatValue, StatValue]] = [
    (ColumnType.INT, 0, 1),
    (ColumnType.INT, -(2**63), 2**63 - 1),
    (ColumnType.INT, -1, -1),
    (ColumnType.INT, -(10**18), 10**18),
    (ColumnType.FLOAT, -1.5, 2.25),
    (ColumnType.FLOAT, -math.inf, math.inf),
    (ColumnType.FLOAT, 5e-324, 1.7976931348623157e308),
    (ColumnType.FLOAT, -0.0, 0.1 + 0.2),
    (ColumnType.STRING, "", "zürich 🚀"),
    (ColumnType.STRING, "a\x00b", "\uffff"),
    (ColumnType.DATE, dt.date(1, 1, 1), dt.date(9999, 12, 31)),
    (ColumnType.DATE, dt.date(1969, 12, 31), dt.date(1970, 1, 1)),
    (
        ColumnType.TIMESTAMP,
        dt.datetime(1, 1, 1, tzinfo=UTC),
        dt.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
    ),
    (
        ColumnType.TIMESTAMP,
        dt.datetime(1969, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        dt.datetime(2024, 2, 29, tzinfo=UTC),
    ),
    (ColumnType.BOOLEAN, False, True),
    (ColumnType.BINARY, b"", b"\x00\xff" * 100),
    (ColumnType.OTHER, "x", "y"),
    (ColumnType.STRING, None, None),
    (ColumnType.INT, None, 7),
]


@pytest.mark.parametrize(
    ("kind", "low", "high"), STATS, ids=[f"{k.value}-{i}" for i, (k, _, _) in enumerate(STATS)]
)
def test_stats_round_trip_losslessly_with_their_python_types(
    kind: ColumnType, low: StatValue, high: StatValue
) -> None:
    decoded = stats_round_trip(kind, low, high)
    assert decoded.type is kind
    for sent, got in ((low, decoded.min), (high, decoded.max)):
        assert got == sent
        assert type(got) is type(sent)  # a bool stays a bool, a date does not become a datetime
        if isinstance(sent, float):
            assert math.copysign(1.0, got) == math.copysign(1.0, sent)  # type: ignore[arg-type]


def test_nan_float_stats_survive() -> None:
    decoded = stats_round_trip(ColumnType.FLOAT, math.nan, math.nan)
    assert isinstance(decoded.min, float) and math.isnan(decoded.min)


def test_integral_float_stats_are_stored_as_floats() -> None:
    decoded = stats_round_trip(ColumnType.FLOAT, 3, 4)
    assert (decoded.min, decoded.max) == (3.0, 4.0)
    assert type(decoded.min) is float


def test_timestamps_are_instants_in_utc() -> None:
    plus_five = dt.timezone(dt.timedelta(hours=5))
    aware = dt.datetime(2024, 1, 1, 5, 0, tzinfo=plus_five)
    naive = dt.datetime(2024, 1, 1, 0, 0, 0, 1)
    decoded = stats_round_trip(ColumnType.TIMESTAMP, aware, naive)
    assert decoded.min == aware and decoded.min.tzinfo == UTC  # type: ignore[union-attr]
    assert decoded.max == naive.replace(tzinfo=UTC)  # a naive timestamp is read as UTC (schema doc)


@pytest.mark.parametrize("value", [2**63 + 1, 2**64 - 1, -(2**63) - 1])
def test_out_of_range_int_stats_are_never_silently_rounded(value: int) -> None:
    try:
        decoded = stats_round_trip(ColumnType.INT, value, value)
    except (DecodeError, ValueError, OverflowError):
        return  # refused: acceptable
    assert decoded.max == value and type(decoded.max) is int


@pytest.mark.parametrize(
    "timestamp_ms", [529_999_526, 2_147_483_705_055, 2_156_774_461_173, 2**62, -62_135_596_800_001]
)
def test_commit_timestamp_ms_round_trips_exactly(timestamp_ms: int) -> None:
    assert (
        codec.decode_commit(codec.encode_commit(a_commit(timestamp_ms=timestamp_ms))).timestamp_ms
        == timestamp_ms
    )


@pytest.mark.parametrize(
    "timestamp_ms", [0, -1, -123, 1_099_511_627_776, 1_700_000_000_123, 2_000_000_000_000]
)
def test_commit_timestamp_ms_round_trips_in_this_era(timestamp_ms: int) -> None:
    assert (
        codec.decode_commit(codec.encode_commit(a_commit(timestamp_ms=timestamp_ms))).timestamp_ms
        == timestamp_ms
    )


def test_every_field_of_a_full_commit_round_trips() -> None:
    full = a_commit(
        operation=Operation.REPLACE,
        adds=(
            Segment(
                segment_id="seg-9",
                path="s3://bucket/ns/t/data/x.parquet",
                size_bytes=2**40,
                row_count=2**33,
                partition=None,
                format="orc",
                stats=(
                    ColumnStats("id", ColumnType.INT, -5, 5, 0),
                    ColumnStats("d", ColumnType.DATE, dt.date(2020, 1, 1), dt.date(2020, 2, 1), None),
                ),
                bloom=BloomFilter("id", 7, b"\x00\x01\xfe\xff"),
                schema='{"fields": []}',
            ),
        ),
        drops=("a", "b"),
        tombstones=(Tombstone("id = 3"), Tombstone("country = 'NZ'")),
        replace_scope=("2024-01", "2024-02"),
        isolation=Isolation.SERIALIZABLE,
        properties={"spark.app.id": "app-1", "": ""},
        table_properties={"owner": "etl", "gone": None},
        schema='{"type": "struct"}',
    )
    assert codec.decode_commit(codec.encode_commit(full)) == full


@settings(SETTINGS, max_examples=200)
@given(commits())
def test_any_commit_round_trips(commit: Commit) -> None:
    value = codec.encode_commit(commit)
    decoded = codec.decode_commit(value)
    assert decoded == commit
    assert codec.encode_commit(decoded) == value


# ---------------------------------------------------------------------- the older layout (v1)


def v1_record(**changes: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "commit_id": COMMIT_ID,
        "table": "ns.t",
        "operation": "COMPACT",
        "base_version": 12,
        "writer_id": "old-writer",
        "timestamp_ms": 1_600_000_000_000,
        "adds": [
            {
                "segment_id": "merged",
                "path": "data/2020-09/merged.parquet",
                "partition": "2020-09",
                "format": "parquet",
                "size_bytes": 4_096,
                "row_count": 100,
                "stats": [
                    {"column": "day", "type": "DATE", "min": 18_506, "max": 18_535, "null_count": 0},
                    {"column": "ok", "type": "BOOLEAN", "min": False, "max": True, "null_count": None},
                ],
            }
        ],
        "drops": ["a", "b"],
        "tombstones": [{"predicate": "id = 1"}],
        "properties": {"job": "nightly"},
    }
    record.update(changes)
    return record


def test_a_v1_record_decodes_with_the_current_code_and_new_fields_get_defaults() -> None:
    value = codec.encode_with_schema(v1_record(), V1_SCHEMA_FILE)
    assert value[:10] == expected_header(json.loads(V1_SCHEMA_FILE.read_text()))
    assert value[2:10] != codec.current_fingerprint()

    commit = codec.decode_commit(value)

    assert (commit.commit_id, commit.operation, commit.base_version) == (COMMIT_ID, Operation.COMPACT, 12)
    assert commit.timestamp_ms == 1_600_000_000_000
    assert commit.drops == ("a", "b")
    assert commit.tombstones == (Tombstone("id = 1"),)
    assert commit.properties == {"job": "nightly"}
    # v2 fields that v1 did not have: their defaults.
    assert commit.replace_scope == ()
    assert commit.isolation is Isolation.SNAPSHOT
    assert commit.table_properties == {}
    assert commit.schema is None
    (segment,) = commit.adds
    assert (segment.bloom, segment.schema) == (None, None)
    assert segment.stats == (
        ColumnStats("day", ColumnType.DATE, dt.date(2020, 9, 1), dt.date(2020, 9, 30), 0),
        ColumnStats("ok", ColumnType.BOOLEAN, False, True, None),
    )


def test_a_v1_record_written_without_segcat_is_judged_like_any_other() -> None:
    """Bytes made with fastavro alone and the header computed here: no codec on the write side."""
    schema = json.loads(V1_SCHEMA_FILE.read_text())
    body = io.BytesIO()
    record = v1_record(operation="APPEND", drops=[], tombstones=[], base_version=-1)
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), record)
    value = expected_header(schema) + body.getvalue()

    state = TableState("ns.t")
    verdict = rules.apply(state, 0, 0, codec.decode_commit(value))
    assert verdict.accepted
    assert state.live_ids() == {"merged"}


# ---------------------------------------------------------------------- garbage


@pytest.mark.parametrize(
    "value",
    [
        b"",
        b"\xc3",
        b"\xc3\x01",
        b"\xc3\x01" + b"\x00" * 7,  # header cut short
        b"\xc3\x02" + b"\x00" * 20,
        b"\x01\xc3" + b"\x00" * 20,
        b'{"commit_id": "x"}',
        b"Obj\x01",  # an Avro object container file, not single-object encoding
    ],
    ids=["empty", "one-byte", "magic-only", "short-header", "wrong-version", "swapped-magic", "json", "ocf"],
)
def test_garbage_is_a_decode_error(value: bytes) -> None:
    with pytest.raises(DecodeError) as caught:
        codec.decode_commit(value)
    assert not isinstance(caught.value, UnknownSchema)


def test_unknown_fingerprint_is_unknown_schema() -> None:
    good = codec.encode_commit(a_commit())
    unknown = bytes.fromhex("0123456789abcdef")
    assert unknown not in codec.known_fingerprints()
    with pytest.raises(UnknownSchema, match="0123456789abcdef") as caught:
        codec.decode_commit(good[:2] + unknown + good[10:])
    assert isinstance(caught.value, DecodeError)  # callers that catch DecodeError see it too


def test_big_endian_fingerprint_is_not_recognised() -> None:
    good = codec.encode_commit(a_commit())
    with pytest.raises(UnknownSchema):
        codec.decode_commit(good[:2] + good[2:10][::-1] + good[10:])


def test_header_only_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="undecodable"):
        codec.decode_commit(codec.encode_commit(a_commit())[:10])


def test_trailing_bytes_are_a_decode_error() -> None:
    good = codec.encode_commit(a_commit())
    for extra in (b"\x00", b"\x02junk", good):
        with pytest.raises(DecodeError, match="trailing bytes"):
            codec.decode_commit(good + extra)


def test_every_truncation_is_a_decode_error() -> None:
    good = codec.encode_commit(a_commit(drops=("x",), tombstones=(Tombstone("y"),), schema="{}"))
    for cut in range(len(good)):
        with pytest.raises(DecodeError):
            codec.decode_commit(good[:cut])


def test_a_body_written_with_another_schema_under_our_fingerprint_is_a_decode_error() -> None:
    """Right header, body of a different layout (e.g. a v1 body labelled as v2)."""
    v1_value = codec.encode_with_schema(v1_record(), V1_SCHEMA_FILE)
    with pytest.raises(DecodeError):
        codec.decode_commit(v1_value[:2] + codec.current_fingerprint() + v1_value[10:])


_GOOD = codec.encode_commit(
    a_commit(
        drops=("x",),
        adds=(
            Segment(
                "s", "p", 1, 1, "p1", stats=(ColumnStats("d", ColumnType.DATE, dt.date(2020, 1, 1), None, 0),)
            ),
        ),
        table_properties={"k": None},
        schema="{}",
    )
)


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    value = bytearray(_GOOD)
    for _ in range(draw(st.integers(1, 4))):
        value[draw(st.integers(10, len(value) - 1))] = draw(st.integers(0, 255))
    return bytes(value)


HEADERS = [b"\xc3\x01" + fp for fp in codec.known_fingerprints()]
FUZZ = st.one_of(
    st.binary(max_size=64),
    st.builds(lambda h, b: h + b, st.sampled_from(HEADERS), st.binary(max_size=200)),
    mutated(),
)


@settings(SETTINGS, max_examples=1_500)
@given(FUZZ)
@example(b"\xc3\x01" + codec.current_fingerprint() + b"\x01")  # negative-length string
@example(b"\xc3\x01" + codec.current_fingerprint() + b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01")
def test_decoding_anything_raises_only_decode_error(value: bytes) -> None:
    try:
        decoded = codec.decode_commit(value)
    except DecodeError:
        return
    assert isinstance(decoded, Commit)
    # Whatever decodes can be judged without an exception (it may well be INVALID).
    rules.judge(TableState("ns.t", version=99), 100, decoded)


def test_decoded_commit_ids_are_what_was_written() -> None:
    """Sanity for the fuzz above: a correct record is not reported as garbage."""
    for n in range(50):
        commit = a_commit(commit_id=str(uuid.UUID(int=n)), base_version=n)
        assert codec.decode_commit(codec.encode_commit(commit)) == commit


# ---------------------------------------------------------------------- exact round trips


def _typed(value: Any) -> Any:
    """``value`` as nested tuples that carry every Python type: equal only if equal and alike."""
    if isinstance(value, tuple | list):
        return (type(value).__name__, tuple(_typed(v) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((_typed(k), _typed(v)) for k, v in value.items())))
    if hasattr(value, "__dataclass_fields__"):
        names = value.__dataclass_fields__
        return (type(value).__name__, tuple((n, _typed(getattr(value, n))) for n in names))
    if isinstance(value, dt.datetime):
        return ("datetime", value.isoformat(), repr(value.tzinfo))
    return (type(value).__name__, repr(value))


@st.composite
def writers_commits(draw: st.DrawFn) -> Commit:
    """Arbitrary commits, some with a protocol or an intent, some with values the codec
    normalises (lists, integral FLOAT stats, naive timestamps, tombstone versions)."""
    commit = draw(commits())
    changes: dict[str, Any] = {}
    if draw(st.booleans()):
        changes["protocol"] = Protocol(
            draw(st.integers(-(2**31), 2**31 - 1)), tuple(draw(st.lists(st.text(max_size=6), max_size=3)))
        )
    if draw(st.booleans()):
        changes["intent"] = Intent(
            draw(st.text(max_size=10)), draw(st.text(max_size=10)), draw(st.integers(0, 2**63 - 1))
        )
    twist = draw(st.sampled_from(["none", "list", "float", "naive", "tombstone", "nan", "bool"]))
    if twist == "list":
        changes["drops"] = list(commit.drops)
    elif twist == "tombstone" and commit.tombstones:
        changes["tombstones"] = (Tombstone(commit.tombstones[0].predicate, 7),)
    elif twist in ("float", "naive", "nan", "bool"):
        kind, value = {
            "float": (ColumnType.FLOAT, 3),
            "naive": (ColumnType.TIMESTAMP, dt.datetime(2024, 1, 1, 12)),
            "nan": (ColumnType.FLOAT, math.nan),
            "bool": (ColumnType.INT, True),
        }[twist]
        seg = Segment("s", "data/s.parquet", 1, 1, stats=(ColumnStats("c", kind, value, None, None),))
        changes["adds"] = (*commit.adds, seg)
    return replace(commit, **changes)


@settings(SETTINGS, max_examples=400)
@given(writers_commits())
def test_a_commit_that_round_trips_exactly_decodes_to_itself_type_for_type(commit: Commit) -> None:
    """What lets a writer judge its own record by the commit it holds (catalog/log/pipeline.py)."""
    try:
        value = codec.encode_commit(commit)
    except Exception:  # a commit that does not encode never reaches the log
        return
    if not codec.round_trips_exactly(commit):
        return
    decoded = codec.decode_commit(value)
    assert _typed(decoded) == _typed(commit)
    assert codec.encode_commit(decoded) == value
    for version in (1, 2, 3):  # the field rules say the same of both
        assert rules.malformation(decoded, 10, commit.table, version) == rules.malformation(
            commit, 10, commit.table, version
        )


def test_what_the_codec_normalises_is_not_called_exact() -> None:
    base = a_commit()
    assert codec.round_trips_exactly(base)
    naive = ColumnStats("ts", ColumnType.TIMESTAMP, dt.datetime(2024, 1, 1), None, None)
    for changed in (
        replace(base, drops=["a"]),  # type: ignore[arg-type]
        replace(base, tombstones=(Tombstone("id = 1", 4),)),
        replace(base, adds=(Segment("s", "p", 1, 1, stats=(ColumnStats("f", ColumnType.FLOAT, 1, 2, 0),)),)),
        replace(base, adds=(Segment("s", "p", 1, 1, stats=(naive,)),)),
        replace(base, properties=types.MappingProxyType({"a": "b"})),
    ):
        assert not codec.round_trips_exactly(changed)
        assert _typed(codec.decode_commit(codec.encode_commit(changed))) != _typed(changed)
    nan = ColumnStats("f", ColumnType.FLOAT, math.nan, 2.0, 0)  # decodes alike, but is never equal
    assert not codec.round_trips_exactly(replace(base, adds=(Segment("s", "p", 1, 1, stats=(nan,)),)))
