"""``scan().to_arrow()`` of a 10-million-row table vs pyiceberg's and delta-rs's readers of the same files.

    .venv/bin/python -m bench.scan_arrow            # full run: 10,000,000 rows in 20 files
    .venv/bin/python -m bench.scan_arrow --quick    # smoke run: 200,000 rows in 4 files, doc untouched

**What is fair.** The three readers read the *same bytes*: one set of Parquet files (pyarrow,
row groups of 1M rows; an int64 id, a low-cardinality string, a double, a UTC timestamp) is
written once under the segcat table's location and hard-linked into the Delta table's directory
(one inode: the page cache is shared, no reader gets a cold copy). Each catalog then records those
files without rewriting them: segcat ``Table.append`` of ``segment_from_parquet`` segments,
pyiceberg ``add_files`` (sqlite ``SqlCatalog``; reads each footer for its manifests), delta-rs
``create_write_transaction`` of ``AddAction``s with ``numRecords``. Rewriting the data with
``write_deltalake`` would compare writers' file layouts, not readers. Each timed read starts from
the table's name or path (open + plan + read into one Arrow table), every column, no filter:

- ``segcat``: ``table.scan().to_arrow()``;
- ``pyiceberg``: ``catalog.load_table(t).scan().to_arrow()``;
- ``delta-rs``: ``DeltaTable(path).to_pyarrow_table()``.

One untimed warm-up round, then interleaved rounds (the readers in turn, medians); row counts
are checked equal. Kafka and Redis are the local stack's; the data sits on the local disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from bench import report, runner
from bench.report import get, size_label
from bench.runner import Context, Results, progress

SCENARIOS = ("scan",)
SYSTEMS = ("segcat", "pyiceberg", "delta-rs")
ROW_GROUP = 1_000_000


@dataclass(frozen=True)
class Params:
    rows: int
    files: int
    rounds: int

    @classmethod
    def of(cls, quick: bool, args: argparse.Namespace) -> Params:
        rows = args.rows or (200_000 if quick else 10_000_000)
        return cls(rows=rows, files=4 if quick else 20, rounds=2 if quick else 5)


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, help="rows of the table (default 10,000,000; quick 200,000)")


def _data(first: int, count: int) -> pa.Table:
    ids = np.arange(first, first + count, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "category": pa.array([f"c{v % 50:02d}" for v in range(first, first + count)]),
            "amount": (ids % 10_007).astype(np.float64) / 7.0,
            "at": pa.array(1_790_000_000_000_000 + ids * 1_000, pa.timestamp("us", tz="UTC")),
        }
    )


def _write_files(directory: Path, p: Params) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    per_file = -(-p.rows // p.files)
    paths = []
    for i, first in enumerate(range(0, p.rows, per_file)):
        path = directory / f"part-{i:05d}.parquet"
        pq.write_table(_data(first, min(per_file, p.rows - first)), path, row_group_size=ROW_GROUP)
        paths.append(path)
    return paths


def _segcat(ctx: Context, name: str, p: Params) -> tuple[Callable[[], pa.Table], list[Path], str]:
    from segcat import load_catalog
    from segcat.catalog.storage.parquet_stats import segment_from_parquet

    table = load_catalog(ctx.config).create_table(name)
    root = Path(table.location().removeprefix("file://"))
    paths = _write_files(root / "data", p)
    table.append(
        [segment_from_parquet(str(f), segment_id=f.stem, relative_path=f"data/{f.name}") for f in paths]
    )
    table.close()

    def read() -> pa.Table:
        with load_catalog(ctx.config).load_table(name) as t, t.scan() as scan:
            return scan.to_arrow()

    return read, paths, "table.scan().to_arrow()"


def _pyiceberg(workdir: Path, paths: list[Path]) -> Callable[[], pa.Table]:
    from bench.peers import iceberg_catalog

    catalog = iceberg_catalog(workdir / "iceberg")
    catalog.create_namespace("bench")
    table = catalog.create_table("bench.scan", schema=pq.read_schema(paths[0]))
    table.add_files([str(f) for f in paths])

    def read() -> pa.Table:
        result: pa.Table = catalog.load_table("bench.scan").scan().to_arrow()
        return result

    return read


def _delta(workdir: Path, paths: list[Path]) -> Callable[[], pa.Table]:
    from deltalake import DeltaTable
    from deltalake.transaction import AddAction

    root = workdir / "delta"
    schema = pq.read_schema(paths[0])
    DeltaTable.create(str(root), schema=schema, name="scan")
    (root / "data").mkdir()
    actions = []
    for f in paths:
        os.link(f, root / "data" / f.name)
        stat = f.stat()
        records = pq.ParquetFile(f).metadata.num_rows
        actions.append(
            AddAction(
                path=f"data/{f.name}",
                size=stat.st_size,
                partition_values={},
                modification_time=int(stat.st_mtime * 1000),
                data_change=True,
                stats=json.dumps({"numRecords": records}),
            )
        )
    DeltaTable(str(root)).create_write_transaction(actions, mode="append", schema=schema)

    def read() -> pa.Table:
        result: pa.Table = DeltaTable(str(root)).to_pyarrow_table()
        return result

    return read


def _forget(ctx: Context, name: str) -> None:
    """The table's topic and the data files written under its location."""
    from bench.commit_segcat import drop_table
    from segcat import load_catalog

    with load_catalog(ctx.config).load_table(name) as table:
        root = Path(table.location().removeprefix("file://"))
    drop_table(ctx.config, name)
    shutil.rmtree(root / "data", ignore_errors=True)


