"""Spark overhead of segcat: a 100-file append vs plain Parquet vs delta-rs, and stream latency.

    .venv/bin/python -m bench.spark_overhead            # full run, updates docs/BENCHMARKS.md
    .venv/bin/python -m bench.spark_overhead --quick    # smoke test: small sizes, doc untouched

Scenarios (full / quick), all in one run and one Spark session (``si.local_session()``,
``local[2]``); a full run first waits (up to 10 min) for other benchmarks to finish:

1. ``append``: 100 × 10,000 / 4 × 1,000 rows, the DataFrame repartitioned to that many
   partitions and cached before timing, 7 / 2 repetitions each, interleaved:
   - ``si.write(df, table, mode="append")`` (segcat: executors write + describe, one commit);
     separately, the same through ``si.stage_write`` + ``staged.commit()`` to split the time
     into the stage (writer open, Spark job incl. footer stats) and the commit publish;
   - ``df.write.parquet(path)`` (plain Spark, no catalog; codec zstd like segcat's files);
   - ``df.mapInArrow(...)`` writing pyarrow files (the Python-worker floor, no catalog);
   - ``deltalake.write_deltalake(path, arrow)`` from the same rows collected to Arrow with
     ``df.toArrow()`` *outside* the timing (zstd too);
   - the footer-stats cost alone: ``segment_from_parquet`` over the 100 files segcat wrote.
2. ``stream``: commit → row in a memory sink: ``readStream.format("segcat")`` →
   ``format("memory")`` with a 100 ms processing-time trigger; 40 / 10 one-segment appends via
   ``TableWriter``, one at a time; the latency of a version is when a poll of the sink first
   sees it minus the return of ``append``.

Results go to ``bench/results/spark-overhead-<UTC time>.json`` and, for full runs, to the
``spark-overhead`` section of docs/BENCHMARKS.md (words: ``spark_doc``).
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from bench import runner, spark_doc
from bench.runner import Context, Results, Timing, progress, timed
from segcat.catalog.config import Config
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol.model import ColumnStats, ColumnType, Segment
from segcat.catalog.protocol.names import table_name


@dataclass(frozen=True)
class Params:
    files: int
    rows_per_file: int
    repetitions: int
    stream_commits: int
    trigger_ms: int
    poll_interval_ms: int

    @classmethod
    def of(cls, quick: bool) -> Params:
        return cls(4, 1_000, 2, 10, 100, 5) if quick else cls(100, 10_000, 7, 40, 100, 5)


def dir_stats(path: Path) -> dict[str, int]:
    files = [p for p in path.rglob("*.parquet") if p.is_file()]
    return {"files": len(files), "bytes": sum(p.stat().st_size for p in files)}


def _tiny_segment(i: int = 0) -> Segment:
    sid = f"s{i:05d}-{uuid.uuid4().hex[:6]}"
    return Segment(
        segment_id=sid,
        path=f"data/2020-01/{sid}.parquet",
        size_bytes=1000,
        row_count=10,
        partition="2020-01",
        stats=(ColumnStats("id", ColumnType.INT, 0, 9, 0),),
    )


def _write_arrow_files(root: str) -> Callable[[Any], Any]:
    """The Python-worker path without the catalog: each task's batches to one pyarrow zstd file."""

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

    return write


def run_append(spark: Any, config: Config, params: Params, work: Path, created: list[str]) -> Results:
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
    arrow, to_arrow_ms = timed(df.toArrow)
    delta_props = deltalake.WriterProperties(compression="ZSTD")
    catalog = Catalog(config)
    run_id = uuid.uuid4().hex[:8]
    samples: dict[str, list[float]] = defaultdict(list)
    files: dict[str, Any] = {}

    def clock(key: str, fn: Callable[[], object]) -> None:
        samples[key].append(timed(fn)[1])

    def segcat_write(i: int) -> None:
        name = f"bench.spark_{run_id}_w{i}"
        catalog.create_table(name)
        created.append(name)
        clock("segcat", lambda: si.write(df, name, mode="append", config=config))
        root = Path(table_root(config, catalog.table(name).name))
        files["segcat"] = dir_stats(root)
        paths = sorted(root.rglob("*.parquet"))  # the footer-stats cost alone, on the driver

        def stats() -> None:
            for p in paths:
                segment_from_parquet(str(p), segment_id=p.stem, relative_path=p.name, partition=None)

        clock("stats_driver", stats)

    def segcat_staged(i: int) -> None:
        name = f"bench.spark_{run_id}_s{i}"
        catalog.create_table(name)
        created.append(name)

        def open_writer() -> None:  # what stage_write does before its Spark job
            with TableWriter(config, name) as probe:
                probe.refresh()

        clock("writer_open", open_writer)
        t = time.perf_counter_ns()
        with si.stage_write(df, name, mode="append", config=config) as staged:
            t1 = time.perf_counter_ns()
            staged.commit()
            t2 = time.perf_counter_ns()
            staged.writer.append([_tiny_segment()])  # a second commit on the now connected writer
            t3 = time.perf_counter_ns()
        for key, ns in (
            ("segcat_stage", t1 - t),
            ("segcat_commit", t2 - t1),
            ("segcat_commit_warm", t3 - t2),
        ):
            samples[key].append(ns / runner.NS_PER_MS)

    def arrow_write(i: int) -> None:
        root = str(work / f"arrow-{i}")
        os.makedirs(root, exist_ok=True)
        clock("arrow", lambda: df.mapInArrow(_write_arrow_files(root), "path string").collect())
        files["arrow"] = dir_stats(Path(root))

    def plain_write(i: int) -> None:
        path = work / f"plain-{i}"
        clock("plain", lambda: df.write.option("compression", "zstd").parquet(str(path)))
        files["plain"] = dir_stats(path)

    def delta_write(i: int) -> None:
        path = work / f"delta-{i}"
        clock("delta", lambda: deltalake.write_deltalake(str(path), arrow, writer_properties=delta_props))
        files["delta"] = dir_stats(path)

    steps = [
        ("segcat", segcat_write),
        ("segcat staged", segcat_staged),
        ("arrow", arrow_write),
        ("plain", plain_write),
        ("delta", delta_write),
    ]
    for label, step in steps:  # one untimed warm-up round (JIT, Python worker start, topic creation paths)
        progress(f"warm-up: {label}")
        step(-1)
    samples.clear()
    for rep in range(params.repetitions):
        order = steps[:]
        random.Random(rep).shuffle(order)
        for _, step in order:
            step(rep)
        progress(
            f"rep {rep + 1}/{params.repetitions}: "
            + ", ".join(f"{k} {v[-1]:.0f} ms" for k, v in samples.items())
        )
    df.unpersist()
    first = next(iter(sorted(work.glob("plain-0/*.parquet"))), None)
    return {
        "rows": total,
        "partitions": params.files,
        "repetitions": params.repetitions,
        "to_arrow_ms_untimed": round(to_arrow_ms, 1),
        "files_written": files,
        "plain_file_codec": pq.ParquetFile(first).metadata.row_group(0).column(0).compression
        if first
        else None,
        "results": {k: Timing(v).to_json() for k, v in samples.items()},
    }


