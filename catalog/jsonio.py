"""Commits and segments as JSON, for the CLI (``segcat commit FILE``, ``segcat log --json``)."""

from __future__ import annotations

import base64
import datetime as dt
from collections.abc import Mapping
from typing import Any

from catalog import codec
from catalog.errors import MalformedCommit
from catalog.model import (
    BloomFilter,
    ColumnStats,
    ColumnType,
    Commit,
    Isolation,
    Operation,
    Segment,
    StatValue,
    Tombstone,
)


def _stat_in(kind: ColumnType, value: Any) -> StatValue:
    if value is None:
        return None
    if kind is ColumnType.DATE:
        return dt.date.fromisoformat(value)
    if kind is ColumnType.TIMESTAMP:
        parsed = dt.datetime.fromisoformat(value)
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
    if kind is ColumnType.BINARY:
        return base64.b64decode(value)
    if kind is ColumnType.FLOAT:
        return float(value)
    if kind is ColumnType.INT and (isinstance(value, bool) or not isinstance(value, int)):
        raise MalformedCommit(f"INT stat must be an integer, got {value!r}")
    return value  # type: ignore[no-any-return]


def _stat_out(value: StatValue) -> Any:
    if isinstance(value, dt.date | dt.datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    return value


def segment_from_json(raw: Mapping[str, Any]) -> Segment:
    try:
        bloom = raw.get("bloom")
        return Segment(
            segment_id=str(raw["segment_id"]),
            path=str(raw["path"]),
            size_bytes=int(raw["size_bytes"]),
            row_count=int(raw["row_count"]),
            partition=None if raw.get("partition") is None else str(raw["partition"]),
            format=str(raw.get("format", "parquet")),
            stats=tuple(
                ColumnStats(
                    column=str(s["column"]),
                    type=ColumnType(s["type"]),
                    min=_stat_in(ColumnType(s["type"]), s.get("min")),
                    max=_stat_in(ColumnType(s["type"]), s.get("max")),
                    null_count=s.get("null_count"),
                )
                for s in raw.get("stats", ())
            ),
            bloom=None
            if not bloom
            else BloomFilter(str(bloom["column"]), int(bloom["num_hashes"]), base64.b64decode(bloom["bits"])),
            schema=raw.get("schema"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedCommit(f"bad segment {dict(raw).get('segment_id', '?')!r}: {exc!r}") from exc


def segment_to_json(segment: Segment) -> dict[str, Any]:
    """The Avro layout of ``codec``, with stats as ISO dates/times and bytes as base64."""
    raw = codec.segment_to_avro(segment)
    raw["stats"] = [
        {**entry, "min": _stat_out(stat.min), "max": _stat_out(stat.max)}
        for entry, stat in zip(raw["stats"], segment.stats, strict=True)
    ]
    if segment.bloom is not None:
        raw["bloom"] = {**raw["bloom"], "bits": base64.b64encode(segment.bloom.bits).decode()}
    return raw


def commit_from_json(
    raw: Mapping[str, Any], *, table: str, writer_id: str, base_version: int, now_ms: int
) -> Commit:
    """Build a commit from a JSON document; fields the file omits get the writer's defaults."""
    if not isinstance(raw, Mapping):
        raise MalformedCommit("a commit file holds one JSON object")
    unknown = set(raw) - _FIELDS
    if unknown:
        raise MalformedCommit(f"unknown commit fields: {sorted(unknown)}")
    try:
        return Commit(
            commit_id=str(raw.get("commit_id") or Commit.new_id()),
            table=str(raw.get("table", table)),
            operation=Operation(raw["operation"]),
            base_version=int(raw.get("base_version", base_version)),
            writer_id=str(raw.get("writer_id", writer_id)),
            timestamp_ms=now_ms,
            adds=tuple(segment_from_json(s) for s in raw.get("adds", ())),
            drops=tuple(str(d) for d in raw.get("drops", ())),
            tombstones=tuple(Tombstone(str(p)) for p in raw.get("tombstones", ())),
            replace_scope=tuple(str(p) for p in raw.get("replace_scope", ())),
            isolation=Isolation(raw.get("isolation", "SNAPSHOT")),
            properties={str(k): str(v) for k, v in dict(raw.get("properties", {})).items()},
            table_properties={
                str(k): None if v is None else str(v)
                for k, v in dict(raw.get("table_properties", {})).items()
            },
            schema=raw.get("schema"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise MalformedCommit(f"bad commit document: {exc!r}") from exc


def commit_to_json(commit: Commit) -> dict[str, Any]:
    raw = codec.commit_to_avro(commit)
    raw["adds"] = [segment_to_json(s) for s in commit.adds]
    raw["tombstones"] = [t.predicate for t in commit.tombstones]
    return raw


_FIELDS = set(commit_to_json(Commit("", "", Operation.APPEND, -1, "", 0)))
