"""Spark overhead of segcat: a 100-file append vs plain Parquet vs delta-rs, streams of versions and rows.

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
2. ``stream``: commit → rows of that commit in a memory sink: ``readStream.format("segcat")`` →
   ``format("memory")`` with a 100 ms processing-time trigger, a materializer process following
   the tables (the source reads the materialized head from Redis); 4 / 1 rounds × 25 / 8
   appends via ``Table.append`` of one real 10-row file each (``_commit_file``), one at a time,
   per variant (``STREAM_VARIANTS``: the rows stream, the source's default, and today's
   version stream ``view=versions`` as the peer; each with ``si.local_session()`` as it comes
   and with async progress tracking; the version stream also with Spark's own checkpoint
   manager and ``latestFrom=kafka``), interleaved in shuffled order; the latency of a version is
   when a poll of the sink first sees it minus the broker's append time, and minus the return
   of ``append``. Spark's own per-batch cost is measured alongside with the JVM
   ``rate-micro-batch`` source into the same sink.
3. ``backfill``: a 10,000,000 / 200,000-row table of 1,000 / 20 files, cached between runs,
   streamed from the start with ``Trigger.AvailableNow`` into ``noop`` by the segcat source and
   by Spark's own ``readStream.parquet`` over the same files, with the same
   ``maxFilesPerTrigger`` (1,000 and 100 / 20 and 5), 3 / 1 repetitions (``spark_backfill``).

Results go to ``bench/results/spark-overhead-<UTC time>.json`` and, for full runs, to the
``spark-overhead`` section of docs/BENCHMARKS.md (tables: ``spark_doc``).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import runner, spark_backfill, spark_doc, spark_materializer
from bench.runner import Context, Results, Timing, progress, timed
from bench.spark_workspace import spark_workspace
from segcat.catalog.config import Config
from segcat.catalog.protocol.model import ColumnStats, ColumnType, Segment


@dataclass(frozen=True)
class Params:
    files: int
    rows_per_file: int
    repetitions: int
    stream_rounds: int
    stream_commits_per_round: int
    trigger_ms: int
    poll_interval_ms: int
    reference_batches: int

    @classmethod
    def of(cls, quick: bool) -> Params:
        return cls(4, 1_000, 2, 1, 8, 100, 5, 10) if quick else cls(100, 10_000, 7, 4, 25, 100, 5, 30)


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
    from segcat import Catalog, load_catalog
    from segcat.catalog.read.table import table_root
    from segcat.catalog.storage.parquet_stats import segment_from_parquet

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
        root = Path(table_root(config, catalog.load_table(name).name))
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
            with load_catalog(config).load_table(name) as probe:
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


FS_CHECKPOINTS = (
    "spark.sql.streaming.checkpointFileManagerClass",
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager",
)
"""What ``si.local_session`` sets: the ``FileSystem``-based checkpoint manager renames with
``File.renameTo``. Spark's own default (``SPARK_CHECKPOINTS``) writes through Hadoop's
``FileContext``: on the local file system (no native Hadoop library in pyspark) every
offset/commit-log file costs forked ``chmod`` and ``readlink`` processes."""
SPARK_CHECKPOINTS = (
    FS_CHECKPOINTS[0],
    "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager",
)


@dataclass(frozen=True)
class StreamVariant:
    """One way of running the stream query: the source's options, Spark settings, sink options."""

    key: str
    label: str
    source: dict[str, str]
    spark_conf: dict[str, str]
    sink: dict[str, str]

    @property
    def rows(self) -> bool:
        """Whether the query streams the table's rows (the source's default view), not its versions."""
        return "view" not in self.source


