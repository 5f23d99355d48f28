"""The streaming sink: rows/s and input → readable latency of ``writeStream.format("segcat")``
against Spark's own ``writeStream.parquet`` to a directory (no catalog), same data, same trigger.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python -m bench.stream_sink           # full run, updates the doc
    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python -m bench.stream_sink --quick   # smoke test

One Spark session (``si.local_session()``, ``local[2]``); the input is a directory of JSON files
read by Spark's file source with ``maxFilesPerTrigger=1`` (one file per micro-batch):

1. ``throughput``: ``files`` × ``rows`` (full: 10 × 100,000; quick: 3 × 5,000) through each sink
   with ``Trigger.AvailableNow``, a fresh table / directory and checkpoint per run, the sinks
   interleaved, ``reps`` runs each, after an untimed warm-up query per sink (the first segcat
   query of a session starts its Python workers); rows/s = rows / wall time from ``start()``
   to the query's end.
2. ``latency``: a query with a 100 ms processing-time trigger per sink; one file of ``small``
   rows is dropped at a time and the time until it is readable is taken: segcat, a
   ``Table.snapshot()`` of the head lists the batch's segments; parquet, the batch's entry in
   the directory's ``_spark_metadata`` log (what ``spark.read.parquet(dir)`` lists). For segcat
   the commit → readable part is also given (the commit record's broker time to the snapshot).

Results go to ``bench/results/stream-sink-<UTC time>.json`` and, for full runs, to the
``stream-sink`` section of docs/BENCHMARKS.md.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import report, runner
from bench.report import count, run_table, table
from bench.runner import Context, Results, progress
from bench.spark_workspace import spark_workspace
from segcat import Operation, load_catalog
from segcat.catalog.config import Config

SCHEMA = "id BIGINT, name STRING, amount DOUBLE"
TRIGGER = "100 milliseconds"


@dataclass(frozen=True)
class Params:
    files: int
    rows: int
    reps: int
    latency_files: int
    small: int

    @classmethod
    def of(cls, quick: bool) -> Params:
        if quick:
            return cls(files=3, rows=5_000, reps=1, latency_files=3, small=100)
        return cls(files=10, rows=100_000, reps=3, latency_files=12, small=1_000)


def _inputs(directory: Path, files: int, rows: int, start: int = 0) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for k in range(start, start + files):
        lines = (
            json.dumps({"id": k * rows + i, "name": f"n{i % 97}", "amount": i * 0.5}) + "\n"
            for i in range(rows)
        )
        tmp = directory / f".in-{k:05d}.tmp"
        tmp.write_text("".join(lines))
        tmp.rename(directory / f"in-{k:05d}.json")  # the file source never sees a half file


def _stream(spark: Any, directory: Path) -> Any:
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(directory))


def _segcat_writer(df: Any, config: Config, checkpoint: Path) -> Any:
    import segcat.spark_integration as si

    return (
        df.writeStream.format("segcat")
        .options(**si.source_options(config))
        .option("checkpointLocation", str(checkpoint))
    )


def _parquet_writer(df: Any, checkpoint: Path) -> Any:
    return (
        df.writeStream.format("parquet")
        .option("checkpointLocation", str(checkpoint))
        .option("compression", "zstd")
    )


def run_throughput(spark: Any, config: Config, params: Params, work: Path, created: list[str]) -> Results:
    inputs = work / "throughput-in"
    _inputs(inputs, params.files, params.rows)
    total = params.files * params.rows
    samples: dict[str, list[float]] = {"segcat": [], "parquet": []}
    catalog = load_catalog(config)
    # untimed warm-up: the first segcat query starts the Python workers (imports, table handles)
    warm = work / "warm-in"
    _inputs(warm, 1, 100)
    name = f"bench.sink_{uuid.uuid4().hex[:10]}"
    catalog.create_table(name).close()
    created.append(name)
    writer = _segcat_writer(_stream(spark, warm), config, work / "warm-ckpt")
    writer.trigger(availableNow=True).start(name).awaitTermination()
    writer = _parquet_writer(_stream(spark, warm), work / "warm-pq-ckpt")
    writer.trigger(availableNow=True).start(str(work / "warm-pq-out")).awaitTermination()
    for rep in range(params.reps):
        for sink in ("segcat", "parquet"):
            run_dir = work / f"tp-{sink}-{rep}"
            if sink == "segcat":
                name = f"bench.sink_{uuid.uuid4().hex[:10]}"
                catalog.create_table(name).close()
                created.append(name)
                writer = _segcat_writer(_stream(spark, inputs), config, run_dir / "ckpt")
                start = time.monotonic()
                query = writer.trigger(availableNow=True).start(name)
            else:
                writer = _parquet_writer(_stream(spark, inputs), run_dir / "ckpt")
                start = time.monotonic()
                query = writer.trigger(availableNow=True).start(str(run_dir / "out"))
            query.awaitTermination()
            elapsed = time.monotonic() - start
            samples[sink].append(total / elapsed)
            progress(f"  {sink} run {rep + 1}: {total / elapsed:,.0f} rows/s")
    return {
        "rows": total,
        "files": params.files,
        "rows_per_s": {k: {"median": statistics.median(v), "samples": v} for k, v in samples.items()},
    }


def _wait(check: Any, timeout_s: float = 120.0) -> float:
    """Poll ``check`` until it is true; the wall time (``time.time()``) it first was."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError("the batch never became readable")
        time.sleep(0.005)
    return time.time()


