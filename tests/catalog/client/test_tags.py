"""Tags on the real stack: named versions, read by name, kept by vacuum, made safely."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import (
    DataFileMissing,
    InvalidArgument,
    ServiceUnavailable,
    TableDropped,
    VersionNotFound,
)
from segcat.catalog.protocol.model import Segment
from segcat.catalog.protocol.tags import tag_key
from segcat.catalog.read.vacuum import execute, vacuum
from tests.handles import reader_of


def _segment(table: Table, sid: str) -> Segment:
    relative = f"data/part=p0/{sid}.parquet"
    path = Path(table.location()) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(64))
    return Segment(sid, relative, 64, 1, "p0")


def _exists(table: Table, sid: str) -> bool:
    return (Path(table.location()) / f"data/part=p0/{sid}.parquet").exists()


@pytest.fixture
def tconfig(config: Config, tmp_path: Path) -> Config:
    return replace(config, warehouse=str(tmp_path / "warehouse"))


@pytest.fixture
def ttable(tconfig: Config, table_name: str) -> Table:
    return Catalog(tconfig).create_table(table_name)


def test_a_tag_names_a_version_every_reader_resolves(tconfig: Config, ttable: Table) -> None:
    with load_catalog(tconfig).load_table(ttable.name) as writer:
        first = writer.append([_segment(ttable, "a")])
        second = writer.append([_segment(ttable, "b")])
        made = writer.tag("release-1", first)
        assert made > second
        assert ttable.tags() == {"release-1": first}
        assert ttable.snapshot(ttable.head_offset()).properties[tag_key("release-1")] == str(first)
        assert ttable.resolve_version("release-1") == first
        assert ttable.snapshot("release-1").segment_ids() == {"a"}
        assert ttable.snapshot(version="release-1").version == first
        head = writer.tag("head")  # the head when asked: the version before the tag's own commit
        assert ttable.tags()["head"] == made and ttable.snapshot("head").segment_ids() == {"a", "b"}
        with pytest.raises(InvalidArgument, match="already names version"):
            writer.tag("release-1", second)
        moved = writer.tag("release-1", second, replace=True)
        assert moved > head and ttable.tags()["release-1"] == second
        assert writer.tag("release-1", second, replace=True) == moved  # already there: no commit
        assert writer.tag("copy", "release-1") and ttable.tags()["copy"] == second  # a tag's version
        writer.drop_tag("release-1")
        assert "release-1" not in ttable.tags()
        with pytest.raises(VersionNotFound, match="'release-1'"):
            ttable.snapshot("release-1")
        with pytest.raises(VersionNotFound, match="no tag 'release-1'"):
            writer.drop_tag("release-1")


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda t: t.tag("1abc"), InvalidArgument, "not a tag name"),
        (lambda t: t.tag(""), InvalidArgument, "not a tag name"),
        (lambda t: t.tag("x" * 200), InvalidArgument, "not a tag name"),
        (lambda t: t.tag(7), InvalidArgument, "must be text"),
        (lambda t: t.tag("ok", 10**6), VersionNotFound, "does not exist yet"),
        (lambda t: t.tag("ok", -3), InvalidArgument, "not an offset"),
        (lambda t: t.tag("ok", True), InvalidArgument, "integer offset or a tag name"),
        (lambda t: t.tag("ok", replace="yes"), InvalidArgument, "replace"),
        (lambda t: t.tag("ok", wait_s=float("nan")), InvalidArgument, "wait_s"),
        (lambda t: t.tag("ok", wait_s=-1), InvalidArgument, "wait_s"),
        (lambda t: t.tag("ok", "missing"), VersionNotFound, "no tag 'missing'"),
        (lambda t: t.snapshot("12"), InvalidArgument, "neither a version"),
        (lambda t: t.snapshot("no such"), InvalidArgument, "neither a version"),
        (lambda t: t.resolve_version("nothing"), VersionNotFound, r"no tag 'nothing' \(its tags: none\)"),
        (lambda t: t.drop_tag("nothing"), VersionNotFound, "no tag"),
    ],
)
def test_bad_tag_arguments_are_typed_errors_and_commit_nothing(
    tconfig: Config, ttable: Table, call: object, error: type[Exception], match: str
) -> None:
    with load_catalog(tconfig).load_table(ttable.name) as writer:
        writer.append([_segment(ttable, "a")])
        head = ttable.head_offset()
        with pytest.raises(error, match=match):
            call(writer)  # type: ignore[operator]
        assert ttable.head_offset() == head and ttable.tags() == {}


def test_a_dropped_table_takes_no_tag(tconfig: Config, ttable: Table) -> None:
    with load_catalog(tconfig).load_table(ttable.name) as writer:
        version = writer.append([_segment(ttable, "a")])
    reader_of(ttable).drop()
    with pytest.raises(TableDropped):
        ttable.tag("late", version)


def test_tagging_needs_redis(tconfig: Config, ttable: Table) -> None:
    from segcat.catalog.read.table import Tables
    from segcat.catalog.write.tagging import create_tag
    from tests.handles import writer_of

    with load_catalog(tconfig).load_table(ttable.name) as writer:
        writer.append([_segment(ttable, "a")])
        bare = Tables(tconfig, use_redis=False).open(ttable.name)
        with pytest.raises(ServiceUnavailable, match="needs Redis"):
            create_tag(bare, writer_of(writer), "x")
    assert ttable.tags() == {}


def test_vacuum_keeps_a_tagged_version_until_the_tag_is_dropped(tconfig: Config, ttable: Table) -> None:
    """Zero grace, the head alone retained: without the tag, a and b would go."""
    with load_catalog(tconfig).load_table(ttable.name) as writer:
        writer.append([_segment(ttable, "a"), _segment(ttable, "b")])
        old = writer.compact(["a"], [_segment(ttable, "a2")])
        writer.compact(["b", "a2"], [_segment(ttable, "final")])
        writer.tag("old", old)
        report = vacuum(reader_of(ttable), retain_versions=1, grace_ms=0)
        assert report.tagged_versions == (old,) and report.kept_by_tag == 2
        assert [Path(f.path).name for f in report.files] == ["a.parquet"]  # only a: not in `old`
        assert _exists(ttable, "b") and _exists(ttable, "a2") and not _exists(ttable, "a")
        missing = [p for p in ttable.snapshot("old").files() if not Path(p).exists()]
        assert missing == []
        again = vacuum(reader_of(ttable), retain_versions=1, grace_ms=0)  # a later run keeps them too
        assert again.files == [] and _exists(ttable, "b") and _exists(ttable, "a2")
        writer.drop_tag("old")
    released = vacuum(reader_of(ttable), retain_versions=1, grace_ms=0)
    assert sorted(Path(f.path).name for f in released.files) == ["a2.parquet", "b.parquet"]
    assert not _exists(ttable, "b") and _exists(ttable, "final")


def test_a_version_whose_files_are_gone_cannot_be_tagged(tconfig: Config, ttable: Table) -> None:
    with load_catalog(tconfig).load_table(ttable.name) as writer:
        old = writer.append([_segment(ttable, "a")])
        writer.compact(["a"], [_segment(ttable, "b")])
        vacuum(reader_of(ttable), retain_versions=1, grace_ms=0)
        head = ttable.head_offset()
        with pytest.raises(DataFileMissing, match=r"a\.parquet"):
            writer.tag("gone", old)
        assert ttable.tags() == {} and ttable.head_offset() == head


def test_a_lease_taken_after_the_plan_is_seen_before_the_deletes(tconfig: Config, ttable: Table) -> None:
    """The re-check before each batch reads the leases again (after the vacuum's fence):
    a version leased between the plan and the deletes keeps its files (regression: a lease
    taken after vacuum read the leases protected nothing)."""
    with load_catalog(tconfig).load_table(ttable.name) as writer:
        old = writer.append([_segment(ttable, "a")])
        writer.compact(["a"], [_segment(ttable, "b")])
    plan = vacuum(reader_of(ttable), retain_versions=1, grace_ms=0, dry_run=True)
    assert [Path(f.path).name for f in plan.files] == ["a.parquet"]
    with ttable.lease(old, ttl_s=30):
        execute(reader_of(ttable), plan)
        assert _exists(ttable, "a") and plan.kept_by_recheck == 1 and plan.deleted == 0


def test_a_tag_made_after_the_plan_is_seen_before_the_deletes(tconfig: Config, ttable: Table) -> None:
    with load_catalog(tconfig).load_table(ttable.name) as writer:
        old = writer.append([_segment(ttable, "a")])
        writer.compact(["a"], [_segment(ttable, "b")])
        plan = vacuum(reader_of(ttable), retain_versions=1, grace_ms=0, dry_run=True)
        writer.tag("kept", old)
    execute(reader_of(ttable), plan)
    assert _exists(ttable, "a") and plan.kept_by_recheck == 1


def test_an_offset_that_is_no_version_is_tagged_as_the_version_it_reads_as(
    tconfig: Config, ttable: Table
) -> None:
    """The log's end may be a write intent (NOTED, not a version): the tag names the version a
    snapshot of that offset reports, so the tag and Iceberg's ref name a real version."""
    with load_catalog(tconfig).load_table(ttable.name) as writer:
        version = writer.append([_segment(ttable, "a")])
        with writer.intent("data/x/", ttl_s=60):
            offset = ttable.head_offset()
            assert offset > version and ttable.snapshot(offset).version == version
            writer.tag("at-intent", offset)
            assert ttable.tags() == {"at-intent": version}
