"""``catalog.read.changes`` without I/O: each operation's kind, and the reads a version implies."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from segcat import Config, DataFileMissing, IncompatibleSchema
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.model import Commit, Operation, Segment, Tombstone
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read.changes import (
    ChangeTracker,
    FileRead,
    VersionKind,
    arrow_schema,
    classify,
    merged_schema,
    read_rows,
    reads_schema,
)

from .changes_support import SPARK_SCHEMA


@pytest.mark.parametrize(
    ("operation", "adds", "drops", "tombstones", "kind"),
    [
        (Operation.APPEND, 1, 0, 0, VersionKind.APPEND),
        (Operation.COMPACT, 1, 2, 0, VersionKind.COMPACT),
        (Operation.COMPACT, 0, 1, 0, VersionKind.COMPACT),  # every row was deleted already
        (Operation.REPLACE, 1, 0, 0, VersionKind.CHANGE),  # an overwrite of an empty table
        (Operation.REPLACE, 0, 1, 0, VersionKind.CHANGE),
        (Operation.REPLACE, 2, 3, 0, VersionKind.CHANGE),
        (Operation.DELETE, 0, 1, 0, VersionKind.DELETE_ONLY),  # a file delete, a drop of partitions
        (Operation.DELETE, 0, 0, 1, VersionKind.DELETE_ONLY),  # a tombstone
        (Operation.DELETE, 1, 1, 0, VersionKind.CHANGE),  # copy-on-write
        (Operation.SET_PROPERTIES, 0, 0, 0, VersionKind.METADATA),
        (Operation.SET_SCHEMA, 0, 0, 0, VersionKind.METADATA),
        (Operation.UPGRADE_PROTOCOL, 0, 0, 0, VersionKind.METADATA),
    ],
)
def test_classify(operation: Operation, adds: int, drops: int, tombstones: int, kind: VersionKind) -> None:
    assert classify(operation, adds, drops, tombstones) is kind


def _segment(sid: str) -> Segment:
    return Segment(sid, f"data/{sid}.parquet", 10, 3, schema=SPARK_SCHEMA)


def _delta(version: int, operation: Operation, **fields: object) -> CommitDelta:
    commit = Commit(Commit.new_id(), "t.x", operation, version - 1, "w", 0, **fields)  # type: ignore[arg-type]
    return CommitDelta(version, 1000 + version, commit)


def test_tracker_reads() -> None:
    tracker = ChangeTracker(TableState("t.x"), root="/r")
    first = tracker.observe(_delta(0, Operation.APPEND, adds=(_segment("a"), _segment("b"))))
    assert first.kind is VersionKind.APPEND and first.deleted == ()
    assert [r.uri for r in first.inserted] == ["/r/data/a.parquet", "/r/data/b.parquet"]
    assert first.schema is not None and '"k"' in first.schema
    t1 = tracker.observe(_delta(1, Operation.DELETE, tombstones=(Tombstone("k = 1"),)))
    assert [(r.uri, r.include, r.exclude) for r in t1.deleted] == [
        ("/r/data/a.parquet", "k = 1", ()),
        ("/r/data/b.parquet", "k = 1", ()),
    ]
    # two tombstones and a drop in one commit: the dropped file goes whole (minus k = 1), the
    # other gets each new tombstone once, never a row twice
    both = tracker.observe(
        _delta(2, Operation.DELETE, drops=("a",), tombstones=(Tombstone("k = 2"), Tombstone("k = 3")))
    )
    assert both.deleted == (
        FileRead("/r/data/a.parquet", 3, 10, 0, SPARK_SCHEMA, ("k = 1",)),
        FileRead("/r/data/b.parquet", 3, 10, 0, SPARK_SCHEMA, ("k = 1",), "k = 2"),
        FileRead("/r/data/b.parquet", 3, 10, 0, SPARK_SCHEMA, ("k = 1", "k = 2"), "k = 3"),
    )
    compact = tracker.observe(_delta(3, Operation.COMPACT, drops=("b",), adds=(_segment("c"),)))
    assert compact.kind is VersionKind.COMPACT and compact.deleted == () and not compact.changes_rows
    assert [r.uri for r in compact.inserted] == ["/r/data/c.parquet"]
    later = tracker.observe(_delta(4, Operation.DELETE, drops=("c",)))
    assert later.deleted == (
        FileRead("/r/data/c.parquet", 3, 10, 3, SPARK_SCHEMA),
    )  # c is newer than every tombstone
    assert later.schema is None  # no live file
    with pytest.raises(ValueError, match="not after"):
        tracker.observe(_delta(4, Operation.DELETE, drops=("c",)))


def test_merged_schema_widens_and_names_conflicts() -> None:
    narrow = '{"type":"struct","fields":[{"name":"k","type":"integer","nullable":true,"metadata":{}}]}'
    text = '{"type":"struct","fields":[{"name":"k","type":"string","nullable":true,"metadata":{}}]}'
    wide = merged_schema([("/a", 0, narrow), ("/b", 1, SPARK_SCHEMA)])
    assert wide is not None and '"long"' in wide and '"p"' in wide
    assert merged_schema([("/a", 0, narrow), ("/c", 2, None)]) is None
    with pytest.raises(IncompatibleSchema, match=r"'k' is int in /a \(version 0\) and string in /b"):
        merged_schema([("/a", 0, narrow), ("/b", 1, text)])


def test_int96_timestamps_read_as_instants(tmp_path: Path, config: Config) -> None:
    """Spark's legacy INT96 timestamps are TIMESTAMP (instants), though pyarrow reads them zoneless."""
    at = dt.datetime(2024, 1, 1, 12, tzinfo=dt.UTC)
    path = tmp_path / "legacy.parquet"
    pq.write_table(
        pa.table({"ts": pa.array([at, None], pa.timestamp("us", tz="UTC"))}),
        path,
        use_deprecated_int96_timestamps=True,
    )
    read = FileRead(str(path), 2, path.stat().st_size, 0, None, ("ts < TIMESTAMP '2024-01-01 12:00:00'",))
    schema = reads_schema([read], config)
    assert schema.field("ts").type == pa.timestamp("us", tz="UTC")
    rows = pa.Table.from_batches(list(read_rows(read, schema, config)))
    assert rows.column("ts").to_pylist() == [at, None]


