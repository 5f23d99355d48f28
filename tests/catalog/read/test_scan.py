"""``Table.scan``: a version's rows as Arrow on the real stack — pruning, tombstones, versions,
tags, columns, leases, typed errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

import segcat
from segcat import (
    Config,
    DataFileMissing,
    InvalidArgument,
    InvalidPredicate,
    Scan,
    Table,
    UnsupportedPredicate,
    VersionNotFound,
    col,
)
from segcat.catalog.read import changes as changes_module
from segcat.catalog.storage.redis.leases import LeaseStore

from .changes_support import write_segments


def _keys(scan: Scan) -> list[Any]:
    return sorted(scan.to_arrow().column("k").to_pylist())


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The files read, in order (every read of a data file goes through ``changes._open``)."""
    seen: list[str] = []
    real = changes_module._open

    def counting(read: changes_module.FileRead, config: Config) -> Any:
        seen.append(read.uri)
        return real(read, config)

    monkeypatch.setattr(changes_module, "_open", counting)
    return seen


def test_rows_versions_as_of_and_tombstones(table: Table) -> None:
    v1 = table.append(write_segments(table, [(1, "a", 1.0), (2, "a", 2.0)]))
    v2 = table.append(write_segments(table, [(3, "b", 3.0)]))
    v3 = table.delete(predicates=["k = 2"])
    v4 = table.append(write_segments(table, [(2, "c", 9.0)]))  # after the tombstone: kept
    assert _keys(table.scan()) == [1, 2, 3]
    assert _keys(table.scan(version=v1)) == [1, 2]
    assert _keys(table.scan(version=v2)) == [1, 2, 3]
    assert _keys(table.scan(version=v3)) == [1, 3]
    head = table.scan()
    assert head.version == v4
    assert head.schema.names == ["k", "p", "x"]
    times = {h.version: h.timestamp_ms for h in table.history()}
    assert table.scan(as_of=times[v2]).version in (v2, v3, v4)  # same-ms records are possible
    before = table.scan(as_of=times[v1] - 1)
    assert before.version < v1 and before.to_arrow().num_rows == 0


def test_where_prunes_files_and_filters_rows(table: Table, opened: list[str]) -> None:
    table.append(write_segments(table, [(1, "a", 1.0), (2, "a", 2.0)]))
    table.append(write_segments(table, [(10, "b", 3.0), (11, "b", 4.0)]))
    table.append(write_segments(table, [(20, "c", None)]))
    scan = table.scan(col("k") >= 10)
    assert len(scan.files()) == 2  # the file of 1..2 pruned by its max
    assert _keys(scan) == [10, 11, 20]
    assert len(opened) == 2
    opened.clear()
    assert _keys(table.scan("k = 11 or p = 'c'")) == [11, 20]
    assert len(opened) == 2
    opened.clear()
    assert table.scan(col("k") > 100).to_arrow().num_rows == 0
    assert opened == []
    batches = table.scan().to_batches()
    next(batches)
    assert len(opened) == 1  # streaming: one file open at a time, the next when it is needed


def test_columns_a_file_lacks_read_as_nulls_even_when_pruned_away(table: Table) -> None:
    segcat.write(table, pa.table({"k": [1, 2]}))
    segcat.write(table, pa.table({"k": [3], "z": ["new"]}))
    assert table.scan("z is null").to_arrow().to_pylist() == [{"k": 1, "z": None}, {"k": 2, "z": None}]
    only_old = table.scan("k < 3")
    assert len(only_old.files()) == 1 and only_old.schema.names == ["k", "z"]
    assert table.scan("z = 'new'", columns=["k"]).to_arrow().to_pylist() == [{"k": 3}]