def _logged(log: Path, batch: int) -> bool:
    """Whether the file sink's metadata log holds ``batch`` (every tenth entry is a compacted one)."""
    return (log / str(batch)).exists() or (log / f"{batch}.compact").exists()


def run_latency(spark: Any, config: Config, params: Params, work: Path, created: list[str]) -> Results:
    catalog = load_catalog(config)
    name = f"bench.sink_{uuid.uuid4().hex[:10]}"
    handle = catalog.create_table(name)
    created.append(name)
    out: dict[str, list[float]] = {"segcat": [], "parquet": [], "segcat_commit_to_readable": []}
    seg_in, pq_in = work / "lat-segcat-in", work / "lat-parquet-in"
    seg_in.mkdir(parents=True)
    pq_in.mkdir(parents=True)
    seg_query = (
        _segcat_writer(_stream(spark, seg_in), config, work / "lat-segcat-ckpt")
        .trigger(processingTime=TRIGGER)
        .start(name)
    )
    pq_out = work / "lat-parquet-out"
    pq_query = (
        _parquet_writer(_stream(spark, pq_in), work / "lat-parquet-ckpt")
        .trigger(processingTime=TRIGGER)
        .start(str(pq_out))
    )
    readable_at: dict[int, float] = {}
    try:
        for k in range(params.latency_files + 1):  # the first of each is a warm-up
            before = len(handle.snapshot().segment_list())
            dropped = time.time()
            _inputs(seg_in, 1, params.small, start=k)
            seen = _wait(lambda n=before: len(handle.snapshot().segment_list()) > n)
            readable_at[k] = seen
            if k:
                out["segcat"].append((seen - dropped) * 1000)
            dropped = time.time()
            _inputs(pq_in, 1, params.small, start=k)
            seen = _wait(lambda log=pq_out / "_spark_metadata", k=k: _logged(log, k))
            if k:
                out["parquet"].append((seen - dropped) * 1000)
    finally:
        seg_query.stop()
        pq_query.stop()
    appends = [h for h in handle.history() if h.commit.operation is Operation.APPEND]
    for entry in appends:
        batch = int(entry.commit.properties["segcat.stream.batch_id"])
        if batch and batch in readable_at:
            out["segcat_commit_to_readable"].append(readable_at[batch] * 1000 - entry.timestamp_ms)
    handle.close()
    return {k: runner.summary(v) | {"samples": v} for k, v in out.items() if v}


def run(ctx: Context) -> Results:
    params = Params.of(ctx.quick)
    out: Results = {"params": asdict(params), "pyspark": runner.package_version("pyspark")}
    with spark_workspace(ctx, "sink") as ws:
        spark, config, work, created = ws.spark, ws.config, ws.work, ws.created
        if "throughput" in ctx.only:
            progress("1. throughput")
            out["throughput"] = run_throughput(spark, config, params, work, created)
        if "latency" in ctx.only:
            progress("2. latency")
            out["latency"] = run_latency(spark, config, params, work, created)
    return out


def render(results: Results) -> str:
    """The run, then one table: each sink's rows/s and its batches' latency until readable."""
    rows = [("Spark", f"pyspark {results['pyspark']}, `local[2]`; the machine is shared with other work")]
    out = run_table(results, rows)
    t, lat = results.get("throughput") or {}, results.get("latency") or {}

    def rate(sink: str) -> str:
        figure = report.get(t, "rows_per_s", sink, "median")
        return count(figure) if figure is not None else "–"

    def latency(key: str) -> tuple[str, str]:
        s = lat.get(key)
        return (report.ms(s["median_ms"]), report.ms(s["p90_ms"])) if s else ("–", "–")

    batches = f"{t['files']} batches of {count(t['rows'] // t['files'])} rows" if t else "–"
    out += [
        "",
        *table(
            (f"Sink ({batches}, AvailableNow; latency: 100 ms trigger)", "rows/s", "readable p50", "p90"),
            [
                (
                    'segcat `writeStream.format("segcat")`: file in → `Table.snapshot()`',
                    rate("segcat"),
                    *latency("segcat"),
                ),
                ("segcat, from the commit's broker time", "", *latency("segcat_commit_to_readable")),
                (
                    "Spark `writeStream.parquet(dir)` (zstd): file in → `_spark_metadata`",
                    rate("parquet"),
                    *latency("parquet"),
                ),
            ],
        ),
    ]
    return "\n".join(out)


BENCHMARK = runner.Benchmark(
    name="stream-sink",
    module="bench.stream_sink",
    description="The segcat streaming sink against writeStream.parquet: rows/s and input → readable latency.",
    scenarios=("throughput", "latency"),
    run=run,
    render=render,
    command_prefix="SPARK_LOCAL_IP=127.0.0.1 ",
    wait_for_others_s=0.0,
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCHMARK))
