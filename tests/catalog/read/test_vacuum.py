"""Vacuum on real Kafka, Redis and a local warehouse: what goes, what stays, and why."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import CommitConflict, InvalidArgument, TableDropped, UnsafeLocation
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.model import Commit, Operation, Segment
from segcat.catalog.protocol.names import TableName
from segcat.catalog.read import broker_clock
from segcat.catalog.read.vacuum import (
    SegmentLife,
    check_duration,
    check_retain_versions,
    dropped_files,
    execute,
    vacuum,
)
from segcat.catalog.storage.objectstore import ObjectStore
from tests.factories import produce_raw
from tests.handles import reader_of, tables_of
from tests.materializer_support import PrivateRedis


def _write_file(table: Table, relative: str, size: int = 64) -> Path:
    path = Path(table.location()) / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path


def _segment(table: Table, sid: str, partition: str = "p0") -> Segment:
    relative = f"data/part={partition}/{sid}.parquet"
    _write_file(table, relative)
    return Segment(sid, relative, 64, 1, partition)


def _exists(table: Table, relative: str) -> bool:
    return (Path(table.location()) / relative).exists()


@pytest.fixture
def vconfig(config: Config, tmp_path: Path) -> Config:
    return replace(config, warehouse=str(tmp_path / "warehouse"))


@pytest.fixture
def vtable(vconfig: Config, table_name: str) -> Table:
    return Catalog(vconfig).create_table(table_name)


def test_dropped_files_go_after_grace_and_leases_keep_theirs(vconfig: Config, vtable: Table) -> None:
    with load_catalog(vconfig).load_table(vtable.name) as writer:
        writer.append([_segment(vtable, "a"), _segment(vtable, "b")])
        old = writer.compact(["a", "b"], [_segment(vtable, "ab")])
        writer.compact(["ab"], [_segment(vtable, "final")])
    head = vtable.head_offset()
    # inside the grace period: nothing dropped goes
    report = vacuum(reader_of(vtable), retain_versions=1, grace_ms=3_600_000)
    assert report.deleted == 0 and report.kept_by_grace >= 3
    catalog = Catalog(vconfig)
    assert tables_of(catalog).redis is not None
    with vtable.lease(old, ttl_s=30) as held:
        assert held.held and held.version == old
        dry = vacuum(reader_of(vtable), retain_versions=1, grace_ms=0, dry_run=True)
        assert dry.horizon == old and dry.leased_versions == (old,)
        assert {Path(f.path).name for f in dry.files} == {"a.parquet", "b.parquet"}
        assert all(_exists(vtable, f"data/part=p0/{s}.parquet") for s in ("a", "b"))  # dry run
        report = vacuum(reader_of(vtable), retain_versions=1, grace_ms=0)
        assert report.deleted == 2 and report.by_reason() == {"dropped": {"files": 2, "bytes": 128}}
        assert _exists(vtable, "data/part=p0/ab.parquet")  # the leased version still sees it
    report = vacuum(reader_of(vtable), retain_versions=1, grace_ms=0)
    assert [Path(f.path).name for f in report.files] == ["ab.parquet"]
    assert not _exists(vtable, "data/part=p0/ab.parquet") and _exists(vtable, "data/part=p0/final.parquet")
    assert report.horizon == head
    again = vacuum(reader_of(vtable), retain_versions=1, grace_ms=0)
    assert again.files == [] and again.deleted == 0  # a rerun has nothing left to do


def test_orphans_wait_for_grace_and_live_intents(vconfig: Config, vtable: Table) -> None:
    with load_catalog(vconfig).load_table(vtable.name) as writer:
        writer.append([_segment(vtable, "kept")])
        young = _write_file(vtable, "data/part=p0/young-orphan.parquet")
        old = _write_file(vtable, "data/part=p0/old-orphan.parquet")
        temp = _write_file(vtable, "data/part=p0/.x.parquet.segcat-tmp-123")
        an_hour_ago = time.time() - 3600
        os.utime(old, (an_hour_ago, an_hour_ago))
        os.utime(temp, (an_hour_ago, an_hour_ago))
        report = vacuum(reader_of(vtable), grace_ms=600_000)
        assert sorted(Path(f.path).name for f in report.files) == sorted([old.name, temp.name])
        assert young.exists() and not old.exists() and _exists(vtable, "data/part=p0/kept.parquet")
        with writer.intent("data/part=p1/", ttl_s=60) as intent:
            in_flight = _write_file(vtable, "data/part=p1/in-flight.parquet")
            os.utime(in_flight, (an_hour_ago, an_hour_ago))
            report = vacuum(reader_of(vtable), grace_ms=0)
            assert in_flight.exists() and report.kept_by_intent == 1 and report.open_intents == 1
            assert young.name in {Path(f.path).name for f in report.files}
            intent.commit(
                writer.new_commit(
                    Operation.APPEND, adds=[Segment("f", "data/part=p1/in-flight.parquet", 64, 1, "p1")]
                )
            )
        assert vtable.snapshot().segment_ids() == {"kept", "f"}
        assert vacuum(reader_of(vtable), grace_ms=0).files == [] and in_flight.exists()


def test_a_killed_writer_s_files_survive_while_its_intent_lives(vconfig: Config, vtable: Table) -> None:
    root = vtable.location()
    script = f"""