def test_missing_readers_are_typed(table: Table, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    table.append(write_segments(table, [(1, "a", 1.0)]))
    monkeypatch.setitem(sys.modules, "duckdb", None)
    monkeypatch.setitem(sys.modules, "pandas", None)
    scan = table.scan()
    with pytest.raises(segcat.MissingExtra, match="pip install duckdb"):
        scan.to_duckdb(object(), "t")
    with pytest.raises(segcat.MissingExtra, match="pip install pandas"):
        scan.to_pandas()


def test_columns_and_outputs(table: Table) -> None:
    table.append(write_segments(table, [(1, "a", 1.0), (2, "b", 2.0)]))
    scan = table.scan(col("p") == "b", columns=["x"])
    assert scan.schema.names == ["x"]
    assert scan.to_arrow().to_pylist() == [{"x": 2.0}]
    assert pa.table(scan).num_rows == 1  # the Arrow C stream, read anew
    frame = table.scan(columns=["k", "p"]).to_pandas()
    assert sorted(frame["k"].tolist()) == [1, 2]
    batches = list(table.scan().to_batches(batch_rows=1))
    assert [b.num_rows for b in batches] == [1, 1]
    table.append(write_segments(table, [(3, "c", None)]))
    streamed = pa.Table.from_batches(list(table.scan().to_batches()))
    assert table.scan().to_arrow().equals(streamed)  # files read on threads, in the same order

    import duckdb

    con = duckdb.connect()
    scan = table.scan()
    assert scan.to_duckdb(con, 'my "t"') is con
    assert con.execute('select sum(k) from "my ""t"""').fetchone() == (6,)
    assert con.execute('select count(*) from "my ""t""" where p = \'a\'').fetchone() == (1,)  # again
    assert con.from_arrow(scan).aggregate("sum(k)").fetchone() == (6,)
    assert con.execute("select count(*) from scan").fetchone() == (3,)  # a fresh stream each query
    assert con.execute("select count(*) from scan").fetchone() == (3,)
    with pytest.raises(InvalidArgument, match="con"):
        scan.to_duckdb(object(), "t")


def test_tags_name_versions(table: Table) -> None:
    v1 = table.append(write_segments(table, [(1, "a", 1.0)]))
    table.append(write_segments(table, [(2, "a", 2.0)]))
    table.set_properties({"segcat.tag.first": str(v1)})
    assert _keys(table.scan(version="first")) == [1]
    with pytest.raises(VersionNotFound, match="'nope'"):
        table.scan(version="nope")
    with pytest.raises(InvalidArgument, match="neither a version"):
        table.scan(version="12")


def test_bad_arguments_are_typed(table: Table) -> None:
    table.append(write_segments(table, [(1, "a", 1.0)]))
    with pytest.raises(InvalidArgument, match="columns"):
        table.scan(columns=["nope"])
    with pytest.raises(InvalidArgument, match="columns"):
        table.scan(columns="k")  # type: ignore[arg-type]
    with pytest.raises(InvalidPredicate, match="where"):
        table.scan(where=42)  # type: ignore[arg-type]
    with pytest.raises(InvalidPredicate, match="'nope'"):
        table.scan("nope = 1")
    with pytest.raises(InvalidPredicate):
        table.scan("k = = 1")
    with pytest.raises(UnsupportedPredicate):
        table.scan("p < 5")  # a string against a number: Spark's cast, not modelled
    for bad in (-2, 1.5, True):
        with pytest.raises(InvalidArgument):
            table.scan(version=bad)  # type: ignore[arg-type]
    assert table.scan(version=-1).to_arrow().num_rows == 0  # the empty table before any record
    with pytest.raises(InvalidArgument, match="not both"):
        table.scan(version=0, as_of=0)
    with pytest.raises(VersionNotFound):
        table.scan(version=10_000)
    with pytest.raises(InvalidArgument, match="batch_rows"):
        table.scan().to_batches(0)


def test_an_empty_table_scans_to_nothing(table: Table) -> None:
    scan = table.scan("k = 1")
    assert scan.to_arrow().num_rows == 0
    assert scan.files() == ()


def _leased(config: Config, name: str) -> list[int]:
    store = LeaseStore.from_config(config)
    try:
        return [lease.version for lease in store.live(name)]
    finally:
        store.close()


def test_a_lease_is_held_until_the_scan_is_closed(config: Config, table: Table) -> None:
    v = table.append(write_segments(table, [(1, "a", 1.0)]))
    with table.scan() as scan:
        assert scan.lease is not None and scan.lease.held
        assert v in _leased(config, table.name.qualified)
        assert _keys(scan) == [1]
    assert v not in _leased(config, table.name.qualified)
    table.scan().to_arrow()  # collected at once: released
    assert _leased(config, table.name.qualified) == []


def test_public_names() -> None:
    assert segcat.Scan is Scan
    assert callable(segcat.write)


def test_vacuum_keeps_the_files_of_an_open_scan(table: Table) -> None:
    segcat.write(table, pa.table({"k": [1, 2]}))
    with table.scan() as scan:
        segcat.write(table, pa.table({"k": [3]}), mode="overwrite")
        report = table.vacuum(retain_versions=1, grace_ms=0)
        assert report.deleted == 0  # the leased version still needs its files
        assert _keys(scan) == [1, 2]
    report = table.vacuum(retain_versions=1, grace_ms=0)
    assert report.deleted == 1  # released: the overwritten file goes
    assert _keys(table.scan()) == [3]


def test_a_file_gone_from_storage_is_typed(table: Table) -> None:
    table.append(write_segments(table, [(1, "a", 1.0)]))
    table.append(write_segments(table, [(2, "b", 2.0)]))
    scan = table.scan()
    Path(scan.files()[-1].uri.removeprefix("file://")).unlink()
    with pytest.raises(DataFileMissing, match="gone from storage"):
        scan.to_arrow()
