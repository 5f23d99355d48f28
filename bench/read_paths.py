"""Read paths: open + list, time travel, watch latency, materializer catch-up — one run.

    .venv/bin/python -m bench.read_paths           # full run, updates docs/BENCHMARKS.md
    .venv/bin/python -m bench.read_paths --quick   # smoke run: tiny sizes, doc untouched
    .venv/bin/python -m bench.read_paths --render bench/results/read-paths-<time>.json

1. ``list``: open + list every live segment (``snapshot()`` then ``files()``) at 1k / 50k / 1M
   live segments: (a) Redis key frame + deltas, (b) object-store key frame Parquet (alone, and
   + Kafka tail at the head), (c) Kafka replay; delta-rs (``DeltaTable`` + ``file_uris()``)
   and pyiceberg (``load_table`` + ``scan().plan_files()``) beside the 50k table.
2. ``timetravel``: the middle version (25k live) of a 100-commit, 50k-segment table, segcat
   with the default lookup chain, delta-rs ``DeltaTable(path, version=mid)``, pyiceberg
   ``scan(snapshot_id=mid)``.
3. ``watch``: commit → ``table.watch()`` latency (watcher in its own process, materializer running).
4. ``catchup``: materializer catch-up from a cold start over a 100k-commit log.
5. ``bulkload``: 50 commits × 1,000 segments with a default-settings materializer, open + list
   3 s later (before the periodic key frame) and at later moments.

Everything runs against the local stack (Kafka + Redis) and a temporary local warehouse.
Helpers: ``read_segcat`` (segcat's tables and reads), ``read_processes`` (writer, materializer
and watcher processes), ``peers`` (delta-rs, pyiceberg), ``read_whatif`` (alternatives to
the Redis path), ``read_doc`` (the tables).
"""

from __future__ import annotations

import argparse
import gc
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any
from unittest import mock

from bench import peers, read_doc, read_processes, read_segcat, read_whatif, report, runner, watch_floor
from bench.read_segcat import bulk_plan
from bench.read_sizes import FULL, QUICK, Sizes
from bench.report import get, size_label
from bench.runner import Context, Results, measure, profile, profile_file, progress
from segcat.catalog.config import Config
from segcat.catalog.read.table import Tables

SCENARIOS = ("list", "timetravel", "watch", "catchup", "bulkload")


CATCHUP_FOCUS = (
    *("apply_record", "decode_commit", "publish_commit", "flush", "write_keyframe", "write_archive"),
    *("to_parquet", "to_ipc", "put_keyframe", "check_redis", "_tick", "seal", "segment_rows", "labels"),
    *(
        "get_watermark_offsets",
        "newest_valid_keyframe",
        "consume",
        "put",
        "_meta",
        "raw_decode",
        "verify",
        "parse",
    ),
)
"""Functions whose totals the catch-up profile always reports (by name)."""
TIME_TRAVEL_FOCUS = (
    *("from_redis", "load", "from_object_store", "newest_valid_keyframe", "archives_between", "apply"),
    *("segment_rows", "_encode_segment", "decode_commit", "files"),
)


# --------------------------------------------------------------------------- scenarios


def open_list(
    config: Config, catalog: Tables, ns: str, sizes: Sizes, workdir: Path, created: list[str]
) -> Results:
    out: Results = {"segcat": {}, "profiles": {}}
    for size in sizes.list_sizes:
        name = f"{ns}.list{size_label(size)}"
        created.append(name)
        progress(f"building {name}: {size:,} live segments")
        built = read_segcat.build_list_table(config, catalog, name, size, sizes)
        progress(f"built in {built.build_s:.0f} s; measuring")
        cell = out["segcat"][str(size)] = read_segcat.measure_open_list(catalog, built, sizes)
        progress(
            f"{size_label(size)}: redis {cell['redis']['median_ms']:.1f} ms, object store "
            f"{cell['object_store']['median_ms']:.1f} ms, kafka {cell['kafka']['median_ms']:.1f} ms"
        )
        if size in (sizes.peer_size, max(sizes.list_sizes)):
            table = catalog.open(name)
            out["profiles"][f"redis_{size_label(size)}"] = profile(lambda: read_segcat.list_files(table))  # noqa: B023
            assert catalog.redis is not None
            progress(f"what-if experiments on the {size_label(size)} key frame")
            cell["whatif"] = read_whatif.keyframe_whatif(config, catalog.redis, table, sizes.reps)
        gc.collect()

    size = sizes.peer_size
    plan = bulk_plan(size - sizes.tail_commits, sizes.per_commit[size])
    full_plan = plan + [1] * sizes.tail_commits
    progress(f"building delta-rs and pyiceberg tables with {size:,} files ({len(full_plan)} commits)")
    started = time.perf_counter()
    delta = peers.build_delta(workdir / "delta-list", full_plan, checkpoint_after=len(plan))
    delta.details["build_s"] = round(time.perf_counter() - started, 1)
    started = time.perf_counter()
    ice = peers.build_iceberg(
        peers.iceberg_catalog(workdir / "iceberg"),
        "bench.list",
        workdir / "iceberg-data-list",
        full_plan,
    )
    ice.details["build_s"] = round(time.perf_counter() - started, 1)
    out["peers"] = {
        "size": size,
        "delta": peers.measure_listing(delta, size, sizes.reps, sizes.fast_reps),
        "iceberg": peers.measure_listing(ice, size, sizes.reps, sizes.fast_reps),
    }
    progress(
        f"delta-rs {out['peers']['delta']['median_ms']:.1f} ms, pyiceberg "
        f"{out['peers']['iceberg']['median_ms']:.1f} ms"
    )
    return out


