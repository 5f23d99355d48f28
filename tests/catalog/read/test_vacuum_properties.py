"""Vacuum never deletes a file a kept version lists: hypothesis on the real stack (issue 20).

Each example is a fresh table on the shared Kafka and Redis, with a warehouse directory of its
own. A writer appends fresh files and files written long ago, compacts, replaces a partition,
deletes, and registers again paths dropped long ago; stray files appear that nothing
commits; leases come and go on random versions. Vacuums run with grace 0 and a random
``retain_versions``, whole or with commits landing inside them at the two points where a
commit can race a vacuum:

- *while it lists* ``data/``: the commits' files (written before the vacuum started, so old
  enough to be orphans) are in the listing, the commits land right after it;
- *between its plan and its deletes* (a dry run, then ``execute``): the re-check before each
  batch must keep what they registered.

After every vacuum, every file of every version from its horizon to the log's end, and of
every leased version, exists.

Not exercised: a commit landing between a batch's re-check and its deletes (the window
docs/LIFECYCLE.md names as remaining), and tagged versions (segcat has none yet).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from pathlib import Path
from unittest import mock

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.protocol.model import Segment
from segcat.catalog.protocol.replay import Applied
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read.vacuum import VacuumReport, execute, vacuum
from segcat.catalog.storage.objectstore import ObjectStore
from tests.handles import reader_of

LONG_AGO_S = 3_600.0
WRITES = ["append", "append_old", "compact", "replace", "delete", "reregister", "stray"]
VACUUMS = ["vacuum", "vacuum_while_listing", "vacuum_between_plan_and_deletes"]

write_step = st.tuples(st.sampled_from(WRITES), st.integers(0, 1_000))
vacuum_step = st.tuples(
    st.sampled_from(VACUUMS), st.integers(1, 3), st.lists(write_step, min_size=1, max_size=3)
)
lease_step = st.tuples(st.sampled_from(["lease", "release"]), st.integers(0, 1_000))
steps = st.lists(st.one_of(write_step, write_step, vacuum_step, lease_step), min_size=4, max_size=16)


@dataclass
class Run:
    """One example's table, writer and bookkeeping."""

    table: Table
    writer: Table
    root: Path
    n: int = 0
    dropped_paths: list[str] = field(default_factory=list)
    leases: list[tuple[int, ExitStack]] = field(default_factory=list)
    vacuums: int = 0

    def file(self, relative: str, *, old: bool) -> None:
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists():
            path.write_bytes(os.urandom(16))
        if old:
            then = time.time() - LONG_AGO_S
            os.utime(path, (then, then))

    def segment(self, partition: str, *, old: bool, path: str | None = None) -> Segment:
        self.n += 1
        relative = path or f"data/{partition}/s{self.n}.parquet"
        self.file(relative, old=old)
        return Segment(f"s{self.n}-{uuid.uuid4().hex[:6]}", relative, 16, 1, partition)

    def live(self) -> dict[str, Segment]:
        return {sid: live.segment for sid, live in sorted(self.writer.refresh().segments.items())}

    def prepare(self, kind: str, pick: int) -> Callable[[], None]:
        """Write the step's files now; the returned call commits them (maybe much later)."""
        partition = f"p{pick % 2}"
        if kind in ("append", "append_old"):
            segment = self.segment(partition, old=kind == "append_old")
            return lambda: self._commit(lambda: self.writer.append([segment]))
        if kind == "compact":
            merged = self.segment(partition, old=False)

            def compact() -> None:
                live = list(self.live())
                if len(live) >= 2:
                    drops = [live[pick % len(live)], live[(pick + 1) % len(live)]]
                    self._commit(lambda: self.writer.compact(drops, [merged]), drops)

            return compact
        if kind == "replace":
            fresh = self.segment("p0", old=False)

            def replace_partition() -> None:
                gone = [sid for sid, s in self.live().items() if s.partition == "p0"]
                self._commit(lambda: self.writer.replace([fresh], scope=["p0"]), gone)

            return replace_partition
        if kind == "delete":

            def delete() -> None:
                live = list(self.live())
                if live:
                    drop = [live[pick % len(live)]]
                    self._commit(lambda: self.writer.delete(drops=drop), drop)

            return delete
        if kind == "reregister" and self.dropped_paths:
            path = self.dropped_paths[pick % len(self.dropped_paths)]
            segment = self.segment(path.split("/")[1], old=True, path=path)  # written again if vacuumed

            def reregister() -> None:
                if path not in {s.path for s in self.live().values()}:
                    self._commit(lambda: self.writer.append([segment]))

            return reregister
        self.file(f"data/stray/x{pick}-{self.n}.parquet", old=True)  # nothing ever commits it
        return lambda: None

    def _commit(self, send: Callable[[], int], drops: Sequence[str] = ()) -> None:
        paths = {sid: s.path for sid, s in self.live().items()}
        send()
        self.dropped_paths.extend(paths[sid] for sid in drops if sid in paths)

    def run(self, kind: str, pick: int) -> None:
        self.prepare(kind, pick)()


