"""Commits and segments as JSON: ``segcat commit NAME FILE`` reads them, ``segcat log --json`` writes them.

Reading validates, it never coerces: ``"12"`` is not a size, ``null`` is not a path and
``1.9`` is not a row count. A document is checked in three steps, each failing with a
``MalformedCommit`` that names the field (``adds[3].stats[0].min: expected integer``):

1. strict JSON text (``parse_json``): UTF-8, no ``NaN``/``Infinity`` literals, no number
   beyond a double, no duplicate keys, at most ``MAX_DEPTH`` levels of nesting;
2. the JSON Schema ``COMMIT_SCHEMA`` (draft 2020-12, published as docs/commit.schema.json
   for writers in other languages; a test keeps the two identical);
3. what a schema cannot say: real calendar dates, exact doubles, canonical base64.

The protocol's rules (``segcat.catalog.protocol.rules``) still judge the commit afterwards: the schema
describes the format, the rules decide what a table accepts (per protocol version).

Writing produces strict JSON only: non-finite FLOAT stats are written as the strings
``"NaN"``, ``"Infinity"`` and ``"-Infinity"``, the spelling the reader takes back.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import math
import re
from collections.abc import Mapping
from functools import cache
from typing import Any, NoReturn

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import ValidationError, best_match

from segcat.catalog.errors import MalformedCommit
from segcat.catalog.protocol import codec
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

INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
MAX_DEPTH = 32
"""A commit document nests 6 levels; anything deeper than this is refused before validation."""
MAX_FEATURES = 64

_DATE_RE = re.compile("[0-9]{4}-[0-9]{2}-[0-9]{2}")
_TIMESTAMP_RE = re.compile(
    "[0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}:[0-9]{2}([.][0-9]{1,6})?(Z|[+-][0-9]{2}:[0-9]{2})?"
)
_UUID = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
_DATE = f"^{_DATE_RE.pattern}$"
_TIMESTAMP = f"^{_TIMESTAMP_RE.pattern}$"
_BASE64 = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$"
_NON_FINITE = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
_WRITABLE_OPERATIONS = [op.value for op in Operation if op is not Operation.UNKNOWN]


# ---------------------------------------------------------------------------- the schema


def _count(what: str) -> dict[str, Any]:
    return {"type": "integer", "minimum": 0, "maximum": INT64_MAX, "description": f"{what}, 0 to 2^63-1"}


def _nullable_count(what: str) -> dict[str, Any]:
    return {**_count(what), "type": ["integer", "null"]}


_STAT_VALUES: dict[str, dict[str, Any]] = {
    "INT": {
        "type": ["integer", "null"],
        "minimum": INT64_MIN,
        "maximum": INT64_MAX,
        "description": "an integer that fits a signed 64-bit long",
    },
    "FLOAT": {
        "type": ["number", "string", "null"],
        "pattern": "^(NaN|Infinity|-Infinity)$",
        "description": 'a number, or "NaN", "Infinity", "-Infinity" (protocol 2 refuses NaN bounds)',
    },
    "STRING": {"type": ["string", "null"]},
    "DATE": {"type": ["string", "null"], "pattern": _DATE, "description": "a date, YYYY-MM-DD"},
    "TIMESTAMP": {
        "type": ["string", "null"],
        "pattern": _TIMESTAMP,
        "description": "an ISO-8601 time YYYY-MM-DDTHH:MM:SS[.ffffff] with Z or ±HH:MM (none = UTC)",
    },
    "BOOLEAN": {"type": ["boolean", "null"]},
    "BINARY": {
        "type": ["string", "null"],
        "pattern": _BASE64,
        "contentEncoding": "base64",
        "description": "standard base64 with padding (RFC 4648 §4)",
    },
    "OTHER": {"type": "null", "description": "OTHER columns carry no min or max"},
}


def _typed_stats() -> list[dict[str, Any]]:
    """min/max typed by the entry's ``type``; nan_count only on FLOAT."""
    rules: list[dict[str, Any]] = [
        {
            "if": {"properties": {"type": {"const": kind}}, "required": ["type"]},
            "then": {"properties": {"min": schema, "max": schema}},
        }
        for kind, schema in _STAT_VALUES.items()
    ]
    rules.append(
        {
            "if": {
                "properties": {"type": {"enum": [k.value for k in ColumnType if k is not ColumnType.FLOAT]}},
                "required": ["type"],
            },
            "then": {"properties": {"nan_count": {"type": "null", "description": "for FLOAT columns only"}}},
        }
    )
    return rules