def time_travel(
    config: Config, catalog: Tables, ns: str, sizes: Sizes, workdir: Path, created: list[str]
) -> Results:
    plan = [sizes.tt_per_commit] * sizes.tt_commits
    mid_index = sizes.tt_commits // 2 - 1
    expected = sizes.tt_per_commit * (mid_index + 1)
    name = f"{ns}.timetravel"
    created.append(name)
    progress(f"building {name}: {sum(plan):,} segments in {len(plan)} commits, K={sizes.tt_keyframe_every}")
    built = read_segcat.build_table(
        config, catalog, name, plan, keyframe_every=sizes.tt_keyframe_every, prefix="t"
    )
    mid = mid_index + 1  # one record per commit after the creation at offset 0: commit i is version i + 1
    out = read_segcat.measure_time_travel(catalog, built, mid, expected, sizes.reps, sizes.fast_reps)
    table = catalog.open(name)
    store_only = measure(
        lambda: read_segcat.list_files(table, mid, ("object-store",)),
        reps=sizes.reps,
        fast_reps=sizes.fast_reps,
        check=read_segcat.expect(expected, "object-store"),
    )
    store_only.details = {"what": "the same version with sources=('object-store',): no Redis detour"}
    out["segcat_object_store_only"] = store_only.to_json()
    out["profile"] = profile(lambda: read_segcat.list_files(table, mid), focus=TIME_TRAVEL_FOCUS)
    progress(f"segcat time travel {out['segcat']['median_ms']:.1f} ms")

    started = time.perf_counter()
    delta = peers.build_delta(workdir / "delta-tt", plan, checkpoint_interval=sizes.tt_keyframe_every)
    delta.details["build_s"] = round(time.perf_counter() - started, 1)
    version = delta.versions[mid_index]
    out["delta"] = peers.measure_listing(
        delta, expected, sizes.reps, sizes.fast_reps, at=version, version=version
    )
    started = time.perf_counter()
    ice = peers.build_iceberg(
        peers.iceberg_catalog(workdir / "iceberg"), "bench.timetravel", workdir / "iceberg-data-tt", plan
    )
    ice.details["build_s"] = round(time.perf_counter() - started, 1)
    snapshot_id = ice.versions[mid_index]
    out["iceberg"] = peers.measure_listing(
        ice,
        expected,
        sizes.reps,
        sizes.fast_reps,
        at=snapshot_id,
        snapshot_index=mid_index + 1,
        snapshot_id=snapshot_id,
    )
    out["mid"] = {"segcat_version": mid, "live_segments": expected}
    progress(f"delta-rs {out['delta']['median_ms']:.1f} ms, pyiceberg {out['iceberg']['median_ms']:.1f} ms")
    return out


def watch(config: Config, catalog: Tables, ns: str, sizes: Sizes, created: list[str]) -> Results:
    out: Results = {}
    for key, pause in (("paced", sizes.watch_pause_s), ("back_to_back", 0.0)):
        name = f"{ns}.watch{key.replace('_', '')}"
        created.append(name)
        progress(f"watch latency, {key}: {sizes.watch_commits} commits")
        out[key] = read_segcat.run_watch(config, catalog, name, sizes.watch_commits, pause)
        got = out[key]["arrival_minus_broker_ts"]
        progress(f"{key}: p50 {got['median_ms']:.1f} ms, p99 {got['p99_ms']:.1f} ms")
    progress(f"the floor: the same hops without segcat, paced, {sizes.watch_commits} records")
    out["floor"] = watch_floor.run_floor(config, sizes.watch_commits, sizes.watch_pause_s)
    got = out["floor"]["arrival_minus_broker_ts"]
    progress(f"floor: p50 {got['median_ms']:.1f} ms, p99 {got['p99_ms']:.1f} ms")
    return out