VERSIONS = {"view": "versions"}
STREAM_VARIANTS = (
    StreamVariant(
        "rows",
        'rows (`readStream.format("segcat")`), `si.local_session()` as it comes',
        {},
        dict([FS_CHECKPOINTS]),
        {},
    ),
    StreamVariant(
        "rows_async",
        "rows + `asyncProgressTrackingEnabled`",
        {},
        dict([FS_CHECKPOINTS]),
        {"asyncProgressTrackingEnabled": "true"},
    ),
    StreamVariant(
        "segcat",
        "versions (`view=versions`), `si.local_session()` as it comes",
        VERSIONS,
        dict([FS_CHECKPOINTS]),
        {},
    ),
    StreamVariant(
        "segcat_spark_checkpoints",
        "versions, Spark's own checkpoint manager (`FileContextBasedCheckpointFileManager`)",
        VERSIONS,
        dict([SPARK_CHECKPOINTS]),
        {},
    ),
    StreamVariant(
        "segcat_kafka_fs_checkpoint",
        "versions, `latestFrom=kafka` (Kafka's end every trigger)",
        {**VERSIONS, "latestFrom": "kafka"},
        dict([FS_CHECKPOINTS]),
        {},
    ),
    StreamVariant(
        "segcat_async",
        "versions + `asyncProgressTrackingEnabled`",
        VERSIONS,
        dict([FS_CHECKPOINTS]),
        {"asyncProgressTrackingEnabled": "true"},
    ),
)
"""The keys of the version-stream variants are those of the runs before the rows stream existed,
so ``--baseline`` compares like with like."""

ROWS_PER_COMMIT = 10


def _commit_file(writer: Any, seq: int) -> Segment:
    """One real Parquet file of ``ROWS_PER_COMMIT`` rows tagged ``seq``, written and described as
    ``si.write``'s tasks do (``write_files``: footer stats, the Spark schema), ready to append."""
    import pyarrow as pa

    from segcat.catalog.protocol.jsonio import segment_from_json
    from segcat.producers.segment_files import FileSpec, write_files

    rows = pa.table(
        {
            "seq": pa.array([seq] * ROWS_PER_COMMIT, pa.int64()),
            "id": pa.array(range(ROWS_PER_COMMIT), pa.int64()),
            "payload": pa.array([f"row-{seq}-{i}" for i in range(ROWS_PER_COMMIT)], pa.string()),
        }
    )
    spec = FileSpec(root=writer.location(), schema_json=_COMMIT_SCHEMA_JSON, table=writer.name.qualified)
    (batch,) = write_files(iter(rows.to_batches()), spec)
    (raw,) = batch.column(0).to_pylist()
    return segment_from_json(json.loads(raw))


_COMMIT_SCHEMA_JSON = json.dumps(
    {
        "type": "struct",
        "fields": [
            {"name": n, "type": t, "nullable": True, "metadata": {}}
            for n, t in (("seq", "long"), ("id", "long"), ("payload", "string"))
        ],
    }
)
"""The Spark schema of ``_commit_file``'s rows, as ``StructType.json()`` writes it."""


