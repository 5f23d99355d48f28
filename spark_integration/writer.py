"""``write`` and ``compact``: Spark writes the files, the driver publishes ONE commit.

Both run in two steps, also offered separately (``stage_write`` / ``stage_compaction``):

1. *stage*: read the table's state (the commit's ``base_version``), run the Spark job that
   writes the segment files on the executors, and plan the commit;
2. *commit*: publish it through a ``segcat.Table`` handle; the log's rules decide.

The base version is taken *before* the Spark job starts, so anything committed while the
job runs counts as concurrent: a SERIALIZABLE replace sees a concurrent append into its
partitions (rule 5), a compaction sees a concurrent compaction of its inputs (rule 3) or a
concurrent soft delete (rule 3b). A rejected commit raises the typed ``CommitConflict``;
its files stay unreferenced until vacuum removes them.

The commit's id and the writer's id exist before the first file does: every file records
them, with the table, in its footer (``files.read_provenance``), and the planned commit
carries that same id, so any file on storage names the commit that meant to add it.
"""

from __future__ import annotations

import functools
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Literal

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from segcat import (
    Commit,
    Config,
    Isolation,
    Operation,
    Predicate,
    Segment,
    Snapshot,
    Table,
    WriteIntent,
    load_catalog,
)
from segcat.catalog.protocol.jsonio import segment_from_json
from segcat.catalog.protocol.state import LiveSegment
from segcat.catalog.read.table import table_root
from segcat.producers.segment_files import GROUP_COLUMN, OUTPUT_SCHEMA, FileSpec, write_files
from segcat.producers.staging import Attempt, check_partition_names, plan_replace, writing_files
from segcat.spark_integration import schemas
from segcat.spark_integration.reader import ScanFile, TableRef, scan, table_ref

Mode = Literal["append", "replace"]

DEFAULT_TARGET_FILE_ROWS = 1_000_000
GROUPS_PER_JOB = 64
"""Compaction groups per Spark job: each group is one scan in a union, so plans stay small."""


@dataclass
class StagedWrite:
    """Files written and a commit planned against ``base_version``; nothing published yet.

    Use as a context manager (it holds a table handle of its own) and call ``commit()``.
    """

    writer: Table
    planned: Commit | None
    """None: nothing to publish (an empty append, a compaction with nothing to merge)."""
    base_version: int
    base_accepted_version: int
    intent: WriteIntent | None = None
    """The write intent protecting the files until the commit (closed by it, or aborted on close)."""

    @property
    def adds(self) -> tuple[Segment, ...]:
        return () if self.planned is None else self.planned.adds

    @property
    def drops(self) -> tuple[str, ...]:
        return () if self.planned is None else self.planned.drops

    def commit(self) -> int:
        """Publish the planned commit; its version, or ``CommitConflict`` if the log rejects it.

        With nothing to publish this returns the last accepted version the job read.
        """
        if self.planned is None:
            return self.base_accepted_version
        if self.intent is not None:
            return self.intent.commit(self.planned)
        return self.writer.commit(self.planned)

    def close(self) -> None:
        try:
            if self.intent is not None:
                self.intent.abort()  # no-op once the commit closed it
        finally:
            self.writer.close()

    def __enter__(self) -> StagedWrite:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def _config(table: TableRef, config: Config | None) -> Config:
    if config is not None:
        return config
    return table.catalog.config if isinstance(table, Table) else Config.load()


