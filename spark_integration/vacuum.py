"""Orphan files listed and deleted on Spark's executors: vacuum for tables of millions of files.

An orphan is a file under a table's ``data/`` that nothing needs any more. *What* is still
needed (the paths some version a reader may ask for references, the prefixes a live write
intent covers, the grace period) is decided by the core's vacuum; this module takes those
as plain inputs and does only the I/O, at scale:

- ``find_orphans_spark``: the driver lists the first levels of ``<root>/data/`` with
  ``pyarrow.fs``; the executors list each directory found there recursively, keep the files
  old enough and outside the protected prefixes, and the result is anti-joined with the
  referenced paths;
- ``delete_files_spark``: deletes such paths on the executors, batch by batch; a file
  already gone counts as done, so a rerun after a kill finishes the job.

Paths are relative to the table root and spelled the way segments spell them
(``data/day=2024-01-01/part-….parquet``), compared literally (docs/PROTOCOL.md §2, "Segment
paths"). Nothing outside ``<root>/data/`` is listed or deleted: ``ValueError`` for anything
that would be.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import IntegralType, StringType

from segcat import Config, Table, VacuumReport
from segcat.catalog.protocol.locations import is_absolute_uri, location_problem, relative_problem, relative_to
from segcat.catalog.read.table import TableReader, Tables
from segcat.catalog.read.vacuum import Doomed, execute
from segcat.catalog.read.vacuum import vacuum as core_vacuum
from segcat.catalog.storage.objectstore import filesystem
from segcat.spark_integration.reader import TableRef, table_ref

LISTING_SCHEMA = "path string, size long, mtime_ms long"
"""What ``find_orphans_spark`` returns: one row per orphan, its path relative to the root."""

DATA = "data"
"""The directory under a table's root that holds its data files, the only one vacuum touches."""

DRIVER_LEVELS = 3
"""At most this many directory levels under ``data/`` are listed on the driver to find enough
directories to spread over the tasks; everything below is listed on the executors."""

_BATCH_ROWS = 65_536
_DELETE_THREADS = 16


# ---------------------------------------------------------------------------- what may be touched


def data_path_problem(path: object) -> str | None:
    """Why ``path`` is not a clean path of a file under ``data/``, relative to the root; None if it is."""
    if not isinstance(path, str):
        return f"path must be a string, not {type(path).__name__}"
    if problem := relative_problem(path):
        return problem
    if not path.startswith(f"{DATA}/"):
        return f"path {path!r} is not under {DATA}/"
    return None


def _location(root: str) -> str:
    """``root`` as an absolute location (local directories made absolute); ValueError if it cannot be one."""
    if not isinstance(root, str) or not root:
        raise ValueError("root must be a table root: a directory or a URI")
    location = root if "://" in root else os.path.abspath(root)
    if problem := location_problem(location):
        raise ValueError(f"root: {problem}")
    return location.rstrip("/")


def _is_absolute(path: str) -> bool:
    return path.startswith("/") or is_absolute_uri(path)


def _reference(path: str | None, location: str) -> str | None:
    """A referenced path as the listing spells it: absolute paths under the root made relative.

    A segment may name its file by an absolute URI under the table's location (protocol 2);
    such a file must be kept as surely as one named relatively. An absolute path outside the
    root is never listed, so it is dropped (None).
    """
    if path is None or not _is_absolute(path):
        return path
    return relative_to(path, location)


def _protected(prefixes: Sequence[str], location: str) -> tuple[str, ...]:
    """The protected prefixes relative to the root, each under ``data/``; ValueError otherwise.

    Prefixes are string prefixes: ``data/day=1/`` protects that directory, ``data/day=1``
    also ``data/day=10/…`` (protecting more is the safe side).
    """
    if isinstance(prefixes, str):
        raise TypeError("protected_prefixes takes a sequence of prefixes, not one string")
    out = []
    for prefix in prefixes:
        if not isinstance(prefix, str):
            raise ValueError(f"protected prefix must be a string, not {type(prefix).__name__}")
        relative = _reference(prefix, location) if _is_absolute(prefix) else prefix
        if relative is None:
            raise ValueError(f"protected prefix {prefix!r} is outside the table root {location!r}")
        stem = relative[:-1] if relative.endswith("/") else relative
        if stem != DATA and (problem := data_path_problem(stem)):
            raise ValueError(f"protected prefix {prefix!r}: {problem}")
        out.append(relative)
    return tuple(out)


