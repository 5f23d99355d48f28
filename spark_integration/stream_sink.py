"""The ``segcat`` streaming sink: ``df.writeStream.format("segcat").start("ns.t")``, one commit per
micro-batch, exactly once.

Spark runs a Python sink in three places, each a Python process of its own:

1. *planning* (driver, once per micro-batch): ``stream_writer`` checks the options, the table
   and the DataFrame's schema against the live files (``schemas.check_append_schema``, as
   ``si.write`` does) and builds the ``FileSpec``;
2. *writing* (executors): each task writes its rows with ``producers.segment_files.write_files``
   (the code of ``si.write``: stats, Bloom filter, provenance, partition directories) and
   returns the segments it wrote;
3. *committing* (driver): ``commit(messages, batchId)`` publishes them as ONE commit: an
   ``APPEND``, or, in ``complete`` mode (Spark passes ``overwrite=True``), one ``REPLACE`` of
   every live segment. A batch without rows commits nothing.

**Exactly once.** The commit id is ``batch_commit_id(table, query id, batch id)``, a UUID 5:
Spark runs a batch again after a failure with the same batch id, so its commit is a
``DUPLICATE`` of the first (rule 1) and adds nothing. The query id is the one Spark keeps in
the checkpoint's ``metadata`` file and hands every task of the query as the local property
``sql.streaming.queryId`` (with ``streaming.sql.batchId``): the tasks name the commit before they
write a file, and their messages carry both ids to the committer. The commit also records
them as properties (``segcat.stream.query_id``, ``segcat.stream.batch_id``). The dedup window
holds the last 20,000 accepted commits; before committing, the committer proves the batch is
not in the table (``BatchCommitter.committed_version``): its id in the window (a duplicate), or
the window never evicted anything, or an earlier batch of the query is in the window (this one
would be newer), or else a scan of the versions before the window back to the query's last
commit. A table that already holds a later batch of the query than the one run raises
``CheckpointConflict``.

**Write intents** (docs/LIFECYCLE.md, *Streaming sink*): a task opens the intent whose id is
the batch's commit id (prefix ``data/``) before its first file, renews it while it writes and
hands it over at its end (it stays open for its TTL); the commit closes it. A task of a re-run
batch opens it again; when the committer finds the batch already committed it closes it.
"""

from __future__ import annotations

import difflib
import itertools
import json
import logging
import threading
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa
import pyspark
from pyspark import TaskContext
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from segcat import (
    CheckpointConflict,
    CommitConflict,
    Config,
    InvalidArgument,
    Operation,
    Segment,
    Table,
    TableName,
    load_catalog,
)
from segcat.catalog.protocol.jsonio import segment_from_json
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.protocol.state import DEDUP_WINDOW, TableState
from segcat.catalog.read.table import table_root
from segcat.producers.segment_files import FileSpec, write_files
from segcat.producers.staging import INTENT_PREFIX, INTENT_TTL_S
from segcat.spark_integration import schemas
from segcat.spark_integration.options import (
    SERVICE_OPTIONS,
    config_from_options,
    is_service_option,
    lower_keys,
)

log = logging.getLogger("segcat.spark.sink")

SINK_NAMESPACE = uuid.UUID("5e9d4a1c-3b7f-4c2e-8d6a-0f1b2c3d4e5f")
"""The UUID 5 namespace of the sink's commit ids (fixed: changing it would make every batch of
a running query look new)."""
QUERY_ID_KEY = "sql.streaming.queryId"
"""The local property Spark gives every task of a streaming query: the id in its checkpoint."""
BATCH_ID_KEY = "streaming.sql.batchId"
QUERY_PROPERTY = "segcat.stream.query_id"
BATCH_PROPERTY = "segcat.stream.batch_id"
LOOKBACK_BATCHES = 10_000
"""Earlier batch ids of the query looked up in the dedup window before the log is scanned."""
SCAN_CHUNK = 10_000
"""Versions read per step when the log is scanned back for the query's last commit."""
REPLACE_ATTEMPTS = 5

_OPTIONS = {
    "table": "table",
    "path": "path",
    "checkpointlocation": "checkpointLocation",
    "partitionby": "partitionBy",
    "bloomcolumn": "bloomColumn",
    "maxrowsperfile": "maxRowsPerFile",
}