COMMIT_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "segcat commit file",
    "description": (
        "One commit, as `segcat commit NAME FILE` reads it and `segcat log --json` writes it "
        "(docs/PROTOCOL.md §2). Integers are JSON numbers written without fraction or exponent. "
        "Fields left out get the writer's defaults: commit_id a new UUID, table the command's, "
        "base_version the head the writer read, writer_id the writer's, timestamp_ms now."
    ),
    "type": "object",
    "additionalProperties": False,
    "required": ["operation"],
    "properties": {
        "commit_id": {
            "type": "string",
            "pattern": _UUID,
            "description": "a UUID in canonical lowercase 8-4-4-4-12 form",
        },
        "table": {"type": "string", "description": "must be the table the commit is published to"},
        "operation": {"enum": _WRITABLE_OPERATIONS},
        "base_version": {
            "type": "integer",
            "minimum": -1,
            "maximum": INT64_MAX,
            "description": "the version the writer read, -1 = nothing",
        },
        "writer_id": {"type": "string", "minLength": 1},
        "timestamp_ms": {
            "type": "integer",
            "minimum": 0,
            "maximum": INT64_MAX,
            "description": "the writer's clock, ms since the epoch; informational, kept as given",
        },
        "adds": {"type": "array", "items": {"$ref": "#/$defs/segment"}},
        "drops": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "tombstones": {
            "type": "array",
            "items": {"type": "string", "minLength": 1, "description": "a predicate (Spark SQL)"},
        },
        "replace_scope": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "isolation": {"enum": ["SNAPSHOT", "SERIALIZABLE"]},
        "properties": {"type": "object", "additionalProperties": {"type": "string"}},
        "table_properties": {
            "type": "object",
            "propertyNames": {"minLength": 1},
            "additionalProperties": {"type": ["string", "null"], "description": "null removes the key"},
        },
        "schema": {"type": ["string", "null"], "description": "the new table schema: JSON text in a string"},
        "protocol": {"type": ["object", "null"]},
        "intent": {
            "oneOf": [{"type": "null"}, {"$ref": "#/$defs/intent"}],
            "description": "INTENT: the intent opened, renewed or closed; a data commit: the one it closes",
        },
    },
    "if": {"properties": {"operation": {"const": "UPGRADE_PROTOCOL"}}, "required": ["operation"]},
    "then": {
        "required": ["protocol"],
        "properties": {"protocol": {"$ref": "#/$defs/protocol"}},
        "description": "UPGRADE_PROTOCOL carries the protocol the table moves to",
    },
    "else": {
        "properties": {
            "protocol": {"type": "null", "description": "only UPGRADE_PROTOCOL carries a protocol"}
        }
    },
    "$defs": {
        "segment": {
            "type": "object",
            "additionalProperties": False,
            "required": ["segment_id", "path", "size_bytes", "row_count"],
            "properties": {
                "segment_id": {"type": "string", "minLength": 1},
                "path": {
                    "type": "string",
                    "minLength": 1,
                    "description": "relative to the table root, or an absolute URI",
                },
                "partition": {"type": ["string", "null"], "minLength": 1},
                "format": {"type": "string"},
                "size_bytes": _count("bytes"),
                "row_count": _count("rows"),
                "stats": {"type": "array", "items": {"$ref": "#/$defs/stats"}},
                "bloom": {
                    "type": ["object", "null"],
                    "additionalProperties": False,
                    "required": ["column", "num_hashes", "bits"],
                    "properties": {
                        "column": {"type": "string"},
                        "num_hashes": {"type": "integer", "minimum": 1, "maximum": INT32_MAX},
                        "bits": {
                            "type": "string",
                            "minLength": 1,
                            "pattern": _BASE64,
                            "contentEncoding": "base64",
                            "description": "standard base64 with padding (RFC 4648 §4)",
                        },
                    },
                },
                "schema": {"type": ["string", "null"]},
            },
        },
        "stats": {
            "type": "object",
            "additionalProperties": False,
            "required": ["column", "type"],
            "properties": {
                "column": {"type": "string"},
                "type": {"enum": [k.value for k in ColumnType]},
                "min": True,
                "max": True,
                "null_count": _nullable_count("null values"),
                "nan_count": _nullable_count("NaN values"),
            },
            "allOf": _typed_stats(),
        },
        "protocol": {
            "type": "object",
            "additionalProperties": False,
            "required": ["version"],
            "properties": {
                "version": {"type": "integer", "minimum": 1, "maximum": INT32_MAX},
                "features": {
                    "type": "array",
                    "maxItems": MAX_FEATURES,
                    "uniqueItems": True,
                    "items": {"type": "string", "minLength": 1},
                },
            },
            "description": "UPGRADE_PROTOCOL: the protocol the table moves to",
        },
        "intent": {
            "type": "object",
            "additionalProperties": False,
            "required": ["intent_id", "prefix", "ttl_ms"],
            "properties": {
                "intent_id": {"type": "string", "minLength": 1},
                "prefix": {"type": "string", "minLength": 1},
                "ttl_ms": {"type": "integer", "minimum": 0, "maximum": INT64_MAX},
            },
            "description": "a write intent (feature lifecycle): ttl_ms 0 closes it",
        },
    },
}