def _columns(value: str | Sequence[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    return (value,) if isinstance(value, str) else tuple(value)


def _job_properties(spark: SparkSession, kind: str, extra: Mapping[str, str] | None) -> dict[str, str]:
    sc = spark.sparkContext
    return {
        "engine": f"spark-{spark.version}",
        "spark.app.id": sc.applicationId,
        "spark.app.name": sc.appName or "",
        "segcat.spark.job": kind,
        **dict(extra or {}),
    }


def _open_writer(table: TableRef, config: Config, spark: SparkSession) -> Table:
    """A handle of the job's own (its writer id names the Spark application), on the catalog of
    the handle passed in when it has this config."""
    writer_id = f"spark-{spark.sparkContext.applicationId}-{uuid.uuid4().hex[:8]}"
    catalog = (
        table.catalog if isinstance(table, Table) and table.catalog.config is config else load_catalog(config)
    )
    return catalog.load_table(table_ref(table), writer_id=writer_id)


def _run(frame: DataFrame, spec: FileSpec) -> list[Segment]:
    """Run the write job; collect only the per-file descriptions."""
    rows = frame.mapInArrow(functools.partial(write_files, spec=spec), OUTPUT_SCHEMA).collect()
    return [segment_from_json(json.loads(row["segment"])) for row in rows]


# ---------------------------------------------------------------------------- write


def write(
    df: DataFrame,
    table: TableRef,
    mode: Mode = "append",
    partition_by: str | Sequence[str] | None = None,
    replace_scope: Iterable[str] | None = None,
    isolation: Isolation = Isolation.SNAPSHOT,
    bloom_column: str | None = None,
    config: Config | None = None,
    *,
    max_rows_per_file: int | None = None,
    properties: Mapping[str, str] | None = None,
) -> int:
    """Write ``df`` as new segments and publish one APPEND or REPLACE; return its version.

    ``mode="replace"`` replaces the partitions present in ``df`` (or ``replace_scope``; the
    whole table when neither partitions nor a scope are given). With SNAPSHOT isolation
    (default) appends committed meanwhile survive the replace; with SERIALIZABLE they make
    it fail with ``CommitConflict`` (rule 5).
    """
    with stage_write(
        df,
        table,
        mode,
        partition_by=partition_by,
        replace_scope=replace_scope,
        isolation=isolation,
        bloom_column=bloom_column,
        config=config,
        max_rows_per_file=max_rows_per_file,
        properties=properties,
    ) as staged:
        return staged.commit()


def stage_write(
    df: DataFrame,
    table: TableRef,
    mode: Mode = "append",
    partition_by: str | Sequence[str] | None = None,
    replace_scope: Iterable[str] | None = None,
    isolation: Isolation = Isolation.SNAPSHOT,
    bloom_column: str | None = None,
    config: Config | None = None,
    *,
    max_rows_per_file: int | None = None,
    properties: Mapping[str, str] | None = None,
) -> StagedWrite:
    """``write`` up to, not including, publishing the commit."""
    if mode not in ("append", "replace"):
        raise ValueError(f"mode must be 'append' or 'replace', not {mode!r}")
    if mode == "append" and (replace_scope is not None or isolation is not Isolation.SNAPSHOT):
        raise ValueError("replace_scope and isolation only apply to mode='replace'")
    keys = _columns(partition_by)
    for column in (*keys, *_columns(bloom_column)):
        if column not in df.columns:
            raise ValueError(f"column {column!r} is not in the DataFrame ({', '.join(df.columns)})")
    if max_rows_per_file is not None and max_rows_per_file < 1:
        raise ValueError("max_rows_per_file must be ≥ 1")
    cfg = _config(table, config)
    name = table_ref(table)
    spark = df.sparkSession
    writer = _open_writer(table, cfg, spark)
    try:
        state = writer.refresh().copy()  # what the job reads: the commit's base, frozen
        base = state.version
        if mode == "append":  # a replace may drop the files it disagrees with
            live = state.segments.values()
            schemas.check_append(
                spark, ((s.segment.path, s.added_version, s.segment.schema) for s in live), df.schema
            )
        with writing_files(writer) as attempt:
            spec = FileSpec(
                root=state.location or table_root(cfg, name),
                s3_endpoint=cfg.s3_endpoint,
                s3_region=cfg.s3_region,
                key_columns=keys,
                bloom_column=bloom_column,
                max_rows_per_file=max_rows_per_file,
                schema_json=df.schema.json(),
            )
            adds = _run(df.repartition(*keys) if keys else df, attempt.stamp(spec))
            check_partition_names(adds, keys)
        props = _job_properties(spark, f"write-{mode}", properties)
        if mode == "append":
            planned = (
                attempt.adopt(
                    writer.new_commit(Operation.APPEND, adds=adds, properties=props, base_version=base)
                )
                if adds
                else None
            )
        else:
            replace = plan_replace(writer, state, adds, keys, replace_scope, isolation, props)
            planned = None if replace is None else attempt.adopt(replace)
        return StagedWrite(writer, planned, base, state.last_accepted_version, attempt.intent)
    except BaseException:
        writer.close()
        raise


# ---------------------------------------------------------------------------- compaction


def compact(
    spark: SparkSession,
    table: TableRef,
    where: Predicate | None = None,
    target_file_rows: int = DEFAULT_TARGET_FILE_ROWS,
    config: Config | None = None,
    *,
    properties: Mapping[str, str] | None = None,
) -> int:
    """Merge small segments (those pruned in by ``where``) into fewer, larger ones: ONE COMPACT.

    Only segments of the same partition are merged, each output holding up to
    ``target_file_rows`` rows; segments already that large are left alone. The commit drops
    exactly the segments the job read, so appends committed meanwhile never conflict; a
    concurrent compaction of the same segments makes one of the two fail with
    ``CommitConflict``. Tombstones are applied while rewriting (the rewritten rows are newer
    than every tombstone, so deleted rows must not be copied). Returns the new version, or
    the version read when there was nothing to merge.
    """
    with stage_compaction(
        spark, table, where=where, target_file_rows=target_file_rows, config=config, properties=properties
    ) as staged:
        return staged.commit()


def plan_groups(segments: Iterable[LiveSegment], target_file_rows: int) -> list[list[LiveSegment]]:
    """Bins of ≥ 2 small segments of one partition, each ≤ ``target_file_rows`` rows, oldest first."""
    by_partition: dict[str | None, list[LiveSegment]] = {}
    for live in segments:
        if live.segment.row_count < target_file_rows:
            by_partition.setdefault(live.segment.partition, []).append(live)
    groups: list[list[LiveSegment]] = []
    for partition in sorted(by_partition, key=lambda p: (p is None, p or "")):
        current: list[LiveSegment] = []
        rows = 0
        for live in sorted(by_partition[partition], key=lambda s: (s.added_version, s.segment.segment_id)):
            if current and rows + live.segment.row_count > target_file_rows:
                groups.append(current)
                current, rows = [], 0
            current.append(live)
            rows += live.segment.row_count
        groups.append(current)
    return [g for g in groups if len(g) >= 2]


def _group_directory(group: Sequence[LiveSegment]) -> str:
    """Where the merged file goes: the inputs' common directory, if they share one under data/."""
    parents = {live.segment.path.rsplit("/", 1)[0] for live in group if "/" in live.segment.path}
    if len(parents) == 1 and all("://" not in live.segment.path for live in group):
        (parent,) = parents
        if parent == "data" or parent.startswith("data/"):
            return parent
    return "data/_compacted"


def stage_compaction(
    spark: SparkSession,
    table: TableRef,
    where: Predicate | None = None,
    target_file_rows: int = DEFAULT_TARGET_FILE_ROWS,
    config: Config | None = None,
    *,
    properties: Mapping[str, str] | None = None,
) -> StagedWrite:
    """``compact`` up to, not including, publishing the commit."""
    if target_file_rows < 2:
        raise ValueError("target_file_rows must be ≥ 2")
    if where is not None and not isinstance(where, Predicate):
        raise TypeError("compact(where=...) takes a catalog.expressions predicate (it selects segments)")
    cfg = _config(table, config)
    name = table_ref(table)
    writer = _open_writer(table, cfg, spark)
    try:
        state = writer.refresh().copy()
        root = state.location or table_root(cfg, name)
        snapshot = Snapshot(state, root)
        if where is not None:
            snapshot = snapshot.prune(where)
        chosen = snapshot.segment_ids()
        groups = plan_groups((state.segments[sid] for sid in chosen), target_file_rows)
        if not groups:
            return StagedWrite(writer, None, state.version, state.last_accepted_version)
        adds: list[Segment] = []
        with writing_files(writer) as attempt:
            for start in range(0, len(groups), GROUPS_PER_JOB):
                batch = groups[start : start + GROUPS_PER_JOB]
                adds.extend(_rewrite(spark, snapshot, batch, start, attempt, cfg, root))
        drops = [live.segment.segment_id for group in groups for live in group]
        props = _job_properties(spark, "compact", properties)
        props["segcat.compact.groups"] = str(len(groups))
        planned = attempt.adopt(
            writer.new_commit(
                Operation.COMPACT, adds=adds, drops=drops, properties=props, base_version=state.version
            )
        )
        return StagedWrite(writer, planned, state.version, state.last_accepted_version, attempt.intent)
    except BaseException:
        writer.close()
        raise


def _rewrite(
    spark: SparkSession,
    snapshot: Snapshot,
    groups: Sequence[Sequence[LiveSegment]],
    first_id: int,
    attempt: Attempt,
    config: Config,
    root: str,
) -> list[Segment]:
    """One Spark job: read each group (tombstones applied), one output file per group."""
    frames: list[DataFrame] = []
    placement: dict[int, tuple[str | None, str]] = {}
    for offset, group in enumerate(groups):
        gid = first_id + offset
        files = [
            ScanFile(snapshot.resolve(live.segment.path), live.added_version, live.segment.schema)
            for live in group
        ]
        frame = scan(spark, files, snapshot.tombstones)
        assert frame is not None
        frames.append(frame.withColumn(GROUP_COLUMN, F.lit(gid)))
        placement[gid] = (group[0].segment.partition, _group_directory(group))
    union = functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)
    blooms = {live.segment.bloom.column if live.segment.bloom else None for g in groups for live in g}
    spec = FileSpec(
        root=root,
        s3_endpoint=config.s3_endpoint,
        s3_region=config.s3_region,
        key_columns=(GROUP_COLUMN,),
        hidden_columns=(GROUP_COLUMN,),
        groups=placement,
        bloom_column=blooms.pop() if len(blooms) == 1 else None,
        schema_json=union.drop(GROUP_COLUMN).schema.json(),
    )
    return _run(union.repartition(len(groups), GROUP_COLUMN), attempt.stamp(spec))