def catchup(
    config: Config, catalog: Tables, ns: str, sizes: Sizes, workdir: Path, created: list[str]
) -> Results:
    name = f"{ns}.catchup"
    created.append(name)
    progress(f"building a {sizes.catchup_commits:,}-commit log with {sizes.catchup_writers} writer processes")
    built = read_segcat.build_log(config, catalog, name, sizes.catchup_commits, sizes.catchup_writers)
    progress(f"log built in {built['build_s']:.0f} s; {sizes.reps} cold catch-ups + 1 profiled")
    profile_path = workdir / "catchup.prof"
    marks: list[dict[str, float]] = []

    def recording_catch_up(*args: Any, **kwargs: Any) -> dict[str, Any]:
        result: dict[str, Any] = read_processes.catch_up(*args, **kwargs)
        if kwargs.get("profile_to") is None:
            marks.append(result["marks"])
        return result

    with mock.patch.object(read_segcat, "catch_up", recording_catch_up):  # keeps each run's marks
        out = read_segcat.measure_catchup(
            config, catalog, name, built["records"] - 1, workdir, sizes.reps, profile_path
        )
    out["outputs"] = _catchup_outputs(marks, built["records"])
    out["build"] = built
    out["profile"] = profile_file(profile_path, top=40, focus=CATCHUP_FOCUS)
    progress("timing a bare replay of the same log (rules only, no Redis, no key frames)")
    out["replay_floor"] = read_segcat.replay_floor(catalog, name, built["records"], sizes.reps)
    progress(f"catch-up: {out['median_commits_per_s']:,.0f} commits/s")
    return out


def bulk_load(config: Config, catalog: Tables, ns: str, sizes: Sizes, created: list[str]) -> Results:
    """50 × 1,000 segments, then open + list 3 s later (before the periodic key frame) and after."""
    name = f"{ns}.bulkload"
    created.append(name)
    commits, per_commit = sizes.bulk_commits, sizes.bulk_per_commit
    progress(f"bulk load: {commits} commits × {per_commit:,} segments, default materializer")
    out = read_segcat.measure_bulk_load(config, catalog, name, commits, per_commit, sizes.reps)
    table = catalog.open(name)
    out["profile"] = profile(lambda: read_segcat.list_files(table, arrow=True), calls=1)
    for m in out["moments"]:
        progress(
            f"bulk load +{m['at_s']:.0f} s: open + list {m['open_list']['median_ms']:.1f} ms "
            f"(files() {m['open_list_files']['median_ms']:.1f} ms), "
            f"Redis key frame {m['redis_keyframe_version']}"
        )
    return out


def _catchup_outputs(marks: list[dict[str, float]], records: int) -> dict[str, Any]:
    """Catch-up timed to its outputs, not only to the image: the key frame of the last version
    in Redis (readers' fast path) and on object storage (where recovery starts); the materializer
    writes them in the background, after the image has applied the last record."""
    out: dict[str, Any] = {"what": "from the ready callback; timed runs only"}
    for mark in ("redis_keyframe", "object_store_keyframe"):
        seconds = [m[mark] - m["ready"] for m in marks if mark in m]
        if seconds:
            median = statistics.median(seconds)
            out[mark] = {
                "runs_s": [round(x, 3) for x in seconds],
                "median_s": round(median, 3),
                "median_commits_per_s": round(records / median, 1),
            }
    return out