# ---------------------------------------------------------------------------- listing


def _relative(path: str, base: str) -> str:
    if not path.startswith(f"{base}/"):
        raise RuntimeError(f"listing of {base!r} returned {path!r}, which is not below it")
    return path[len(base) + 1 :]


def _candidate(
    info: pafs.FileInfo, base: str, protected: tuple[str, ...], older_than_ms: int
) -> tuple[str, int, int] | None:
    """(path, size, mtime_ms) of a listed file that may be an orphan, or None.

    Kept out: directories, paths under a protected prefix, files modified at or after
    ``older_than_ms`` or of unknown age (temp files of writers still running included), and
    names vacuum could not delete safely (``data_path_problem``).
    """
    if info.type != pafs.FileType.File:
        return None
    path = _relative(info.path, base)
    if path.startswith(protected) or data_path_problem(path) is not None:
        return None
    if info.mtime_ns is None:
        return None
    mtime_ms = int(info.mtime_ns) // 1_000_000
    if mtime_ms >= older_than_ms:
        return None
    return path, int(info.size or 0), mtime_ms


def _listing_batch(rows: list[tuple[str, int, int]]) -> pa.RecordBatch:
    paths, sizes, mtimes = zip(*rows, strict=True) if rows else ((), (), ())
    return pa.RecordBatch.from_pydict(
        {"path": list(paths), "size": list(sizes), "mtime_ms": list(mtimes)},
        schema=pa.schema([("path", pa.string()), ("size", pa.int64()), ("mtime_ms", pa.int64())]),
    )


def _plan_listing(
    fs: pafs.FileSystem, base: str, shards: int, protected: tuple[str, ...], older_than_ms: int
) -> tuple[list[str], list[tuple[str, int, int]]]:
    """Directories for the executors to list recursively, and the candidate files seen on the way.

    Lists ``data/`` (and, while that gives fewer directories than ``shards``, the level below,
    up to ``DRIVER_LEVELS``) on the driver. Every directory below ``data/`` ends up either
    listed here or handed out, never both.
    """
    top = fs.get_file_info(f"{base}/{DATA}")
    if top.type == pafs.FileType.NotFound:
        return [], []
    if top.type != pafs.FileType.Directory:
        raise ValueError(f"{base}/{DATA} is not a directory")
    frontier, files = [DATA], []
    for level in range(1, DRIVER_LEVELS + 1):
        directories = []
        for directory in frontier:
            selector = pafs.FileSelector(f"{base}/{directory}", allow_not_found=True)
            for info in fs.get_file_info(selector):
                if info.type == pafs.FileType.Directory:
                    directories.append(_relative(info.path, base))
                elif (row := _candidate(info, base, protected, older_than_ms)) is not None:
                    files.append(row)
        if not directories or len(directories) >= shards or level == DRIVER_LEVELS:
            return sorted(directories), files
        frontier = directories
    raise AssertionError("unreachable")


