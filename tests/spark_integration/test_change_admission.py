"""Admission of the streams' micro-batches (``Budget``: ``maxFilesPerTrigger`` / ``maxBytesPerTrigger``
/ ``maxRowsPerTrigger``): whole versions in order, at least one, within every limit unless one
version alone exceeds them; the snapshot file by file; and the tasks a change feed batch is cut
into carry every read once, in order."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxFiles

from segcat.catalog.read.changes import FileRead, VersionFiles, VersionKind
from segcat.spark_integration.change_feed import PARTITION_FILES, plan_partitions, reads_of
from segcat.spark_integration.stream_planning import Budget

KINDS = [
    VersionKind.APPEND,
    VersionKind.COMPACT,
    VersionKind.DELETE_ONLY,
    VersionKind.CHANGE,
    VersionKind.METADATA,
]


def _read(version: int, i: int, size: int) -> FileRead:
    return FileRead(f"file:///t/{version}-{i}.parquet", size // 3, size, version, None)


@st.composite
def versions(draw: st.DrawFn) -> list[VersionFiles]:
    out = []
    for version in range(draw(st.integers(0, 8))):
        kind = draw(st.sampled_from(KINDS))
        sizes = draw(st.lists(st.integers(1, 100), max_size=5))
        reads = tuple(_read(version, i, s) for i, s in enumerate(sizes))
        half = draw(st.integers(0, len(reads)))
        inserted, deleted = (reads, ()) if kind is VersionKind.APPEND else (reads[:half], reads[half:])
        if kind is VersionKind.METADATA:
            inserted = deleted = ()
        out.append(VersionFiles(version, 0, "X", kind, inserted, deleted, None))
    return out


LIMITS = st.tuples(
    st.none() | st.integers(1, 6), st.none() | st.integers(1, 300), st.none() | st.integers(1, 100)
)
Limits = tuple[int | None, int | None, int | None]


def within(limits: Limits, reads: Sequence[FileRead]) -> bool:
    """Whether ``reads`` together stay within every limit (files, bytes, rows)."""
    used = (len(reads), sum(r.size_bytes for r in reads), sum(r.row_count for r in reads))
    return all(limit is None or n <= limit for limit, n in zip(limits, used, strict=True))


@given(versions(), LIMITS)
def test_whole_versions_are_taken_within_the_limits(found: list[VersionFiles], limits: Limits) -> None:
    taken = Budget(*limits).take(reads_of(vf) for vf in found)
    if not found:
        assert taken == 0
        return
    assert 1 <= taken <= len(found)
    reads = [r for vf in found[:taken] for r in reads_of(vf)]
    if taken > 1:
        assert within(limits, reads)
    if taken < len(found):  # the next version would have broken a limit
        assert not within(limits, reads + list(reads_of(found[taken])))
    assert all(not reads_of(vf) for vf in found if vf.kind in (VersionKind.COMPACT, VersionKind.METADATA))


@given(st.lists(st.integers(1, 100), max_size=12), LIMITS)
def test_the_snapshot_is_admitted_file_by_file(sizes: list[int], limits: Limits) -> None:
    reads = [_read(0, i, s) for i, s in enumerate(sizes)]
    taken = Budget(*limits).take((r,) for r in reads)
    assert taken == 0 if not reads else 1 <= taken <= len(reads)
    if taken > 1:
        assert within(limits, reads[:taken])
    if 0 < taken < len(reads):
        assert not within(limits, reads[: taken + 1])


def test_the_trigger_sets_the_budget() -> None:
    """Trigger.Once reads everything; a ReadMaxFiles Spark passes sets the files, the rest stay."""
    assert Budget.of(ReadAllAvailable(), 5, 6, 7) == Budget(None, None, None)
    assert Budget.of(ReadMaxFiles(3), 5, 6, 7) == Budget(3, 6, 7)


@given(versions())
def test_partitions_carry_every_read_once_in_order(found: list[VersionFiles]) -> None:
    parts = plan_partitions(found, 3)
    flat = [(vf.version, r, r in vf.deleted) for p in parts for vf in p.versions for r in reads_of(vf)]
    expected = [(vf.version, r, r in vf.deleted) for vf in found for r in reads_of(vf)]
    assert flat == expected
    assert all(0 < sum(len(reads_of(vf)) for vf in p.versions) <= PARTITION_FILES for p in parts)
    assert [p.value for p in parts] == list(range(len(parts)))
    assert all(p.horizon == 3 for p in parts)
