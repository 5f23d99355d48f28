"""Lifecycle: vacuum of dropped files, orphan scan in-process vs Spark, materializer
recovery and topic size before and after log pruning — one run.

    .venv/bin/python -m bench.lifecycle            # full run, updates docs/BENCHMARKS.md
    .venv/bin/python -m bench.lifecycle --quick    # smoke run: 100k files, 10k commits, doc untouched
    .venv/bin/python -m bench.lifecycle --render bench/results/lifecycle-<time>.json

1. ``vacuum``: 1,000,000 (quick: 100,000) empty files under ``<root>/data/d0000 …``, registered
   by APPEND commits of 5,000 segments and dropped by DELETE commits of 5,000 ids
   (``Table.append``), then ``vacuum(table, retain_versions=1, grace_ms=0, orphans=False,
   ignore_leases=True)`` in a child process of its own: wall time, files/s, CPU, and the
   child's peak RSS during the call (``VmHWM`` reset just before it; ``getrusage`` ``ru_maxrss``
   is kept too, but a spawned child inherits its parent's). The files are created again before each
   repetition and the table's ``_catalog/_vacuum`` record is removed, so every repetition is
   a first vacuum of the same log. One more run under cProfile; a bare ``os.unlink`` loop
   over the same tree is the floor.
2. ``orphans``: the same kind of tree on a table with no data commits (every file an orphan):
   (a) ``vacuum(table, grace_ms=0, ignore_leases=True, dry_run=True)`` (lists ``data/`` with
   pyarrow), (b) ``find_orphans_spark(...).count()`` on a ``local[2]`` session; floors: the
   pyarrow listing alone and the executors' listing code run in-process.
3. ``recovery``: a 100,000-commit (quick: 10,000) table of one-segment appends, materialized
   with a key frame every 1,000 commits; the topic's size on the broker, a fresh
   materializer's recovery (in-process ``TableMaterializer.recover()`` + replay to the end,
   and a materializer process with Redis flushed until its head reaches the end) and a cold
   reader's ``snapshot(version=…)`` of an old version; then ``table.prune_log()`` with an
   aggressive cleaner, and the same figures again once the broker holds none of the pruned
   records.

Tables: ``lifecycle_doc``; child processes and helpers: ``lifecycle_procs``.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench import lifecycle_doc, runner
from bench.lifecycle_procs import (
    Tree,
    alter_topic,
    broker_records,
    fresh_materializer,
    pending_deletions,
    run_vacuum,
    topic_files,
)
from bench.runner import Context, Results, counting, measure, progress
from segcat import load_catalog
from segcat.catalog.config import Config
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.model import Operation, Segment
from segcat.catalog.protocol.names import table_name
from segcat.catalog.read.table import TableReader, Tables
from segcat.local_stack.private import PrivateRedis

SCENARIOS = ("vacuum", "orphans", "recovery")
Config_Name = tuple[Config, str]
"""A table the run created, with the config that reaches it (dropped at the end)."""
AGGRESSIVE_CLEANER = {
    "min.compaction.lag.ms": "0",
    "segment.ms": "300",
    "min.cleanable.dirty.ratio": "0.0001",
    "delete.retention.ms": "200",
}
"""The topic settings tests/catalog/read/test_log_pruning.py uses so that compaction runs within seconds."""
RECOVER_FOCUS = (
    *("recover", "find_newest_valid_keyframe", "_read_latest", "read_keyframe", "from_parquet", "verify"),
    *("state", "state_from_keyframe", "decode_segments", "segment_from_avro", "from_keyframe"),
    *("raw_decode", "_sweep_temp_files", "index_paths"),
)
VACUUM_FOCUS = (
    *("vacuum", "replay", "catch_up", "apply_record", "decode_commit", "apply", "_delete", "delete_batch"),
    *("delete_file", "path_key", "canonical", "resolve", "is_absolute_uri", "_dedupe", "snapshot"),
)


@dataclass(frozen=True)
class Params:
    files: int
    dirs: int
    per_commit: int
    vacuum_reps: int
    orphan_reps: int
    commits: int
    writers: int
    keyframe_every: int
    recovery_reps: int
    snapshot_reps: int
    compaction_timeout_s: float

    @classmethod
    def of(cls, quick: bool, args: argparse.Namespace) -> Params:
        p = (
            cls(100_000, 100, 5_000, 3, 3, 10_000, 2, 1_000, 3, 5, 300.0)
            if quick
            else cls(1_000_000, 1_000, 5_000, 3, 3, 100_000, 2, 1_000, 3, 5, 900.0)
        )
        changes = {
            key: value
            for key, value in (("files", args.files), ("commits", args.commits), ("vacuum_reps", args.reps))
            if value is not None
        }
        if args.reps is not None:
            changes.update(orphan_reps=args.reps, recovery_reps=args.reps)
        return replace(p, **changes)


def options(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--files", type=int, help="files for the vacuum and orphan trees (default 1,000,000; quick 100,000)")
    add("--commits", type=int, help="commits of the recovery table (default 100,000; quick 10,000)")
    add("--reps", type=int, help="timed repetitions per measurement (default 3)")


def median(values: list[float]) -> float:
    return float(statistics.median(values))


def _median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    """Median of ``run[key]`` over the runs that have it, whole MB (None if none has)."""
    values = [r[key] for r in runs if r.get(key) is not None]
    return round(median(values)) if values else None


# --------------------------------------------------------------------------- 1. vacuum


def register_tree(
    config: Config, name: str, tree: Tree, per_commit: int, tick: runner.Tick
) -> dict[str, Any]:
    """APPEND every file of ``tree`` in commits of ``per_commit`` segments, then DELETE them all."""

    ids = [f"{tree.prefix}-{i:07d}" for i in range(tree.files)]
    append_ms: list[float] = []
    delete_ms: list[float] = []
    sizes: dict[str, int] = {}
    with load_catalog(config).load_table(name, writer_id="bench-lifecycle") as writer:
        for start in range(0, tree.files, per_commit):
            segments = [
                Segment(ids[i], tree.relative(i), 0, 0, tree.directory(i))
                for i in range(start, min(start + per_commit, tree.files))
            ]
            commit = writer.new_commit(Operation.APPEND, adds=segments)
            sizes.setdefault("append_bytes", len(codec.encode_commit(commit)))
            started = time.perf_counter()
            writer.commit(commit)
            append_ms.append((time.perf_counter() - started) * 1000)
            tick(len(segments))
        for start in range(0, tree.files, per_commit):
            drops = ids[start : start + per_commit]
            commit = writer.new_commit(Operation.DELETE, drops=drops)
            sizes.setdefault("delete_bytes", len(codec.encode_commit(commit)))
            started = time.perf_counter()
            writer.commit(commit)
            delete_ms.append((time.perf_counter() - started) * 1000)
            tick(len(drops))
        max_bytes = writer.topic.max_message_bytes
    return {
        "append_commits": len(append_ms),
        "delete_commits": len(delete_ms),
        "append_s": round(sum(append_ms) / 1000, 2),
        "delete_s": round(sum(delete_ms) / 1000, 2),
        "append_median_ms": round(median(append_ms), 1),
        "delete_median_ms": round(median(delete_ms), 1),
        "append_commit_bytes": sizes["append_bytes"],
        "delete_commit_bytes": sizes["delete_bytes"],
        "max_message_bytes": max_bytes,
    }


def forget_vacuum_run(table: TableReader) -> None:
    """Remove ``_catalog/_vacuum`` so the next vacuum starts over (a first vacuum of the log)."""
    files = table.files
    assert files is not None
    files.store.delete(f"{files.base}/_vacuum")


def vacuum_scenario(config: Config, p: Params, workdir: Path, ns: str, created: list[Config_Name]) -> Results:
    cfg = replace(config, warehouse=str(workdir / "vacuum-warehouse"))
    name = f"{ns}.vacuum"
    table = Tables(cfg).create_table(name)
    created.append((cfg, name))
    tree = Tree(Path(table.location()), p.files, p.dirs, "f")
    with counting(f"creating {p.files:,} files in {p.dirs:,} directories", p.files) as tick:
        first_create_s = tree.create(tick)
    with counting(f"registering and dropping them in commits of {p.per_commit:,}", 2 * p.files) as tick:
        registered = register_tree(cfg, name, tree, p.per_commit, tick)
    gc.collect()
    kwargs = {"retain_versions": 1, "grace_ms": 0, "orphans": False, "ignore_leases": True}
    runs: list[dict[str, Any]] = []
    create_s = [first_create_s]
    for rep in range(p.vacuum_reps):
        if rep:
            forget_vacuum_run(table)
            create_s.append(tree.create())
        progress(f"vacuum {rep + 1}/{p.vacuum_reps} of {p.files:,} dropped files")
        (run,) = run_vacuum(cfg, name, kwargs)
        if run["deleted"] != p.files or tree.count() != 0:
            raise AssertionError(f"vacuum deleted {run['deleted']:,} of {p.files:,}: {run}")
        progress(f"  {run['seconds']:.1f} s, peak RSS {run['peak_rss_mb']} MB")
        runs.append(run)
    progress("one more vacuum under cProfile")
    forget_vacuum_run(table)
    create_s.append(tree.create())
    profile_path = workdir / "vacuum.prof"
    (profiled,) = run_vacuum(cfg, name, kwargs, profile_to=profile_path)
    profile = runner.profile_file(profile_path, top=15, focus=VACUUM_FOCUS)
    progress("floor: a bare os.unlink loop over the same tree")
    create_s.append(tree.create())
    unlink_s = tree.unlink_all()
    seconds = [r["seconds"] for r in runs]
    split_keys = sorted({k for r in runs for k in r["split_s"]})
    return {
        "table": name,
        "files": p.files,
        "dirs": p.dirs,
        "setup": {
            "create_files_s": [round(s, 1) for s in create_s],
            "create_files_median_s": round(median(create_s), 1),
            **registered,
        },
        "runs": runs,
        "median_s": round(median(seconds), 2),
        "files_per_s": round(p.files / median(seconds)),
        "median_cpu_s": round(median([r["cpu_s"] for r in runs]), 2),
        "peak_rss_mb": _median_of(runs, "peak_rss_mb"),
        "rss_start_mb": _median_of(runs, "rss_start_mb"),
        "ru_maxrss_mb": _median_of(runs, "ru_maxrss_mb"),
        "median_split_s": {k: round(median([r["split_s"].get(k, 0.0) for r in runs]), 2) for k in split_keys},
        "profiled_s": profiled["seconds"],
        "profile": profile,
        "unlink_floor_s": round(unlink_s, 2),
        "unlink_floor_files_per_s": round(p.files / unlink_s),
    }


# --------------------------------------------------------------------------- 2. orphans


def _spark_session() -> Any:
    from segcat.spark_integration.session import local_session

    spark = local_session(
        "segcat-bench-lifecycle",
        "local[2]",
        shuffle_partitions=2,
        conf={"spark.sql.adaptive.enabled": "true", "spark.default.parallelism": "2"},
    )
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def orphans_scenario(
    config: Config, p: Params, workdir: Path, ns: str, created: list[Config_Name]
) -> Results:
    import pyarrow as pa
    import pyarrow.fs as pafs

    from segcat.catalog.storage.objectstore import ObjectStore
    from segcat.spark_integration.vacuum import _list_directories, find_orphans_spark

    cfg = replace(config, warehouse=str(workdir / "orphans-warehouse"))
    name = f"{ns}.orphans"
    table = Tables(cfg).create_table(name)
    created.append((cfg, name))
    root = table.location()
    tree = Tree(Path(root), p.files, p.dirs, "o")
    with counting(f"creating {p.files:,} orphan files in {p.dirs:,} directories", p.files) as tick:
        create_s = tree.create(tick)
    time.sleep(0.01)  # every file strictly older than the scans' "now"

    def expect(count: int) -> Callable[[int], None]:
        def check(found: int) -> None:
            if found != count:
                raise AssertionError(f"found {found:,} orphans, expected {count:,}")

        return check

    progress(f"in-process vacuum dry run: 1 warm-up + {p.orphan_reps}")
    kwargs = {"grace_ms": 0, "ignore_leases": True, "dry_run": True}
    inproc = run_vacuum(cfg, name, kwargs, reps=1 + p.orphan_reps)
    for run in inproc:
        expect(p.files)(run["by_reason"].get("orphan", {}).get("files", 0))
    timed = inproc[1:]

    progress("floors: the pyarrow listing alone, and the Spark executors' listing code in-process")
    fs = pafs.LocalFileSystem()
    listing = measure(
        lambda: sum(
            1
            for i in fs.get_file_info(pafs.FileSelector(f"{root}/data", recursive=True))
            if i.type == pafs.FileType.File
        ),
        reps=p.orphan_reps,
        check=expect(p.files),
    )
    store = ObjectStore.from_uri(root)
    store_listing = measure(lambda: len(store.list_files("data")), reps=p.orphan_reps, check=expect(p.files))
    dirs = pa.RecordBatch.from_pydict({"directory": [f"data/d{d:04d}" for d in range(p.dirs)]})

    def executor_body() -> int:
        body = _list_directories(
            iter([dirs]),
            root=root,
            s3_endpoint=None,
            s3_region=None,
            protected=(),
            older_than_ms=int(time.time() * 1000),
        )
        return sum(batch.num_rows for batch in body)

    executor = measure(executor_body, reps=p.orphan_reps, check=expect(p.files))

    progress("Spark: local[2] session")
    started = time.perf_counter()
    spark = _spark_session()
    session_s = time.perf_counter() - started
    spark_runs: list[dict[str, float]] = []
    try:
        for rep in range(1 + p.orphan_reps):
            gc.collect()
            t0 = time.perf_counter()
            frame = find_orphans_spark(spark, root, [], [], int(time.time() * 1000))
            t1 = time.perf_counter()
            found = frame.count()
            t2 = time.perf_counter()
            expect(p.files)(found)
            spark_runs.append(
                {"plan_s": round(t1 - t0, 3), "count_s": round(t2 - t1, 3), "total_s": round(t2 - t0, 3)}
            )
            progress(
                f"  Spark run {rep + 1}/{1 + p.orphan_reps}"
                f"{' (warm-up)' if rep == 0 else ''}: {t2 - t0:.1f} s"
            )
        tasks = spark.sparkContext.defaultParallelism
    finally:
        spark.stop()
    spark_timed = spark_runs[1:]
    inproc_s = median([r["seconds"] for r in timed])
    spark_s = median([r["total_s"] for r in spark_timed])
    return {
        "table": name,
        "files": p.files,
        "dirs": p.dirs,
        "create_files_s": round(create_s, 1),
        "in_process": {
            "runs": inproc,
            "warmup": 1,
            "median_s": round(inproc_s, 2),
            "files_per_s": round(p.files / inproc_s),
            "median_cpu_s": round(median([r["cpu_s"] for r in timed]), 2),
            "peak_rss_mb": _median_of(timed, "peak_rss_mb"),
            "rss_start_mb": _median_of(timed, "rss_start_mb"),
            "median_split_s": {
                k: round(median([r["split_s"].get(k, 0.0) for r in timed]), 2)
                for k in sorted({k for r in timed for k in r["split_s"]})
            },
        },
        "floors": {
            "pyarrow_listing": listing.to_json(),
            "objectstore_list_files": store_listing.to_json(),
            "executor_listing_in_process": executor.to_json(),
        },
        "spark": {
            "session_start_s": round(session_s, 1),
            "tasks": tasks,
            "runs": spark_runs,
            "warmup": 1,
            "median_s": round(spark_s, 2),
            "median_plan_s": round(median([r["plan_s"] for r in spark_timed]), 2),
            "median_count_s": round(median([r["count_s"] for r in spark_timed]), 2),
            "files_per_s": round(p.files / spark_s),
        },
        "spark_over_in_process": round(spark_s / inproc_s, 2),
    }


# --------------------------------------------------------------------------- 3. recovery and pruning


def recover_in_process(config: Config, table: str, end: int) -> dict[str, float]:
    """``TableMaterializer(…, redis=None).recover()`` then every record after it applied, to ``end``."""
    from segcat.catalog.log.reader import LogReader
    from segcat.materializer.table_materializer import TableMaterializer

    name = table_name(table)
    files = _bound_files(config, table)
    gc.collect()
    t0 = time.perf_counter()
    materializer = TableMaterializer(name, config, None, files)
    next_offset = materializer.recover()
    t1 = time.perf_counter()
    applied = 0
    with LogReader(config, name) as reader:
        for record in reader.read(next_offset, end + 1):
            materializer.apply(record, notify=False)
            applied += 1
    t2 = time.perf_counter()
    if materializer.state.version != end:
        raise AssertionError(f"recovered to {materializer.state.version}, expected {end}")
    return {
        "recover_s": round(t1 - t0, 3),
        "replay_s": round(t2 - t1, 3),
        "total_s": round(t2 - t0, 3),
        "keyframe_version": next_offset - 1,
        "records_replayed": applied,
        "live_segments": materializer.state.live_count,
    }


def _bound_files(config: Config, table: str) -> Any:
    """The table's objects as the materializer service wrote them: bound to its topic's log."""
    from segcat.catalog.log.topics import TopicAdmin
    from segcat.catalog.storage.objectstore import ObjectStore
    from segcat.catalog.storage.table_files import TableFiles

    name = table_name(table)
    return TableFiles(ObjectStore.from_config(config), name, TopicAdmin(config).describe(name).topic_id)


def profile_recover(config: Config, table: str) -> dict[str, Any]:
    """cProfile of one ``TableMaterializer.recover()`` (after one unprofiled call)."""
    from segcat.materializer.table_materializer import TableMaterializer

    name = table_name(table)
    files = _bound_files(config, table)

    def once() -> None:
        TableMaterializer(name, config, None, files).recover()

    return runner.profile(once, calls=1, top=12, focus=RECOVER_FOCUS)


def recover_service(config: Config, redis: PrivateRedis, table: str, end: int) -> dict[str, Any]:
    """Redis flushed, then a fresh materializer process until its Redis head reaches ``end``."""
    redis.flushall()
    result = fresh_materializer(config, table, end)
    marks, recovered = result["marks"], result["recover"]
    if "head_reached" not in marks:
        raise AssertionError(f"the materializer did not reach {end}: {result}")
    return {
        "from_construction_s": round(marks["head_reached"] - marks["constructed"], 3),
        "from_spawn_s": round(marks["head_reached"] - marks["spawned"], 3),
        "interpreter_and_imports_s": round(marks["imported"] - marks["spawned"], 3),
        "to_assignment_s": round(recovered.get("start", marks["head_reached"]) - marks["constructed"], 3),
        "recover_s": round(recovered.get("end", 0.0) - recovered.get("start", 0.0), 3),
        "recover_to_head_s": round(marks["head_reached"] - recovered.get("end", marks["constructed"]), 3),
        "keyframe_version": int(recovered.get("next_offset", 0)) - 1,
        "process_cpu_s": result["process_cpu_s"],
    }


def cold_snapshot(
    config: Config, table: str, version: int, expected: frozenset[str], reps: int
) -> dict[str, Any]:
    """``Tables(config).open(t).snapshot(version=…)``, a new Catalog (no warm clients) each time."""
    opens: list[float] = []
    snaps: list[float] = []
    origins: set[str] = set()
    for _ in range(reps):
        gc.collect()
        t0 = time.perf_counter()
        handle = Tables(config).open(table)
        t1 = time.perf_counter()
        snap = handle.snapshot(version=version)
        t2 = time.perf_counter()
        if snap.version != version or snap.segment_ids() != expected:
            raise AssertionError(
                f"snapshot({version}) gave version {snap.version}, {snap.live_count} segments"
            )
        opens.append((t1 - t0) * 1000)
        snaps.append((t2 - t1) * 1000)
        origins.add(snap.origin)
    return {
        "version": version,
        "live_segments": len(expected),
        "open_ms": runner.summary(opens),
        "snapshot_ms": runner.summary(snaps),
        "origins": sorted(origins),
    }


def catalog_bytes(config: Config, table: str) -> dict[str, int]:
    """Bytes the table keeps on object storage: key frames, commit archives, the rest of ``_catalog``."""
    name = table_name(table)
    base = Path(config.warehouse) / name.namespace / name.table / "_catalog"
    out = {"keyframe_bytes": 0, "keyframes": 0, "archive_bytes": 0, "archives": 0, "other_bytes": 0}
    for path in base.rglob("*"):
        if not path.is_file():
            continue
        size = path.stat().st_size
        if path.parent.name == "keyframes":
            out["keyframe_bytes"] += size
            out["keyframes"] += 1
        elif path.parent.name == "commits":
            out["archive_bytes"] += size
            out["archives"] += 1
        else:
            out["other_bytes"] += size
    return out


def measure_state(
    config: Config,
    redis: PrivateRedis,
    table: str,
    p: Params,
    version: int,
    expected: frozenset[str],
    label: str,
) -> dict[str, Any]:
    """Topic size, recovery (in-process and a materializer process) and a cold old-version read."""
    handle = Tables(config).open(table)
    end = handle.log_end()
    sizes = topic_files(config, table_name(table).topic)
    records = broker_records(config, table)
    progress(
        f"{label}: log end {end:,}; broker holds {records['records']:,} records"
        + (f", {sizes['log_bytes'] / 1e6:,.1f} MB in {sizes['segments']} log segment files" if sizes else "")
    )
    progress(f"{label}: in-process recover + replay, 1 warm-up + {p.recovery_reps}")
    inproc = [recover_in_process(config, table, end) for _ in range(1 + p.recovery_reps)]
    progress(f"{label}: fresh materializer processes (Redis flushed before each), {p.recovery_reps}")
    service = [recover_service(config, redis, table, end) for _ in range(p.recovery_reps)]
    progress(f"{label}: cold snapshot(version={version:,}), {p.snapshot_reps} times")
    snap = cold_snapshot(config, table, version, expected, p.snapshot_reps)
    timed = inproc[1:]
    return {
        "log_end": end,
        "log_start": handle.log_start(),
        "topic_files": sizes,
        "broker_records": records,
        "object_storage": catalog_bytes(config, table),
        "in_process": {
            "runs": inproc,
            "warmup": 1,
            "median_recover_s": round(median([r["recover_s"] for r in timed]), 3),
            "median_replay_s": round(median([r["replay_s"] for r in timed]), 3),
            "median_total_s": round(median([r["total_s"] for r in timed]), 3),
        },
        "service": {
            "runs": service,
            "median_from_construction_s": round(median([r["from_construction_s"] for r in service]), 3),
            "median_from_spawn_s": round(median([r["from_spawn_s"] for r in service]), 3),
            "median_recover_s": round(median([r["recover_s"] for r in service]), 3),
        },
        "cold_snapshot": snap,
    }


def wait_for_compaction(
    config: Config, table: str, prune_point: int, timeout_s: float, roll: Callable[[], None]
) -> dict[str, Any]:
    """Until the broker holds no record ≤ ``prune_point`` and no null record, committing one
    small append every few seconds meanwhile (the cleaner only cleans a dirty log), then until
    the segment files the cleaner replaced are gone from the broker's directory."""
    started = time.monotonic()
    marks: dict[str, float] = {}
    rolls = 0
    last_roll = 0.0
    state: dict[str, int] = {}
    while time.monotonic() - started < timeout_s:
        if time.monotonic() - last_roll >= 3.0:
            roll()
            rolls += 1
            last_roll = time.monotonic()
        time.sleep(1.0)
        state = broker_records(config, table, prune_point)
        elapsed = round(time.monotonic() - started, 1)
        if state["at_or_before_prune_point"] == 0 and "pruned_records_gone_s" not in marks:
            marks["pruned_records_gone_s"] = elapsed
            progress(f"  no record ≤ {prune_point:,} left after {elapsed:.0f} s")
        if "pruned_records_gone_s" in marks and state["null_records"] == 0:
            marks["null_records_gone_s"] = elapsed
            progress(f"  no null record left after {elapsed:.0f} s")
            break
    # the cleaner renames replaced segments to *.deleted and removes them file.delete.delay.ms later
    pending: list[str] = []
    while time.monotonic() - started < timeout_s:
        pending = pending_deletions(config, table_name(table).topic)
        if not pending:
            marks["replaced_files_gone_s"] = round(time.monotonic() - started, 1)
            progress(f"  no replaced segment file left after {marks['replaced_files_gone_s']:.0f} s")
            break
        time.sleep(2.0)
    return {
        **marks,
        "roll_commits": rolls,
        "last_state": state,
        "pending_deletions": pending,
        "timed_out": "null_records_gone_s" not in marks or "replaced_files_gone_s" not in marks,
    }


