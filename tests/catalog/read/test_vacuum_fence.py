"""Tag creation racing vacuum: a tag never names a version whose files vacuum deleted.

The interleavings are driven, not hoped for: vacuum is split into its plan (a dry run) and
its deletes (``execute``), and the tag is made at a chosen point, one of them inside
``execute`` right after the re-check read the log and the leases and before the batch goes
(the window the vacuum fence closes).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import DataFileMissing, SegcatError, ServiceUnavailable
from segcat.catalog.protocol.model import Segment
from segcat.catalog.read import vacuum as vacuuming
from segcat.catalog.read.vacuum import execute, vacuum
from segcat.catalog.read.vacuum_fence import is_fence
from segcat.catalog.storage.redis.leases import LeaseStore
from tests.handles import reader_of, tables_of

POINTS = ("before-plan", "after-plan", "inside-deletes", "after-deletes")


def _segment(table: Table, sid: str) -> Segment:
    relative = f"data/part=p0/{sid}.parquet"
    path = Path(table.location()) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(64))
    return Segment(sid, relative, 64, 1, "p0")


def _broken_tags(table: Table) -> dict[str, list[str]]:
    """Each tag naming a version some of whose files are gone, with those files."""
    broken = {}
    for name in table.tags():
        missing = [p for p in table.snapshot(name).files() if not Path(p).exists()]
        if missing:
            broken[name] = missing
    return broken


@pytest.fixture
def fconfig(config: Config, tmp_path: Path) -> Config:
    return replace(config, warehouse=str(tmp_path / "warehouse"))


@pytest.fixture
def inside_deletes(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Callable[[], None]]]:
    """Actions run once, in ``execute``, right after the first re-check and before its deletes."""
    actions: list[Callable[[], None]] = []
    real = vacuuming.Recheck.refresh

    def refresh(self: vacuuming.Recheck) -> None:
        real(self)
        while actions:
            actions.pop(0)()

    monkeypatch.setattr(vacuuming.Recheck, "refresh", refresh)
    yield actions


def test_a_tag_made_while_vacuum_deletes_waits_for_it_and_finds_the_files_gone(
    fconfig: Config, table_name: str, inside_deletes: list[Callable[[], None]]
) -> None:
    """Vacuum read the leases (none) and is about to delete a.parquet of the old version when
    the tag is made: the creator sees the vacuum's fence and waits (here: gives up after its
    ``wait_s``), so it never commits a tag the deletes then break. Without the fence it would
    (regression: the tag named a.parquet after vacuum deleted it)."""
    table = Catalog(fconfig).create_table(table_name)
    with load_catalog(fconfig).load_table(table.name) as writer:
        old = writer.append([_segment(table, "a")])
        writer.compact(["a"], [_segment(table, "b")])
        plan = vacuum(reader_of(table), retain_versions=1, grace_ms=0, dry_run=True)
        outcome: list[object] = []

        def make_tag() -> None:
            store = LeaseStore.from_store(tables_of(writer.catalog).redis)  # type: ignore[arg-type]
            assert any(is_fence(lease) for lease in store.live(table.name))
            try:
                outcome.append(writer.tag("during", old, wait_s=0.5))
            except SegcatError as exc:
                outcome.append(exc)

        inside_deletes.append(make_tag)
        execute(reader_of(table), plan)
        assert isinstance(outcome[0], ServiceUnavailable), outcome
        assert "vacuum" in str(outcome[0]) and plan.deleted == 1
        assert table.tags() == {} and _broken_tags(table) == {}
        with pytest.raises(DataFileMissing):  # after the vacuum: the creator finds a.parquet gone
            writer.tag("during", old)
        store = LeaseStore.from_store(tables_of(writer.catalog).redis)  # type: ignore[arg-type]
        assert store.live(table.name) == []  # fence and the tag's lease both released


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(point=st.sampled_from(POINTS), tag_old=st.booleans(), retain=st.integers(1, 3))
def test_tagging_at_any_point_of_a_vacuum_never_leaves_a_broken_tag(
    fconfig: Config, inside_deletes: list[Callable[[], None]], point: str, tag_old: bool, retain: int
) -> None:
    """Hypothesis over the points a tag can be made at, relative to vacuum's plan and deletes:
    either the tag is committed and every file of its version stays, or it fails with a typed
    error and nothing is committed."""
    inside_deletes.clear()
    table = Catalog(fconfig).create_table(f"test.fence_{uuid.uuid4().hex[:10]}")
    with load_catalog(fconfig).load_table(table.name) as writer:
        first = writer.append([_segment(table, "a"), _segment(table, "b")])
        writer.compact(["a"], [_segment(table, "a2")])
        writer.compact(["b", "a2"], [_segment(table, "c")])
        version = first if tag_old else table.head_offset()
        outcome: list[object] = []

        def make_tag() -> None:
            try:
                outcome.append(writer.tag("t", version, wait_s=0.3))
            except (DataFileMissing, ServiceUnavailable) as exc:
                outcome.append(exc)

        if point == "before-plan":
            make_tag()
        plan = vacuum(reader_of(table), retain_versions=retain, grace_ms=0, dry_run=True)
        if point == "after-plan":
            make_tag()
        if point == "inside-deletes":
            inside_deletes.append(make_tag)
        execute(reader_of(table), plan)
        if point == "after-deletes" or not outcome:  # nothing to delete: the hook never ran
            inside_deletes.clear()
            make_tag()
        assert len(outcome) == 1
        if isinstance(outcome[0], int):
            assert table.tags() == {"t": version}
        else:
            assert table.tags() == {}
        assert _broken_tags(table) == {}
        vacuum(reader_of(table), retain_versions=1, grace_ms=0)  # and any vacuum after keeps it whole
        assert _broken_tags(table) == {}