def test_arrow_schema_is_sparks_mapping() -> None:
    schema = json.dumps(
        {
            "type": "struct",
            "fields": [
                {"name": "i", "type": "integer", "nullable": False, "metadata": {}},
                {"name": "d", "type": "decimal(12,3)", "nullable": True, "metadata": {}},
                {"name": "t", "type": "timestamp", "nullable": True, "metadata": {}},
                {"name": "n", "type": "timestamp_ntz", "nullable": True, "metadata": {}},
                {
                    "name": "s",
                    "type": {"type": "struct", "fields": [{"name": "a", "type": "string", "nullable": True}]},
                    "nullable": True,
                    "metadata": {},
                },
                {
                    "name": "l",
                    "type": {"type": "array", "elementType": "long", "containsNull": True},
                    "nullable": True,
                },
            ],
        }
    )
    arrow = arrow_schema(schema)
    assert [str(f.type) for f in arrow] == [
        "int32",
        "decimal128(12, 3)",
        "timestamp[us, tz=UTC]",
        "timestamp[us]",
        "struct<a: string>",
        "list<element: int64>",
    ]
    assert not arrow.field("i").nullable
    varchar = '{"type":"struct","fields":[{"name":"v","type":"varchar(5)","nullable":true}]}'
    assert arrow_schema(varchar).field("v").type == pa.string()
    with pytest.raises(IncompatibleSchema, match="interval"):
        arrow_schema('{"type":"struct","fields":[{"name":"x","type":"interval","nullable":true}]}')


def test_read_rows_widens_and_refuses_by_name(tmp_path: Path, config: Config) -> None:
    path = tmp_path / "narrow.parquet"
    pq.write_table(
        pa.table({"K": pa.array([1, None], pa.int32()), "x": pa.array([1.5, 2.5], pa.float32())}), path
    )
    read = FileRead(str(path), 2, 0, 7, None)
    table = pa.schema([("k", pa.int64()), ("x", pa.float64()), ("z", pa.string())])
    rows = pa.Table.from_batches(list(read_rows(read, table, config)))
    assert rows.to_pylist() == [{"k": 1, "x": 1.5, "z": None}, {"k": None, "x": 2.5, "z": None}]
    with pytest.raises(IncompatibleSchema, match=r"'x' is float in .*narrow.parquet \(version 7\)"):
        list(read_rows(read, pa.schema([("x", pa.string())]), config))
    with pytest.raises(DataFileMissing, match=r"gone\.parquet"):
        list(read_rows(FileRead(str(tmp_path / "gone.parquet"), 1, 0, 3, None), table, config))


def test_structs_widen_by_field(tmp_path: Path, config: Config) -> None:
    path = tmp_path / "nested.parquet"
    values = pa.array([{"a": 1}, None, {"a": None}], pa.struct([("a", pa.int32())]))
    pq.write_table(pa.table({"s": values}), path)
    read = FileRead(str(path), 3, 0, 0, None)
    wide = pa.schema([("s", pa.struct([("a", pa.int64()), ("b", pa.string())]))])
    rows = pa.Table.from_batches(list(read_rows(read, wide, config)))
    assert rows.column("s").to_pylist() == [{"a": 1, "b": None}, None, {"a": None, "b": None}]