def run(ctx: Context) -> Results:
    sizes = QUICK if ctx.quick else FULL
    workdir = Path(tempfile.mkdtemp(prefix="segcat-read-paths-"))
    config = replace(ctx.config, warehouse=str(workdir / "warehouse"))
    catalog = Tables(config)
    ns = f"rp{uuid.uuid4().hex[:8]}"
    created: list[str] = []
    out: Results = {"params": sizes.to_json(), "namespace": ns, "warehouse": "local directory (temporary)"}
    progress(f"namespace {ns}, warehouse {config.warehouse}")
    try:
        if "list" in ctx.only:
            out["open_list"] = open_list(config, catalog, ns, sizes, workdir, created)
        if "timetravel" in ctx.only:
            out["time_travel"] = time_travel(config, catalog, ns, sizes, workdir, created)
        if "watch" in ctx.only:
            out["watch"] = watch(config, catalog, ns, sizes, created)
        if "catchup" in ctx.only:
            out["catchup"] = catchup(config, catalog, ns, sizes, workdir, created)
        if "bulkload" in ctx.only:
            out["bulk_load"] = bulk_load(config, catalog, ns, sizes, created)
    finally:
        if not ctx.args.keep:
            progress("dropping the benchmark's topics, Redis keys and warehouse")
            read_segcat.drop_tables(config, catalog, created)
            shutil.rmtree(workdir, ignore_errors=True)
    if ctx.args.baseline:
        earlier = runner.load_results(ctx.args.baseline)
        env = earlier.get("environment", {})
        out["baseline"] = {
            "path": str(ctx.args.baseline),
            **{k: env.get(k) for k in ("git", "date_utc", "loadavg_at_start")},
            "figures": headline(earlier),
        }
    return out


# --------------------------------------------------------------------------- checks


def headline(results: Results) -> dict[str, float | None]:
    """The figures worth comparing between runs."""
    out: dict[str, float | None] = {}
    for size in results["params"].get("list_sizes", []):
        for path in ("redis", "object_store", "kafka"):
            key = f"open + list {size_label(size)}, {path.replace('_', ' ')} (ms)"
            out[key] = get(results, "open_list", "segcat", str(size), path, "median_ms")
    out["time travel (ms)"] = get(results, "time_travel", "segcat", "median_ms")
    out["time travel, delta-rs (ms)"] = get(results, "time_travel", "delta", "median_ms")
    out["bulk load, open + list 3 s after (ms)"] = get(
        results, "bulk_load", "moments", 0, "open_list", "median_ms"
    )
    for key, label in (("paced", "paced"), ("back_to_back", "back to back")):
        out[f"watch p99, {label} (ms)"] = get(results, "watch", key, "arrival_minus_broker_ts", "p99_ms")
    out["catch-up (commits/s)"] = get(results, "catchup", "median_commits_per_s")
    return out


def evaluate(results: Results) -> None:
    """The issue's targets, and the headline figures a later run can be compared with."""
    params = results["params"]
    peer, biggest = str(params.get("peer_size")), str(max(params.get("list_sizes") or [0]))
    seg = get(results, "open_list", "segcat") or {}
    target = report.target
    results["targets"] = [
        target(
            f"open + list {size_label(peer)} segments from Redis (median)",
            get(seg, peer, "redis", "median_ms"),
            25.0,
            "ms",
        ),
        target(
            f"open + list {size_label(biggest)} segments from Redis (median)",
            get(seg, biggest, "redis", "median_ms"),
            250.0,
            "ms",
        ),
        target(
            "time travel to the middle version (median)",
            get(results, "time_travel", "segcat", "median_ms"),
            20.0,
            "ms",
        ),
        target(
            "time travel: delta-rs ÷ segcat, same run",
            _ratio(
                get(results, "time_travel", "delta", "median_ms"),
                get(results, "time_travel", "segcat", "median_ms"),
            ),
            2.0,
            "×",
        ),
        target(
            "open + list after a bulk load, 3 s after (median)",
            _first_moment(results),
            50.0,
            "ms",
        ),
        target(
            "open + list after a bulk load, worst moment (median)",
            max(
                (m["open_list"]["median_ms"] for m in get(results, "bulk_load", "moments") or []),
                default=None,
            ),
            50.0,
            "ms",
        ),
        target(
            "commit → watch() notification p99 (paced writer)",
            get(results, "watch", "paced", "arrival_minus_broker_ts", "p99_ms"),
            50.0,
            "ms",
        ),
        target(
            "materializer catch-up (median)",
            get(results, "catchup", "median_commits_per_s"),
            20_000.0,
            "commits/s",
        ),
    ]
    results["headline"] = headline(results)


def _first_moment(results: Results) -> float | None:
    """The bulk load's open + list at its first moment (3 s after the last commit)."""
    moments = get(results, "bulk_load", "moments") or []
    return get(moments[0], "open_list", "median_ms") if moments else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--baseline", type=Path, help="an earlier results JSON to compare the headline figures with"
    )


BENCHMARK = runner.Benchmark(
    name="read-paths",
    module="bench.read_paths",
    description="Read paths of segcat (open + list, time travel, watch, catch-up), delta-rs and pyiceberg.",
    scenarios=SCENARIOS,
    run=run,
    render=read_doc.render,
    details=read_doc.details,
    evaluate=evaluate,
    options=options,
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCHMARK))
