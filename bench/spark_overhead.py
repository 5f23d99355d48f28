"""Spark overhead of segcat: a 100-file append vs plain Parquet vs delta-rs, and stream latency.

    .venv/bin/python -m bench.spark_overhead            # full run, updates docs/BENCHMARKS.md
    .venv/bin/python -m bench.spark_overhead --quick    # smoke test: small sizes, doc untouched

Scenarios (full / quick), all in one run and one Spark session (``si.local_session()``,
``local[2]``):

1. *Append of 100 files* (100 × 10,000 / 4 × 1,000 rows, the DataFrame repartitioned to that
   many partitions and cached before timing), ≥ 5 repetitions each, interleaved:
   - ``si.write(df, table, mode="append")`` (segcat: executors write + describe, one commit);
     separately, the same through ``si.stage_write`` + ``staged.commit()`` to split the time
     into the stage (writer open, Spark job incl. footer stats) and the commit publish;
   - ``df.write.parquet(path)`` (plain Spark, no catalog; codec zstd like segcat's files);
   - ``deltalake.write_deltalake(path, arrow)`` from the same rows collected to Arrow with
     ``df.toArrow()`` *outside* the timing (zstd too);
   - the footer-stats cost alone: ``segment_from_parquet`` over the 100 files segcat wrote.
2. *Commit → row in a memory sink*: ``readStream.format("segcat")`` → ``format("memory")`` with
   a 100 ms processing-time trigger; 40 / 10 one-segment appends via ``TableWriter``, one at a
   time; the latency of a version is when a poll of the sink first sees it minus the return
   of ``append``.

Results go to ``bench/results/spark-overhead-<UTC time>.json`` and, for full runs, to the
``spark-overhead`` section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import os
import random
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

from rich.console import Console

from bench import report
from bench.environment import describe, package_version
from bench.stats import percentile
from segcat.catalog.config import Config

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"
DOC = REPO / "docs" / "BENCHMARKS.md"
SECTION = "spark-overhead"
OTHER_BENCHES = ("bench.read_paths", "bench.commit_latency")

console = Console(stderr=True)
log = logging.getLogger("segcat.bench")


@dataclass(frozen=True)
class Params:
    files: int
    rows_per_file: int
    repetitions: int
    stream_commits: int
    trigger_ms: int
    poll_interval_ms: int
    wait_for_others_s: int

    @classmethod
    def full(cls) -> Params:
        return cls(100, 10_000, 7, 40, 100, 5, 600)

    @classmethod
    def quick(cls) -> Params:
        return cls(4, 1_000, 2, 10, 100, 5, 0)


def _ms(ns: int) -> float:
    return ns / 1e6


def summary(values_ms: list[float]) -> dict[str, Any]:
    s = sorted(values_ms)
    return {
        "count": len(s),
        "median_ms": round(statistics.median(s), 3),
        "p99_ms": round(percentile(s, 99), 3),
        "min_ms": round(s[0], 3),
        "max_ms": round(s[-1], 3),
        "mean_ms": round(statistics.fmean(s), 3),
        "samples_ms": [round(v, 3) for v in values_ms],
    }


def wait_for_other_benchmarks(limit_s: int) -> dict[str, Any]:
    """Poll every 20 s until no other benchmark process runs, for at most ``limit_s``."""
    import subprocess

    def busy() -> list[str]:
        found = []
        for name in OTHER_BENCHES:
            out = subprocess.run(["pgrep", "-f", name], capture_output=True, text=True, check=False)
            pids = [p for p in out.stdout.split() if int(p) != os.getpid()]
            if pids:
                found.append(f"{name} ({', '.join(pids)})")
        return found

    start = time.monotonic()
    others = busy()
    while others and time.monotonic() - start < limit_s:
        console.print(f"waiting for other benchmarks to finish: {', '.join(others)}")
        time.sleep(20)
        others = busy()
    waited = round(time.monotonic() - start, 1)
    if others:
        console.print(f"[yellow]still running after {waited} s, measuring anyway: {', '.join(others)}")
    return {"waited_s": waited, "still_running": others}


def ensure_stack(config: Config) -> None:
    from segcat import local_stack as stack
    from segcat.local_stack.probe import kafka_answers
    from segcat.local_stack.settings import StackSettings

    if not kafka_answers(config.bootstrap_servers, timeout_s=5.0):
        console.print("[bold]Kafka is down: starting the local stack…")
        stack.up(StackSettings.load())


def dir_stats(path: Path) -> dict[str, int]:
    files = [p for p in path.rglob("*.parquet") if p.is_file()]
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


# --------------------------------------------------------------------------- scenario 1


def _tiny_segment(i: int = 0) -> Any:
    from segcat.catalog.protocol.model import ColumnStats, ColumnType, Segment

    sid = f"s{i:05d}-{uuid.uuid4().hex[:6]}"
    return Segment(
        segment_id=sid,
        path=f"data/2020-01/{sid}.parquet",
        size_bytes=1000,
        row_count=10,
        partition="2020-01",
        stats=(ColumnStats("id", ColumnType.INT, 0, 9, 0),),
    )


def run_append(spark: Any, config: Config, params: Params, work: Path) -> dict[str, Any]:
    import deltalake
    import pyarrow.parquet as pq
    from pyspark.sql import functions as F

    import segcat.spark_integration as si
    from segcat.catalog.read.table import Catalog, table_root
    from segcat.catalog.storage.parquet_stats import segment_from_parquet
    from segcat.producers import TableWriter

    total = params.files * params.rows_per_file
    df = (
        spark.range(total)
        .select(
            F.col("id"),
            F.date_add(F.lit("2024-01-01").cast("date"), (F.col("id") % 30).cast("int")).alias("day"),
            (F.col("id") % 10_007).cast("string").alias("user"),
            (F.rand(7) * 100).alias("amount"),
            F.concat(F.lit("item-"), (F.col("id") % 997).cast("string")).alias("item"),
        )
        .repartition(params.files)
        .cache()
    )
    assert df.count() == total
    t0 = time.perf_counter_ns()
    arrow = df.toArrow()
    to_arrow_ms = _ms(time.perf_counter_ns() - t0)
    delta_props = deltalake.WriterProperties(compression="ZSTD")

    catalog = Catalog(config)
    run_id = uuid.uuid4().hex[:8]
    samples: dict[str, list[float]] = {
        k: []
        for k in (
            "segcat",
            "segcat_stage",
            "segcat_commit",
            "segcat_commit_warm",
            "writer_open",
            "arrow",
            "plain",
            "delta",
            "stats_driver",
        )
    }
    files: dict[str, Any] = {}

    def segcat_write(i: int) -> None:
        name = f"bench.spark_{run_id}_w{i}"
        catalog.create_table(name)
        t = time.perf_counter_ns()
        si.write(df, name, mode="append", config=config)
        samples["segcat"].append(_ms(time.perf_counter_ns() - t))
        root = Path(table_root(config, catalog.table(name).name))
        files["segcat"] = dir_stats(root)
        # the footer-stats cost alone, on the driver, over the files this write made
        paths = sorted(p for p in root.rglob("*.parquet"))
        t = time.perf_counter_ns()
        for p in paths:
            segment_from_parquet(str(p), segment_id=p.stem, relative_path=p.name, partition=None)
        samples["stats_driver"].append(_ms(time.perf_counter_ns() - t))

    def segcat_staged(i: int) -> None:
        name = f"bench.spark_{run_id}_s{i}"
        catalog.create_table(name)
        t = time.perf_counter_ns()
        with TableWriter(config, name) as probe:  # what stage_write does before its Spark job
            probe.refresh()
        samples["writer_open"].append(_ms(time.perf_counter_ns() - t))
        t = time.perf_counter_ns()
        with si.stage_write(df, name, mode="append", config=config) as staged:
            t1 = time.perf_counter_ns()
            staged.commit()
            t2 = time.perf_counter_ns()
            # a second, one-segment commit on the same (now connected) writer: the warm cost
            staged.writer.append([_tiny_segment()])
            t3 = time.perf_counter_ns()
        samples["segcat_stage"].append(_ms(t1 - t))
        samples["segcat_commit"].append(_ms(t2 - t1))
        samples["segcat_commit_warm"].append(_ms(t3 - t2))

    def arrow_write(i: int) -> None:
        """The Python-worker path without the catalog: mapInArrow + pyarrow zstd, no stats."""
        root = str(work / f"arrow-{i}")
        os.makedirs(root, exist_ok=True)

        def write(batches: Any) -> Any:  # nested, so Spark pickles it by value
            import uuid as _uuid

            import pyarrow as _pa
            import pyarrow.parquet as _pq

            writer = None
            path = f"{root}/part-{_uuid.uuid4().hex}.parquet"
            for batch in batches:
                if batch.num_rows == 0:
                    continue
                if writer is None:
                    writer = _pq.ParquetWriter(path, batch.schema, compression="zstd")
                writer.write_batch(batch)
            if writer is not None:
                writer.close()
                yield _pa.RecordBatch.from_pydict({"path": [path]})

        t = time.perf_counter_ns()
        df.mapInArrow(write, "path string").collect()
        samples["arrow"].append(_ms(time.perf_counter_ns() - t))
        files["arrow"] = dir_stats(Path(root))

    def plain_write(i: int) -> None:
        path = work / f"plain-{i}"
        t = time.perf_counter_ns()
        df.write.option("compression", "zstd").parquet(str(path))
        samples["plain"].append(_ms(time.perf_counter_ns() - t))
        files["plain"] = dir_stats(path)

    def delta_write(i: int) -> None:
        path = work / f"delta-{i}"
        t = time.perf_counter_ns()
        deltalake.write_deltalake(str(path), arrow, writer_properties=delta_props)
        samples["delta"].append(_ms(time.perf_counter_ns() - t))
        files["delta"] = dir_stats(path)

    steps: list[tuple[str, Callable[[int], None]]] = [
        ("segcat", segcat_write),
        ("segcat staged", segcat_staged),
        ("arrow", arrow_write),
        ("plain", plain_write),
        ("delta", delta_write),
    ]
    # one untimed warm-up round (JIT, Python worker start, topic creation paths)
    for label, step in steps:
        console.print(f"warm-up: {label}")
        step(-1)
    for values in samples.values():
        values.clear()
    for rep in range(params.repetitions):
        order = steps[:]
        random.Random(rep).shuffle(order)
        for _label, step in order:
            step(rep)
        console.print(
            f"rep {rep + 1}/{params.repetitions}: "
            + ", ".join(f"{k} {v[-1]:.0f} ms" for k, v in samples.items() if v)
        )
    df.unpersist()
    first = next(iter(sorted((work).glob("plain-0/*.parquet"))), None)
    return {
        "rows": total,
        "partitions": params.files,
        "repetitions": params.repetitions,
        "to_arrow_ms_untimed": round(to_arrow_ms, 1),
        "files_written": files,
        "plain_file_codec": pq.ParquetFile(first).metadata.row_group(0).column(0).compression
        if first
        else None,
        "results": {k: summary(v) for k, v in samples.items()},
    }


# --------------------------------------------------------------------------- scenario 2


def run_stream(spark: Any, config: Config, params: Params) -> dict[str, Any]:
    import segcat.spark_integration as si
    from segcat.catalog.read.table import Catalog
    from segcat.producers import TableWriter

    name = f"bench.stream_{uuid.uuid4().hex[:8]}"
    Catalog(config).create_table(name)
    sink = f"segcat_bench_{uuid.uuid4().hex[:8]}"
    checkpoint = tempfile.mkdtemp(prefix="segcat-bench-ckpt-")

    seg = _tiny_segment

    writer = TableWriter(config, name)
    first = writer.append([seg(0)])  # so the query has something to start on
    query = (
        spark.readStream.format("segcat")
        .options(**si.source_options(config))
        .option("table", name)
        .load()
        .writeStream.format("memory")
        .queryName(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=f"{params.trigger_ms} milliseconds")
        .start()
    )

    def seen() -> set[int]:
        return {r["version"] for r in spark.sql(f"select version from {sink}").collect()}

    def wait_for(version: int, limit_s: float = 120.0) -> tuple[int, int]:
        polls = 0
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            polls += 1
            if version in seen():
                return time.perf_counter_ns(), polls
            time.sleep(params.poll_interval_ms / 1000)
        raise TimeoutError(f"version {version} not in the sink after {limit_s} s")

    latencies: list[float] = []
    poll_costs: list[float] = []
    try:
        wait_for(first)
        # warm-up commits, untimed
        for i in range(3):
            wait_for(writer.append([seg(1000 + i)]))
        rng = random.Random(1)
        for i in range(params.stream_commits):
            time.sleep(rng.uniform(0, params.trigger_ms / 1000))  # do not lock onto the trigger
            version = writer.append([seg(i + 1)])
            committed = time.perf_counter_ns()
            appeared, _ = wait_for(version)
            latencies.append(_ms(appeared - committed))
        for _ in range(20):
            t = time.perf_counter_ns()
            seen()
            poll_costs.append(_ms(time.perf_counter_ns() - t))
        progress = query.recentProgress
        batch_ms = [
            float(p["durationMs"].get("triggerExecution", 0)) for p in progress if p.get("numInputRows")
        ]
        phases: dict[str, list[float]] = {}
        for prog in progress:
            if prog.get("numInputRows"):
                for phase, value in prog["durationMs"].items():
                    phases.setdefault(phase, []).append(float(value))
    finally:
        query.stop()
        writer.close()
        shutil.rmtree(checkpoint, ignore_errors=True)
    return {
        "trigger_ms": params.trigger_ms,
        "poll_interval_ms": params.poll_interval_ms,
        "commits": params.stream_commits,
        "latency": summary(latencies),
        "sink_poll_cost": summary(poll_costs),
        "batch_trigger_execution_ms": summary(batch_ms) if batch_ms else None,
        "batch_phases_ms": {k: summary(v) for k, v in phases.items()},
    }


# --------------------------------------------------------------------------- report


def _f(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:,.1f}"


def render(res: dict[str, Any]) -> str:
    env = res["environment"]
    a = res["append"]
    r = a["results"]
    m = {k: v["median_ms"] for k, v in r.items()}
    s = res["stream"]
    files = a["files_written"]
    overhead = m["segcat"] - m["plain"]
    lines = [
        "## Spark overhead: a 100-file append, and commit → stream latency",
        "",
        f"Measured {env['date_utc']} on one machine, both scenarios in one run and one Spark session "
        f"(`{res['results_file']}` holds every sample). Reproduce from the repository root, with the "
        "local stack running or startable (`segcat stack up`):",
        "",
        "```sh",
        "SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python -m bench.spark_overhead",
        "```",
        "",
        "### Machine and software",
        "",
        "|  |  |",
        "| --- | --- |",
        f"| CPU | {env['cpu']}, `nproc` = {env['nproc']} |",
        f"| Memory (`free -h`) | {env['memory']} |",
        f"| Kernel | {env['kernel']} |",
        f"| Python | {env['python']} |",
        f"| Java | {env['java']} |",
        f"| Kafka | {env['kafka']} |",
        f"| Spark | pyspark {res['pyspark']}, `local[2]` (`si.local_session()`) |",
        f"| Peers | deltalake {env['packages']['deltalake']}, pyarrow {env['packages']['pyarrow']} |",
        f"| Tree | {env['git']} |",
        f"| Load average at start | {', '.join(str(v) for v in env['loadavg_at_start'])} |",
        f"| Other benchmarks | {_others(res['waited_for_others'])} |",
        "",
        f"### 1. Append of {a['rows']:,} rows as {a['partitions']} files",
        "",
        f"The same cached DataFrame ({a['partitions']} partitions × {a['rows'] // a['partitions']:,} rows; "
        "columns `id` long, `day` date, `user` string, `amount` double, `item` string), "
        f"median of {a['repetitions']} repetitions (interleaved in shuffled order, after one "
        "untimed warm-up round):",
        "",
        "| Write | Files | Bytes | Median | p99 | Min |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        _row('**segcat** `si.write(df, t, mode="append")`', files.get("segcat"), r["segcat"]),
        _row(
            "Python-worker floor: `df.mapInArrow(...)`, pyarrow zstd, no stats, no catalog",
            files.get("arrow"),
            r["arrow"],
        ),
        _row("plain Spark `df.write.parquet(path)` (zstd)", files.get("plain"), r["plain"]),
        _row(
            "delta-rs `write_deltalake(path, arrow)` (zstd; Arrow collected beforehand)",
            files.get("delta"),
            r["delta"],
        ),
        "",
        f"**segcat overhead = segcat − plain = {_f(overhead)} ms** "
        f"({overhead / m['plain'] * 100:+.0f}% of the plain write). "
        f"Collecting the rows to Arrow for delta-rs (`df.toArrow()`, not timed) took "
        f"{_f(a['to_arrow_ms_untimed'])} ms once.",
        "",
        "Where segcat's time goes (the same write split with `si.stage_write` + `commit()`, separate "
        "repetitions):",
        "",
        "| Part | Median | p99 |",
        "| --- | ---: | ---: |",
        f"| stage: open `TableWriter` + read state, Spark job (`mapInArrow`: pyarrow writes, "
        f"footer stats), plan | {_f(m['segcat_stage'])} ms | {_f(r['segcat_stage']['p99_ms'])} ms |",
        f"| of which: open a `TableWriter` on the (empty) table + `refresh()` (timed separately) | "
        f"{_f(m['writer_open'])} ms | {_f(r['writer_open']['p99_ms'])} ms |",
        f"| commit publish: the write's one commit, the first on the `TableWriter` that "
        f"`si.write` opens (one Kafka record, wait for the verdict) | "
        f"{m['segcat_commit']:.2f} ms | {r['segcat_commit']['p99_ms']:.2f} ms |",
        f"| for contrast: a second (one-segment) commit on that now-connected writer | "
        f"{m['segcat_commit_warm']:.2f} ms | {r['segcat_commit_warm']['p99_ms']:.2f} ms |",
        f"| footer stats alone: `segment_from_parquet` over the {files.get('segcat', {}).get('files', '?')} "
        f"files, sequential on the driver (executors share it over 2 cores) | {_f(m['stats_driver'])} ms "
        f"| {_f(r['stats_driver']['p99_ms'])} ms |",
        "",
        f"Against the Python-worker floor (same write path as segcat's job, no stats, no rename, no "
        f"catalog): segcat − floor = **{_f(m['segcat'] - m['arrow'])} ms**; floor − plain = "
        f"{_f(m['arrow'] - m['plain'])} ms is what moving rows through Python workers costs. "
        f"Spread over the repetitions: segcat {_f(r['segcat']['min_ms'])}–{_f(r['segcat']['max_ms'])} ms, "
        f"floor {_f(r['arrow']['min_ms'])}–{_f(r['arrow']['max_ms'])} ms, so segcat − floor is "
        + (
            "within the run-to-run noise; the parts measured directly (writer open + commit publish + "
            f"footer stats ≈ {_f(m['writer_open'] + m['segcat_commit'] + m['stats_driver'] / 2)} ms) "
            "are the better estimate of the catalog's own cost."
            if abs(m["segcat"] - m["arrow"]) < max(r["segcat"]["max_ms"] - r["segcat"]["min_ms"], 1)
            else "larger than the run-to-run spread."
        ),
        "",
        f"Decomposition of the overhead (medians): stage − plain = "
        f"{_f(m['segcat_stage'] - m['plain'])} ms (Python-worker write path incl. footer stats and "
        f"opening the writer), commit publish = {_f(m['segcat_commit'])} ms; of the stage, the footer "
        f"stats themselves are ≈ {_f(m['stats_driver'] / 2)} ms (driver time ÷ 2 cores).",
        "",
        f"### 2. Commit → row in a memory sink ({s['trigger_ms']} ms trigger)",
        "",
        f'`spark.readStream.format("segcat")` → `writeStream.format("memory")`, '
        f'`trigger(processingTime="{s["trigger_ms"]} milliseconds")`; {s["commits"]} one-segment appends '
        "with `TableWriter.append`, one at a time, each after a random 0–trigger pause; latency = "
        f"first poll of `select version from <sink>` (every {s['poll_interval_ms']} ms) that shows the "
        "version − return of `append`.",
        "",
        "| Measure | Count | p50 | p99 | Min | Max |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
        _lat("commit → visible in sink", s["latency"]),
        _lat("one sink poll (`spark.sql(...).collect()`)", s["sink_poll_cost"]),
    ]
    if s.get("batch_trigger_execution_ms"):
        lines.append(
            _lat("micro-batch `triggerExecution` (batches with rows)", s["batch_trigger_execution_ms"])
        )
    phases = s.get("batch_phases_ms") or {}
    if phases:
        lines += [
            "",
            "Micro-batches that carried rows, Spark's `durationMs` per phase (median / max): "
            + ", ".join(
                f"`{k}` {_f(v['median_ms'])} / {_f(v['max_ms'])} ms"
                for k, v in sorted(phases.items(), key=lambda kv: -kv[1]["median_ms"])
            )
            + ".",
        ]
    lines += [
        "",
        "### Method",
        "",
        "- One `si.local_session()` (`local[2]`, 2 shuffle partitions) for everything. The DataFrame is "
        "built with `spark.range`, repartitioned to the file count and cached (counted) before any "
        "timing, so every write reads the same in-memory partitions and writes one file per partition.",
        "- segcat: a fresh table per repetition (`Catalog.create_table`, untimed); the time covers "
        "`si.write` end to end: opening the writer, the Spark job (Arrow batches to Python workers, "
        "pyarrow Parquet zstd, footer read-back for stats), collecting the descriptions, one commit.",
        '- plain: `df.write.option("compression", "zstd").parquet(path)` into a new directory (Spark\'s '
        "JVM writer and commit protocol, `_SUCCESS`, no catalog). delta-rs: `write_deltalake` of the "
        'whole Arrow table into a new local table with `WriterProperties(compression="ZSTD")`; it '
        "chooses its own file sizes (count above) and runs in the driver process only.",
        "- Python-worker floor: a `mapInArrow` function that writes each task's batches to one pyarrow "
        "zstd file and returns its path; no temp name + rename, no footer read-back, no writer, no "
        "commit. segcat's files and the floor's have the same total size (table above); Spark's "
        "JVM writer makes "
        "smaller ones (different encodings and row groups).",
        "- Stream: the table gets one version before the query starts and three untimed warm-up "
        "commits; the sink is polled from the driver while the query runs in the same JVM, so polls "
        "and micro-batches share the 2 cores. The checkpoint is in a local temp directory.",
        "- The footer-stats row re-reads the files segcat wrote in that repetition, on the driver; in "
        "the write they are read right after being written, by the executors (page cache hot in both).",
        "- All files on the local disk (warehouse in a temp directory); Kafka is the local one-broker "
        "stack. p99 is nearest-rank; with ≤ 10 samples it is the maximum.",
        "",
    ]
    return "\n".join(lines)


def _others(w: dict[str, Any]) -> str:
    if w["still_running"]:
        return f"still running after waiting {w['waited_s']} s: {', '.join(w['still_running'])}"
    return f"none running (waited {w['waited_s']} s)"


def _row(label: str, files: dict[str, int] | None, s: dict[str, Any]) -> str:
    f = files or {"files": 0, "bytes": 0}
    return (
        f"| {label} | {f['files']} | {f['bytes'] / 1e6:,.1f} MB | {_f(s['median_ms'])} ms "
        f"| {_f(s['p99_ms'])} ms | {_f(s['min_ms'])} ms |"
    )


def _lat(label: str, s: dict[str, Any]) -> str:
    return (
        f"| {label} | {s['count']} | {_f(s['median_ms'])} ms | {_f(s['p99_ms'])} ms "
        f"| {_f(s['min_ms'])} ms | {_f(s['max_ms'])} ms |"
    )


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="small sizes; docs untouched")
    parser.add_argument("--no-wait", action="store_true", help="do not wait for other benchmarks")
    parser.add_argument("--no-doc", action="store_true", help="do not update docs/BENCHMARKS.md")
    parser.add_argument("--render", metavar="JSON", help="re-render the doc section from a results file")
    args = parser.parse_args(argv)
    if args.render:
        body = render(json.loads(Path(args.render).read_text()))
        print(body)
        if not args.no_doc:
            report.update_section(DOC, SECTION, body)
        return 0
    logging.basicConfig(level=logging.WARNING)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    params = Params.quick() if args.quick else Params.full()

    base = Config.load()
    ensure_stack(base)
    work = Path(tempfile.mkdtemp(prefix="segcat-bench-spark-"))
    config = replace(base, warehouse=str(work / "warehouse"))

    import segcat.spark_integration as si
    spark = si.local_session("segcat-bench-spark")
    spark.sparkContext.setLogLevel("ERROR")
    waited = wait_for_other_benchmarks(0 if args.no_wait else params.wait_for_others_s)
    environment = describe(config, REPO)
    try:
        console.print("[bold]1. append")
        append = run_append(spark, config, params, work)
        console.print("[bold]2. stream")
        stream = run_stream(spark, config, params)
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / f"spark-overhead-{stamp}{'-quick' if args.quick else ''}.json"
    results = {
        "benchmark": SECTION,
        "quick": args.quick,
        "params": asdict(params),
        "environment": environment,
        "pyspark": package_version("pyspark"),
        "waited_for_others": waited,
        "results_file": str(out.relative_to(REPO)),
        "append": append,
        "stream": stream,
    }
    out.write_text(json.dumps(results, indent=2, default=str))
    body = render(results)
    print(body)
    console.print(f"results: {out}")
    if not args.quick and not args.no_doc:
        report.update_section(DOC, SECTION, body)
        console.print(f"updated the {SECTION} section of {DOC}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
