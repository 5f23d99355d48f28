"""Orphan listing and deletion on Spark's executors, checked against an os.walk oracle (local[2])."""

from __future__ import annotations

import importlib
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import segcat.spark_integration as si
from segcat import Table
from segcat.catalog.config import Config
from segcat.catalog.storage.objectstore import TEMP_MARKER
from tests.handles import reader_of
from tests.spark_support import spark

pytestmark = [pytest.mark.spark]

__all__ = ["spark"]

DAY_MS = 86_400_000


@dataclass
class Layout:
    root: Path
    cutoff_ms: int
    referenced: set[str]
    protected: tuple[str, ...]


def _put(root: Path, relative: str, size: int, mtime_ms: int) -> None:
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    os.utime(path, ns=(mtime_ms * 1_000_000, mtime_ms * 1_000_000))


def build(root: Path, seed: int = 7) -> Layout:
    """A table root with ~260 files: nested partitions, top-level files, temp files, young files."""
    rng = random.Random(seed)
    now_ms = int(time.time() * 1000)
    cutoff = now_ms - DAY_MS
    old = cutoff - 2 * DAY_MS
    files: list[str] = []
    for d in range(1, 9):
        for h in range(0, 24, 3):
            for k in range(3):
                files.append(f"data/day=2024-01-0{d}/hour={h:02d}/part-{d}{h:02d}{k}.parquet")
    files += [f"data/part-top{k}.parquet" for k in range(6)]  # an unpartitioned writer
    files += [f"data/_compacted/part-c{k}.parquet" for k in range(5)]
    files += [f"data/a=1/b=2/c=3/d=4/e=5/part-deep{k}.parquet" for k in range(4)]  # below the driver's levels
    files += ["data/ts=2024-01-01T00%3A00%3A00/part-escaped.parquet", "data/day=2024-01-01/_SUCCESS"]
    for relative in files:
        _put(root, relative, rng.randint(1, 300), old - rng.randint(0, DAY_MS))
    young = [f"data/day=2024-01-0{d}/hour=00/part-young{d}.parquet" for d in range(1, 9)]
    for relative in young:
        _put(root, relative, 11, now_ms - rng.randint(0, DAY_MS // 2))
    _put(root, "data/day=2024-01-02/hour=03/part-at-cutoff.parquet", 5, cutoff)  # not older than the cutoff
    _put(root, "data/day=2024-01-02/hour=03/part-before-cutoff.parquet", 6, cutoff - 1)
    # temp files: a killed task's (old: an orphan), a running writer's (young: kept)
    _put(root, f"data/day=2024-01-04/hour=06/.part-k.parquet{TEMP_MARKER}abc123", 7, old)
    _put(root, f"data/day=2024-01-05/hour=06/.part-r.parquet{TEMP_MARKER}def456", 8, now_ms)
    # never listed: outside data/
    for relative in ("_meta/keyframe.parquet", "part-root.parquet", "database/part-x.parquet"):
        _put(root, relative, 9, old)
    (root / "data" / "empty" / "dir").mkdir(parents=True)
    referenced = {f for f in files if rng.random() < 0.4} | {young[0]}
    protected = ("data/day=2024-01-03/", "data/day=2024-01-06/hour=09")
    return Layout(root, cutoff, referenced, protected)


def oracle(layout: Layout) -> dict[str, tuple[int, int]]:
    """Brute force: every file under data/ not referenced, not protected, older than the cutoff."""
    found = {}
    for directory, _dirs, names in os.walk(layout.root / "data"):
        for name in names:
            path = Path(directory) / name
            relative = path.relative_to(layout.root).as_posix()
            stat = path.stat()
            mtime_ms = stat.st_mtime_ns // 1_000_000
            if relative in layout.referenced or relative.startswith(layout.protected):
                continue
            if mtime_ms < layout.cutoff_ms:
                found[relative] = (stat.st_size, mtime_ms)
    return found


def every_file(root: Path) -> set[str]:
    return {
        (Path(directory) / name).relative_to(root).as_posix()
        for directory, _dirs, names in os.walk(root)
        for name in names
    }


def listed(spark: SparkSession, layout: Layout, shards: int) -> dict[str, tuple[int, int]]:
    frame = si.find_orphans_spark(
        spark, str(layout.root), layout.referenced, layout.protected, layout.cutoff_ms, shards=shards
    )
    rows = frame.collect()
    assert len(rows) == len({r["path"] for r in rows}), "a file listed twice"
    return {r["path"]: (r["size"], r["mtime_ms"]) for r in rows}


def test_find_orphans_matches_the_oracle_for_any_shard_count(spark: SparkSession, tmp_path: Path) -> None:
    layout = build(tmp_path / "ns" / "t")
    expected = oracle(layout)
    assert len(every_file(layout.root)) > 200 and 80 < len(expected) < 200
    assert f"data/day=2024-01-04/hour=06/.part-k.parquet{TEMP_MARKER}abc123" in expected
    assert "data/day=2024-01-02/hour=03/part-before-cutoff.parquet" in expected
    assert not any(TEMP_MARKER in p and "2024-01-05" in p for p in expected)
    for shards in (1, 2, 7, 200):  # from "top level only" to "expand every driver level"
        assert listed(spark, layout, shards) == expected, shards

    # referenced as a DataFrame; absolute spellings of paths under the root count, others are ignored
    refs = sorted(layout.referenced)
    spelled = [f"file://{layout.root / p}" for p in refs[:10]] + [str(layout.root / p) for p in refs[10:20]]
    spelled += [*refs[20:], "s3://elsewhere/data/x.parquet", "/somewhere/else/data/y.parquet"]
    frame = spark.createDataFrame([(p,) for p in spelled], "path string")
    found = si.find_orphans_spark(spark, str(layout.root), frame, list(layout.protected), layout.cutoff_ms)
    assert {r["path"] for r in found.collect()} == set(expected)

    # nothing referenced, nothing protected, everything old: every file under data/
    everything = si.find_orphans_spark(spark, str(layout.root), [], [], int(time.time() * 1000) + DAY_MS)
    assert {r["path"] for r in everything.collect()} == {
        p for p in every_file(layout.root) if p.startswith("data/")
    }
    # a table without data/ has no orphans
    (tmp_path / "bare").mkdir()
    assert si.find_orphans_spark(spark, str(tmp_path / "bare"), [], [], layout.cutoff_ms).count() == 0


def test_delete_orphans_then_rerun_is_a_no_op(spark: SparkSession, tmp_path: Path) -> None:
    layout = build(tmp_path / "ns" / "t", seed=11)
    expected = oracle(layout)
    before = every_file(layout.root)
    found = si.find_orphans_spark(
        spark, str(layout.root), layout.referenced, layout.protected, layout.cutoff_ms, shards=3
    )
    # a run killed halfway: some orphans already gone
    gone = sorted(expected)[::5]
    for relative in gone:
        (layout.root / relative).unlink()
    files, size = si.delete_files_spark(spark, str(layout.root), found, shards=4, threads=3)
    assert files == len(expected) - len(gone)
    assert size == sum(expected[p][0] for p in expected if p not in gone)
    assert every_file(layout.root) == before - set(expected)

    assert si.delete_files_spark(spark, str(layout.root), sorted(expected)) == (0, 0)  # the rerun
    assert si.delete_files_spark(spark, str(layout.root), found) == (0, 0)  # re-listed: nothing left
    assert every_file(layout.root) == before - set(expected)


def test_delete_without_sizes_asks_storage(spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path / "t"
    for k in range(5):
        _put(root, f"data/p={k}/f.parquet", 10 + k, 0)
    paths = [f"data/p={k}/f.parquet" for k in range(5)] + ["data/p=9/missing.parquet"]
    assert si.delete_files_spark(spark, str(root), paths) == (5, 60)
    frame = spark.createDataFrame([(p,) for p in paths], "path string")
    assert si.delete_files_spark(spark, str(root), frame) == (0, 0)


@pytest.mark.parametrize(
    "bad",
    [
        "_meta/keyframe.parquet",
        "part-root.parquet",
        "database/part-x.parquet",
        "data/../_meta/keyframe.parquet",
        "data/./x",
        "data//x",
        "data",
        "data/",
        "/abs/data/x",
        "s3://bucket/t/data/x",
        "",
    ],
)
def test_delete_refuses_paths_outside_data(spark: SparkSession, tmp_path: Path, bad: str) -> None:
    root = tmp_path / "t"
    _put(root, "data/keep.parquet", 3, 0)
    _put(root, "_meta/keyframe.parquet", 3, 0)
    _put(root, "part-root.parquet", 3, 0)
    before = every_file(root)
    with pytest.raises(ValueError, match="refusing"):
        si.delete_files_spark(spark, str(root), ["data/keep.parquet", bad])
    frame = spark.createDataFrame([("data/keep.parquet",), (bad,)], "path string")
    with pytest.raises(ValueError, match="refusing"):
        si.delete_files_spark(spark, str(root), frame)
    assert every_file(root) == before  # nothing deleted, not even the good path


def test_find_refuses_protected_prefixes_outside_data(spark: SparkSession, tmp_path: Path) -> None:
    root = tmp_path / "t"
    _put(root, "data/x.parquet", 3, 0)
    for prefix in ("_meta/", "", "database", "../data/", "/elsewhere/data/", "data/../x"):
        with pytest.raises(ValueError):
            si.find_orphans_spark(spark, str(root), [], [prefix], 10)
    with pytest.raises(TypeError):
        si.find_orphans_spark(spark, str(root), [], "data/", 10)
    # an absolute spelling of a prefix under the root is fine
    found = si.find_orphans_spark(spark, str(root), [], [f"file://{root}/data/"], 10)
    assert found.count() == 0
    assert si.find_orphans_spark(spark, str(root), [], [], 10).count() == 1


def test_si_vacuum_deletes_dropped_files_and_orphans_with_spark(
    spark: SparkSession, config: Config, table: Table
) -> None:
    from segcat.catalog.read.vacuum import vacuum as core_vacuum

    for k in range(3):
        si.write(spark.createDataFrame([(k, "x")], "id long, v string"), table, config=config)
    si.compact(spark, table, config=config)
    root = Path(table.location())
    orphan = root / "data" / "lost" / "part-orphan.parquet"
    orphan.parent.mkdir(parents=True, exist_ok=True)
    orphan.write_bytes(b"x" * 7)
    old = time.time() - 3600
    os.utime(orphan, (old, old))
    live = {Path(p) for p in table.snapshot().files()}
    dry = si.vacuum(spark, table, retain_versions=1, grace_ms=0, dry_run=True, config=config)
    reasons = sorted(f.reason for f in dry.files)
    assert reasons == ["dropped", "dropped", "dropped", "orphan"], dry.files
    assert orphan.exists()
    in_process = core_vacuum(reader_of(table), retain_versions=1, grace_ms=0, dry_run=True)
    assert sorted(f.path for f in in_process.files) == sorted(f.path for f in dry.files)
    report = si.vacuum(spark, table, retain_versions=1, grace_ms=0, config=config)
    assert report.deleted == 4 and not orphan.exists()
    assert {p for p in root.rglob("*.parquet")} == live
    assert sorted(r.id for r in si.read(spark, table, config=config).collect()) == [0, 1, 2]


def test_si_vacuum_keeps_a_file_committed_while_the_executors_list(
    spark: SparkSession, config: Config, table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20, item 1 on the Spark path: the plan reads the head, then the executors list
    ``data/``; a commit registering a file written long before lands in between. The log is
    read again after the listing: the file stays (regression: it went as an orphan)."""
    from segcat import load_catalog
    from segcat.catalog.protocol.model import Segment

    si.write(spark.createDataFrame([(1, "x")], "id long, v string"), table, config=config)
    root = Path(table.location())
    old = root / "data" / "import" / "old.parquet"
    _put(root, "data/import/old.parquet", 9, int(time.time() * 1000) - 3_600_000)
    spark_vacuum = importlib.import_module("segcat.spark_integration.vacuum")  # (si.vacuum is the function)
    real = spark_vacuum.find_orphans_spark

    def plan_then_commit(*args: object, **kwargs: object) -> object:
        with load_catalog(config).load_table(table.name) as writer:
            writer.append([Segment("old", "data/import/old.parquet", 9, 1, "import")])
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(spark_vacuum, "find_orphans_spark", plan_then_commit)
    report = si.vacuum(spark, table, retain_versions=1, grace_ms=0, config=config)
    assert old.exists() and report.deleted == 0
    assert not [p for p in table.snapshot().files() if not Path(p).exists()]