def run(ctx: Context) -> Results:
    p = Params.of(ctx.quick, ctx.args)
    ns = f"benchscan_{uuid.uuid4().hex[:8]}"
    name = f"{ns}.rows{p.rows}"
    workdir = Path(tempfile.mkdtemp(prefix="segcat-bench-scan-"))
    samples: dict[str, list[int]] = {s: [] for s in SYSTEMS}
    try:
        progress(f"writing {p.rows:,} rows in {p.files} files; three catalogs over them")
        segcat_read, paths, segcat_how = _segcat(ctx, name, p)
        readers = {
            "segcat": segcat_read,
            "pyiceberg": _pyiceberg(workdir, paths),
            "delta-rs": _delta(workdir, paths),
        }
        counts = {s: read().num_rows for s, read in readers.items()}  # the warm-up round
        if set(counts.values()) != {p.rows}:
            raise AssertionError(f"the readers disagree on the row count: {counts}, expected {p.rows}")
        for n in range(p.rounds):
            progress(f"round {n + 1} of {p.rounds}")
            for system, read in readers.items():
                started = time.perf_counter_ns()
                got = read()
                samples[system].append(time.perf_counter_ns() - started)
                del got
        data_bytes = sum(f.stat().st_size for f in paths)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        if not ctx.args.keep:
            _forget(ctx, name)
    return {
        "params": asdict(p),
        "table": name,
        "segcat_reader": segcat_how,
        "data_bytes": data_bytes,
        "scan": {s: runner.summary(runner.to_ms(samples[s])) for s in SYSTEMS},
    }


def render(results: Results) -> str:
    lines = report.run_table(results)
    segcat_ms = get(results, "scan", "segcat", "median_ms")
    rows = [
        [
            system,
            report.ms(get(results, "scan", system, "median_ms"), seconds_from=1000),
            report.ratio(get(results, "scan", system, "median_ms"), segcat_ms),
        ]
        for system in SYSTEMS
    ]
    rows_label = size_label(get(results, "params", "rows") or 0)
    lines += [
        "",
        f"{rows_label} rows, {report.mb(results.get('data_bytes'))} of Parquet; segcat: "
        f"{results.get('segcat_reader')}",
        "",
    ]
    lines += report.table(["Reader", "Median", "÷ segcat's"], rows)
    return "\n".join(lines)


BENCHMARK = runner.Benchmark(
    name="scan-arrow",
    module="bench.scan_arrow",
    description="scan().to_arrow() of a 10M-row table vs pyiceberg's and delta-rs's readers of its files.",
    scenarios=SCENARIOS,
    run=run,
    render=render,
    options=options,
    wait_for_others_s=600.0,
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCHMARK))