def _set_conf(spark: Any, conf: dict[str, str]) -> dict[str, str | None]:
    """Set ``conf`` on the session; what the keys held before (``_restore_conf`` puts it back)."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    return before


def _restore_conf(spark: Any, before: dict[str, str | None]) -> None:
    """The session as it was: ``si.local_session`` sets one of these keys itself, so unsetting
    would not restore it."""
    for key, value in before.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def _stream_once(
    spark: Any, config: Config, params: Params, name: str, variant: StreamVariant, seed: int
) -> tuple[list[float], list[float], list[dict[str, Any]]]:
    """One query on ``name``: warm-up commits, then ``stream_commits_per_round`` timed ones; the
    latencies from ``append``'s return and from the broker's append time, and the batches' progress.

    Every commit adds one real file (``_commit_file``), whichever the view, so the rows and the
    version variants see the same commits."""
    import segcat.spark_integration as si
    from segcat import load_catalog

    sink = f"segcat_bench_{uuid.uuid4().hex[:8]}"
    checkpoint = tempfile.mkdtemp(prefix="segcat-bench-ckpt-")
    before = _set_conf(spark, variant.spark_conf)
    writer = load_catalog(config).load_table(name)
    query = None
    try:
        version_of: dict[int, int] = {0: writer.append([_commit_file(writer, 0)])}  # seq → version
        stream = (
            spark.readStream.format("segcat")
            .options(**si.source_options(config))
            .options(**variant.source)  # the version variants set view=versions
            .option("table", name)
            .load()
        )
        # versions: the row's version (column 1 of VERSIONS_SCHEMA); rows: the file's seq → version
        column = stream.columns.index("seq") if variant.rows and "seq" in stream.columns else None
        if variant.rows and column is None:
            raise RuntimeError(f"the segcat source streams {', '.join(stream.columns[:3])}, …, not rows")
        query = (
            stream.writeStream.format("memory")
            .queryName(sink)
            .options(**variant.sink)
            .option("checkpointLocation", checkpoint)
            .trigger(processingTime=f"{params.trigger_ms} milliseconds")
            .start()
        )

        rows_read = 0
        seen_at: dict[int, tuple[int, float]] = {}  # version → (perf ns, wall ms) of the first poll with it
        memory_sink = query._jsq.streamingQuery().sink()  # the MemorySink the query appends to

        def poll() -> None:
            """Note the versions that reached the sink. Read from the ``MemorySink`` over py4j (a few
            ms, no Spark job): a ``spark.sql`` poll is a job of its own (30-250 ms on this machine)
            and, every few ms, would compete with the stream."""
            nonlocal rows_read
            data = memory_sink.allData()
            size = int(data.size())
            now = (time.perf_counter_ns(), time.time() * 1000)
            for i in range(rows_read, size):
                row = data.apply(i)
                version = version_of[int(row.getLong(column))] if column is not None else int(row.getLong(1))
                seen_at.setdefault(version, now)
            rows_read = size

        def wait_for(version: int, limit_s: float = 120.0) -> int:
            """When a poll first saw ``version`` (``perf_counter_ns``)."""
            deadline = time.monotonic() + limit_s
            while time.monotonic() < deadline:
                poll()
                if version in seen_at:
                    return seen_at[version][0]
                time.sleep(params.poll_interval_ms / 1000)
            raise TimeoutError(f"version {version} not in the sink after {limit_s} s")

        def commit(seq: int) -> tuple[int, int]:
            """Append ``seq``'s file (written first, untimed); its version and when ``append`` returned."""
            segment = _commit_file(writer, seq)
            version_of[seq] = version = writer.append([segment])
            return version, time.perf_counter_ns()

        wait_for(version_of[0])
        for i in range(3):  # warm-up commits, untimed
            wait_for(commit(1000 + i)[0])
        started = len(query.recentProgress)
        rng = random.Random(seed)
        timed_versions: list[int] = []
        latencies: list[float] = []
        for i in range(params.stream_commits_per_round):
            time.sleep(rng.uniform(0, params.trigger_ms / 1000))  # do not lock onto the trigger
            version, committed = commit(i + 1)
            latencies.append((wait_for(version) - committed) / runner.NS_PER_MS)
            timed_versions.append(version)
        progress_rows = [p for p in query.recentProgress[started:] if p.get("numInputRows")]
        # from the broker's append time (LogAppendTime; broker and benchmark share the clock)
        appended = {entry.version: entry.timestamp_ms for entry in writer.history()}
        from_log = [seen_at[v][1] - appended[v] for v in timed_versions]
        return latencies, from_log, progress_rows
    finally:
        if query is not None:
            query.stop()
        writer.close()
        _restore_conf(spark, before)
        shutil.rmtree(checkpoint, ignore_errors=True)


