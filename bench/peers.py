"""delta-rs and pyiceberg, as the benchmarks drive them: one schema, one catalog set-up, real files.

Both peers commit metadata only; their data files are written beforehand, outside any timing.

- delta-rs: ``DeltaTable.create`` on a local directory, then ``create_write_transaction`` of
  ``AddAction``s carrying file stats as JSON (numRecords, min, max, nullCount).
- pyiceberg: ``SqlCatalog`` on sqlite with a local warehouse directory, ``table.add_files``.

Commit latency (``run_delta``, ``run_iceberg``): one long-lived table object (like segcat's
long-lived writer), one untimed warm-up commit, then one timed commit per distinct 100-row file,
defaults otherwise (delta-rs checkpoints at its default interval; pyiceberg reads each footer
and checks for duplicate files).

Read paths (``build_delta``, ``build_iceberg``): the same commit plan as the segcat table they
are compared with. The files are one tiny Parquet file hard-linked under every name, so 50k
entries cost seconds (pyiceberg's ``add_files`` reads every footer, so the files must exist;
delta-rs gets the same files for symmetry). The delta-rs list table gets an explicit
``create_checkpoint()`` right after the bulk commits (where segcat writes its key frame); the
time-travel table uses ``delta.checkpointInterval`` = segcat's K. pyiceberg appends with
``check_duplicate_files=False`` (fast appends: one manifest per commit).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.commit_runs import CpuMeter, Run, timed_commits
from bench.runner import Tick, measure

ROWS = 100
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=True), pa.field("name", pa.string(), nullable=True)])


def _rows(ids: list[int], names: list[str]) -> pa.Table:
    return pa.Table.from_pydict({"id": ids, "name": names}, schema=SCHEMA)


def _stats(ids: list[int], names: list[str]) -> str:
    return json.dumps(
        {
            "numRecords": len(ids),
            "minValues": {"id": min(ids), "name": min(names)},
            "maxValues": {"id": max(ids), "name": max(names)},
            "nullCount": {"id": 0, "name": 0},
        }
    )


def _add(path: str, size: int, mtime_ms: int, stats: str) -> Any:
    from deltalake.transaction import AddAction

    return AddAction(
        path=path, size=size, partition_values={}, modification_time=mtime_ms, data_change=True, stats=stats
    )


def iceberg_catalog(root: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = root / "warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    return SqlCatalog("bench", uri=f"sqlite:///{root / 'segcat.catalog.db'}", warehouse=f"file://{warehouse}")


# --------------------------------------------------------------------------- commit latency


def _distinct_files(directory: Path, count: int) -> list[tuple[Path, str]]:
    """``count`` small real Parquet files of different rows, each with its stats JSON."""
    directory.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(count):
        ids = list(range(i * ROWS, (i + 1) * ROWS))
        names = [f"name-{v % 26:02d}" for v in ids]
        path = directory / f"part-{i:06d}.parquet"
        pq.write_table(_rows(ids, names), path)
        out.append((path, _stats(ids, names)))
    return out


def run_delta(workdir: Path, commits: int, *, tick: Tick, meter: CpuMeter | None = None) -> Run:
    """``commits`` sequential one-file append transactions on a local Delta table."""
    import deltalake
    from deltalake import DeltaTable

    root = workdir / "delta_table"
    DeltaTable.create(str(root), schema=SCHEMA, name="commits")
    actions = [  # index 0 is the warm-up
        _add(p.name, p.stat().st_size, int(p.stat().st_mtime * 1000), stats)
        for p, stats in _distinct_files(root, commits + 1)
    ]
    table = DeltaTable(str(root))

    def commit(action: Any) -> None:
        table.create_write_transaction([action], mode="append", schema=SCHEMA)

    commit(actions[0])
    run = timed_commits("delta-rs", "sequential", actions[1:], commit, tick=tick, meter=meter)
    check = DeltaTable(str(root))
    live = len(check.file_uris())
    if live != commits + 1:
        raise AssertionError(f"delta table has {live} files, expected {commits + 1}")
    run.details.update(
        deltalake_version=deltalake.__version__,
        table_version_after=check.version(),
        live_files_after=live,
        checkpoints=len(list((root / "_delta_log").glob("*.checkpoint*.parquet"))),
    )
    return run


def run_iceberg(workdir: Path, commits: int, *, tick: Tick, meter: CpuMeter | None = None) -> Run:
    """``commits`` sequential ``add_files`` commits on a pyiceberg table in a sqlite catalog."""
    import pyiceberg

    root = workdir / "iceberg"
    catalog = iceberg_catalog(root)
    catalog.create_namespace("bench")
    table = catalog.create_table("bench.commits", schema=SCHEMA)
    files = [str(p) for p, _ in _distinct_files(root / "data", commits + 1)]

    def commit(path: str) -> None:
        table.add_files([path])

    commit(files[0])
    run = timed_commits("pyiceberg", "sequential", files[1:], commit, tick=tick, meter=meter)
    check = catalog.load_table("bench.commits")
    live = len(check.inspect.files())
    if live != commits + 1:
        raise AssertionError(f"iceberg table has {live} data files, expected {commits + 1}")
    run.details.update(
        pyiceberg_version=pyiceberg.__version__,
        snapshots_after=len(check.snapshots()),
        live_files_after=live,
        catalog="SqlCatalog (sqlite)",
    )
    return run


# --------------------------------------------------------------------------- read paths

LINKED_ROWS = (list(range(ROWS)), ["alpha" if i == 0 else "omega" for i in range(ROWS)])
LINKED_STATS = _stats(*LINKED_ROWS)


def linked_files(directory: Path, plan: list[int], source_dir: Path) -> list[list[Path]]:
    """The files of each commit of ``plan``: names for one tiny Parquet file in ``source_dir``
    (hard links: seconds for 50k, no extra space)."""
    source = source_dir / "source.parquet"
    if not source.exists():
        source_dir.mkdir(parents=True, exist_ok=True)
        pq.write_table(_rows(*LINKED_ROWS), source)
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / f"part-{i:07d}.parquet" for i in range(sum(plan))]
    for path in paths:
        if not path.exists():
            os.link(source, path)
    starts = [sum(plan[:n]) for n in range(len(plan))]
    return [paths[start : start + count] for start, count in zip(starts, plan, strict=True)]


@dataclass
class Built:
    """A peer table built to a plan: how to list it, each commit's version or snapshot, details."""

    list_files: Callable[[int | None], list[str]]
    """Every live file's path at a version / snapshot id (None: the latest)."""
    versions: list[int]
    details: dict[str, Any]


