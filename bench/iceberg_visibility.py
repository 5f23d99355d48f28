"""Commit → the new version visible to Iceberg readers through segcat's REST catalog, p50 and p99.

    .venv/bin/python -m bench.iceberg_visibility            # full run: 300 commits
    .venv/bin/python -m bench.iceberg_visibility --quick    # smoke run: 20 commits, doc untouched

Every part is a process of its own, as in production (``bench.serve_services``): a private
``redis-server``, ``segcat materializer`` (whose Iceberg publisher writes the metadata and moves
the pointer) and ``segcat serve`` (the REST catalog under ``/iceberg``); Kafka is the local stack's.
The benchmark process appends one one-row file per commit, 50 ms apart, and then polls, without
pause, until the reader's own catalog load names the commit's version as its snapshot (snapshot
ids are segcat versions):

- ``pyiceberg``: ``load_catalog(type="rest").load_table(t).metadata.current_snapshot_id``
  (a fresh load each poll: pyiceberg keeps no table cache);
- ``duckdb``: one connection with the REST catalog attached (``ATTACH … TYPE iceberg``),
  ``max(snapshot_id)`` of ``iceberg_snapshots(cat.ns.t)``;
- ``pointer``: the Redis pointer the catalog answers from, read directly: the floor under both
  (the materializer's judging and publishing, no HTTP).

``DuckRest`` and ``IcebergTarget`` are the test harness's (``tests/iceberg_readers.py``): one
way to load DuckDB's extensions from their packages. The readers take turns commit by commit
(peers in the same run, on the same table size); latency
= the poll that saw the version returned − just before ``append()`` was called. Goal (issue 23):
p50 ≤ 250 ms for pyiceberg and DuckDB.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from bench import report, runner
from bench.commit_segcat import drop_table
from bench.report import get
from bench.runner import Context, Results, progress
from bench.serve_services import Services
from segcat.catalog.storage.parquet_stats import segment_from_parquet

SCENARIOS = ("visibility",)
READERS = ("pyiceberg", "duckdb", "pointer")
TARGET_P50_MS = 250.0
POLL_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Params:
    commits: int
    pause_s: float
    warmup: int

    @classmethod
    def of(cls, quick: bool, args: argparse.Namespace) -> Params:
        commits = args.commits or (20 if quick else 300)
        return cls(commits=commits, pause_s=0.05, warmup=3)


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--commits", type=int, help="timed commits, shared by the readers (default 300; quick 20)"
    )


def _file(root: Path, i: int) -> Any:
    relative = f"data/f-{i:06d}.parquet"
    path = root / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"id": pa.array([i], pa.int64()), "name": [f"row-{i}"]}), path)
    return segment_from_parquet(str(path), segment_id=f"f-{i:06d}", relative_path=relative)


def _pollers(services: Services, table: str, log_id: str | None) -> dict[str, Callable[[], int]]:
    """Per reader: one poll, returning the newest version (snapshot id) it sees, -1 for none."""
    import duckdb as duckdb_module
    from pyiceberg.catalog import load_catalog
    from pyiceberg.exceptions import NoSuchTableError

    from segcat.catalog.iceberg.pointer import read_pointer
    from segcat.catalog.storage.redis import RedisStore
    from tests.iceberg_readers import DuckRest, IcebergTarget

    uri = f"{services.url}/iceberg"
    catalog = load_catalog("bench", type="rest", uri=uri)
    duck = DuckRest(IcebergTarget("", uri, table))
    namespace, name = table.split(".")
    store = RedisStore.from_config(services.config)

    def pyiceberg() -> int:
        try:
            current = catalog.load_table(table).metadata.current_snapshot_id
        except NoSuchTableError:  # nothing published yet
            return -1
        return -1 if current is None else int(current)

    def duckdb() -> int:
        try:
            row = duck.con.execute(
                f'SELECT max(snapshot_id) FROM iceberg_snapshots({duck.ALIAS}."{namespace}"."{name}")'
            )
        except duckdb_module.CatalogException:  # nothing published yet
            return -1
        found = row.fetchone()
        return -1 if found is None or found[0] is None else int(found[0])

    def pointer() -> int:
        found = read_pointer(store, table, log_id)
        return -1 if found is None else found.version

    return {"pyiceberg": pyiceberg, "duckdb": duckdb, "pointer": pointer}


def _wait(poll: Callable[[], int], version: int) -> tuple[int, int]:
    """Poll until ``version`` is seen; (ns when seen, polls made)."""
    deadline = time.monotonic() + POLL_TIMEOUT_S
    polls = 0
    while True:
        polls += 1
        if poll() >= version:
            return time.perf_counter_ns(), polls
        if time.monotonic() > deadline:
            raise TimeoutError(f"version {version} not visible within {POLL_TIMEOUT_S:.0f} s")


def run(ctx: Context) -> Results:
    from segcat import load_catalog
    from segcat.catalog.log.topics import TopicAdmin
    from segcat.catalog.protocol.names import TableName

    p = Params.of(ctx.quick, ctx.args)
    ns = f"benchice_{uuid.uuid4().hex[:8]}"
    workdir = Path(tempfile.mkdtemp(prefix="segcat-bench-iceberg-"))
    services = Services(ctx.config, workdir, ns)
    table_name = f"{ns}.visible"
    samples: dict[str, list[int]] = {r: [] for r in READERS}
    polls: dict[str, list[int]] = {r: [] for r in READERS}
    try:
        services.start_redis()
        services.start_server()
        with load_catalog(services.config).create_table(table_name) as table:
            services.start_materializer(table_name)
            root = Path(table.location().removeprefix("file://"))
            log_id = TopicAdmin(services.config).describe(TableName.parse(table_name)).topic_id
            pollers = _pollers(services, table_name, log_id)
            progress(f"{p.warmup} warm-up commits, then {p.commits} timed, readers in turn")
            for i in range(p.warmup + p.commits):
                reader = READERS[i % len(READERS)]
                segment = _file(root, i)
                started = time.perf_counter_ns()
                version = table.append([segment])
                seen, count = _wait(pollers[reader], version)
                services.check_alive()
                if i >= p.warmup:
                    samples[reader].append(seen - started)
                    polls[reader].append(count)
                time.sleep(p.pause_s)
    finally:
        services.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        if not ctx.args.keep:
            drop_table(ctx.config, table_name)
    return {
        "params": asdict(p),
        "namespace": ns,
        "visibility": {
            reader: {
                "commit_to_visible": runner.summary(runner.to_ms(samples[reader])),
                "polls_median": sorted(polls[reader])[len(polls[reader]) // 2] if polls[reader] else None,
            }
            for reader in READERS
        },
    }


def render(results: Results) -> str:
    lines = report.run_table(results)
    rows = []
    for reader in READERS:
        s = get(results, "visibility", reader, "commit_to_visible") or {}
        rows.append([reader, s.get("count"), report.ms(s.get("median_ms")), report.ms(s.get("p99_ms"))])
    lines += ["", *report.table(["Reader", "Commits", "p50", "p99"], rows, "lrrr")]
    lines += ["", *report.targets_table(results.get("targets", []))]
    return "\n".join(lines)


def evaluate(results: Results) -> None:
    results["targets"] = [
        report.target(
            f"commit → visible to {reader} through /iceberg, p50",
            get(results, "visibility", reader, "commit_to_visible", "median_ms"),
            TARGET_P50_MS,
            "ms",
        )
        for reader in ("pyiceberg", "duckdb")
    ]


BENCHMARK = runner.Benchmark(
    name="iceberg-visibility",
    module="bench.iceberg_visibility",
    description="Commit → visible to pyiceberg and DuckDB through segcat's Iceberg REST catalog.",
    scenarios=SCENARIOS,
    run=run,
    render=render,
    evaluate=evaluate,
    options=options,
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCHMARK))