def _spark_reference(spark: Any, params: Params, conf: dict[str, str]) -> dict[str, Any]:
    """Spark's own per-batch cost: ``rate-micro-batch`` (a JVM source, one row per batch) into the
    same memory sink with the same trigger; no Python, no catalog."""
    sink = f"segcat_bench_rate_{uuid.uuid4().hex[:8]}"
    checkpoint = tempfile.mkdtemp(prefix="segcat-bench-ckpt-")
    before = _set_conf(spark, conf)
    query = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 1)
        .load()
        .writeStream.format("memory")
        .queryName(sink)
        .option("checkpointLocation", checkpoint)
        .trigger(processingTime=f"{params.trigger_ms} milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + 120
        while len(query.recentProgress) < params.reference_batches + 5 and time.monotonic() < deadline:
            time.sleep(0.2)
        rows = [p for p in query.recentProgress[5:] if p.get("numInputRows")]
    finally:
        query.stop()
        _restore_conf(spark, before)
        shutil.rmtree(checkpoint, ignore_errors=True)
    return {"batches": len(rows), "phases_ms": _phases(rows)}


def _phases(rows: list[dict[str, Any]]) -> dict[str, Any]:
    phases: dict[str, list[float]] = defaultdict(list)
    for prog in rows:
        for phase, value in prog["durationMs"].items():
            phases[phase].append(float(value))
    return {k: Timing(v).to_json() for k, v in phases.items()}


def run_stream(spark: Any, config: Config, params: Params, created: list[str]) -> Results:
    from segcat import Catalog

    run_id = uuid.uuid4().hex[:8]
    catalog = Catalog(config)
    tables: dict[tuple[int, str], str] = {}
    for rnd in range(params.stream_rounds):
        for variant in STREAM_VARIANTS:
            name = f"bench.stream_{run_id}_{variant.key}_{rnd}"
            catalog.create_table(name)  # all before the materializer subscribes to their pattern
            created.append(name)
            tables[rnd, variant.key] = name
    materializer = spark_materializer.spawn(config, rf"^segcat\.bench\.stream_{run_id}_.*")
    latencies: dict[str, list[float]] = defaultdict(list)
    from_log: dict[str, list[float]] = defaultdict(list)
    round_log_p50: dict[str, list[float]] = defaultdict(list)
    round_p50: dict[str, list[float]] = defaultdict(list)
    progress_rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    errors: dict[str, str] = {}
    try:
        spark_materializer.wait_for_heads(config, {name: 0 for name in tables.values()})
        progress(f"materializer up for {len(tables)} tables")
        for rnd in range(params.stream_rounds):
            order = list(STREAM_VARIANTS)
            random.Random(rnd).shuffle(order)
            for variant in order:
                if variant.key in errors:
                    continue
                try:
                    lat, log_lat, rows = _stream_once(
                        spark, config, params, tables[rnd, variant.key], variant, rnd
                    )
                except Exception as exc:  # the other variants (the peers) are measured all the same
                    errors[variant.key] = spark_backfill.error_line(exc)
                    progress(f"stream variant {variant.key} failed: {errors[variant.key]}")
                    continue
                latencies[variant.key] += lat
                from_log[variant.key] += log_lat
                round_p50[variant.key].append(statistics.median(lat))
                round_log_p50[variant.key].append(statistics.median(log_lat))
                progress_rows[variant.key] += rows
            progress(
                f"round {rnd + 1}/{params.stream_rounds}: "
                + ", ".join(
                    f"{k} p50 {v[-1]:.0f} ms ({round_log_p50[k][-1]:.0f} ms from the log)"
                    for k, v in round_p50.items()
                )
            )
        sink_probe = f"segcat_bench_probe_{run_id}"
        spark.range(1).createOrReplaceTempView(sink_probe)
        poll_costs = [timed(lambda: spark.sql(f"select * from {sink_probe}").collect())[1] for _ in range(20)]
        reference = {
            "spark_defaults": _spark_reference(spark, params, dict([SPARK_CHECKPOINTS])),
            "fs_checkpoint": _spark_reference(spark, params, dict([FS_CHECKPOINTS])),
        }
    finally:
        spark_materializer.stop(materializer)
    variants: dict[str, Any] = {}
    for variant in STREAM_VARIANTS:
        rows = progress_rows[variant.key]
        batch_ms = [float(p["durationMs"].get("triggerExecution", 0)) for p in rows]
        measured = bool(latencies[variant.key])
        variants[variant.key] = {
            "label": variant.label,
            "view": "rows" if variant.rows else "versions",
            "source_options": variant.source,
            "spark_conf": variant.spark_conf,
            "sink_options": variant.sink,
            "error": errors.get(variant.key),
            "latency": Timing(latencies[variant.key]).to_json() if measured else None,
            "round_p50_ms": [round(x, 1) for x in round_p50[variant.key]],
            "latency_from_log": Timing(from_log[variant.key]).to_json() if measured else None,
            "round_log_p50_ms": [round(x, 1) for x in round_log_p50[variant.key]],
            "batch_trigger_execution_ms": Timing(batch_ms).to_json() if batch_ms else None,
            "batch_phases_ms": _phases(rows),
        }
    head = variants["segcat"]
    return {
        "trigger_ms": params.trigger_ms,
        "poll_interval_ms": params.poll_interval_ms,
        "rounds": params.stream_rounds,
        "commits": params.stream_commits_per_round * params.stream_rounds,
        "materializer": "a separate `python -m segcat.materializer` process following the stream tables",
        "sink_watch": "py4j",
        # the headline variant's figures under the keys older results used
        "latency": head["latency"],
        "sink_poll_cost": Timing(poll_costs).to_json(),
        "batch_trigger_execution_ms": head["batch_trigger_execution_ms"],
        "batch_phases_ms": head["batch_phases_ms"],
        "variants": variants,
        "spark_reference": reference,
        "rows_per_commit": ROWS_PER_COMMIT,
    }


def run(ctx: Context) -> Results:
    params = Params.of(ctx.quick)
    out: Results = {"params": asdict(params), "pyspark": runner.package_version("pyspark")}
    if ctx.args.note:
        out["note"] = ctx.args.note
    with spark_workspace(ctx, "spark") as ws:
        spark, config, work, created = ws.spark, ws.config, ws.work, ws.created
        if "append" in ctx.only:
            progress("1. append")
            out["append"] = run_append(spark, config, params, work, created)
        if "stream" in ctx.only:
            progress("2. stream")
            out["stream"] = run_stream(spark, config, params, created)
            if ctx.args.baseline:
                out["stream"]["baselines"] = [_baseline(Path(p)) for p in ctx.args.baseline]
        if "backfill" in ctx.only:
            progress("3. backfill")
            backfill = spark_backfill.BackfillParams.of(ctx.quick)
            out["backfill"] = spark_backfill.run_backfill(
                spark, config, backfill, ctx.args.backfill_cache, created
            )
    return out


def _baseline(path: Path) -> dict[str, Any]:
    """The stream figures of an earlier run (``--baseline``): the same scenario on older code."""
    saved = runner.load_results(path)
    stream = saved["stream"]
    return {
        "results_file": runner.relative(path),
        "tree": str(saved["environment"]["git"]).split()[0],  # the worktree carried this bench only
        "started": saved["environment"]["date_utc"],
        "finished": saved.get("finished_utc"),
        "load_at_start": saved["environment"]["loadavg_at_start"],
        "load_at_end": saved.get("loadavg_at_end"),
        "latency": stream["latency"],
        "batch_phases_ms": stream.get("batch_phases_ms", {}),
        "variants": stream.get("variants"),
        "spark_reference": stream.get("spark_reference"),
    }


def options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--note",
        metavar="TEXT",
        help="what the run table should say about the run (e.g. other work sharing the machine)",
    )
    parser.add_argument(
        "--backfill-cache",
        type=Path,
        default=spark_backfill.DATASET_ROOT,
        metavar="DIR",
        help="where the backfill data set is kept between runs (default: %(default)s)",
    )
    parser.add_argument(
        "--baseline",
        action="append",
        type=Path,
        metavar="RESULTS_JSON",
        help="a stream run of older code (e.g. from a git worktree of HEAD) to show as 'before'",
    )


BENCHMARK = runner.Benchmark(
    name="spark-overhead",
    module="bench.spark_overhead",
    description=(
        "Spark overhead of segcat: a 100-file append vs plain Parquet and delta-rs, stream latency, "
        "a backfill stream vs readStream.parquet."
    ),
    scenarios=("append", "stream", "backfill"),
    run=run,
    render=spark_doc.render,
    details=spark_doc.details,
    evaluate=spark_doc.evaluate,
    options=options,
    command_prefix="SPARK_LOCAL_IP=127.0.0.1 ",
    wait_for_others_s=600.0,
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCHMARK))
