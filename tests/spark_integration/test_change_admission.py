"""Admission of the change feed's micro-batches (``maxFilesPerTrigger`` / ``maxBytesPerTrigger``):
whole versions in order, at least one, within both limits unless one version alone exceeds them;
and the tasks a batch is cut into carry every read once, in order."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from segcat.catalog.read.changes import FileRead, VersionFiles, VersionKind
from segcat.spark_integration.change_feed import PARTITION_FILES, plan_partitions
from segcat.spark_integration.change_follower import Limits, admit, admit_files, reads_of

KINDS = [
    VersionKind.APPEND,
    VersionKind.COMPACT,
    VersionKind.DELETE_ONLY,
    VersionKind.CHANGE,
    VersionKind.METADATA,
]


def _read(version: int, i: int, size: int) -> FileRead:
    return FileRead(f"file:///t/{version}-{i}.parquet", 10, size, version, None)


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


LIMITS = st.builds(Limits, st.none() | st.integers(1, 6), st.none() | st.integers(1, 300))


@given(versions(), LIMITS)
def test_admit_takes_whole_versions_within_the_limits(found: list[VersionFiles], limits: Limits) -> None:
    taken = admit(found, limits)
    if not found:
        assert taken == 0
        return
    assert 1 <= taken <= len(found)
    reads = [r for vf in found[:taken] for r in reads_of(vf)]
    if taken > 1:
        assert limits.admits(len(reads), sum(r.size_bytes for r in reads))
    if taken < len(found):  # the next version would have broken a limit
        more = reads + list(reads_of(found[taken]))
        assert not limits.admits(len(more), sum(r.size_bytes for r in more))
    assert all(not reads_of(vf) for vf in found if vf.kind in (VersionKind.COMPACT, VersionKind.METADATA))


@given(st.lists(st.integers(1, 100), max_size=12), LIMITS)
def test_the_snapshot_is_admitted_file_by_file(sizes: list[int], limits: Limits) -> None:
    reads = [_read(0, i, s) for i, s in enumerate(sizes)]
    taken = admit_files(reads, limits)
    assert taken == 0 if not reads else 1 <= taken <= len(reads)
    if taken > 1:
        assert limits.admits(taken, sum(sizes[:taken]))
    if 0 < taken < len(reads):
        assert not limits.admits(taken + 1, sum(sizes[: taken + 1]))


@given(versions())
def test_partitions_carry_every_read_once_in_order(found: list[VersionFiles]) -> None:
    parts = plan_partitions(found, 3)
    flat = [(vf.version, r, r in vf.deleted) for p in parts for vf in p.versions for r in reads_of(vf)]
    expected = [(vf.version, r, r in vf.deleted) for vf in found for r in reads_of(vf)]
    assert flat == expected
    assert all(0 < sum(len(reads_of(vf)) for vf in p.versions) <= PARTITION_FILES for p in parts)
    assert [p.value for p in parts] == list(range(len(parts)))
    assert all(p.horizon == 3 for p in parts)
