"""``segcat commit FILE`` / ``segcat log --json``: commits survive a JSON round trip exactly."""

from __future__ import annotations

import datetime as dt
import json

import pytest

from catalog.errors import MalformedCommit
from catalog.jsonio import commit_from_json, commit_to_json
from catalog.model import (
    BloomFilter,
    ColumnStats,
    ColumnType,
    Commit,
    Isolation,
    Operation,
    Segment,
    Tombstone,
)


def test_every_field_and_stat_type_round_trips() -> None:
    stats = (
        ColumnStats("i", ColumnType.INT, -(2**63), 2**63 - 1, 0),
        ColumnStats("f", ColumnType.FLOAT, -1.5, 2.25, 1),
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
    text = json.dumps(commit_to_json(commit))
    back = commit_from_json(json.loads(text), table="ns.t", writer_id="other", base_version=-1, now_ms=123)
    assert back == commit


@pytest.mark.parametrize(
    "doc",
    [
        [],
        {"operation": "NOPE"},
        {"operation": "APPEND", "extra": 1},
        {"operation": "APPEND", "adds": [{"segment_id": "a"}]},
        {
            "operation": "APPEND",
            "adds": [
                {
                    "segment_id": "a",
                    "path": "p",
                    "size_bytes": 1,
                    "row_count": 1,
                    "stats": [{"column": "c", "type": "INT", "min": "x"}],
                }
            ],
        },
    ],
)
def test_bad_documents_are_malformed(doc: object) -> None:
    with pytest.raises(MalformedCommit):
        commit_from_json(doc, table="ns.t", writer_id="w", base_version=-1, now_ms=0)  # type: ignore[arg-type]
