"""``Table.changes``: the change feed as Arrow batches on the real stack."""

from __future__ import annotations

import pytest

from segcat import InvalidArgument, Table, VersionNotFound

from .changes_support import write_segments


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
