"""``Table.changes``: the change feed as Arrow batches on the real stack."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pyarrow as pa
import pytest

from segcat import (
    Catalog,
    Config,
    DataFileMissing,
    InvalidArgument,
    Table,
    UnsupportedPredicate,
    VersionNotFound,
)
from tests.s3_server import S3Server, s3_server

from .changes_support import write_segments

__all__ = ["s3_server"]


def _rows(table: Table, start: int, end: int | None = None) -> list[tuple[object, ...]]:
    with table.changes(start, end) as feed:
        data = feed.read_all()
    return sorted(
        zip(*(data.column(c).to_pylist() for c in ("k", "_change_type", "_commit_version")), strict=True),
        key=repr,
    )


def test_feed_of_append_delete_compact(table: Table) -> None:
    a = write_segments(table, [(1, "a", 1.0), (2, "a", 2.0), (3, "b", None)])
    v1 = table.append(a)
    v2 = table.delete(predicates=["k = 2"])
    v3 = table.compact([s.segment_id for s in a], write_segments(table, [(1, "a", 1.0), (3, "b", None)]))
    b = write_segments(table, [(4, "c", 4.0)])
    v4 = table.append(b)
    v5 = table.delete(drops=[b[0].segment_id])
    assert _rows(table, v1) == sorted(
        [
            (1, "insert", v1),
            (2, "insert", v1),
            (3, "insert", v1),
            (2, "delete", v2),
            (4, "insert", v4),
            (4, "delete", v5),
        ],
        key=repr,
    )
    assert _rows(table, v3, v3) == []
    with table.changes(v1, v5) as feed:
        kinds = [vf.kind.value for vf in feed.versions]
    assert kinds == ["append", "delete", "compact", "append", "delete"]


def test_bad_ranges(table: Table) -> None:
    v = table.append(write_segments(table, [(1, "a", 1.0)]))
    with pytest.raises(InvalidArgument, match="start"):
        table.changes(-1)
    with pytest.raises(InvalidArgument, match="start"):
        table.changes(True)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="after"):
        table.changes(v + 1, v)
    with pytest.raises(VersionNotFound, match="end"):
        table.changes(0, v + 5)
    with pytest.raises(InvalidArgument, match="columns"):
        table.changes(0, columns=["nope"])


def test_a_tombstone_only_spark_applies_fails_before_any_row(table: Table) -> None:
    v = table.append(write_segments(table, [(1, "a", 1.0)]))
    table.delete(predicates=["p < 5"])  # a string column against a number: Spark's cast, not modelled
    with pytest.raises(UnsupportedPredicate, match="'p'"):
        table.changes(v)
    with table.changes(v, v) as feed:  # the version before it reads
        assert feed.read_all().num_rows == 1


def test_a_vacuumed_file_is_named(table: Table) -> None:
    segments = write_segments(table, [(1, "a", 1.0)])
    v = table.append(segments)
    path = Path(table.location()) / segments[0].path
    path.unlink()
    with table.changes(v) as feed, pytest.raises(DataFileMissing, match=re.escape(segments[0].path)):
        feed.read_all()


def test_columns_and_lease(table: Table) -> None:
    v = table.append(write_segments(table, [(1, "a", 1.0), (2, "b", None)]))
    with table.changes(v, columns=["x"]) as feed:
        assert feed.schema.names == ["x", "_change_type", "_commit_version", "_commit_timestamp"]
        assert feed.lease is not None and feed.lease.held
        data = feed.read_all()
    assert sorted(data.column("x").to_pylist(), key=repr) == [1.0, None]
    assert data.column("_commit_timestamp").type == pa.timestamp("us", tz="UTC")
    assert feed.lease is not None and not feed.lease.held


def test_feed_on_s3(config: Config, s3_server: S3Server) -> None:
    """Files on ``s3://`` are read through the object store's filesystem, tombstones applied."""
    with (
        Catalog(s3_server.config(config)) as catalog,
        catalog.create_table(f"test.changes_s3_{uuid.uuid4().hex[:8]}") as table,
    ):
        assert table.location().startswith("s3://")
        v = table.append(write_segments(table, [(1, "a", 1.0), (2, "a", None)]))
        table.delete(predicates=["x IS NULL"])
        assert _rows(table, v) == sorted([(1, "insert", v), (2, "insert", v), (2, "delete", v + 1)], key=repr)