def _is_integer(_: object, instance: object) -> bool:
    """JSON Schema's "integer" admits 1.0; here an integer is written without a fraction."""
    return isinstance(instance, int) and not isinstance(instance, bool)


_StrictValidator = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator, type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer)
)


@cache
def _validator(definition: str | None) -> Any:
    """The whole commit schema, or one of its definitions (``"segment"``) with refs resolved."""
    if definition is None:
        return _StrictValidator(COMMIT_SCHEMA)
    ref = f"#/$defs/{definition}"
    return _StrictValidator(
        {"$schema": COMMIT_SCHEMA["$schema"], "$defs": COMMIT_SCHEMA["$defs"], "$ref": ref}
    )


# ---------------------------------------------------------------------------- strict JSON text


def parse_json(data: bytes | str, *, source: str = "the document") -> Any:
    """Decode strict JSON: UTF-8, finite numbers, unique keys, at most ``MAX_DEPTH`` levels deep."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError as exc:
            raise MalformedCommit(
                f"{source} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                "a commit file is a JSON document"
            ) from exc
    else:
        text = data
    try:
        document = json.loads(
            text, parse_constant=_refuse_constant, parse_float=_finite_float, object_pairs_hook=_unique_keys
        )
    except json.JSONDecodeError as exc:
        raise MalformedCommit(f"{source} is not valid JSON: {exc}") from exc
    except RecursionError as exc:
        raise MalformedCommit(f"{source} nests deeper than {MAX_DEPTH} levels") from exc
    except ValueError as exc:  # our hooks, and integers longer than Python's digit limit
        raise MalformedCommit(f"{source} is not valid JSON: {str(exc)[:200]}") from exc
    check_json_value(document)
    return document


def _refuse_constant(name: str) -> Any:
    raise ValueError(f'{name} is not JSON (write it as the string "{name}" in a FLOAT stat)')


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} does not fit a double")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key[:60]!r} in an object")
        out[key] = value
    return out


def check_json_value(document: Any, root: str = "") -> None:
    """Refuse what is not a JSON value (non-string keys, NaN, lone surrogates, tuples) or too deep.

    Iterative, so a deeply nested value fails here with a message rather than somewhere
    recursive with a ``RecursionError``.
    """
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(document, ())]
    while stack:
        value, path = stack.pop()
        if len(path) > MAX_DEPTH:
            raise MalformedCommit(f"{_path(path[:4], root)}…: nested deeper than {MAX_DEPTH} levels")
        if value is None or isinstance(value, bool | int):
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                raise MalformedCommit(
                    f"{_path(path, root)}: {value} is not a JSON number "
                    '(a FLOAT stat takes "NaN", "Infinity" or "-Infinity" as a string)'
                )
        elif isinstance(value, str):
            _check_unicode(value, path, root)
        elif isinstance(value, list):
            stack.extend((item, (*path, i)) for i, item in enumerate(value))
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise MalformedCommit(
                        f"{_path(path, root)}: object keys are strings, not {type(key).__name__} {key!r:.40}"
                    )
                _check_unicode(key, path, root)
                stack.append((item, (*path, key)))
        else:
            raise MalformedCommit(f"{_path(path, root)}: a {type(value).__name__} is not a JSON value")


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_unicode(text: str, path: tuple[str | int, ...], root: str) -> None:
    if _SURROGATE.search(text):
        raise MalformedCommit(
            f"{_path(path, root)}: text holds a lone UTF-16 surrogate, which is not Unicode text"
        )


# ---------------------------------------------------------------------------- errors


_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _path(parts: tuple[str | int, ...] | list[str | int], root: str = "") -> str:
    """``adds[3].stats[0].min``; ``root`` (or "the document") for the top."""
    out = root
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENT.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part[:60])}]"
    return out or "the document"


def _kind(value: Any) -> str:
    """A short, safe description of a JSON value (never the repr of a whole container)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):  # str() of a huge int is slow, and refused past 4,300 digits
        return f"integer {value}" if value.bit_length() <= 128 else f"an integer of {value.bit_length()} bits"
    if isinstance(value, float):
        return f"number {value!r}"
    if isinstance(value, str):
        shown = value if len(value) <= 40 else value[:40] + "…"
        return f"string {json.dumps(shown)}"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "an object"
    return f"a {type(value).__name__}"


