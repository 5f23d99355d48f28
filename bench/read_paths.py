"""Read paths: open + list, time travel, watch latency, materializer catch-up — one run.

    .venv/bin/python -m bench.read_paths           # full run (~35 min on 2 cores), updates docs/BENCHMARKS.md
    .venv/bin/python -m bench.read_paths --quick   # smoke run: tiny sizes, doc untouched
    .venv/bin/python -m bench.read_paths --render bench/results/read-paths-<time>.json

1. Open + list every live segment (``snapshot()`` then ``files()``) at 1k / 50k / 1M live
   segments: (a) Redis key frame + deltas, (b) object-store key frame Parquet (alone, and
   + Kafka tail at the head), (c) Kafka replay; delta-rs (``DeltaTable`` + ``file_uris()``)
   and pyiceberg (``load_table`` + ``scan().plan_files()``) beside the 50k table.
2. Time travel to the middle version (25k live) of a 100-commit, 50k-segment table,
   segcat with the default lookup chain, delta-rs ``DeltaTable(path, version=mid)``,
   pyiceberg ``scan(snapshot_id=mid)``.
3. Commit → ``table.watch()`` latency (watcher in its own process, materializer running).
4. Materializer catch-up from a cold start over a 100k-commit log.

Everything runs against the local stack (Kafka + Redis) and a temporary local warehouse.
Raw results go to ``bench/results/read-paths-<UTC time>.json``; full runs also update the
``read-paths`` section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import resource
import shutil
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from bench import read_peers, read_report, read_segcat, read_whatif
from bench.environment import describe
from bench.read_common import FULL, QUICK, Sizes, bulk_plan, measure, profile, profile_file, quiet_logging
from bench.runs import loadavg
from segcat import local_stack as stack
from segcat.catalog.config import Config
from segcat.catalog.read.table import Catalog
from segcat.local_stack.settings import StackSettings

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"
DOC = REPO / "docs" / "BENCHMARKS.md"


def log(message: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


def label(size: int) -> str:
    return (
        f"{size // 1_000_000}M"
        if size >= 1_000_000 and size % 1_000_000 == 0
        else (f"{size // 1000}k" if size >= 1000 and size % 1000 == 0 else str(size))
    )


CATCHUP_FOCUS = (
    "apply_record",
    "decode_commit",
    "publish_commit",
    "flush",
    "write_keyframe",
    "write_archive",
    "to_parquet",
    "to_ipc",
    "put_keyframe",
    "check_redis",
    "_tick",
    "seal",
    "segment_rows",
    "labels",
    "get_watermark_offsets",
    "newest_valid_keyframe",
    "consume",
    "put",
    "_meta",
    "raw_decode",
    "verify",
    "parse",
)
"""Functions whose totals the catch-up profile always reports (by name)."""

TIME_TRAVEL_FOCUS = (
    "from_redis",
    "load",
    "from_object_store",
    "newest_valid_keyframe",
    "archives_between",
    "apply",
    "segment_rows",
    "_encode_segment",
    "decode_commit",
    "files",
)


# --------------------------------------------------------------------------- scenarios


def open_list(
    config: Config, catalog: Catalog, ns: str, sizes: Sizes, workdir: Path, created: list[str]
) -> dict[str, Any]:
    out: dict[str, Any] = {"segcat": {}, "profiles": {}}
    for size in sizes.list_sizes:
        name = f"{ns}.list{label(size)}"
        created.append(name)
        log(f"building {name}: {size:,} live segments")
        built = read_segcat.build_list_table(config, catalog, name, size, sizes)
        log(f"built in {built.build_s:.0f} s; measuring")
        out["segcat"][str(size)] = read_segcat.measure_open_list(catalog, built, sizes)
        cell = out["segcat"][str(size)]
        log(
            f"{label(size)}: redis {cell['redis']['median_ms']:.1f} ms, object store "
            f"{cell['object_store']['median_ms']:.1f} ms, kafka {cell['kafka']['median_ms']:.1f} ms"
        )
        if size in (sizes.peer_size, max(sizes.list_sizes)):
            table = catalog.table(name)
            out["profiles"][f"redis_{label(size)}"] = read_segcat.profile_redis_read(table)
            assert catalog.redis is not None
            log(f"what-if experiments on the {label(size)} key frame")
            cell["whatif"] = read_whatif.keyframe_whatif(config, catalog.redis, table, sizes.reps)
        gc.collect()

    size = sizes.peer_size
    plan = bulk_plan(size - sizes.tail_commits, sizes.per_commit[size])
    full_plan = plan + [1] * sizes.tail_commits
    log(f"building delta-rs and pyiceberg tables with {size:,} files ({len(full_plan)} commits)")
    peers: dict[str, Any] = {}
    started = time.perf_counter()
    delta = read_peers.build_delta(workdir / "delta-list", full_plan, checkpoint_after=len(plan))
    delta.details["build_s"] = round(time.perf_counter() - started, 1)
    timing = read_peers.measure_delta(delta.root, size, sizes.reps, sizes.fast_reps)
    timing.details = delta.details
    peers["delta"] = timing.to_json()
    started = time.perf_counter()
    ice = read_peers.build_iceberg(
        read_peers.iceberg_catalog(workdir / "iceberg"),
        "bench.list",
        workdir / "iceberg-data-list",
        full_plan,
    )
    ice.details["build_s"] = round(time.perf_counter() - started, 1)
    timing = read_peers.measure_iceberg(ice, size, sizes.reps, sizes.fast_reps)
    timing.details = ice.details
    peers["iceberg"] = timing.to_json()
    out["peers"] = {"size": size, **peers}
    log(f"delta-rs {peers['delta']['median_ms']:.1f} ms, pyiceberg {peers['iceberg']['median_ms']:.1f} ms")
    return out


def time_travel(
    config: Config, catalog: Catalog, ns: str, sizes: Sizes, workdir: Path, created: list[str]
) -> dict[str, Any]:
    plan = [sizes.tt_per_commit] * sizes.tt_commits
    mid_index = sizes.tt_commits // 2 - 1
    expected = sizes.tt_per_commit * (mid_index + 1)
    name = f"{ns}.timetravel"
    created.append(name)
    log(f"building {name}: {sum(plan):,} segments in {len(plan)} commits, K={sizes.tt_keyframe_every}")
    built = read_segcat.build_table(
        config, catalog, name, plan, keyframe_every=sizes.tt_keyframe_every, prefix="t"
    )
    mid = mid_index + 1  # one record per commit after the creation at offset 0: commit i is version i + 1
    out = read_segcat.measure_time_travel(catalog, built, mid, expected, sizes.reps, sizes.fast_reps)
    table = catalog.table(name)
    store_only = measure(
        lambda: read_segcat.list_files(table, mid, ("object-store",)),
        reps=sizes.reps,
        fast_reps=sizes.fast_reps,
        check=read_segcat.expect(expected, "object-store"),
    )
    store_only.details = {"what": "the same version with sources=('object-store',): no Redis detour"}
    out["segcat_object_store_only"] = store_only.to_json()
    out["profile"] = profile(lambda: read_segcat.list_files(table, mid), focus=TIME_TRAVEL_FOCUS)
    log(f"segcat time travel {out['segcat']['median_ms']:.1f} ms")

    started = time.perf_counter()
    delta = read_peers.build_delta(workdir / "delta-tt", plan, checkpoint_interval=sizes.tt_keyframe_every)
    delta.details["build_s"] = round(time.perf_counter() - started, 1)
    timing = read_peers.measure_delta(
        delta.root, expected, sizes.reps, sizes.fast_reps, version=delta.versions[mid_index]
    )
    timing.details = {**delta.details, "version": delta.versions[mid_index]}
    out["delta"] = timing.to_json()
    started = time.perf_counter()
    ice = read_peers.build_iceberg(
        read_peers.iceberg_catalog(workdir / "iceberg"), "bench.timetravel", workdir / "iceberg-data-tt", plan
    )
    ice.details["build_s"] = round(time.perf_counter() - started, 1)
    snapshot_id = ice.snapshot_ids[mid_index]
    timing = read_peers.measure_iceberg(ice, expected, sizes.reps, sizes.fast_reps, snapshot_id=snapshot_id)
    timing.details = {**ice.details, "snapshot_index": mid_index + 1, "snapshot_id": snapshot_id}
    out["iceberg"] = timing.to_json()
    out["mid"] = {"segcat_version": mid, "live_segments": expected}
    log(f"delta-rs {out['delta']['median_ms']:.1f} ms, pyiceberg {out['iceberg']['median_ms']:.1f} ms")
    return out


def watch(config: Config, catalog: Catalog, ns: str, sizes: Sizes, created: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, pause in (("paced", sizes.watch_pause_s), ("back_to_back", 0.0)):
        name = f"{ns}.watch{key.replace('_', '')}"
        created.append(name)
        log(f"watch latency, {key}: {sizes.watch_commits} commits")
        out[key] = read_segcat.run_watch(config, catalog, name, sizes.watch_commits, pause)
        got = out[key]["arrival_minus_broker_ts"]
        log(f"{key}: p50 {got['median_ms']:.1f} ms, p99 {got['p99_ms']:.1f} ms")
    return out


def catchup(
    config: Config, catalog: Catalog, ns: str, sizes: Sizes, workdir: Path, created: list[str]
) -> dict[str, Any]:
    name = f"{ns}.catchup"
    created.append(name)
    log(f"building a {sizes.catchup_commits:,}-commit log with {sizes.catchup_writers} writer processes")
    built = read_segcat.build_log(config, catalog, name, sizes.catchup_commits, sizes.catchup_writers)
    log(f"log built in {built['build_s']:.0f} s; {sizes.reps} cold catch-ups + 1 profiled")
    profile_path = workdir / "catchup.prof"
    out = read_segcat.measure_catchup(
        config, catalog, name, built["records"] - 1, workdir, sizes.reps, profile_path
    )
    out["build"] = built
    out["profile"] = profile_file(profile_path, top=40, focus=CATCHUP_FOCUS)
    log("timing a bare replay of the same log (rules only, no Redis, no key frames)")
    out["replay_floor"] = read_segcat.replay_floor(catalog, name, built["records"], sizes.reps)
    log(f"catch-up: {out['median_commits_per_s']:,.0f} commits/s")
    return out


# --------------------------------------------------------------------------- main


def run(sizes: Sizes, *, quick: bool, keep: bool, only: set[str]) -> dict[str, Any]:
    base = Config.load()
    stack.up(StackSettings.load())
    workdir = Path(tempfile.mkdtemp(prefix="segcat-read-paths-"))
    config = replace(base, warehouse=str(workdir / "warehouse"))
    catalog = Catalog(config)
    ns = f"rp{uuid.uuid4().hex[:8]}"
    created: list[str] = []
    results: dict[str, Any] = {
        "benchmark": "read-paths",
        "quick": quick,
        "command": "python -m bench.read_paths" + (" --quick" if quick else ""),
        "environment": describe(config, REPO),
        "sizes": sizes.to_json(),
        "namespace": ns,
        "warehouse": "local directory (temporary)",
    }
    log(f"namespace {ns}, warehouse {config.warehouse}")
    try:
        if "list" in only:
            results["open_list"] = open_list(config, catalog, ns, sizes, workdir, created)
        if "timetravel" in only:
            results["time_travel"] = time_travel(config, catalog, ns, sizes, workdir, created)
        if "watch" in only:
            results["watch"] = watch(config, catalog, ns, sizes, created)
        if "catchup" in only:
            results["catchup"] = catchup(config, catalog, ns, sizes, workdir, created)
    finally:
        results["loadavg_at_end"] = list(loadavg())
        results["peak_rss_mb"] = {
            "benchmark_process": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "largest_child_process": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
        }
        results["finished_utc"] = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        if not keep:
            log("dropping the benchmark's topics, Redis keys and warehouse")
            read_segcat.drop_tables(config, catalog, created)
            shutil.rmtree(workdir, ignore_errors=True)
    results["targets"] = read_report.targets(results)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.read_paths", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke run (doc untouched)")
    parser.add_argument("--keep", action="store_true", help="keep topics, Redis keys and the warehouse")
    parser.add_argument(
        "--only",
        default="list,timetravel,watch,catchup",
        help="comma-separated subset of: list, timetravel, watch, catchup",
    )
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/BENCHMARKS.md")
    parser.add_argument("--render", type=Path, help="re-render the doc section from a saved results JSON")
    parser.add_argument(
        "--baseline", type=Path, help="an earlier results JSON to compare the headline figures with"
    )
    args = parser.parse_args(argv)
    if args.render:
        results = json.loads(args.render.read_text())
        results["targets"] = read_report.targets(results)
        read_report.update_doc(
            DOC,
            results,
            args.render.relative_to(REPO)
            if args.render.is_absolute() and args.render.is_relative_to(REPO)
            else args.render,
        )
        log(f"updated {DOC}")
        return 0
    quiet_logging()
    only = {part.strip() for part in args.only.split(",") if part.strip()}
    sizes = QUICK if args.quick else FULL
    results = run(sizes, quick=args.quick, keep=args.keep, only=only)
    if args.baseline:
        results["baseline"] = read_report.baseline_of(args.baseline, json.loads(args.baseline.read_text()))
        results["command"] += f" --baseline {args.baseline}"
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    path = RESULTS_DIR / f"read-paths-{stamp}{'-quick' if args.quick else ''}.json"
    path.write_text(json.dumps(results, indent=1, default=str))
    log(f"results: {path}")
    print(read_report.summary_text(results))
    if not args.quick and not args.no_doc and only == {"list", "timetravel", "watch", "catchup"}:
        read_report.update_doc(DOC, results, path.relative_to(REPO))
        log(f"updated the read-paths section of {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
