"""The ``backfill`` scenario of ``bench.spark_overhead``: a table's rows streamed from the start.

One data set, written once and cached (``DATASET_ROOT``, ``--backfill-cache``): ``files`` Parquet
files of ``rows / files`` rows each, written by ``si.write`` (so each file carries what segcat's
writers record: footer stats, the Spark schema) into a directory that every run's table uses as
its ``location``, with the segments described in a manifest beside them. A run creates a fresh
table over those files (one APPEND of the cached segments, no data written) and streams it with
``Trigger.AvailableNow`` into Spark's ``noop`` sink, which consumes every row and column (a
``foreachBatch`` count would let Spark's Parquet reader skip the columns):

- ``spark.readStream.format("segcat")``: the initial snapshot of the head, rows read by the
  source's Python workers through Arrow;
- ``spark.readStream.parquet(<the same data directory>)``: Spark's own file source, its JVM
  vectorized reader, listing the directory;

both with the same ``maxFilesPerTrigger`` and the same session, in shuffled order per repetition.
A query's time runs from ``start()`` to the end of ``awaitTermination()`` (the source's planning,
every micro-batch and its checkpoint); its rows are the sum of the batches' ``numInputRows``,
checked against the data set. Beside them, in the report: Spark's per-batch phases and each
query's time to its first trigger, and the floors that say where the time goes (``FLOORS``:
the same rows read as a batch, by Python workers with no segcat code, and in one process).
"""

from __future__ import annotations

import datetime as dt
import json
import random
import re
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench import runner, spark_materializer
from bench.runner import Results, Timing, progress
from segcat.catalog.config import Config
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol.jsonio import segment_from_json, segment_to_json
from segcat.catalog.protocol.model import Segment
from segcat.catalog.protocol.names import table_name

DATASET_ROOT = Path(tempfile.gettempdir()) / "segcat-bench"
"""Where the data sets live between runs (shared by every checkout on the machine)."""
DATASET_VERSION = 1
"""Part of the data set's directory name: a change to ``_frame`` must not reuse old files."""
MANIFEST = "segments.json"
SYSTEMS = ("segcat", "parquet")


@dataclass(frozen=True)
class BackfillParams:
    rows: int
    files: int
    repetitions: int
    max_files_per_trigger: tuple[int, ...]

    @classmethod
    def of(cls, quick: bool) -> BackfillParams:
        return cls(200_000, 20, 1, (20, 5)) if quick else cls(10_000_000, 1_000, 3, (1_000, 100))


@dataclass(frozen=True)
class Dataset:
    """The cached files and their segments (paths relative to ``root``, the tables' location)."""

    root: Path
    segments: list[Segment]
    written_s: float | None
    """How long writing it took, when this run wrote it; None when it came from the cache."""

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments)

    @property
    def rows(self) -> int:
        return sum(s.row_count for s in self.segments)


def dataset_dir(cache: Path, params: BackfillParams) -> Path:
    return cache / f"backfill-v{DATASET_VERSION}-{params.files}x{params.rows // params.files}"


def cached_segments(root: Path, params: BackfillParams) -> list[Segment] | None:
    """The manifest's segments when every file is there with its size and the counts match, else None."""
    manifest = root / MANIFEST
    if not manifest.is_file():
        return None
    try:
        segments = [segment_from_json(raw) for raw in json.loads(manifest.read_text())]
    except (ValueError, TypeError, KeyError):
        return None
    if len(segments) != params.files or sum(s.row_count for s in segments) != params.rows:
        return None
    for s in segments:
        path = root / s.path
        if not path.is_file() or path.stat().st_size != s.size_bytes:
            return None
    return segments


def _frame(spark: Any, params: BackfillParams) -> Any:
    """``rows`` rows in ``files`` partitions (one file each): the columns of the append scenario."""
    from pyspark.sql import functions as F

    return spark.range(0, params.rows, 1, params.files).select(
        F.col("id"),
        F.date_add(F.lit("2024-01-01").cast("date"), (F.col("id") % 30).cast("int")).alias("day"),
        (F.col("id") % 10_007).cast("string").alias("user"),
        (F.rand(7) * 100).alias("amount"),
        F.concat(F.lit("item-"), (F.col("id") % 997).cast("string")).alias("item"),
    )