def run_stream(spark: Any, config: Config, params: Params, created: list[str]) -> Results:
    import segcat.spark_integration as si
    from segcat.catalog.read.table import Catalog
    from segcat.producers import TableWriter

    name = f"bench.stream_{uuid.uuid4().hex[:8]}"
    Catalog(config).create_table(name)
    created.append(name)
    sink = f"segcat_bench_{uuid.uuid4().hex[:8]}"
    checkpoint = tempfile.mkdtemp(prefix="segcat-bench-ckpt-")
    writer = TableWriter(config, name)
    first = writer.append([_tiny_segment(0)])  # so the query has something to start on
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

    def wait_for(version: int, limit_s: float = 120.0) -> int:
        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if version in seen():
                return time.perf_counter_ns()
            time.sleep(params.poll_interval_ms / 1000)
        raise TimeoutError(f"version {version} not in the sink after {limit_s} s")

    latencies: list[float] = []
    try:
        wait_for(first)
        for i in range(3):  # warm-up commits, untimed
            wait_for(writer.append([_tiny_segment(1000 + i)]))
        rng = random.Random(1)
        for i in range(params.stream_commits):
            time.sleep(rng.uniform(0, params.trigger_ms / 1000))  # do not lock onto the trigger
            version = writer.append([_tiny_segment(i + 1)])
            committed = time.perf_counter_ns()
            latencies.append((wait_for(version) - committed) / runner.NS_PER_MS)
        poll_costs = [timed(seen)[1] for _ in range(20)]
        with_rows = [p for p in query.recentProgress if p.get("numInputRows")]
        phases: dict[str, list[float]] = defaultdict(list)
        for prog in with_rows:
            for phase, value in prog["durationMs"].items():
                phases[phase].append(float(value))
    finally:
        query.stop()
        writer.close()
        shutil.rmtree(checkpoint, ignore_errors=True)
    batch_ms = [float(p["durationMs"].get("triggerExecution", 0)) for p in with_rows]
    return {
        "trigger_ms": params.trigger_ms,
        "poll_interval_ms": params.poll_interval_ms,
        "commits": params.stream_commits,
        "latency": Timing(latencies).to_json(),
        "sink_poll_cost": Timing(poll_costs).to_json(),
        "batch_trigger_execution_ms": Timing(batch_ms).to_json() if batch_ms else None,
        "batch_phases_ms": {k: Timing(v).to_json() for k, v in phases.items()},
    }


def run(ctx: Context) -> Results:
    import segcat.spark_integration as si

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    params = Params.of(ctx.quick)
    work = Path(tempfile.mkdtemp(prefix="segcat-bench-spark-"))
    config = replace(ctx.config, warehouse=str(work / "warehouse"))
    spark = si.local_session("segcat-bench-spark")
    spark.sparkContext.setLogLevel("ERROR")
    out: Results = {"params": asdict(params), "pyspark": runner.package_version("pyspark")}
    created: list[str] = []
    try:
        if "append" in ctx.only:
            progress("1. append")
            out["append"] = run_append(spark, config, params, work, created)
        if "stream" in ctx.only:
            progress("2. stream")
            out["stream"] = run_stream(spark, config, params, created)
    finally:
        spark.stop()
        if ctx.args.keep:
            progress(f"kept tables {created} and the warehouse {work}")
        else:
            admin = TopicAdmin(config)
            for name in created:
                admin.delete(table_name(name))
            shutil.rmtree(work, ignore_errors=True)
    return out


BENCHMARK = runner.Benchmark(
    name="spark-overhead",
    module="bench.spark_overhead",
    description="Spark overhead of segcat: a 100-file append vs plain Parquet and delta-rs, stream latency.",
    scenarios=("append", "stream"),
    run=run,
    render=spark_doc.render,
    summary=spark_doc.render,
    command_prefix="SPARK_LOCAL_IP=127.0.0.1 ",
    wait_for_others_s=600.0,
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCHMARK))