def _explain(error: ValidationError, root: str) -> str:
    """One line: where, what was expected, what was found (and the schema's hint, if any)."""
    where = _path(list(error.absolute_path), root)
    schema: Any = error.schema
    expected: Any = error.validator_value
    value: Any = error.instance
    validator = str(error.validator)
    hint = f" ({schema['description']})" if isinstance(schema, dict) and "description" in schema else ""
    if validator == "type":
        names = " or ".join(expected if isinstance(expected, list) else [expected])
        return f"{where}: expected {names}, got {_kind(value)}{hint}"
    if validator == "required":
        missing = ", ".join(repr(name) for name in expected if name not in value)
        return f"{where}: missing required field {missing}{hint}"
    if validator == "additionalProperties":
        known = sorted(schema.get("properties", {}))
        extra = ", ".join(repr(str(k)[:40]) for k in sorted(value, key=str) if k not in known)
        return f"{where}: unknown field {extra} (known: {', '.join(known)})"
    if validator in ("enum", "const"):
        options = expected if validator == "enum" else [expected]
        return f"{where}: expected one of {', '.join(map(str, options))}, got {_kind(value)}"
    if validator in ("minimum", "maximum"):
        bound = "at least" if validator == "minimum" else "at most"
        return f"{where}: must be {bound} {expected}, got {_kind(value)}{hint}"
    if validator == "minLength":
        what = "a key" if "propertyNames" in error.schema_path else "the text"
        return f"{where}: {what} must not be empty"
    if validator == "pattern":
        wanted = schema.get("description") or f"text matching {expected}"
        return f"{where}: expected {wanted}, got {_kind(value)}"
    if validator == "uniqueItems":
        return f"{where}: items repeat"
    if validator == "maxItems":
        return f"{where}: more than {expected} items"
    return f"{where}: fails the schema's {validator!r} check"