def ensure_dataset(spark: Any, config: Config, params: BackfillParams, cache: Path) -> Dataset:
    """The cached data set, written first (through a table of its own, dropped after) when missing."""
    import segcat.spark_integration as si
    from segcat import Catalog

    root = dataset_dir(cache, params)
    if (segments := cached_segments(root, params)) is not None:
        progress(f"backfill data set: {len(segments):,} cached files under {root}")
        return Dataset(root, segments, None)
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    name = f"bench.backfill_write_{uuid.uuid4().hex[:8]}"
    catalog = Catalog(config)
    progress(f"backfill data set: writing {params.rows:,} rows as {params.files:,} files under {root}")
    start = time.monotonic()
    try:
        catalog.create_table(name, location=str(root))
        si.write(_frame(spark, params), name, mode="append", config=config)
        with catalog.load_table(name) as table:
            segments = table.snapshot().segment_list()
    finally:
        TopicAdmin(config).delete(table_name(name))
    written = time.monotonic() - start
    (root / MANIFEST).write_text(json.dumps([segment_to_json(s) for s in segments]))
    if cached_segments(root, params) is None:
        raise RuntimeError(
            f"the data set under {root} does not have {params.files} files of {params.rows} rows"
        )
    return Dataset(root, segments, written)


_RAISED = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Invalid\w*|NotFound|Lost|Conflict\w*): \S")


def error_line(exc: BaseException) -> str:
    """The line of an exception that names the error: for a failed query, the Python exception
    at the end of the worker's traceback Spark wraps it in, rather than Spark's wrapper."""
    lines = [line.strip() for line in str(exc).splitlines()]
    raised = [line for line in lines if _RAISED.match(line)]
    ours = [line for line in raised if line.startswith("segcat.")]  # pyspark may mask it with its own
    text = (ours or raised or [line for line in lines if line] or [""])[-1]
    return f"{type(exc).__name__}: {text[:300]}"


def _progress_s(stamp: str) -> float:
    """A progress event's ``timestamp`` (ISO 8601, UTC) as seconds since the epoch."""
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()


def _query_result(query: Any, started_ns: int, started_s: float, expected_rows: int) -> dict[str, Any]:
    elapsed_ms = (time.perf_counter_ns() - started_ns) / runner.NS_PER_MS
    batches = [p for p in query.recentProgress if p.get("numInputRows")]
    first_trigger = min((_progress_s(p["timestamp"]) for p in query.recentProgress), default=None)
    rows = sum(int(p["numInputRows"]) for p in batches)
    if rows != expected_rows:
        raise RuntimeError(f"the query read {rows:,} rows, the data set has {expected_rows:,}")
    return {
        "wall_ms": round(elapsed_ms, 1),
        "rows": rows,
        "batches": len(batches),
        "to_first_trigger_ms": None
        if first_trigger is None
        else round((first_trigger - started_s) * 1000, 1),
        "phases_ms": {
            phase: round(sum(float(p["durationMs"].get(phase, 0)) for p in batches), 1)
            for phase in (
                "latestOffset",
                "getBatch",
                "queryPlanning",
                "walCommit",
                "addBatch",
                "commitOffsets",
            )
        },
    }