import os, sys
from pathlib import Path
from segcat.catalog.config import Config
from segcat import load_catalog
config = Config.load()
writer = load_catalog(config).load_table({vtable.name.qualified!r})
intent = writer.intent("data/job/", ttl_s=3)
intent.open()
path = Path({root!r}) / "data/job/part-0.parquet"
path.parent.mkdir(parents=True, exist_ok=True)
path.write_bytes(b"x" * 10)
sys.stdout.write("written\\n"); sys.stdout.flush()
os._exit(9)  # killed before its commit: no abort, no renewal
"""
    env = {
        **os.environ,
        "SEGCAT_BOOTSTRAP_SERVERS": vconfig.bootstrap_servers,
        "SEGCAT_REDIS_URL": vconfig.redis_url or "",
        "SEGCAT_WAREHOUSE": vconfig.warehouse,
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert "written" in done.stdout, done.stderr
    orphan = Path(root) / "data/job/part-0.parquet"
    report = vacuum(reader_of(vtable), grace_ms=0)
    assert orphan.exists() and report.kept_by_intent == 1
    time.sleep(3.5)  # the intent expires (broker time + 3 s)
    report = vacuum(reader_of(vtable), grace_ms=0)
    assert not orphan.exists() and [f.reason for f in report.files] == ["orphan"]


def test_vacuum_refuses_bad_input_and_deletes_nothing(
    vconfig: Config, vtable: Table, catalog: Catalog, table_name: str
) -> None:
    with load_catalog(vconfig).load_table(vtable.name) as writer:
        writer.append([_segment(vtable, "a")])
        writer.compact(["a"], [_segment(vtable, "b")])
    for bad in ({"grace_ms": -1}, {"grace_ms": 10**30}, {"retain_versions": 0}, {"retain_versions": True}):
        with pytest.raises(InvalidArgument):
            vacuum(vtable, **bad)  # type: ignore[arg-type]
    assert _exists(vtable, "data/part=p0/a.parquet")
    vtable.catalog.drop_table(vtable.name)
    with pytest.raises(TableDropped):
        vacuum(reader_of(vtable), grace_ms=0)
    assert _exists(vtable, "data/part=p0/a.parquet")
    vtable.catalog.undrop_table(vtable.name)
    # a protocol-1 log may hold absolute paths anywhere: vacuum refuses to touch them
    name = TableName.parse(f"test.p1_{uuid.uuid4().hex[:12]}")
    TopicAdmin(vconfig).create(name)
    legacy = Catalog(vconfig).load_table(name)
    outside = Path(vconfig.warehouse).parent / f"elsewhere-{uuid.uuid4().hex[:6]}.parquet"
    outside.write_bytes(b"x")
    commits = [
        Commit(
            Commit.new_id(),
            name.qualified,
            Operation.APPEND,
            -1,
            "w",
            0,
            adds=(Segment("x", f"file://{outside}", 1, 1),),
        ),
        Commit(Commit.new_id(), name.qualified, Operation.DELETE, 0, "w", 0, drops=("x",)),
    ]
    produce_raw(vconfig, name.topic, [(c.commit_id.encode(), codec.encode_commit(c)) for c in commits])
    with pytest.raises(UnsafeLocation):
        vacuum(reader_of(legacy), retain_versions=1, grace_ms=0, ignore_leases=True)
    assert outside.exists()


@given(st.integers(max_value=-1) | st.integers(min_value=100 * 365 * 24 * 3600 * 1000 + 1) | st.booleans())
def test_durations_out_of_range_are_refused(value: int) -> None:
    with pytest.raises(InvalidArgument):
        check_duration(value, "grace")


@given(st.integers(max_value=0) | st.booleans())
def test_retain_versions_below_one_are_refused(value: int) -> None:
    with pytest.raises(InvalidArgument):
        check_retain_versions(value)


def test_racing_vacuum_never_deletes_a_live_or_leased_file(vconfig: Config, vtable: Table) -> None:
    """4 writers append and compact (under intents) while vacuum runs with no grace at all."""
    stop = threading.Event()
    errors: list[BaseException] = []

    def work(n: int) -> None:
        try:
            with load_catalog(vconfig).load_table(vtable.name, writer_id=f"w{n}") as writer:
                k = 0
                while not stop.is_set():
                    k += 1
                    with writer.intent("data/", ttl_s=30) as intent:
                        live = sorted(s for s in writer.refresh().segments if s.startswith(f"w{n}-"))
                        if len(live) >= 3 and k % 3 == 0:
                            commit = writer.new_commit(
                                Operation.COMPACT, drops=live[:2], adds=[_segment(vtable, f"w{n}-c{k}")]
                            )
                        else:
                            commit = writer.new_commit(
                                Operation.APPEND, adds=[_segment(vtable, f"w{n}-a{k}")]
                            )
                        with contextlib.suppress(CommitConflict):
                            intent.commit(commit)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    horizons = []
    deleted = 0
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            run = vacuum(reader_of(vtable), retain_versions=5, grace_ms=0)
            horizons.append(run.horizon)
            deleted += run.deleted
    finally:
        stop.set()
        for thread in threads:
            thread.join(60)
    assert not errors, errors
    assert len(horizons) >= 2
    final = vacuum(reader_of(vtable), retain_versions=5, grace_ms=0)
    assert deleted + final.deleted > 0  # compactions' inputs were collected while writers ran
    end = vtable.head_offset()
    for version in range(final.horizon, end + 1):
        snap = vtable.snapshot(version=version)
        missing = [p for p in snap.files() if not Path(p).exists()]
        assert not missing, f"version {version} lost {missing}"


def _parquet_with_provenance(path: Path, commit_id: str) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path.parent.mkdir(parents=True, exist_ok=True)
    table = pa.table({"id": [1]}).replace_schema_metadata({"segcat.commit_id": commit_id})
    pq.write_table(table, path)
    an_hour_ago = time.time() - 3600
    os.utime(path, (an_hour_ago, an_hour_ago))


def test_a_live_intent_keeps_its_own_files_not_a_dead_writer_s(vconfig: Config, vtable: Table) -> None:
    """Under one prefix: the live write's files (their footers name its intent) stay; a losing
    writer's (another commit id) go; a file without provenance stays (when in doubt, keep)."""
    root = Path(vtable.location())
    with load_catalog(vconfig).load_table(vtable.name) as writer:
        writer.append([_segment(vtable, "kept")])
        with writer.intent("data/", ttl_s=60, intent_id=str(uuid.uuid4())) as intent:
            mine = root / "data/day=1/part-mine.parquet"
            dead = root / "data/day=2/part-dead.parquet"
            unknown = root / "data/day=3/part-unknown.parquet"
            _parquet_with_provenance(mine, intent.intent_id)
            _parquet_with_provenance(dead, str(uuid.uuid4()))
            unknown.parent.mkdir(parents=True, exist_ok=True)
            unknown.write_bytes(b"not parquet")
            an_hour_ago = time.time() - 3600
            os.utime(unknown, (an_hour_ago, an_hour_ago))
            report = vacuum(reader_of(vtable), grace_ms=0)
            assert [Path(f.path).name for f in report.files] == ["part-dead.parquet"]
            assert mine.exists() and unknown.exists() and not dead.exists()
            assert report.kept_by_intent == 2
        report = vacuum(
            reader_of(vtable), grace_ms=0
        )  # the intent is closed (aborted): its files are orphans now
        assert sorted(Path(f.path).name for f in report.files) == [
            "part-mine.parquet",
            "part-unknown.parquet",
        ]