def batch_commit_id(table: str, query_id: str, batch_id: int) -> str:
    """The commit id of one micro-batch of one query into one table (the same on every retry)."""
    return str(uuid.uuid5(SINK_NAMESPACE, f"{table}\n{query_id}\n{batch_id}"))


# ---------------------------------------------------------------------------- options


@dataclass(frozen=True)
class SinkOptions:
    """The parsed options of one ``writeStream.format("segcat")`` (plain values: pickles everywhere)."""

    table: str
    raw: Mapping[str, str]
    partition_by: tuple[str, ...]
    bloom_column: str | None
    max_rows_per_file: int | None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SinkOptions:
        opts = lower_keys(options)
        for key in opts:
            if key in _OPTIONS or is_service_option(key) or key.startswith("__"):
                continue  # "__…": what Spark adds itself
            names = {**_OPTIONS, **SERVICE_OPTIONS}
            close = difflib.get_close_matches(key, list(names), n=1)
            hint = f"; did you mean {names[close[0]]}?" if close else ""
            raise InvalidArgument(
                f"unknown option {key[:80]!r} of the segcat sink{hint} "
                f"(it takes {', '.join(_OPTIONS.values())} and the segcat.* service options)"
            )
        table = opts.get("table") or opts.get("path")
        if not table:
            raise InvalidArgument(
                'the segcat sink needs a table: .start("<namespace>.<table>") or .option("table", ...)'
            )
        TableName.parse(table)
        if not opts.get("checkpointlocation"):
            raise InvalidArgument(
                'the segcat sink needs .option("checkpointLocation", ...): a query\'s identity (the id in '
                "its checkpoint) is what makes a batch run again after a failure a duplicate of the first"
            )
        keys = _partition_columns(opts)
        bloom = opts.get("bloomcolumn") or None
        max_rows: int | None = None
        if opts.get("maxrowsperfile"):
            try:
                max_rows = int(opts["maxrowsperfile"])
            except ValueError:
                raise InvalidArgument(
                    f"option maxRowsPerFile must be an integer, got {opts['maxrowsperfile'][:40]!r}"
                ) from None
            if max_rows < 1:
                raise InvalidArgument(f"option maxRowsPerFile must be ≥ 1, not {max_rows}")
        return cls(table, opts, keys, bloom, max_rows)

    @property
    def name(self) -> TableName:
        return TableName.parse(self.table)

    def config(self) -> Config:
        return config_from_options(self.raw)

    def check_columns(self, schema: StructType) -> None:
        """``InvalidArgument`` naming a partition or Bloom column the DataFrame does not have."""
        for what, column in [*(("partition", c) for c in self.partition_by), ("Bloom", self.bloom_column)]:
            if column is not None and column not in schema.fieldNames():
                raise InvalidArgument(
                    f"{what} column {column!r} is not in the streaming DataFrame "
                    f"({', '.join(schema.fieldNames())})"
                )


def _partition_columns(opts: Mapping[str, str]) -> tuple[str, ...]:
    """``.option("partitionBy", "a,b")``. Spark hands a Python data source nothing of
    ``writeStream.partitionBy(...)`` (pyspark 4.3), so the option is the only way to say it."""
    raw = opts.get("partitionby") or ""
    return tuple(c.strip() for c in raw.split(",") if c.strip())


# ---------------------------------------------------------------------------- table handles


_handles: dict[tuple[tuple[tuple[str, str], ...], str], Table] = {}
_handles_lock = threading.Lock()


def _handle(options: SinkOptions) -> Table:
    """A table handle kept for the life of this Python process.

    Spark reuses its Python workers from batch to batch, so the planner, the committer and each
    executor worker open the table (and its writer: producer, image) once, not at every batch.
    """
    services = tuple(sorted((k, v) for k, v in options.raw.items() if is_service_option(k)))
    key = (services, options.table)
    with _handles_lock:
        handle = _handles.get(key)
        if handle is None:
            handle = _handles[key] = load_catalog(options.config()).load_table(options.name)
        return handle


def _drop_handle(options: SinkOptions) -> None:
    """Forget a handle that failed (a dropped table, a lost connection): the next batch opens anew."""
    with _handles_lock:
        for key, handle in list(_handles.items()):
            if key[1] == options.table:
                del _handles[key]
                handle.close()


# ---------------------------------------------------------------------------- planning