def versions_and_files(table: Table, root: Path) -> dict[int, set[Path]]:
    """Every accepted version's files, from one replay of the log."""
    found: dict[int, set[Path]] = {}

    def remember(applied: Applied, state: TableState) -> None:
        if applied.verdict.outcome is Outcome.ACCEPTED:
            found[applied.verdict.offset] = {root / live.segment.path for live in state.segments.values()}

    reader_of(table).state(listener=remember)
    return found


def intact(run: Run) -> set[int]:
    """The versions whose every file exists now."""
    return {
        v for v, paths in versions_and_files(run.table, run.root).items() if all(p.exists() for p in paths)
    }


def check(run: Run, report: VacuumReport, before: set[int], end_before: int) -> None:
    """Every file of every version from the vacuum's horizon on, and of every leased version, that
    was whole when the vacuum started (a lease taken on a version an earlier vacuum already let
    go does not bring its files back) or was committed while it ran."""
    by_version = versions_and_files(run.table, run.root)
    ordered = sorted(by_version)
    kept_from = max([v for v in ordered if v <= report.horizon], default=-1)
    wanted = {v for v in ordered if v >= kept_from}
    for leased, _ in run.leases:
        at = max([v for v in ordered if v <= leased], default=None)
        if at is not None:
            wanted.add(at)
    for version in sorted(wanted):
        if version not in before and version <= end_before:
            continue
        missing = sorted(str(p) for p in by_version[version] if not p.exists())
        assert not missing, f"version {version} (horizon {report.horizon}) lost {missing}"


@settings(
    max_examples=12,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # shrinking on the real stack takes minutes
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=steps)
def test_vacuum_keeps_every_file_a_kept_or_leased_version_lists(config: Config, steps: list[tuple]) -> None:  # type: ignore[type-arg]
    warehouse = tempfile.mkdtemp(prefix="vacuum-props-")
    cfg = replace(config, warehouse=warehouse)
    table = Catalog(cfg).create_table(f"test.vprops_{uuid.uuid4().hex[:10]}")
    with load_catalog(cfg).load_table(table.name) as writer:
        run = Run(table, writer, Path(table.location()))
        try:
            for step in steps:
                _step(run, step)
            _vacuum(run, "vacuum", 1, [])
        finally:
            for _, held in run.leases:
                held.close()
            shutil.rmtree(warehouse, ignore_errors=True)


def _step(run: Run, step: tuple) -> None:  # type: ignore[type-arg]
    kind = step[0]
    if kind in WRITES:
        run.run(kind, step[1])
    elif kind == "lease":
        head = run.table.head_offset()
        if head >= 0:
            version = step[1] % (head + 1)
            held = ExitStack()
            held.enter_context(run.table.lease(version, ttl_s=120))
            run.leases.append((version, held))
    elif kind == "release":
        if run.leases:
            _, held = run.leases.pop(step[1] % len(run.leases))
            held.close()
    else:
        _vacuum(run, kind, step[1], step[2])


def _vacuum(run: Run, kind: str, retain: int, inside: list[tuple[str, int]]) -> None:
    before, end_before = intact(run), run.table.head_offset()
    if kind == "vacuum":
        check(run, vacuum(reader_of(run.table), retain_versions=retain, grace_ms=0), before, end_before)
        return
    commits = [run.prepare(k, pick) for k, pick in inside]  # the files exist before the vacuum starts
    if kind == "vacuum_between_plan_and_deletes":
        plan = vacuum(reader_of(run.table), retain_versions=retain, grace_ms=0, dry_run=True)
        for commit in commits:
            commit()
        execute(reader_of(run.table), plan)
        check(run, plan, before, end_before)
        return
    real_listing = ObjectStore.list_files

    def listing_then_commits(store: ObjectStore, prefix: str = "") -> list[tuple[str, int, int]]:
        found = real_listing(store, prefix)
        if prefix == "data":
            while commits:
                commits.pop(0)()
        return found

    with mock.patch.object(ObjectStore, "list_files", listing_then_commits):
        report = vacuum(reader_of(run.table), retain_versions=retain, grace_ms=0)
    check(run, report, before, end_before)
