"""How the rows source packs files into Spark partitions (no services: ``pack`` is a pure function).

A Python task costs far more to start than a file costs to open inside one, so many small files
go to a few tasks, never one task per file, and a large table still splits by bytes.
"""

from __future__ import annotations

from segcat.catalog.read.changes import FileRead
from segcat.spark_integration.row_batch import MIN_PARTITIONS, TARGET_PARTITION_BYTES, pack


def _reads(count: int, size_bytes: int) -> list[FileRead]:
    return [FileRead(f"file:///t/data/f{i:05d}.parquet", 10_000, size_bytes, 1, None) for i in range(count)]


def test_many_small_files_pack_into_a_few_tasks_in_order() -> None:
    reads = _reads(1_000, 150_000)  # the backfill benchmark's table: 1,000 files of 150 kB
    parts = pack(reads)
    assert len(parts) == MIN_PARTITIONS
    assert [r for p in parts for r in p.reads] == reads


def test_a_large_table_splits_by_bytes() -> None:
    reads = _reads(400, 64 * 1024 * 1024)  # 25 GiB in 64 MiB files
    parts = pack(reads)
    assert len(parts) == 400 * 64 * 1024 * 1024 // TARGET_PARTITION_BYTES
    assert all(len(p.reads) == 2 for p in parts)


def test_fewer_files_than_the_minimum_get_one_task_each() -> None:
    parts = pack(_reads(3, 1_000))
    assert [len(p.reads) for p in parts] == [1, 1, 1]
    assert pack([]) == []
