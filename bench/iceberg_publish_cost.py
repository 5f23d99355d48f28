"""The cost of publishing one version's Iceberg metadata as the table grows: 1k, 100k, 1M files.

    .venv/bin/python -m bench.iceberg_publish_cost            # full run: 1,000 / 100,000 / 1,000,000 files
    .venv/bin/python -m bench.iceberg_publish_cost --quick    # smoke run: 1,000 / 10,000 files, doc untouched

Per size: a table filled by bulk appends (segments that describe files with their schema and
stats recorded, so nothing is read from data files; 10,000 per commit at most) with ``segcat
materializer`` running (a process of its own, as in production; private Redis through
``bench.serve_services``), until the Iceberg pointer names the last bulk version. Then one-file
appends, 200 ms apart, each timed:

- **commit → published**: just before ``append()`` → the pointer (what ``/iceberg`` serves)
  names the version, polled in this process;
- **publish lag**: the pointer's ``updated_ms`` − the record's broker time (the materializer's
  own share, no polling in it);
- **bytes written** for the version: ``v<V>.metadata.json``, its manifest list and the manifests
  named for ``V`` (``catalog/iceberg/layout.py``), summed from the metadata directory.

Issue 23: the cost must follow what a version changed (one file), not the table's size; the
figures at 1M files are compared with those at 1k (``evaluate``). The publisher is the
materializer's (``materializer/iceberg_publisher.py``); this driver touches only its outputs.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import report, runner
from bench.commit_segcat import drop_table
from bench.report import get, size_label
from bench.runner import Context, Results, progress
from bench.serve_services import Services
from segcat.catalog.protocol.model import ColumnStats, ColumnType, Segment

SCENARIOS = ("publish",)
SCHEMA_JSON = (
    '{"type":"struct","fields":[{"name":"id","type":"long","nullable":true,"metadata":{}},'
    '{"name":"name","type":"string","nullable":true,"metadata":{}}]}'
)
NO_POINTER_S = 120.0
"""A materializer that wrote no pointer at all by then publishes no Iceberg metadata."""
FOLLOW_LIMIT = 3.0
"""How much dearer a version may be at the largest size than at the smallest (medians)."""


@dataclass(frozen=True)
class Params:
    sizes: tuple[int, ...]
    per_commit: int
    timed: int
    pause_s: float
    bulk_timeout_s: float

    @classmethod
    def of(cls, quick: bool, args: argparse.Namespace) -> Params:
        sizes = (
            tuple(args.sizes) if args.sizes else ((1_000, 10_000) if quick else (1_000, 100_000, 1_000_000))
        )
        return cls(
            sizes=sizes, per_commit=10_000, timed=10 if quick else 50, pause_s=0.2, bulk_timeout_s=3600
        )


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", type=int, nargs="+", help="live files per table (default 1k 100k 1M)")


def segment(prefix: str, i: int) -> Segment:
    """A file described the way writers describe one: schema and stats recorded."""
    segment_id = f"{prefix}-{i:08d}"
    return Segment(
        segment_id=segment_id,
        path=f"data/{segment_id}.parquet",
        size_bytes=4096 + i % 1000,
        row_count=100,
        stats=(
            ColumnStats("id", ColumnType.INT, min=i * 100, max=i * 100 + 99, null_count=0),
            ColumnStats("name", ColumnType.STRING, min="alpha", max="omega", null_count=0),
        ),
        schema=SCHEMA_JSON,
    )


def _pointer(services: Services, table: str, log_id: str | None) -> Any:
    from segcat.catalog.iceberg.pointer import read_pointer
    from segcat.catalog.storage.redis import RedisStore

    return read_pointer(RedisStore.from_config(services.config), table, log_id)


def _wait_published(
    services: Services, table: str, log_id: str | None, version: int, timeout_s: float
) -> Any:
    deadline = time.monotonic() + timeout_s
    absent_until = time.monotonic() + NO_POINTER_S
    while True:
        pointer = _pointer(services, table, log_id)
        if pointer is None and time.monotonic() > absent_until:
            raise RuntimeError(
                f"no Iceberg pointer for {table} after {NO_POINTER_S:.0f} s: is the publisher on?"
            )
        if pointer is not None and pointer.blocked_version is not None:
            raise RuntimeError(f"version {pointer.blocked_version} not publishable: {pointer.reason}")
        if pointer is not None and pointer.version >= version:
            return pointer
        services.check_alive()
        if time.monotonic() > deadline:
            raise TimeoutError(f"version {version} of {table} not published in {timeout_s:.0f} s ({pointer})")
        time.sleep(0.002)


def _bytes_of(location: str, version: int) -> int:
    """Bytes of the metadata files named for ``version`` in the metadata directory."""
    import pyarrow.fs as pafs

    fs, path = pafs.FileSystem.from_uri(location)
    directory = path.rsplit("/", 1)[0]
    names = (f"v{version}.metadata.json", f"snap-{version:020d}", f"m-{version:020d}-")
    infos = fs.get_file_info(pafs.FileSelector(directory))
    return sum(i.size or 0 for i in infos if i.base_name.startswith(names))


def _one_size(ctx: Context, p: Params, services: Services, ns: str, size: int) -> dict[str, Any]:
    from segcat import load_catalog
    from segcat.catalog.log.topics import TopicAdmin
    from segcat.catalog.protocol.names import TableName

    name = f"{ns}.files{size}"
    out: dict[str, Any] = {"size": size}
    with load_catalog(services.config).create_table(name) as table:
        services.start_materializer(name)
        log_id = TopicAdmin(services.config).describe(TableName.parse(name)).topic_id
        started = time.perf_counter()
        version = -1
        for first in range(0, size, p.per_commit):
            version = table.append(
                [segment("bulk", i) for i in range(first, min(size, first + p.per_commit))]
            )
        _wait_published(services, name, log_id, version, p.bulk_timeout_s)
        out["build_s"] = round(time.perf_counter() - started, 1)
        progress(
            f"{size_label(size)} files published in {out['build_s']} s; {p.timed} timed one-file appends"
        )
        from segcat.catalog.storage.redis import RedisStore

        store = RedisStore.from_config(services.config)
        latency, lag, written = [], [], []
        for i in range(p.timed):
            before = time.perf_counter_ns()
            version = table.append([segment("one", size + i)])
            pointer = _wait_published(services, name, log_id, version, 120)
            latency.append(time.perf_counter_ns() - before)
            # the head's broker time of the version (``table.history()`` would replay the whole log)
            head = store.head(name)
            if head is not None and head.version == version and head.timestamp_ms is not None:
                lag.append(pointer.updated_ms - head.timestamp_ms)
            written.append(_bytes_of(pointer.location, version))
            time.sleep(p.pause_s)
        services.stop_materializer()
    out["commit_to_published"] = runner.summary(runner.to_ms(latency))
    out["publish_lag"] = runner.summary([float(v) for v in lag]) if lag else None
    out["bytes_written"] = runner.summary([float(v) for v in written])
    return out


def run(ctx: Context) -> Results:
    p = Params.of(ctx.quick, ctx.args)
    ns = f"benchicepub_{uuid.uuid4().hex[:8]}"
    workdir = Path(tempfile.mkdtemp(prefix="segcat-bench-iceberg-publish-"))
    services = Services(ctx.config, workdir, ns)
    sizes: list[dict[str, Any]] = []
    try:
        services.start_redis()
        for size in p.sizes:
            sizes.append(_one_size(ctx, p, services, ns, size))
    finally:
        services.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        if not ctx.args.keep:
            for size in p.sizes:
                with contextlib.suppress(Exception):  # a size the run never reached has no topic
                    drop_table(ctx.config, f"{ns}.files{size}")
    return {"params": asdict(p), "namespace": ns, "publish": sizes}


def render(results: Results) -> str:
    lines = report.run_table(results)
    rows = [
        [
            size_label(cell["size"]),
            report.ms(get(cell, "commit_to_published", "median_ms")),
            report.ms(get(cell, "commit_to_published", "p99_ms")),
            report.ms(get(cell, "publish_lag", "median_ms")),
            report.count(get(cell, "bytes_written", "median_ms") or 0),
        ]
        for cell in results.get("publish", [])
    ]
    header = [
        "Live files",
        "Commit → published, median",
        "p99",
        "Publish lag, median",
        "Bytes written, median",
    ]
    lines += ["", *report.table(header, rows)]
    lines += ["", *report.targets_table(results.get("targets", []))]
    return "\n".join(lines)


def evaluate(results: Results) -> None:
    cells = results.get("publish", [])
    if len(cells) < 2:
        results["targets"] = []
        return
    small = get(cells[0], "commit_to_published", "median_ms")
    large = get(cells[-1], "commit_to_published", "median_ms")
    if small is None:
        results["targets"] = []
        return
    results["targets"] = [
        report.target(
            f"commit → published at {size_label(cells[-1]['size'])} files, median "
            f"(≤ {FOLLOW_LIMIT:.0f}× that at {size_label(cells[0]['size'])})",
            large,
            FOLLOW_LIMIT * small,
            "ms",
        )
    ]


BENCHMARK = runner.Benchmark(
    name="iceberg-publish-cost",
    module="bench.iceberg_publish_cost",
    description="Publishing one version's Iceberg metadata at 1k, 100k and 1M live files.",
    scenarios=SCENARIOS,
    run=run,
    render=render,
    evaluate=evaluate,
    options=options,
    wait_for_others_s=600.0,
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCHMARK))