def _validate(document: Any, definition: str | None, root: str) -> None:
    check_json_value(document, root)
    errors = list(_validator(definition).iter_errors(document))
    if not errors:
        return
    first = best_match(errors)
    assert first is not None
    message = _explain(first, root)
    others = len({_explain(e, root) for e in errors} - {message})
    raise MalformedCommit(message + (f" (and {others} more problem{'s' * (others > 1)})" if others else ""))


# ---------------------------------------------------------------------------- values


def _stat_in(kind: ColumnType, value: Any, where: str) -> StatValue:
    """The typed stat for a schema-valid JSON value; checks what a pattern cannot."""
    if value is None:
        return None
    if kind is ColumnType.DATE:
        try:
            return dt.date.fromisoformat(value) if _DATE_RE.fullmatch(value) else _bad(where, value)
        except ValueError:
            return _bad(where, value, "is not a calendar date")
    if kind is ColumnType.TIMESTAMP:
        return _timestamp_in(value, where)
    if kind is ColumnType.BINARY:
        return _base64_in(value, where)
    if kind is ColumnType.FLOAT:
        return _float_in(value, where)
    return value  # type: ignore[no-any-return]  # INT, STRING, BOOLEAN: the schema checked the type


def _bad(where: str, value: Any, why: str = "does not match the expected form") -> NoReturn:
    raise MalformedCommit(f"{where}: {_kind(value)} {why}")


def _timestamp_in(value: str, where: str) -> dt.datetime:
    if not _TIMESTAMP_RE.fullmatch(value):
        _bad(where, value, "is not an ISO-8601 time with at most microseconds")
    try:
        parsed = dt.datetime.fromisoformat(value)
        aware = parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
        codec.stat_to_avro(ColumnType.TIMESTAMP, aware)  # years 1..9999 in any zone must fit
        aware.astimezone(dt.UTC)
    except (ValueError, OverflowError):
        _bad(where, value, "is not a valid time (or out of range once in UTC)")
    return aware


def _base64_in(value: str, where: str) -> bytes:
    try:
        decoded = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        _bad(where, value, "is not base64")
    if base64.b64encode(decoded).decode() != value:
        _bad(where, value, "is not canonical base64 (stray bits in the padding)")
    return decoded


def _float_in(value: float | int | str, where: str) -> float:
    if isinstance(value, str):
        return _NON_FINITE[value]  # the schema allowed exactly these three
    try:
        number = float(value)
    except OverflowError:
        _bad(where, value, "does not fit a double")
    if isinstance(value, int) and int(number) != value:
        _bad(where, value, "is not exactly representable as a double")
    return number


def _stat_out(value: StatValue) -> Any:
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value


# ---------------------------------------------------------------------------- segments


def segment_from_json(raw: Any, *, where: str = "segment") -> Segment:
    """A segment from its JSON form (``segment_to_json``), validated; ``where`` prefixes errors."""
    _validate(raw, "segment", where)
    return _segment_in(raw, where)


def _segment_in(raw: Mapping[str, Any], where: str) -> Segment:
    bloom = raw.get("bloom")
    bits = None if bloom is None else _base64_in(bloom["bits"], f"{where}.bloom.bits")
    return Segment(
        segment_id=raw["segment_id"],
        path=raw["path"],
        size_bytes=raw["size_bytes"],
        row_count=raw["row_count"],
        partition=raw.get("partition"),
        format=raw.get("format", "parquet"),
        stats=tuple(_stats_in(s, f"{where}.stats[{i}]") for i, s in enumerate(raw.get("stats", ()))),
        bloom=None
        if bloom is None or bits is None
        else BloomFilter(bloom["column"], bloom["num_hashes"], bits),
        schema=raw.get("schema"),
    )


