"""``Table.scan``: a version's rows as Arrow, without Spark — what ``si.read`` returns, row for row.

Planned eagerly, read lazily, as the change feed is (``change_feed``). The call resolves the
version (a number, a tag name, ``as_of`` or the head), takes a version lease on it (vacuum
keeps every file of a leased version, docs/LIFECYCLE.md), reads the snapshot, prunes its
segments with ``where`` by the catalog's own rules (``Snapshot.prune``: min/max/null/NaN counts
and Bloom filters, at the protocol's semantics, UTC), and fixes the schema every batch has:
the merged schema of *every* live file (``reads_schema``), so a column only pruned-away files
hold still reads as nulls, exactly as ``si.read`` reads with the table's schema. Tombstones and
``where`` are checked before a row is read (``UnsupportedPredicate`` now, not midway).

Reading (``to_batches``, ``to_arrow``, ``to_pandas``, ``to_duckdb``, or any Arrow consumer
through ``__arrow_c_stream__``: polars, ``pa.table(scan)``, DuckDB's ``FROM scan``) streams
the surviving files one batch at a time through ``read_rows`` (conformed to the table's
schema, each file's tombstones applied) and keeps the rows ``where`` matches (``row_filter``:
Spark's semantics at UTC). The lease is held until the scan is closed (``with``,
``close()``) or collected.
"""

from __future__ import annotations

import importlib
import os
import uuid
import weakref
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from segcat.catalog.errors import InvalidArgument, InvalidPredicate, MissingExtra
from segcat.catalog.protocol.expressions import Predicate
from segcat.catalog.protocol.predicates import parse_predicate
from segcat.catalog.protocol.row_filter import matches
from segcat.catalog.read.as_of import AsOf, as_of_ms
from segcat.catalog.read.changes import FileRead, check_predicates, read_rows, reads_schema, snapshot_reads
from segcat.catalog.read.column_choice import chosen_columns
from segcat.catalog.read.lease import HeldLease, hold_or_warn
from segcat.catalog.read.tag_lookup import version_or_tag
from segcat.catalog.storage.redis.leases import default_holder

if TYPE_CHECKING:
    from segcat.catalog.config import Config
    from segcat.catalog.read.table import TableReader

DEFAULT_BATCH_ROWS = 65_536
MAX_READ_THREADS = 8
"""``to_arrow`` reads at most this many files at once (and no more than the machine has cores)."""


class Scan:
    """The rows of one version of a table, planned: read them with ``to_batches`` (streaming),
    ``to_arrow``, ``to_pandas`` or ``to_duckdb``; ``files()`` are the files it reads.

    ``version``: the version read (-1: the table had no record yet); ``schema``: every batch's
    columns. ``lease``: the version lease held until ``close()`` (None without Redis).
    """

    def __init__(
        self,
        *,
        table: str,
        version: int,
        reads: Sequence[FileRead],
        table_schema: pa.Schema,
        names: Sequence[str],
        where: Predicate | None,
        config: Config,
        lease: HeldLease | None,
    ) -> None:
        self.table = table
        self.version = version
        self.table_schema = table_schema
        self.schema = pa.schema([table_schema.field(n) for n in names])
        self.where = where
        self.lease = lease
        self._reads = tuple(reads)
        self._names = list(names)
        self._read_schema = _read_schema(table_schema, names, where, self._reads)
        self._config = config
        self._release = weakref.finalize(self, lease.release) if lease is not None else None

    def files(self) -> tuple[FileRead, ...]:
        """The files the scan reads (those pruning kept), each with the tombstones that filter it."""
        return self._reads

    def to_batches(self, batch_rows: int = DEFAULT_BATCH_ROWS) -> Iterator[pa.RecordBatch]:
        """The rows, file by file, at most ``batch_rows`` per batch (empty batches skipped)."""
        if isinstance(batch_rows, bool) or not isinstance(batch_rows, int) or batch_rows < 1:
            raise InvalidArgument(f"batch_rows is a positive integer, not {batch_rows!r}")
        return self._batches(batch_rows)

    def _batches(self, batch_rows: int) -> Iterator[pa.RecordBatch]:
        for read in self._reads:
            yield from self._file_batches(read, batch_rows)

    def _file_batches(self, read: FileRead, batch_rows: int) -> Iterator[pa.RecordBatch]:
        for rows in read_rows(read, self._read_schema, self._config, batch_rows):
            if self.where is not None and rows.num_rows:
                rows = rows.filter(pa.array(matches(self.where, rows)))
            if rows.num_rows:
                yield rows.select(self._names)

    def to_reader(self, batch_rows: int = DEFAULT_BATCH_ROWS) -> pa.RecordBatchReader:
        """The rows as a ``pyarrow.RecordBatchReader`` (read once, streaming)."""
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches(batch_rows))

    def __arrow_c_stream__(self, requested_schema: object = None) -> Any:
        """The Arrow C stream interface: a fresh stream of the rows for each call (polars,
        DuckDB, ``pa.table(scan)``)."""
        return self.to_reader().__arrow_c_stream__(requested_schema)

    def to_arrow(self) -> pa.Table:
        """Every row as one Arrow table (all of it in memory), files read on a few threads
        (decoding releases the GIL), in the order ``to_batches`` reads them."""
        workers = max(1, min(len(self._reads), os.cpu_count() or 1, MAX_READ_THREADS))
        with ThreadPoolExecutor(workers, thread_name_prefix="segcat-scan") as pool:
            parts = pool.map(lambda read: list(self._file_batches(read, DEFAULT_BATCH_ROWS)), self._reads)
            batches = [batch for part in parts for batch in part]
        return pa.Table.from_batches(batches, schema=self.schema)

    def to_pandas(self) -> Any:
        """Every row as a pandas DataFrame (needs pandas)."""
        try:
            importlib.import_module("pandas")
        except ModuleNotFoundError as exc:
            raise MissingExtra(
                "Scan.to_pandas needs pandas (no module named 'pandas'): pip install pandas", extras=()
            ) from exc
        return self.to_arrow().to_pandas()

    def to_duckdb(self, con: Any, name: str) -> Any:
        """Load the rows into DuckDB connection ``con`` as the temporary table ``name`` (replacing
        one of that name), streamed batch by batch; returns ``con``.

        **Decision — a table, not a registered reader:** DuckDB consumes a registered Arrow
        stream once and answers later queries of it with no rows, so the rows are copied in and
        every query sees them all. To query the files without copying, hand DuckDB the scan
        itself (``con.from_arrow(scan)``, or ``FROM scan`` by its Python name): it reads a fresh
        stream each time (``__arrow_c_stream__``)."""
        try:
            import duckdb
        except ModuleNotFoundError as exc:
            raise MissingExtra(
                "Scan.to_duckdb needs duckdb (no module named 'duckdb'): pip install duckdb", extras=()
            ) from exc
        if not isinstance(con, duckdb.DuckDBPyConnection):
            raise InvalidArgument(f"con is a duckdb connection (duckdb.connect()), not {type(con).__name__}")
        if not isinstance(name, str) or not name or "\x00" in name:
            raise InvalidArgument(f"name is the table's name, a non-empty string, not {name!r}")
        staging = f"__segcat_scan_{uuid.uuid4().hex}"
        con.register(staging, self.to_reader())
        try:
            quoted = '"' + name.replace('"', '""') + '"'
            con.execute(f"CREATE OR REPLACE TEMPORARY TABLE {quoted} AS SELECT * FROM {staging}")
        finally:
            con.unregister(staging)
        return con

    def close(self) -> None:
        """Release the version lease (reading after that is not protected from vacuum)."""
        if self._release is not None:
            self._release()

    def __enter__(self) -> Scan:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Scan({self.table!r}, version={self.version}, files={len(self._reads)})"