def recovery_scenario(
    config: Config, p: Params, workdir: Path, ns: str, created: list[Config_Name]
) -> Results:
    from bench.read_processes import materializer_config, materializer_process, write_in_processes
    from bench.read_segcat import wait_for_offset

    redis = PrivateRedis(workdir / "redis")
    redis.start()
    try:
        base = replace(
            config.with_services(config.bootstrap_servers, redis.url),
            warehouse=str(workdir / "recovery-warehouse"),
        )
        cfg = materializer_config(base, p.keyframe_every)
        name = f"{ns}.recovery"
        catalog = Tables(cfg)
        assert catalog.redis is not None
        table = catalog.create_table(name)
        created.append((cfg, name))
        share, rest = divmod(p.commits, p.writers)
        plans = [(f"w{w}", [1] * (share + (1 if w < rest else 0))) for w in range(p.writers)]
        progress(f"writing {p.commits:,} one-segment appends from {p.writers} writer processes")
        write_started = time.perf_counter()
        writers = write_in_processes(cfg, name, plans)
        write_s = time.perf_counter() - write_started
        end = table.log_end()
        progress(
            f"  {write_s:.0f} s ({p.commits / write_s:,.0f} commits/s); "
            f"materializing (K = {p.keyframe_every:,})"
        )
        catchup_started = time.perf_counter()
        with materializer_process(cfg, name):
            wait_for_offset(catalog.redis, name, end, timeout_s=3600)
        catchup_s = time.perf_counter() - catchup_started
        files = table.files
        assert files is not None
        frames = files.keyframe_versions()
        # an old version between two key frames, so the read needs a key frame and archives
        middle = [v for v in frames if v <= end // 2] or frames[:1]
        after = [v for v in frames if v > middle[-1]]
        version = (middle[-1] + after[0]) // 2 if after else end // 2
        expected = frozenset(table.snapshot(version=version, sources=("kafka",)).segment_ids())
        before = measure_state(cfg, redis, name, p, version, expected, "before pruning")
        progress("one more recover() under cProfile")
        recover_profile = profile_recover(cfg, name)

        progress("pruning: aggressive cleaner settings, prune_log(), then waiting for the log cleaner")
        alter_topic(cfg, table.name.topic, AGGRESSIVE_CLEANER)
        with (
            materializer_process(cfg, name),
            load_catalog(cfg).load_table(name, writer_id="bench-lifecycle-roll") as writer,
        ):
            prune_started = time.perf_counter()
            result = table.prune_log()
            prune_s = time.perf_counter() - prune_started
            prune_point = result.plan.prune_point
            progress(
                f"  prune point {prune_point:,} ({result.plan.limit}), {len(result.plan.nulls):,} "
                f"null records, marker at {result.marker_version} ({prune_s:.1f} s)"
            )
            counter = [0]

            def roll() -> None:
                writer.append([Segment(f"roll-{counter[0]}", f"data/roll/roll-{counter[0]}.parquet", 0, 0)])
                counter[0] += 1

            compaction = wait_for_compaction(cfg, name, prune_point, p.compaction_timeout_s, roll)
            wait_for_offset(catalog.redis, name, table.log_end(), timeout_s=600)
        if version > prune_point:
            raise AssertionError(f"version {version} is not pruned (prune point {prune_point})")
        after_prune = measure_state(cfg, redis, name, p, version, expected, "after pruning")
        return {
            "table": name,
            "commits": p.commits,
            "writers": p.writers,
            "keyframe_every": p.keyframe_every,
            "setup": {
                "write_s": round(write_s, 1),
                "commits_per_s": round(p.commits / write_s),
                "writer_s": [round(w["seconds"], 1) for w in writers],
                "initial_catchup_s": round(catchup_s, 1),
                "keyframes": len(frames),
                "newest_keyframe": frames[-1] if frames else None,
            },
            "snapshot_version": version,
            "before": before,
            "recover_profile": recover_profile,
            "prune": {
                "prune_point": prune_point,
                "limit": result.plan.limit,
                "null_records": len(result.plan.nulls),
                "kept_keys": len(result.plan.kept_keys),
                "marker_version": result.marker_version,
                "prune_log_s": round(prune_s, 2),
                "cleaner_settings": AGGRESSIVE_CLEANER,
                **compaction,
            },
            "after": after_prune,
        }
    finally:
        redis.stop()


# --------------------------------------------------------------------------- the benchmark


def drop_tables(created: list[Config_Name]) -> None:
    for cfg, name in created:
        try:
            TopicAdmin(cfg).delete(table_name(name))
        except Exception as exc:  # cleanup is best effort
            progress(f"could not drop {name}: {exc}")


def source_digest() -> str:
    """SHA-256 (12 hex digits) of segcat's Python sources: other work may change them mid-run."""
    digest = hashlib.sha256()
    for folder in ("catalog", "producers", "materializer", "spark_integration"):
        for path in sorted((runner.REPO / folder).rglob("*.py")):
            digest.update(str(path.relative_to(runner.REPO)).encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def run(ctx: Context) -> Results:
    p = Params.of(ctx.quick, ctx.args)
    digest = source_digest()
    ns = f"lc{uuid.uuid4().hex[:8]}"
    workdir = Path(tempfile.mkdtemp(prefix="segcat-bench-lifecycle-"))
    created: list[Config_Name] = []
    out: Results = {"params": asdict(p), "namespace": ns, "pyspark": runner.package_version("pyspark")}
    steps = {"vacuum": vacuum_scenario, "orphans": orphans_scenario, "recovery": recovery_scenario}
    try:
        for scenario in ctx.only:
            started, load = time.perf_counter(), runner.loadavg()
            out[scenario] = steps[scenario](ctx.config, p, workdir, ns, created)
            out[scenario]["scenario_s"] = round(time.perf_counter() - started, 1)
            out[scenario]["loadavg"] = {"start": load, "end": runner.loadavg()}
            progress(f"{scenario} done in {out[scenario]['scenario_s']:.0f} s")
        after = source_digest()
        out["source_digest"] = {"start": digest, "end": after, "changed": after != digest}
        if after != digest:
            progress(f"WARNING: segcat's source changed during the run ({digest} → {after})")
    finally:
        if ctx.args.keep:
            progress(f"kept tables {[n for _, n in created]} and files under {workdir}")
        else:
            drop_tables(created)
            shutil.rmtree(workdir, ignore_errors=True)
    return out


BENCHMARK = runner.Benchmark(
    name="lifecycle",
    module="bench.lifecycle",
    description="Vacuum, orphan scan (in-process vs Spark), recovery and topic size around log pruning.",
    scenarios=SCENARIOS,
    run=run,
    render=lifecycle_doc.render,
    details=lifecycle_doc.details,
    options=options,
    command_prefix="SPARK_LOCAL_IP=127.0.0.1 ",
    wait_for_others_s=900.0,
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCHMARK))