def _stats_in(raw: Mapping[str, Any], where: str) -> ColumnStats:
    kind = ColumnType(raw["type"])
    return ColumnStats(
        column=raw["column"],
        type=kind,
        min=_stat_in(kind, raw.get("min"), f"{where}.min"),
        max=_stat_in(kind, raw.get("max"), f"{where}.max"),
        null_count=raw.get("null_count"),
        nan_count=raw.get("nan_count"),
    )


def segment_to_json(segment: Segment) -> dict[str, Any]:
    """The Avro layout of ``codec``, with stats as ISO dates/times, bytes as base64, strict JSON."""
    raw = codec.segment_to_avro(segment)
    raw["stats"] = [
        {**entry, "min": _stat_out(stat.min), "max": _stat_out(stat.max)}
        for entry, stat in zip(raw["stats"], segment.stats, strict=True)
    ]
    if segment.bloom is not None:
        raw["bloom"] = {**raw["bloom"], "bits": base64.b64encode(segment.bloom.bits).decode()}
    return raw


# ---------------------------------------------------------------------------- commits


def commit_from_json(raw: Any, *, table: str, writer_id: str, base_version: int, now_ms: int) -> Commit:
    """Build a commit from a decoded JSON document; fields the file omits get the writer's defaults.

    Raises ``MalformedCommit`` naming the field for anything the schema or the value checks
    refuse; never another exception, whatever ``raw`` is.
    """
    if not isinstance(raw, dict):
        raise MalformedCommit(f"a commit file holds one JSON object, not {_kind(raw)}")
    _validate(raw, None, "")
    given_table = raw.get("table", table)
    if given_table != table:
        raise MalformedCommit(
            f"table: the document is for table {given_table[:200]!r}, but it is being committed to {table!r}"
        )
    schema = raw.get("schema")
    if schema is not None:
        _check_json_text(schema, "schema")
    proto = raw.get("protocol")
    intent = raw.get("intent")
    return Commit(
        commit_id=raw.get("commit_id") or Commit.new_id(),
        table=table,
        operation=Operation(raw["operation"]),
        base_version=raw.get("base_version", base_version),
        writer_id=raw.get("writer_id", writer_id),
        timestamp_ms=raw.get("timestamp_ms", now_ms),
        adds=tuple(_segment_in(s, f"adds[{i}]") for i, s in enumerate(raw.get("adds", ()))),
        drops=tuple(raw.get("drops", ())),
        tombstones=tuple(Tombstone(p) for p in raw.get("tombstones", ())),
        replace_scope=tuple(raw.get("replace_scope", ())),
        isolation=Isolation(raw.get("isolation", "SNAPSHOT")),
        properties=dict(raw.get("properties", {})),
        table_properties=dict(raw.get("table_properties", {})),
        schema=schema,
        protocol=None if proto is None else Protocol(proto["version"], tuple(proto.get("features", ()))),
        intent=None if intent is None else Intent(intent["intent_id"], intent["prefix"], intent["ttl_ms"]),
    )


def _check_json_text(text: str, where: str) -> None:
    """The table schema is JSON text; refuse text the rules' ``json.loads`` would refuse or choke on."""
    try:
        parse_json(text, source=where)
    except MalformedCommit as exc:
        raise MalformedCommit(f"{exc}; the table schema is JSON text in a string") from exc


def commit_to_json(commit: Commit) -> dict[str, Any]:
    """The commit as strict JSON (``json.dumps(..., allow_nan=False)`` never fails on it)."""
    raw = codec.commit_to_avro(commit)
    raw["adds"] = [segment_to_json(s) for s in commit.adds]
    raw["tombstones"] = [t.predicate for t in commit.tombstones]
    return raw


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps`` that refuses NaN/Infinity (strict JSON for other tools' parsers)."""
    return json.dumps(value, allow_nan=False, **kwargs)


def schema_text() -> str:
    """docs/commit.schema.json as it must read (``python -m catalog.jsonio > docs/commit.schema.json``)."""
    return json.dumps(COMMIT_SCHEMA, indent=2, ensure_ascii=False) + "\n"


if __name__ == "__main__":
    print(schema_text(), end="")