def _read_schema(
    table_schema: pa.Schema, names: Sequence[str], where: Predicate | None, reads: Sequence[FileRead]
) -> pa.Schema:
    """The table's columns a scan must read: those asked for, and those ``where`` and the
    tombstones test (a column left out would read as missing, a NULL literal, to a tombstone)."""
    wanted = {n.lower() for n in names}
    if where is not None:
        wanted |= {c.lower() for c in where.columns()}
    for text in {
        t for read in reads for t in (*read.exclude, *(() if read.include is None else (read.include,)))
    }:
        wanted |= {c.lower() for c in parse_predicate(text, lenient=True).columns()}
    return pa.schema([f for f in table_schema if f.name.lower() in wanted])


def _where_argument(where: object) -> Predicate | None:
    if where is None or isinstance(where, Predicate):
        return where
    if isinstance(where, str):
        return parse_predicate(where)
    raise InvalidPredicate(
        f"where is a predicate (segcat.col(...)) or predicate text, not {type(where).__name__}"
    )


def _columns_argument(columns: object, schema: pa.Schema) -> list[str]:
    chosen = chosen_columns(columns, schema, "the table at this version")
    return list(schema.names) if chosen is None else chosen


def _check_where(where: Predicate, schema: pa.Schema) -> None:
    """``InvalidPredicate`` for a column the table lacks; ``UnsupportedPredicate`` for a test
    the row filter cannot answer exactly (evaluated once on no rows)."""
    known = {n.lower() for n in schema.names}
    missing = sorted(c for c in where.columns() if c.lower() not in known)
    if missing:
        raise InvalidPredicate(
            f"where: column {missing[0]!r} is not a column of the table at this version "
            f"({', '.join(schema.names)})"
        )
    matches(where, schema.empty_table())


def open_scan(
    reader: TableReader,
    where: object = None,
    columns: object = None,
    *,
    version: object = None,
    as_of: AsOf | None = None,
    holder: str | None = None,
) -> Scan:
    """``Table.scan``: see the module docstring."""
    predicate = _where_argument(where)
    number = version_or_tag(version, lambda: reader.snapshot().properties, reader.name)
    at_ms = as_of_ms(as_of)
    bound = reader.resolve_version(number, at_ms).bound  # type: ignore[arg-type]  # checked there
    lease = hold_or_warn(reader.lease(bound, holder=holder or default_holder("scan"))) if bound >= 0 else None
    try:
        if bound < 0:
            schema = pa.schema([])
            return Scan(
                table=reader.name.qualified,
                version=bound,
                reads=(),
                table_schema=schema,
                names=_columns_argument(columns, schema),
                where=predicate,
                config=reader.config,
                lease=None,
            )
        snapshot = reader.snapshot(bound)
        everything = snapshot_reads(snapshot)
        schema = reads_schema(everything, reader.config)
        names = _columns_argument(columns, schema)
        reads = everything
        if predicate is not None and everything:
            _check_where(predicate, schema)
            pruned = snapshot.prune(predicate)
            reads = snapshot_reads(pruned) if pruned.live_count < len(everything) else everything
        check_predicates(reads, schema)
        return Scan(
            table=reader.name.qualified,
            version=snapshot.version,
            reads=reads,
            table_schema=schema,
            names=names,
            where=predicate if everything else None,
            config=reader.config,
            lease=lease,
        )
    except BaseException:
        if lease is not None:
            lease.release()
        raise