def test_drops_before_the_newest_key_frame_are_found_on_a_first_vacuum(
    vconfig: Config, vtable: Table, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    """A materializer wrote key frames after the drops: vacuum still replays from before them
    (regression: it started from the newest key frame and missed these drops)."""
    from tests.materializer_support import (
        materializer_config,
        running_materializer,
        wait_for_head,
        wait_until_following,
    )

    mconfig = materializer_config(vconfig, private_redis.url, tmp_path / "w", every=2)
    mconfig = replace(mconfig, warehouse=vconfig.warehouse)
    catalog = Catalog(mconfig)
    with running_materializer(mconfig, rf"^{vtable.name.topic.replace('.', '[.]')}$") as service:
        wait_until_following(service, vtable.name.qualified)  # live: a backlog gets one key frame
        with load_catalog(mconfig).load_table(vtable.name) as writer:
            writer.append([_segment(vtable, "a"), _segment(vtable, "b")])
            writer.compact(["a", "b"], [_segment(vtable, "ab")])
            for k in range(5):
                writer.append([_segment(vtable, f"n{k}")])
        wait_for_head(tables_of(catalog).redis, vtable.name.qualified, vtable.head_offset())  # type: ignore[arg-type]
    files = reader_of(vtable).files
    assert files is not None and len(files.keyframe_versions()) >= 3
    report = vacuum(
        reader_of(vtable), retain_versions=1, grace_ms=0, orphans=False, ignore_leases=True, dry_run=True
    )
    assert sorted(Path(f.path).name for f in report.files) == ["a.parquet", "b.parquet"]
    vacuum(reader_of(vtable), retain_versions=1, grace_ms=0, orphans=False, ignore_leases=True)
    again = vacuum(
        reader_of(vtable), retain_versions=1, grace_ms=0, orphans=False, ignore_leases=True, dry_run=True
    )
    assert again.files == []  # the record of the first run moves the next replay forward


def test_a_vacuum_killed_midway_is_finished_by_the_next_run(
    vconfig: Config, vtable: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    import segcat.catalog.read.vacuum as vacuum_module

    with load_catalog(vconfig).load_table(vtable.name) as writer:
        writer.append([_segment(vtable, f"s{k}") for k in range(6)])
        writer.compact([f"s{k}" for k in range(6)], [_segment(vtable, "merged")])
    monkeypatch.setattr(vacuum_module, "BATCH", 2)
    monkeypatch.setattr(vacuum_module, "DELETE_THREADS", 1)
    calls = []

    def die(done: int, total: int) -> None:
        calls.append(done)
        raise KeyboardInterrupt  # killed after the first batch

    with pytest.raises(KeyboardInterrupt):
        vacuum(reader_of(vtable), retain_versions=1, grace_ms=0, progress=die)
    left = [k for k in range(6) if _exists(vtable, f"data/part=p0/s{k}.parquet")]
    assert 0 < len(left) < 6 and _exists(vtable, "data/part=p0/merged.parquet")
    assert vtable.snapshot().segment_ids() == {"merged"}  # the table is consistent meanwhile
    report = vacuum(reader_of(vtable), retain_versions=1, grace_ms=0)
    assert report.deleted == len(left) and report.already_gone == 6 - len(left)
    assert not any(_exists(vtable, f"data/part=p0/s{k}.parquet") for k in range(6))


def _old(path: Path, seconds: float = 120) -> Path:
    """Make ``path`` look written ``seconds`` ago (the storage's clock is this machine's here)."""
    then = time.time() - seconds
    os.utime(path, (then, then))
    return path


def test_a_file_committed_while_vacuum_lists_data_is_kept(
    vconfig: Config, vtable: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 20, item 1: ``segcat commit`` registers a file written two minutes earlier while
    vacuum runs; the commit lands while ``data/`` is listed. The head read after the listing
    sees it (regression: the head was read first, and the file went as an orphan)."""
    old = _old(_write_file(vtable, "data/import/old.parquet"))
    real_listing = ObjectStore.list_files
    with load_catalog(vconfig).load_table(vtable.name) as writer:
        for k in range(3):
            writer.append([_segment(vtable, f"s{k}")])

        def listing_while_a_commit_lands(store: ObjectStore, prefix: str = "") -> list[tuple[str, int, int]]:
            found = real_listing(store, prefix)
            if prefix == "data":
                writer.append([Segment("old", "data/import/old.parquet", 64, 1, "import")])
            return found

        monkeypatch.setattr(ObjectStore, "list_files", listing_while_a_commit_lands)
        report = vacuum(reader_of(vtable), grace_ms=60_000)
    assert old.exists(), [f.path for f in report.files]
    assert "old" in vtable.snapshot().segment_ids() and report.files == []


def test_a_file_committed_after_the_plan_is_kept_by_the_recheck(vconfig: Config, vtable: Table) -> None:
    """Item 1, the rest of the race: commits land after vacuum read the head, before it deletes
    (a Spark listing, a long plan). Right before a batch goes the log is read again: a file
    registered by then stays, whether planned as an orphan or as a dropped file."""
    old = _old(_write_file(vtable, "data/import/old.parquet"))
    with load_catalog(vconfig).load_table(vtable.name) as writer:
        writer.append([_segment(vtable, "a")])
        writer.compact(["a"], [_segment(vtable, "b")])
        plan = vacuum(reader_of(vtable), retain_versions=1, grace_ms=0, dry_run=True)
        assert sorted((Path(f.path).name, f.reason) for f in plan.files) == [
            ("a.parquet", "dropped"),
            ("old.parquet", "orphan"),
        ]
        writer.append([Segment("old", "data/import/old.parquet", 64, 1, "import")])
        writer.append([Segment("a-again", "data/part=p0/a.parquet", 64, 1, "p0")])  # registered again
    execute(reader_of(vtable), plan)
    assert old.exists() and _exists(vtable, "data/part=p0/a.parquet")
    assert plan.deleted == 0 and plan.kept_by_recheck == 2 and plan.files == []
    missing = [p for p in vtable.snapshot().files() if not Path(p).exists()]
    assert not missing


def test_a_path_registered_again_is_judged_by_its_last_life(vconfig: Config, vtable: Table) -> None:
    """Item 2: a file added as segment a and dropped, and more than the grace period later added
    again as segment b and dropped: b's recent drop keeps it, whatever a's old drop says
    (regression: a's drop condemned the path)."""
    grace_ms = 3_000
    path = "data/part=p0/a.parquet"
    with load_catalog(vconfig).load_table(vtable.name) as writer:
        writer.append([_segment(vtable, "a")])
        writer.delete(drops=["a"])
        time.sleep(grace_ms / 1000 + 0.2)  # a's drop is now older than the grace (broker time)
        writer.append([Segment("b", path, 64, 1, "p0")])
        writer.delete(drops=["b"])
    drops = [h.timestamp_ms for h in vtable.history() if h.commit.drops]
    assert drops[1] - drops[0] > grace_ms
    report = vacuum(reader_of(vtable), grace_ms=grace_ms, orphans=False)
    head = vtable.snapshot()
    vacuum_now_at_most = broker_clock.now_ms(reader_of(vtable), head.protocol, head.version)
    if vacuum_now_at_most - drops[1] < grace_ms:  # (always, unless this machine stalled for seconds)
        assert _exists(vtable, path), report.files
        assert report.kept_by_grace == 1 and report.files == []


LIFE = st.tuples(st.sampled_from("pqrs"), st.integers(0, 12), st.one_of(st.none(), st.integers(0, 12)))


@given(st.lists(LIFE, max_size=12), st.integers(0, 12), st.integers(0, 12))
def test_dropped_files_are_decided_by_each_file_s_last_life(
    raw: list[tuple[str, int, int | None]], horizon: int, cutoff: int
) -> None:
    """Pure: a file goes iff no life of it reaches a version ≥ H and its newest drop is older
    than the cut-off; then once, as its last life. Drop times are the drop versions here."""
    lives = []
    for path, added, length in raw:
        dropped = None if length is None else added + 1 + length
        lives.append(SegmentLife(path, 1, added, dropped, -1 if dropped is None else dropped))
    doomed, kept = dropped_files(lives, lambda p: p, horizon, -1, cutoff)
    for path in "pqrs":
        group = [life for life in lives if life.path == path]
        out = [life for life in doomed if life.path == path]
        waiting = [life for life in kept if life.path == path]
        needed = any(life.dropped is None or life.dropped > horizon for life in group)
        if not group or needed:
            assert out == [] and waiting == []
            continue
        newest = max(life.dropped_ms for life in group)
        (decided,) = out + waiting
        assert decided.dropped == max(life.dropped or 0 for life in group)
        assert (out != []) is (newest <= cutoff)