def stream_writer(options: Mapping[str, str], schema: StructType, overwrite: bool) -> SegcatStreamWriter:
    """What ``SegcatDataSource.streamWriter`` returns: the options, table and schema checked."""
    opts = SinkOptions.parse(options)
    opts.check_columns(schema)
    table = _handle(opts)
    try:
        state = table.refresh()
    except BaseException:
        _drop_handle(opts)
        raise
    if not overwrite:  # complete mode replaces every live file: their schemas do not matter
        live = state.segments.values()
        schemas.check_append_schema(
            ((s.segment.path, s.added_version, s.segment.schema) for s in live), schema
        )
    config = table.catalog.config
    spec = FileSpec(
        root=state.location or table_root(config, opts.name),
        s3_endpoint=config.s3_endpoint,
        s3_region=config.s3_region,
        key_columns=opts.partition_by,
        bloom_column=opts.bloom_column,
        max_rows_per_file=opts.max_rows_per_file,
        schema_json=schema.json(),
        table=opts.name.qualified,
    )
    return SegcatStreamWriter(opts, spec, overwrite)


# ---------------------------------------------------------------------------- the writer


class FilesWritten(WriterCommitMessage):
    """What one task wrote: its batch (query id, batch id) and its segments as JSON."""

    def __init__(self, query_id: str, batch_id: int, segments: Sequence[str]) -> None:
        self.query_id = query_id
        self.batch_id = batch_id
        self.segments = tuple(segments)


def _batch_identity() -> tuple[str, int]:
    """(query id, batch id) of the micro-batch this task belongs to, from Spark's local properties."""
    context = TaskContext.get()
    query = context.getLocalProperty(QUERY_ID_KEY) if context is not None else None
    batch = context.getLocalProperty(BATCH_ID_KEY) if context is not None else None
    if not query or batch is None:
        raise InvalidArgument(
            "the segcat sink's task sees no streaming query id (Spark's sql.streaming.queryId): "
            "it takes a micro-batch streaming query (writeStream with a checkpointLocation), "
            "not a continuous one"
        )
    return query, int(batch)


class SegcatStreamWriter(DataSourceStreamArrowWriter):
    """Executors: ``write`` a task's rows as segment files. Driver: ``commit`` them as one version."""

    def __init__(self, options: SinkOptions, spec: FileSpec, overwrite: bool) -> None:
        self.options = options
        self.spec = spec
        self.overwrite = overwrite

    def write(self, iterator: Iterator[pa.RecordBatch]) -> FilesWritten:
        query, batch = _batch_identity()
        first = next((b for b in iterator if b.num_rows), None)
        if first is None:
            return FilesWritten(query, batch, ())  # no rows, no intent, no file
        commit_id = batch_commit_id(self.spec.table or self.options.table, query, batch)
        table = _handle(self.options)
        intent = table.intent(INTENT_PREFIX, ttl_s=INTENT_TTL_S, intent_id=commit_id)
        try:
            intent.open()
        except BaseException:
            _drop_handle(self.options)
            raise
        try:
            spec = replace(self.spec, commit_id=commit_id, writer_id=table.writer_id)
            rows = write_files(itertools.chain([first], iterator), spec)
            segments = [text for out in rows for text in out.column("segment").to_pylist()]
        finally:
            intent.hand_over()  # open until the commit closes it, or its TTL
        return FilesWritten(query, batch, segments)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        written = [m for m in messages if isinstance(m, FilesWritten)]
        segments = [segment_from_json(json.loads(text)) for m in written for text in m.segments]
        if not segments:
            return  # an empty batch commits nothing
        queries = {m.query_id for m in written}
        if len(queries) != 1 or any(m.batch_id != batchId for m in written):
            raise InvalidArgument(
                f"the segcat sink got files of several queries or batches for batch {batchId}: "
                f"{sorted(queries)[:3]}; nothing was committed"
            )
        committer = BatchCommitter(_handle(self.options), self.spec.table or self.options.table)
        try:
            committer.publish(queries.pop(), batchId, segments, overwrite=self.overwrite)
        except CheckpointConflict:
            raise
        except BaseException:
            _drop_handle(self.options)
            raise

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Tasks failed: close the batch's intent (its files are orphans for vacuum)."""
        queries = {m.query_id for m in messages if isinstance(m, FilesWritten) and m.segments}
        for query in queries:
            table = _handle(self.options)
            table.refresh()
            intent = table.intent(
                INTENT_PREFIX,
                intent_id=batch_commit_id(self.spec.table or self.options.table, query, batchId),
            )
            if intent.adopt():
                intent.abort()