def _stream(spark: Any, reader: Any, expected_rows: int) -> dict[str, Any]:
    """``reader`` (a loaded streaming DataFrame) into ``noop`` with ``AvailableNow``, timed to the end."""
    checkpoint = tempfile.mkdtemp(prefix="segcat-bench-backfill-ckpt-")
    try:
        started, started_s = time.perf_counter_ns(), time.time()
        query = (
            reader.writeStream.format("noop")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        return _query_result(query, started, started_s, expected_rows)
    finally:
        shutil.rmtree(checkpoint, ignore_errors=True)


def _read_files(batch_rows: int) -> Any:
    """``mapInArrow`` body of the floor: each path of the task's rows read with plain pyarrow,
    yielded as Arrow batches of at most ``batch_rows`` rows (a file's row group at most)."""

    def read(batches: Any) -> Any:  # nested, so Spark pickles it by value
        import pyarrow.parquet as _pq

        for batch in batches:
            for path in batch.column(0).to_pylist():
                yield from _pq.ParquetFile(path).iter_batches(batch_size=batch_rows, use_threads=False)

    return read


def _read_files_coalesced(rows_target: int) -> Any:
    """As ``_read_files``, the batches of consecutive files merged up to ``rows_target`` rows."""

    def read(batches: Any) -> Any:
        import pyarrow as _pa
        import pyarrow.parquet as _pq

        pending: list[Any] = []
        held = 0
        for batch in batches:
            for path in batch.column(0).to_pylist():
                for part in _pq.ParquetFile(path).iter_batches(batch_size=rows_target, use_threads=False):
                    pending.append(part)
                    held += part.num_rows
                    if held >= rows_target:
                        yield from _pa.Table.from_batches(pending).combine_chunks().to_batches()
                        pending, held = [], 0
        if pending:
            yield from _pa.Table.from_batches(pending).combine_chunks().to_batches()

    return read


FLOORS = ("batch_segcat", "batch_parquet", "map_in_arrow", "map_in_arrow_coalesced", "map_in_arrow_jvm_tasks")
"""Batch reads into ``noop`` that place the stream's cost: the same rows without the streaming
machinery, and Python workers yielding Arrow with no segcat code (``mapInArrow``) at all."""


def _floors(
    spark: Any, config: Config, dataset: Dataset, name: str, schema: Any, reps: int
) -> dict[str, Any]:
    """Each floor ``reps`` times (after a warm-up), interleaved; then the in-process reads."""
    import segcat.spark_integration as si

    def segcat_batch() -> Any:
        return spark.read.format("segcat").options(**si.source_options(config)).option("table", name).load()

    partitions = segcat_batch().rdd.getNumPartitions()
    jvm_partitions = spark.read.parquet(str(dataset.data_dir)).rdd.getNumPartitions()
    files = spark.createDataFrame([(str(dataset.root / s.path),) for s in dataset.segments], "path string")
    paths = files.repartition(partitions).cache()
    jvm_paths = files.repartition(jvm_partitions).cache()
    paths.count(), jvm_paths.count()
    frames: dict[str, Callable[[], Any]] = {
        "batch_segcat": segcat_batch,
        "batch_parquet": lambda: spark.read.parquet(str(dataset.data_dir)),
        "map_in_arrow": lambda: paths.mapInArrow(_read_files(65_536), schema),
        "map_in_arrow_coalesced": lambda: paths.mapInArrow(_read_files_coalesced(131_072), schema),
        "map_in_arrow_jvm_tasks": lambda: jvm_paths.mapInArrow(_read_files(65_536), schema),
    }
    samples: dict[str, list[float]] = {key: [] for key in FLOORS}
    for rep in range(-1, reps):
        order = list(FLOORS)
        random.Random(rep).shuffle(order)
        for key in order:
            frame = frames[key]()
            start = time.perf_counter_ns()
            frame.write.format("noop").mode("overwrite").save()
            if rep >= 0:
                samples[key].append((time.perf_counter_ns() - start) / runner.NS_PER_MS)
    paths.unpersist()
    jvm_paths.unpersist()
    out: dict[str, Any] = {"partitions": partitions, "jvm_partitions": jvm_partitions}
    for key, walls in samples.items():
        out[key] = {
            "wall": Timing(walls).to_json(),
            "rows_per_s": round(dataset.rows / Timing(walls).median_ms * 1000),
        }
    out["in_process"] = _in_process(config, dataset, name)
    return out


def _in_process(config: Config, dataset: Dataset, name: str) -> dict[str, Any]:
    """One process, no Spark: every file with plain pyarrow, and through segcat's own read path
    (``snapshot_reads`` + ``read_rows``, what each of the source's tasks runs)."""
    import pyarrow.parquet as pq

    from segcat import load_catalog
    from segcat.catalog.read.changes import arrow_schema, read_rows, snapshot_reads
    from segcat.spark_integration.row_batch import table_schema

    def pyarrow_files() -> int:
        return sum(pq.read_table(dataset.root / s.path).num_rows for s in dataset.segments)

    with load_catalog(config).load_table(name) as table:
        reads = snapshot_reads(table.snapshot())
    schema = arrow_schema(table_schema(reads, config))

    def segcat_reads() -> int:
        return sum(batch.num_rows for read in reads for batch in read_rows(read, schema, config))

    out = {}
    for key, fn in (("pyarrow", pyarrow_files), ("read_rows", segcat_reads)):
        timing = runner.measure(fn, reps=3, warmup=1)
        out[key] = {"wall": timing.to_json(), "rows_per_s": round(dataset.rows / timing.median_ms * 1000)}
    return out


def run_backfill(
    spark: Any, config: Config, params: BackfillParams, cache: Path, created: list[str]
) -> Results:
    """The data set (cached), a fresh table over it with a materializer following, every query."""
    from segcat import Catalog

    dataset = ensure_dataset(spark, config, params, cache)
    schema = spark.read.parquet(str(dataset.data_dir)).schema
    catalog = Catalog(config)
    run_id = uuid.uuid4().hex[:8]
    name = f"bench.backfill_{run_id}"
    catalog.create_table(name, location=str(dataset.root))
    created.append(name)
    with catalog.load_table(name) as table:
        version = table.append(dataset.segments)
    materializer = spark_materializer.spawn(config, rf"^segcat\.bench\.backfill_{run_id}$")
    try:
        spark_materializer.wait_for_heads(config, {name: version})
        out = _measure(spark, config, params, dataset, name, schema)
    finally:
        spark_materializer.stop(materializer)
    return {
        "params": {
            "rows": params.rows,
            "files": params.files,
            "repetitions": params.repetitions,
            "max_files_per_trigger": list(params.max_files_per_trigger),
        },
        "dataset": {
            "root": str(dataset.root),
            "files": len(dataset.segments),
            "rows": dataset.rows,
            "bytes": dataset.bytes,
            "written_s": None if dataset.written_s is None else round(dataset.written_s, 1),
            "schema": schema.simpleString(),
        },
        "materializer": "a separate `python -m segcat.materializer` process following the table",
        "table_version": version,
        **out,
    }


def _measure(
    spark: Any, config: Config, params: BackfillParams, dataset: Dataset, name: str, schema: Any
) -> dict[str, Any]:
    """Every (system, ``maxFilesPerTrigger``) pair, one untimed warm-up then ``repetitions`` each."""
    import segcat.spark_integration as si

    def segcat_reader(max_files: int) -> Any:
        return (
            spark.readStream.format("segcat")
            .options(**si.source_options(config))
            .option("table", name)
            .option("maxFilesPerTrigger", str(max_files))
            .load()
        )

    def parquet_reader(max_files: int) -> Any:
        return (
            spark.readStream.schema(schema)
            .option("maxFilesPerTrigger", str(max_files))
            .parquet(str(dataset.data_dir))
        )

    readers = {"segcat": segcat_reader, "parquet": parquet_reader}
    steps = [(system, n) for n in params.max_files_per_trigger for system in SYSTEMS]
    runs: dict[str, list[dict[str, Any]]] = {f"{system}/{n}": [] for system, n in steps}
    errors: dict[str, str] = {}
    for rep in range(-1, params.repetitions):  # rep -1: one untimed warm-up of each
        order = steps[:]
        random.Random(rep).shuffle(order)
        for system, n in order:
            key = f"{system}/{n}"
            if key in errors:
                continue
            try:
                result = _stream(spark, readers[system](n), dataset.rows)
            except Exception as exc:  # the peer is measured even when one side fails
                errors[key] = error_line(exc)
                progress(f"backfill {key} failed: {errors[key]}")
                continue
            if rep >= 0:
                runs[key].append(result)
            progress(
                f"backfill {'warm-up' if rep < 0 else f'rep {rep + 1}/{params.repetitions}'} {key}: "
                f"{result['wall_ms'] / 1000:.1f} s, {result['batches']} batches, "
                f"{dataset.rows / result['wall_ms'] * 1000:,.0f} rows/s"
            )
    floors = _floors(spark, config, dataset, name, schema, params.repetitions)
    out: dict[str, Any] = {}
    for system, n in steps:
        key = f"{system}/{n}"
        samples = runs[key]
        walls = [r["wall_ms"] for r in samples]
        out[key] = {
            "system": system,
            "max_files_per_trigger": n,
            "error": errors.get(key),
            "wall": Timing(walls).to_json() if walls else None,
            "rows_per_s": round(dataset.rows / Timing(walls).median_ms * 1000) if walls else None,
            "batches": samples[0]["batches"] if samples else None,
            "runs": samples,
        }
    return {
        "queries": out,
        "floors": floors,
    }
