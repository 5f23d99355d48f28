"""The same sequential one-file appends on delta-rs and on pyiceberg (SQL catalog on sqlite).

Both peers commit metadata only: the data files are written beforehand with pyarrow,
outside the timing, and each timed commit adds one of them to the table.

- delta-rs: ``DeltaTable.create_write_transaction([AddAction(...)], mode="append", ...)`` on a
  local directory table, one long-lived ``DeltaTable`` object (like segcat's long-lived
  writer), default post-commit hooks (checkpoints at the default interval), add actions
  carrying file stats as JSON (numRecords, min, max, nullCount).
- pyiceberg: ``SqlCatalog`` on sqlite with a local warehouse directory and
  ``table.add_files([path])`` per commit, defaults otherwise (it reads each file's Parquet
  footer to derive the data-file stats, and checks for duplicate files).

Each runs one untimed warm-up commit first, as the segcat writers do.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench.cpu import CpuMeter
from bench.runs import Run, Tick, loadavg, no_tick

ROWS_PER_FILE = 100

SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64(), nullable=True),
        pa.field("name", pa.string(), nullable=True),
    ]
)


def _batch(i: int) -> pa.Table:
    ids = list(range(i * ROWS_PER_FILE, (i + 1) * ROWS_PER_FILE))
    names = [f"name-{v % 26:02d}" for v in ids]
    return pa.Table.from_pydict({"id": ids, "name": names}, schema=SCHEMA)


def write_files(directory: Path, count: int, prefix: str = "part") -> list[Path]:
    """``count`` small real Parquet files (``ROWS_PER_FILE`` rows each) under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        path = directory / f"{prefix}-{i:06d}.parquet"
        pq.write_table(_batch(i), path)
        paths.append(path)
    return paths


def _delta_stats(i: int) -> str:
    batch = _batch(i)
    ids = batch.column("id").to_pylist()
    names = batch.column("name").to_pylist()
    return json.dumps(
        {
            "numRecords": batch.num_rows,
            "minValues": {"id": min(ids), "name": min(names)},
            "maxValues": {"id": max(ids), "name": max(names)},
            "nullCount": {"id": 0, "name": 0},
        }
    )


# --------------------------------------------------------------------------- delta-rs


def run_delta(workdir: Path, commits: int, *, tick: Tick = no_tick, meter: CpuMeter | None = None) -> Run:
    """``commits`` sequential one-file append transactions on a local Delta table."""
    import deltalake
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    root = workdir / "delta_table"
    DeltaTable.create(str(root), schema=SCHEMA, name="commits")
    files = write_files(root, commits + 1)  # index 0 is the warm-up
    actions = []
    for i, path in enumerate(files):
        st = path.stat()
        actions.append(
            AddAction(
                path=path.name,
                size=st.st_size,
                partition_values={},
                modification_time=int(st.st_mtime * 1000),
                data_change=True,
                stats=_delta_stats(i),
            )
        )
    table = DeltaTable(str(root))
    table.create_write_transaction([actions[0]], mode="append", schema=SCHEMA)

    load_before = loadavg()
    latencies: list[int] = []
    if meter is not None:
        meter.start()
    cpu_start = time.process_time_ns()
    first = time.perf_counter_ns()
    for action in actions[1:]:
        start = time.perf_counter_ns()
        table.create_write_transaction([action], mode="append", schema=SCHEMA)
        latencies.append(time.perf_counter_ns() - start)
        tick(1)
    wall = time.perf_counter_ns() - first
    cpu = meter.stop(commits, time.process_time_ns() - cpu_start) if meter is not None else None
    run = Run("delta-rs", "sequential", latencies, wall, load_before=load_before, load_after=loadavg())

    if cpu is not None:
        run.details["cpu"] = cpu
    check = DeltaTable(str(root))
    live = len(check.file_uris())
    if live != commits + 1:
        raise AssertionError(f"delta table has {live} files, expected {commits + 1}")
    run.details.update(
        {
            "deltalake_version": deltalake.__version__,
            "table_version_after": check.version(),
            "live_files_after": live,
            "checkpoints": len(list((root / "_delta_log").glob("*.checkpoint*.parquet"))),
        }
    )
    return run


# --------------------------------------------------------------------------- pyiceberg


def run_iceberg(workdir: Path, commits: int, *, tick: Tick = no_tick, meter: CpuMeter | None = None) -> Run:
    """``commits`` sequential ``add_files`` commits on a pyiceberg table in a sqlite catalog."""
    import pyiceberg
    from pyiceberg.catalog.sql import SqlCatalog

    root = workdir / "iceberg"
    warehouse = root / "warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    catalog = SqlCatalog(
        "bench",
        uri=f"sqlite:///{root / 'segcat.catalog.db'}",
        warehouse=f"file://{warehouse}",
    )
    catalog.create_namespace("bench")
    table = catalog.create_table("bench.commits", schema=SCHEMA)
    files = write_files(root / "data", commits + 1)
    table.add_files([str(files[0])])

    load_before = loadavg()
    latencies: list[int] = []
    if meter is not None:
        meter.start()
    cpu_start = time.process_time_ns()
    first = time.perf_counter_ns()
    for path in files[1:]:
        start = time.perf_counter_ns()
        table.add_files([str(path)])
        latencies.append(time.perf_counter_ns() - start)
        tick(1)
    wall = time.perf_counter_ns() - first
    cpu = meter.stop(commits, time.process_time_ns() - cpu_start) if meter is not None else None
    run = Run("pyiceberg", "sequential", latencies, wall, load_before=load_before, load_after=loadavg())

    if cpu is not None:
        run.details["cpu"] = cpu
    check = catalog.load_table("bench.commits")
    live = len(check.inspect.files())
    if live != commits + 1:
        raise AssertionError(f"iceberg table has {live} data files, expected {commits + 1}")
    details: dict[str, Any] = {
        "pyiceberg_version": pyiceberg.__version__,
        "snapshots_after": len(check.snapshots()),
        "live_files_after": live,
        "catalog": "SqlCatalog (sqlite)",
    }
    run.details.update(details)
    return run