def build_delta(
    root: Path,
    plan: list[int],
    *,
    checkpoint_after: int | None = None,
    checkpoint_interval: int | None = None,
) -> Built:
    import deltalake
    from deltalake import DeltaTable

    configuration = {"delta.checkpointInterval": str(checkpoint_interval)} if checkpoint_interval else None
    DeltaTable.create(str(root), schema=SCHEMA, name="bench", configuration=configuration)
    batches = linked_files(root / "data", plan, root.parent / f"{root.name}-src")
    first = batches[0][0].stat()
    table = DeltaTable(str(root))
    for n, batch in enumerate(batches, start=1):
        actions = [
            _add(f"data/{p.name}", first.st_size, int(first.st_mtime * 1000), LINKED_STATS) for p in batch
        ]
        table.create_write_transaction(actions, mode="append", schema=SCHEMA)
        if checkpoint_after is not None and n == checkpoint_after:
            DeltaTable(str(root)).create_checkpoint()  # a fresh handle: ``table`` stays at its load version
    if DeltaTable(str(root)).version() != len(plan):
        raise AssertionError(f"delta table is at version {DeltaTable(str(root)).version()}, not {len(plan)}")
    log = root / "_delta_log"
    checkpoint = "none"
    if checkpoint_after:
        checkpoint = f"explicit create_checkpoint() after commit {checkpoint_after}"
    elif checkpoint_interval:
        checkpoint = f"post-commit hook, delta.checkpointInterval={checkpoint_interval}"

    def list_files(version: int | None) -> list[str]:
        return list(
            (DeltaTable(str(root)) if version is None else DeltaTable(str(root), version=version)).file_uris()
        )

    return Built(
        list_files,
        list(range(1, len(plan) + 1)),  # version 0 is the table's creation
        {
            "deltalake_version": deltalake.__version__,
            "commits": len(plan),
            "files": sum(plan),
            "version_after": len(plan),
            "checkpoint_versions": sorted(
                int(p.name.split(".")[0]) for p in log.glob("*.checkpoint*.parquet")
            ),
            "checkpoint": checkpoint,
        },
    )


def build_iceberg(catalog: Any, identifier: str, data_dir: Path, plan: list[int]) -> Built:
    import pyiceberg

    namespace = identifier.split(".")[0]
    if (namespace,) not in catalog.list_namespaces():
        catalog.create_namespace(namespace)
    table = catalog.create_table(identifier, schema=SCHEMA)
    snapshot_ids = []
    for batch in linked_files(data_dir, plan, data_dir.parent / f"{data_dir.name}-src"):
        table.add_files([str(p) for p in batch], check_duplicate_files=False)
        snapshot_ids.append(table.current_snapshot().snapshot_id)

    def list_files(snapshot_id: int | None) -> list[str]:
        loaded = catalog.load_table(identifier)
        scan = loaded.scan() if snapshot_id is None else loaded.scan(snapshot_id=snapshot_id)
        return [task.file.file_path for task in scan.plan_files()]

    return Built(
        list_files,
        snapshot_ids,
        {
            "pyiceberg_version": pyiceberg.__version__,
            "catalog": "SqlCatalog (sqlite), local warehouse directory",
            "commits": len(plan),
            "files": sum(plan),
            "manifests_at_head": len(table.current_snapshot().manifests(table.io)),
            "how": "add_files(check_duplicate_files=False) per commit: fast append, one manifest each",
        },
    )


def measure_listing(
    built: Built, expected: int, reps: int, fast_reps: int, *, at: int | None = None, **details: Any
) -> dict[str, Any]:
    """Open + list (at a version / snapshot id), each listing checked against ``expected`` files."""

    def check(files: list[str]) -> None:
        if len(files) != expected:
            raise AssertionError(f"listed {len(files)} files, expected {expected}")

    timing = measure(lambda: built.list_files(at), reps=reps, fast_reps=fast_reps, check=check)
    return {**timing.to_json(), "details": {**built.details, **details}}
