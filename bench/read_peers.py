"""delta-rs and pyiceberg beside segcat: the same table shapes, listed and time-travelled.

Both peers get the same commit plan as the segcat table they are compared with (same
files per commit, same number of commits). Data files are real but tiny: one 100-row
Parquet file written once and hard-linked under every file name, so building 50k
entries costs seconds (pyiceberg's ``add_files`` reads every file's footer, so its files
must exist; delta-rs gets the same files for symmetry).

- delta-rs: ``DeltaTable.create`` then one ``create_write_transaction`` of N ``AddAction``s
  (with JSON stats: numRecords, min, max, nullCount) per commit. The list table gets an
  explicit ``create_checkpoint()`` right after the bulk commits (where segcat writes its
  key frame), then the tail commits as JSON; the time-travel table uses
  ``delta.checkpointInterval`` = segcat's K (checkpoints by the post-commit hook).
- pyiceberg: ``SqlCatalog`` on sqlite, a local warehouse directory, one ``add_files(paths,
  check_duplicate_files=False)`` per commit (fast appends: one manifest per commit).
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

from bench.read_common import Timing, measure

ROWS = 100
SCHEMA = pa.schema([pa.field("id", pa.int64(), nullable=True), pa.field("name", pa.string(), nullable=True)])
STATS = json.dumps(
    {
        "numRecords": ROWS,
        "minValues": {"id": 0, "name": "alpha"},
        "maxValues": {"id": ROWS - 1, "name": "omega"},
        "nullCount": {"id": 0, "name": 0},
    }
)


def _source_file(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "source.parquet"
    if not path.exists():
        ids = list(range(ROWS))
        table = pa.Table.from_pydict(
            {"id": ids, "name": ["alpha" if i == 0 else "omega" for i in ids]}, schema=SCHEMA
        )
        pq.write_table(table, path)
    return path


def linked_files(source: Path, directory: Path, count: int, prefix: str = "part") -> list[Path]:
    """``count`` names for one tiny Parquet file (hard links: seconds for 50k, no extra space)."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = directory / f"{prefix}-{i:07d}.parquet"
        if not path.exists():
            os.link(source, path)
        paths.append(path)
    return paths


def _chunks(items: list[Path], plan: list[int]) -> list[list[Path]]:
    out, start = [], 0
    for count in plan:
        out.append(items[start : start + count])
        start += count
    return out


# --------------------------------------------------------------------------- delta-rs


@dataclass
class DeltaBuilt:
    root: Path
    versions: list[int]
    """The table version after each commit of the plan (version 0 is the empty table)."""
    details: dict[str, Any]


def build_delta(
    root: Path,
    plan: list[int],
    *,
    checkpoint_after: int | None = None,
    checkpoint_interval: int | None = None,
) -> DeltaBuilt:
    import deltalake
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction, RemoveAction

    configuration = {"delta.checkpointInterval": str(checkpoint_interval)} if checkpoint_interval else None
    DeltaTable.create(str(root), schema=SCHEMA, name="bench", configuration=configuration)
    files = linked_files(_source_file(root.parent / f"{root.name}-src"), root / "data", sum(plan))
    size = files[0].stat().st_size if files else 0
    mtime = int(files[0].stat().st_mtime * 1000) if files else 0
    table = DeltaTable(str(root))
    versions = []
    for n, batch in enumerate(_chunks(files, plan), start=1):
        actions: list[AddAction | RemoveAction] = [
            AddAction(
                path=f"data/{p.name}",
                size=size,
                partition_values={},
                modification_time=mtime,
                data_change=True,
                stats=STATS,
            )
            for p in batch
        ]
        table.create_write_transaction(actions, mode="append", schema=SCHEMA)
        versions.append(n)  # version 0 is the table's creation
        if checkpoint_after is not None and n == checkpoint_after:
            DeltaTable(str(root)).create_checkpoint()  # a fresh handle: ``table`` stays at its load version
    if DeltaTable(str(root)).version() != len(plan):
        raise AssertionError(f"delta table is at version {DeltaTable(str(root)).version()}, not {len(plan)}")
    checkpoints = sorted(
        int(p.name.split(".")[0]) for p in (root / "_delta_log").glob("*.checkpoint*.parquet")
    )
    return DeltaBuilt(
        root,
        versions,
        {
            "deltalake_version": deltalake.__version__,
            "commits": len(plan),
            "files": sum(plan),
            "version_after": versions[-1],
            "checkpoint_versions": checkpoints,
            "checkpoint": (
                f"explicit create_checkpoint() after commit {checkpoint_after}"
                if checkpoint_after
                else f"post-commit hook, delta.checkpointInterval={checkpoint_interval}"
                if checkpoint_interval
                else "none"
            ),
        },
    )


def delta_list(root: Path, version: int | None = None) -> list[str]:
    from deltalake import DeltaTable

    table = DeltaTable(str(root)) if version is None else DeltaTable(str(root), version=version)
    return list(table.file_uris())


# --------------------------------------------------------------------------- pyiceberg


@dataclass
class IcebergBuilt:
    catalog: Any
    identifier: str
    snapshot_ids: list[int]
    """The snapshot after each commit of the plan, in order."""
    details: dict[str, Any]


def iceberg_catalog(root: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    warehouse = root / "warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    return SqlCatalog("bench", uri=f"sqlite:///{root / 'segcat.catalog.db'}", warehouse=f"file://{warehouse}")


def build_iceberg(catalog: Any, identifier: str, data_dir: Path, plan: list[int]) -> IcebergBuilt:
    import pyiceberg

    namespace = identifier.split(".")[0]
    if (namespace,) not in catalog.list_namespaces():
        catalog.create_namespace(namespace)
    table = catalog.create_table(identifier, schema=SCHEMA)
    files = linked_files(_source_file(data_dir.parent / f"{data_dir.name}-src"), data_dir, sum(plan))
    snapshot_ids = []
    for batch in _chunks(files, plan):
        table.add_files([str(p) for p in batch], check_duplicate_files=False)
        snapshot = table.current_snapshot()
        assert snapshot is not None
        snapshot_ids.append(snapshot.snapshot_id)
    return IcebergBuilt(
        catalog,
        identifier,
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


def iceberg_list(catalog: Any, identifier: str, snapshot_id: int | None = None) -> list[str]:
    table = catalog.load_table(identifier)
    scan = table.scan() if snapshot_id is None else table.scan(snapshot_id=snapshot_id)
    return [task.file.file_path for task in scan.plan_files()]


# --------------------------------------------------------------------------- measuring


def _count(expected: int) -> Callable[[list[str]], None]:
    def check(files: list[str]) -> None:
        if len(files) != expected:
            raise AssertionError(f"listed {len(files)} files, expected {expected}")

    return check


def measure_delta(root: Path, expected: int, reps: int, fast_reps: int, version: int | None = None) -> Timing:
    return measure(lambda: delta_list(root, version), reps=reps, fast_reps=fast_reps, check=_count(expected))


def measure_iceberg(
    built: IcebergBuilt, expected: int, reps: int, fast_reps: int, snapshot_id: int | None = None
) -> Timing:
    return measure(
        lambda: iceberg_list(built.catalog, built.identifier, snapshot_id),
        reps=reps,
        fast_reps=fast_reps,
        check=_count(expected),
    )