def _list_directories(
    batches: Iterator[pa.RecordBatch],
    *,
    root: str,
    s3_endpoint: str | None,
    s3_region: str | None,
    protected: tuple[str, ...],
    older_than_ms: int,
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the candidate files below each directory of the batch, recursively."""
    fs, base = filesystem(root, s3_endpoint, s3_region)
    rows: list[tuple[str, int, int]] = []
    for batch in batches:
        for directory in batch.column("directory").to_pylist():
            if data_path_problem(directory) is not None:
                raise RuntimeError(f"refusing to list {directory!r}: not under {DATA}/")
            selector = pafs.FileSelector(f"{base}/{directory}", recursive=True, allow_not_found=True)
            for info in fs.get_file_info(selector):
                if (row := _candidate(info, base, protected, older_than_ms)) is not None:
                    rows.append(row)
                    if len(rows) >= _BATCH_ROWS:
                        yield _listing_batch(rows)
                        rows = []
    if rows:
        yield _listing_batch(rows)


def _normalise_references(batches: Iterator[pa.RecordBatch], *, location: str) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: referenced paths as the listing spells them (``_reference``)."""
    for batch in batches:
        paths = batch.column(0)
        absolute = pc.fill_null(pc.or_(pc.match_substring(paths, "://"), pc.starts_with(paths, "/")), False)
        if pc.any(absolute).as_py():
            paths = pa.array([_reference(p, location) for p in paths.to_pylist()], pa.string())
        yield pa.RecordBatch.from_arrays([paths], names=["path"])


def _path_column(frame: DataFrame, what: str) -> str:
    """The name of ``frame``'s path column: ``path``, or its only column."""
    if "path" in frame.columns:
        name = "path"
    elif len(frame.columns) == 1:
        (name,) = frame.columns
    else:
        raise ValueError(f"{what} needs a 'path' column (or a single column); it has {frame.columns}")
    if not isinstance(frame.schema[name].dataType, StringType):
        raise ValueError(f"{what}: column {name!r} must be a string column")
    return name


def _referenced_frame(spark: SparkSession, referenced: DataFrame | Iterable[str], location: str) -> DataFrame:
    if isinstance(referenced, DataFrame):
        column = _path_column(referenced, "referenced")
        return referenced.select(F.col(column).alias("path")).mapInArrow(
            functools.partial(_normalise_references, location=location), "path string"
        )
    if isinstance(referenced, str):
        raise TypeError("referenced takes paths (an iterable or a DataFrame), not one string")
    paths = {p for p in (_reference(path, location) for path in referenced) if p is not None}
    return spark.createDataFrame([(p,) for p in sorted(paths)], "path string")


def find_orphans_spark(
    spark: SparkSession,
    root: str,
    referenced: DataFrame | Iterable[str],
    protected_prefixes: Sequence[str],
    older_than_ms: int,
    *,
    s3_endpoint: str | None = None,
    s3_region: str | None = None,
    shards: int | None = None,
) -> DataFrame:
    """The files under ``<root>/data/`` that vacuum may delete: a DataFrame ``(path, size, mtime_ms)``.

    A file is listed when it is not in ``referenced``, not under one of ``protected_prefixes``
    and was last modified before ``older_than_ms`` (a moment, milliseconds since the epoch:
    typically the vacuum's start minus its grace period). Temp files of writers (names holding
    ``objectstore.TEMP_MARKER``) follow the same rule: younger ones may belong to a write still
    running and stay, older ones are what a killed task left and are listed.

    ``root`` is the table root (a directory or a URI, ``s3://bucket/…`` with ``s3_endpoint`` /
    ``s3_region`` as ``files.filesystem`` takes them). ``referenced`` holds paths relative to
    the root as segments spell them (absolute URIs under the root are made relative, others
    ignored): a DataFrame with a string column ``path`` (or a single string column) for large
    tables, any iterable of strings for small ones. ``protected_prefixes`` are string prefixes
    of such paths, each under ``data/`` (``ValueError`` otherwise). ``shards``: how many tasks
    list (default: Spark's default parallelism).

    The first levels of ``data/`` are listed now, on the driver; the rest of the listing runs
    each time the returned DataFrame is evaluated (``delete_files_spark`` evaluates it once).
    """
    location = _location(root)
    if isinstance(older_than_ms, bool) or not isinstance(older_than_ms, int):
        raise TypeError("older_than_ms is a moment in milliseconds since the epoch (an int)")
    protected = _protected(protected_prefixes, location)
    tasks = shards if shards is not None else spark.sparkContext.defaultParallelism
    if tasks < 1:
        raise ValueError("shards must be ≥ 1")
    fs, base = filesystem(root, s3_endpoint, s3_region)
    directories, seen = _plan_listing(fs, base, tasks, protected, older_than_ms)
    listing = spark.createDataFrame(seen, LISTING_SCHEMA)
    if directories:
        handed_out = spark.createDataFrame(
            spark.sparkContext.parallelize([(d,) for d in directories], min(tasks, len(directories))),
            "directory string",
        )
        listed = handed_out.mapInArrow(
            functools.partial(
                _list_directories,
                root=root,
                s3_endpoint=s3_endpoint,
                s3_region=s3_region,
                protected=protected,
                older_than_ms=older_than_ms,
            ),
            LISTING_SCHEMA,
        )
        listing = listed.unionByName(listing)
    return listing.join(_referenced_frame(spark, referenced, location), on="path", how="left_anti")


# ---------------------------------------------------------------------------- deleting


def _refused(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: the paths ``delete_files_spark`` must refuse, with the reason."""
    for batch in batches:
        bad = [(p, problem) for p in batch.column("path").to_pylist() if (problem := data_path_problem(p))]
        if bad:
            yield pa.RecordBatch.from_pydict(
                {"path": [str(p) for p, _ in bad], "problem": [problem for _, problem in bad]}
            )


def _delete_one(fs: pafs.FileSystem, base: str, path: str, size: int | None) -> tuple[bool, int]:
    """Delete ``<base>/<path>``: (whether this call deleted it, its size); a missing file is done."""
    full = f"{base}/{path}"
    if size is None:
        info = fs.get_file_info(full)
        if info.type == pafs.FileType.NotFound:
            return False, 0
        size = int(info.size or 0)
    try:
        fs.delete_file(full)
    except FileNotFoundError:
        return False, 0
    return True, size


def _delete_files(
    batches: Iterator[pa.RecordBatch],
    *,
    root: str,
    s3_endpoint: str | None,
    s3_region: str | None,
    threads: int,
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` body: delete the batch's files; yield (files deleted, bytes) for the task."""
    fs, base = filesystem(root, s3_endpoint, s3_region)
    files = size_total = 0
    with ThreadPoolExecutor(max_workers=threads) as pool:
        for batch in batches:
            paths = batch.column("path").to_pylist()
            for path in paths:  # checked on the driver too; never delete outside data/ regardless
                if problem := data_path_problem(path):
                    raise ValueError(f"refusing to delete: {problem}")
            sizes = batch.column("size").to_pylist()
            for deleted, size in pool.map(functools.partial(_delete_one, fs, base), paths, sizes):
                if deleted:
                    files += 1
                    size_total += size
    yield pa.RecordBatch.from_pydict(
        {"files": [files], "bytes": [size_total]},
        schema=pa.schema([("files", pa.int64()), ("bytes", pa.int64())]),
    )


def _paths_frame(spark: SparkSession, paths: DataFrame | Iterable[str]) -> DataFrame:
    """``paths`` as a DataFrame (path string, size long); size null when unknown."""
    if isinstance(paths, DataFrame):
        column = _path_column(paths, "paths")
        sized = "size" in paths.columns and isinstance(paths.schema["size"].dataType, IntegralType)
        size = F.col("size").cast("long") if sized else F.lit(None).cast("long")
        return paths.select(F.col(column).alias("path"), size.alias("size"))
    if isinstance(paths, str):
        raise TypeError("paths takes paths (an iterable or a DataFrame), not one string")
    listed = list(dict.fromkeys(paths))
    bad = [(p, problem) for p in listed if (problem := data_path_problem(p))]
    if bad:
        raise ValueError(_refusal(bad))
    slices = max(1, min(len(listed), spark.sparkContext.defaultParallelism))
    rows = spark.sparkContext.parallelize([(p, None) for p in listed], slices)
    return spark.createDataFrame(rows, "path string, size long")


def _refusal(bad: Sequence[tuple[object, str]]) -> str:
    shown = "; ".join(problem for _, problem in bad[:5])
    return f"refusing to delete anything: paths that are not clean paths under {DATA}/ ({shown})"


def delete_files_spark(
    spark: SparkSession,
    root: str,
    paths: DataFrame | Iterable[str],
    *,
    s3_endpoint: str | None = None,
    s3_region: str | None = None,
    shards: int | None = None,
    threads: int = _DELETE_THREADS,
) -> tuple[int, int]:
    """Delete ``paths`` (relative to ``root``, each under ``data/``) on the executors: (files, bytes).

    ``paths`` is what ``find_orphans_spark`` returns (its ``size`` column gives the bytes
    without asking storage), any DataFrame with a string column ``path`` (or a single string
    column), or an iterable of paths. It is evaluated once: every path is checked before
    anything is deleted, and a path that is not a clean path under ``data/`` makes the whole
    call refuse with ``ValueError``, deleting nothing. Each task deletes its batches with
    ``threads`` deletes in flight (``pyarrow.fs`` ``delete_file``). A file already gone counts as
    done: a rerun after a kill finishes the job. Returns the files this call deleted and their
    bytes (a rerun returns ``(0, 0)``). Directories left empty stay.
    """
    _location(root)
    if threads < 1:
        raise ValueError("threads must be ≥ 1")
    if shards is not None and shards < 1:
        raise ValueError("shards must be ≥ 1")
    frame = _paths_frame(spark, paths)
    if isinstance(paths, DataFrame):
        frame = frame.localCheckpoint(eager=True)  # one listing: what is checked is what is deleted
        bad = frame.select("path").mapInArrow(_refused, "path string, problem string").limit(5).collect()
        if bad:
            raise ValueError(_refusal([(row["path"], row["problem"]) for row in bad]))
    if shards is not None:
        frame = frame.repartition(shards)
    done = frame.mapInArrow(
        functools.partial(
            _delete_files, root=root, s3_endpoint=s3_endpoint, s3_region=s3_region, threads=threads
        ),
        "files long, bytes long",
    ).agg(F.sum("files").alias("files"), F.sum("bytes").alias("bytes"))
    row = done.first()
    if row is None:
        return 0, 0
    return int(row["files"] or 0), int(row["bytes"] or 0)


# ---------------------------------------------------------------------------- the whole vacuum


def vacuum(
    spark: SparkSession,
    table: TableRef,
    *,
    retain_versions: int | None = None,
    grace_ms: int | None = None,
    dry_run: bool = False,
    ignore_leases: bool = False,
    config: Config | None = None,
    shards: int | None = None,
) -> VacuumReport:
    """``segcat vacuum`` for tables of millions of files: the orphans are listed and deleted
    on the executors; dropped files and old history come from the log as in-process.

    The driver plans first (horizon, leases, intents, the files every replayed version
    references, dropped files past the grace period) exactly as ``catalog.read.vacuum``
    does. The executors then list ``data/`` (the listing is checkpointed: done once), and the
    driver reads the log again to its end: a file some commit registered meanwhile, or that a
    write intent opened meanwhile covers, is taken out before anything is deleted. What
    remains is the time the delete job runs (docs/LIFECYCLE.md, "Races"). ``dry_run``
    collects every orphan's path to the driver (for the report); otherwise only their count
    and bytes come back.
    """
    handle = _reader(table, config)
    report = core_vacuum(
        handle,
        retain_versions=retain_versions,
        grace_ms=grace_ms,
        dry_run=True,
        ignore_leases=ignore_leases,
        orphans=False,
        fresh_clock=not dry_run,
    )
    cfg = handle.config
    orphans = find_orphans_spark(
        spark,
        report.root,
        sorted(report.referenced),
        [p for p in report.protected_prefixes if p.startswith("data/")],
        report.cutoff_ms,
        s3_endpoint=cfg.s3_endpoint,
        s3_region=cfg.s3_region,
        shards=shards,
    )
    if any(not p.startswith("data/") for p in report.protected_prefixes):
        return report  # an intent covers more than data/: nothing there is an orphan now
    orphans = _recheck(spark, report, orphans.localCheckpoint(eager=True))
    if dry_run:
        base = report.root.rstrip("/")
        report.files.extend(
            Doomed(f"{base}/{row['path']}", int(row["size"]), "orphan") for row in orphans.collect()
        )
        return report
    execute(handle, report)
    files, size = delete_files_spark(
        spark, report.root, orphans, s3_endpoint=cfg.s3_endpoint, s3_region=cfg.s3_region, shards=shards
    )
    report.deleted += files
    report.deleted_bytes += size
    return report


def _reader(table: TableRef, config: Config | None) -> TableReader:
    """The read side the in-process vacuum plans with: of a handle's own log, or of a name's."""
    if isinstance(table, Table):
        return Tables(table.catalog.config).open_topic(table.topic)
    return Tables(config or Config.load()).open(table_ref(table))


def _recheck(spark: SparkSession, report: VacuumReport, listed: DataFrame) -> DataFrame:
    """The listed orphans less what the log says now: paths registered since the plan, and
    whole prefixes of write intents opened since (the footer check is in-process only)."""
    recheck = report.recheck
    if recheck is None:
        return listed
    with recheck:
        recheck.refresh()
    added = sorted(key for key in recheck.added if key.startswith(f"{DATA}/"))
    if added:
        listed = listed.join(
            spark.createDataFrame([(p,) for p in added], "path string"), on="path", how="left_anti"
        )
    if recheck.prefixes:
        covered = functools.reduce(
            lambda a, b: a | b, (F.col("path").startswith(prefix) for prefix in recheck.prefixes)
        )
        listed = listed.filter(~covered)
    return listed