# ---------------------------------------------------------------------------- committing


_last_batches: dict[tuple[str, str], int] = {}
"""(table, query id) → the last batch this process committed (or found committed)."""


class BatchCommitter:
    """Publishes one micro-batch of one query, unless the table already holds it."""

    def __init__(self, table: Table, qualified: str) -> None:
        self.table = table
        self.qualified = qualified

    def publish(self, query: str, batch: int, segments: Sequence[Segment], *, overwrite: bool) -> int:
        """The version of the batch's commit: a new one, or the one an earlier run published."""
        commit_id = batch_commit_id(self.qualified, query, batch)
        state = self.table.refresh()
        intent = self.table.intent(INTENT_PREFIX, intent_id=commit_id)
        intent.adopt()
        done = self.committed_version(state, query, batch)
        if done is not None:
            intent.abort()  # the run again opened it for files nobody will add
            log.info(
                "batch %s of query %s is in %s already (version %s): nothing committed",
                batch,
                query,
                self.qualified,
                done,
                extra={"table": self.qualified},
            )
            _last_batches[(self.qualified, query)] = batch
            return done
        properties = {
            "engine": f"spark-{pyspark.__version__}",
            "segcat.spark.job": "stream-complete" if overwrite else "stream-append",
            QUERY_PROPERTY: query,
            BATCH_PROPERTY: str(batch),
        }
        for attempt in range(1, REPLACE_ATTEMPTS + 1):
            if overwrite:
                planned = self.table.new_commit(
                    Operation.REPLACE,
                    adds=segments,
                    drops=sorted(state.segments),
                    properties=properties,
                    base_version=state.version,
                )
            else:
                planned = self.table.new_commit(
                    Operation.APPEND, adds=segments, properties=properties, base_version=state.version
                )
            try:
                version = intent.commit(replace(planned, commit_id=commit_id))
            except CommitConflict:  # a compaction took a segment the REPLACE drops: re-plan
                if not overwrite or attempt == REPLACE_ATTEMPTS:
                    raise
                state = self.table.refresh()
                continue
            _last_batches[(self.qualified, query)] = batch
            return version
        raise AssertionError("unreachable")

    def committed_version(self, state: TableState, query: str, batch: int) -> int | None:
        """The version of ``batch``'s commit when the table holds it, None when it provably does not.

        The window holds every accepted commit since its oldest entry; a commit of ``batch`` would
        be newer than any earlier batch's of the same query, so finding one of those in the
        window proves ``batch`` absent. Only when neither tells are the versions before the
        window scanned, back to the query's last commit.
        """
        window = state.recent_commits
        commit_id = batch_commit_id(self.qualified, query, batch)
        if commit_id in window:
            return window[commit_id]
        if len(window) < DEDUP_WINDOW:
            return None  # nothing ever left the window: it holds every accepted commit
        known = _last_batches.get((self.qualified, query))
        earlier = [known] if known is not None and known < batch else []
        for k in itertools.chain(earlier, range(batch - 1, max(-1, batch - 1 - LOOKBACK_BATCHES), -1)):
            if batch_commit_id(self.qualified, query, k) in window:
                return None
        oldest = next(iter(window.values()))
        return self._scan(query, batch, oldest)

    def _scan(self, query: str, batch: int, before: int) -> int | None:
        """Read the versions before ``before`` back to the query's newest commit there."""
        end = before
        while end > 0:
            start = max(0, end - SCAN_CHUNK)
            newest: tuple[int, int] | None = None  # (batch, version)
            for applied in self.table.records(start, end):
                commit = applied.commit
                if applied.verdict.outcome is not Outcome.ACCEPTED or commit is None:
                    continue
                if commit.properties.get(QUERY_PROPERTY) == query:
                    newest = (int(commit.properties.get(BATCH_PROPERTY, "-1")), applied.verdict.offset)
            if newest is not None:
                found, version = newest
                if found == batch:
                    return version
                if found > batch:
                    raise CheckpointConflict(
                        f"{self.qualified} holds batch {found} of streaming query {query} "
                        f"(version {version}) but the query runs batch {batch}: its checkpoint is older "
                        "than the table (restored from a copy, or shared with another query); nothing "
                        "was committed. Start the query from a new checkpoint instead"
                    )
                return None
            end = start
        return None
