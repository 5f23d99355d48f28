"""Readers that know Iceberg and nothing of segcat: each returns a table's rows as a comparable Arrow table.

segcat's Iceberg metadata is only worth what a reader that never heard of segcat makes of it, so
the tests read it with the engines themselves:

- **pyiceberg through a REST catalog** (``load_catalog(type="rest", uri=…, token=…)``);
- **pyiceberg on the metadata file** (``StaticTable.from_metadata``);
- **DuckDB 1.4.4** with the Iceberg, Avro, Parquet and httpfs extensions loaded from their PyPI
  packages (``duckdb-ext-*``; DuckDB's own download is never tried): ``iceberg_scan`` of the
  metadata location, and a REST catalog ``ATTACH`` (httpfs carries its HTTP calls);
- **Spark** with ``iceberg-spark-runtime-4.1_2.13:1.12.0`` (``tests/iceberg_spark_reader.py``,
  in a process of its own: a JVM's classpath is fixed when it starts, and the tests' shared
  session must not change). On pyspark 4.3 that runtime does not load (``SPARK_ICEBERG_BROKEN``).

Every reader reads the current snapshot, a snapshot by id, or the snapshot as of a time (the
newest snapshot whose ``timestamp-ms`` is at or before it). A time before the first snapshot,
or an id the table does not have, raises ``NoSnapshot`` from every reader, as Spark and DuckDB
refuse such a read (pyiceberg alone would hand back nothing, which a test cannot tell apart from
an empty table). ``comparable``
puts any reader's answer in one shape (canonical types, columns in the expected order, rows
sorted) so ``assert_same_rows`` compares values, not the physical widths each engine picks.
A reader that should work but cannot start raises ``ReaderUnavailable``; the ``iceberg_readers``
fixture (``tests/iceberg/conftest.py``) turns that into a failure, never a silent skip.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

SPARK_ICEBERG_RUNTIME = "org.apache.iceberg:iceberg-spark-runtime-4.1_2.13:1.12.0"
"""The newest Iceberg Spark runtime Maven Central has for Spark 4 (no ``-4.0``, ``-4.2`` or ``-4.3``
artifact of 1.12.0 resolves)."""

SPARK_ICEBERG_BROKEN = "IncompatibleClassChangeError"
"""What loading ``SPARK_ICEBERG_RUNTIME`` on pyspark 4.3 ends in: the runtime is compiled against
Spark 4.1, where ``CatalogManager`` is a class and ``connector.catalog.View`` an interface; 4.3
swapped both, so ``format("iceberg").load(path)`` fails in ``IcebergSource.catalogAndIdentifier``
and every statement on a REST ``SparkCatalog`` fails loading ``SparkView``."""

DUCKDB_EXTENSIONS = ("parquet", "avro", "iceberg", "httpfs")


class NoSnapshot(LookupError):
    """The table has no snapshot by that id, or none at or before that time."""


class ReaderUnavailable(RuntimeError):
    """A reader could not start (an extension, jar or package is missing): names which and why."""

    def __init__(self, reader: str, reason: str) -> None:
        super().__init__(f"Iceberg reader {reader!r} cannot start: {reason}")
        self.reader = reader
        self.reason = reason


@dataclass(frozen=True)
class IcebergTarget:
    """Where a reader finds one Iceberg table: its metadata file and, if served, its REST catalog."""

    metadata_location: str
    rest_uri: str | None = None
    identifier: str | None = None
    """``"<namespace>.<table>"`` in the REST catalog."""
    token: str | None = None


@dataclass(frozen=True)
class At:
    """Which snapshot: the current one (both None), one by id, or the newest at or before a time."""

    snapshot_id: int | None = None
    timestamp_ms: int | None = None

    def __post_init__(self) -> None:
        if self.snapshot_id is not None and self.timestamp_ms is not None:
            raise ValueError("At takes a snapshot id or a timestamp, not both")

    def __str__(self) -> str:
        if self.snapshot_id is not None:
            return f"snapshot {self.snapshot_id}"
        if self.timestamp_ms is not None:
            return f"as of {self.timestamp_ms} ms"
        return "current"


CURRENT = At()

Reader = Callable[[IcebergTarget, At], pa.Table]


# ------------------------------------------------------------------ comparing


def _canonical(t: pa.DataType) -> pa.DataType:
    if pa.types.is_dictionary(t):
        return _canonical(t.value_type)
    if pa.types.is_integer(t):
        return pa.int64()
    if pa.types.is_floating(t):
        return pa.float64()
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", "UTC" if t.tz is not None else None)
    return t


def comparable(table: pa.Table, columns: Sequence[str] | None = None) -> pa.Table:
    """``table`` with ``columns`` (default: its own) in that order, canonical types, rows sorted.

    Integers compare as int64, floats as float64, every string/binary flavour as one, timestamps
    in microseconds (Iceberg's precision) with any zone as UTC: engines pick physical widths of
    their own, and a widened column (int → long) reads as either. Field metadata is dropped.
    """
    names = list(table.column_names if columns is None else columns)
    missing = [n for n in names if n not in table.column_names]
    if missing:
        raise AssertionError(f"columns {missing} missing from {table.column_names}")
    arrays, fields = [], []
    for name in names:
        column = table.column(name)
        target = _canonical(column.type)
        arrays.append(column.cast(target) if target != column.type else column)
        fields.append(pa.field(name, target))
    out = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    if out.num_rows and names:
        out = out.sort_by([(name, "ascending") for name in names])
    return out.combine_chunks()


def assert_same_rows(expected: pa.Table, actual: pa.Table, what: str) -> None:
    """Fail naming ``what`` unless ``actual`` holds exactly ``expected``'s columns and rows.

    A segcat version without a live file has no columns; Iceberg keeps the last schema
    (docs/ICEBERG.md), so there only the row count is compared."""
    if not expected.column_names:
        if actual.num_rows:
            raise AssertionError(f"{what}: {actual.num_rows} rows, expected none (no live file)")
        return
    if sorted(actual.column_names) != sorted(expected.column_names):
        raise AssertionError(f"{what}: columns {actual.column_names}, expected {expected.column_names}")
    want = comparable(expected)
    got = comparable(actual, expected.column_names)
    if got.equals(want):
        return
    want_rows, got_rows = want.to_pylist(), got.to_pylist()
    extra = [r for r in got_rows if r not in want_rows][:5]
    lost = [r for r in want_rows if r not in got_rows][:5]
    raise AssertionError(
        f"{what}: {got.num_rows} rows, expected {want.num_rows}; "
        f"schema {got.schema} vs {want.schema}; unexpected {extra}; missing {lost}"
    )


# ------------------------------------------------------------------ pyiceberg


def _pyiceberg_scan(table: Any, at: At) -> pa.Table:
    snapshot_id = at.snapshot_id
    if at.timestamp_ms is not None:
        snapshot = table.snapshot_as_of_timestamp(at.timestamp_ms, inclusive=True)
        if snapshot is None:
            raise NoSnapshot(f"no snapshot at or before {at.timestamp_ms} ms in {table.metadata_location}")
        snapshot_id = snapshot.snapshot_id
    if snapshot_id is not None and table.snapshot_by_id(snapshot_id) is None:
        raise NoSnapshot(f"no snapshot {snapshot_id} in {table.metadata_location}")
    result: pa.Table = table.scan(snapshot_id=snapshot_id).to_arrow()
    return result


def rest_catalog(target: IcebergTarget) -> Any:
    """A pyiceberg REST catalog client for ``target`` (no cache of its own: each load asks)."""
    from pyiceberg.catalog import load_catalog

    if target.rest_uri is None:
        raise ValueError("this target has no REST catalog")
    props = {"type": "rest", "uri": target.rest_uri}
    if target.token is not None:
        props["token"] = target.token
    return load_catalog("segcat-test-rest", **props)


def pyiceberg_rest(target: IcebergTarget, at: At = CURRENT) -> pa.Table:
    """pyiceberg through the REST catalog: load the table, scan the snapshot."""
    if target.identifier is None:
        raise ValueError("this target has no REST identifier")
    return _pyiceberg_scan(rest_catalog(target).load_table(target.identifier), at)


def pyiceberg_static(target: IcebergTarget, at: At = CURRENT) -> pa.Table:
    """pyiceberg on the metadata file alone (``StaticTable.from_metadata``)."""
    from pyiceberg.table import StaticTable

    return _pyiceberg_scan(StaticTable.from_metadata(target.metadata_location), at)


# ------------------------------------------------------------------ DuckDB


def duckdb_extension(name: str) -> Path:
    """The binary of DuckDB extension ``name`` from its PyPI package, for this DuckDB and platform."""
    import duckdb

    spec = importlib.util.find_spec("duckdb_ext")
    roots = list(spec.submodule_search_locations or []) if spec is not None else []
    platform = duckdb.execute("PRAGMA platform").fetchone()
    sub = Path("extensions") / f"v{duckdb.__version__}" / str(platform[0] if platform else "")
    for root in roots:
        path = Path(root) / sub / f"{name}.duckdb_extension"
        if path.is_file():
            return path
    raise ReaderUnavailable(
        "duckdb",
        f"no {name}.duckdb_extension for DuckDB {duckdb.__version__} under {sub} in "
        f"{roots or 'any duckdb_ext'} (install duckdb-ext-{name}=={duckdb.__version__}.*)",
    )


def duckdb_connection() -> Any:
    """An in-memory DuckDB with the extensions loaded from files; it never downloads one."""
    import duckdb

    paths = [duckdb_extension(name) for name in DUCKDB_EXTENSIONS]
    con = duckdb.connect(config={"autoinstall_known_extensions": False, "autoload_known_extensions": False})
    try:
        for path in paths:
            con.execute(f"LOAD {_sql_text(str(path))}")
    except duckdb.Error as exc:
        con.close()
        raise ReaderUnavailable("duckdb", f"LOAD failed: {exc}") from exc
    return con


def _sql_text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _sql_name(value: str) -> str:
    return '"' + value.replace('"', '""') + '"'


DUCKDB_NO_SNAPSHOT = ("Could not find latest snapshots for timestamp", "Could not find snapshot with id")
"""The messages of the Iceberg extension for a time before the first snapshot, or an unknown id."""


DUCKDB_NO_COLUMNS = ("Table function must return at least one column", "SELECT list is empty")


def _arrow(con: Any, sql: str) -> pa.Table:
    import duckdb

    try:
        result = con.execute(sql).fetch_arrow_table()
    except duckdb.Error as exc:
        if any(text in str(exc) for text in DUCKDB_NO_SNAPSHOT):
            raise NoSnapshot(str(exc).splitlines()[0]) from exc
        if any(text in str(exc) for text in DUCKDB_NO_COLUMNS):
            # DuckDB binds no relation without columns: a table that never had a column reads as
            # nothing (``assert_same_rows`` accepts that only where segcat has no columns either)
            return pa.table({})
        raise
    assert isinstance(result, pa.Table)
    return result


def duckdb_scan(target: IcebergTarget, at: At = CURRENT, *, con: Any = None) -> pa.Table:
    """DuckDB's ``iceberg_scan`` of the metadata location (``snapshot_from_id`` / ``_timestamp``)."""
    options = ""
    if at.snapshot_id is not None:
        options = f", snapshot_from_id => {int(at.snapshot_id)}"
    elif at.timestamp_ms is not None:
        options = f", snapshot_from_timestamp => epoch_ms({int(at.timestamp_ms)})"
    with _connection(con) as c:
        return _arrow(c, f"SELECT * FROM iceberg_scan({_sql_text(target.metadata_location)}{options})")


class DuckRest:
    """A DuckDB connection with ``target``'s REST catalog attached (``ATTACH … TYPE iceberg``)."""

    ALIAS = "segcat_rest"

    def __init__(self, target: IcebergTarget) -> None:
        if target.rest_uri is None or target.identifier is None:
            raise ValueError("this target has no REST catalog")
        self.target = target
        self.con = duckdb_connection()
        auth = "AUTHORIZATION_TYPE 'none'"
        if target.token is not None:
            self.con.execute(
                f"CREATE SECRET segcat_rest_secret (TYPE iceberg, TOKEN {_sql_text(target.token)})"
            )
            auth = "SECRET segcat_rest_secret"
        self.con.execute(
            f"ATTACH '' AS {self.ALIAS} (TYPE iceberg, ENDPOINT {_sql_text(target.rest_uri)}, {auth})"
        )

    def read(self, at: At = CURRENT) -> pa.Table:
        namespace, name = self.target.identifier.split(".", 1)  # type: ignore[union-attr]
        relation = f"{self.ALIAS}.{_sql_name(namespace)}.{_sql_name(name)}"
        if at.snapshot_id is not None:
            relation += f" AT (VERSION => {int(at.snapshot_id)})"
        elif at.timestamp_ms is not None:
            relation += f" AT (TIMESTAMP => epoch_ms({int(at.timestamp_ms)}))"
        return _arrow(self.con, f"SELECT * FROM {relation}")

    def close(self) -> None:
        self.con.close()


def duckdb_rest(target: IcebergTarget, at: At = CURRENT) -> pa.Table:
    """DuckDB through the REST catalog, one fresh ``ATTACH`` per read (no catalog cache carried over)."""
    reader = DuckRest(target)
    try:
        return reader.read(at)
    finally:
        reader.close()


@contextlib.contextmanager
def _connection(con: Any) -> Iterator[Any]:
    if con is not None:
        yield con
        return
    own = duckdb_connection()
    try:
        yield own
    finally:
        own.close()


# ------------------------------------------------------------------ Spark


def spark_iceberg(target: IcebergTarget, at: At = CURRENT) -> pa.Table:
    """Spark with the Iceberg runtime, in a process of its own (``tests/iceberg_spark_reader.py``)."""
    from tests.iceberg_spark_reader import read_in_subprocess

    return read_in_subprocess(target, [at])[0]


@functools.cache
def spark_iceberg_status() -> str | None:
    """None when the Iceberg runtime reads a table on this Spark, else its error (probed once)."""
    from tests.iceberg_spark_reader import probe

    return probe()


# ------------------------------------------------------------------ the set


READERS: dict[str, Reader] = {
    "pyiceberg-rest": pyiceberg_rest,
    "pyiceberg-static": pyiceberg_static,
    "duckdb-scan": duckdb_scan,
    "duckdb-rest": duckdb_rest,
}
"""Every reader expected to work here. Spark joins once ``spark_iceberg_status()`` is None."""

NEEDS_REST = frozenset({"pyiceberg-rest", "duckdb-rest"})


def readers_for(target: IcebergTarget) -> dict[str, Reader]:
    """The readers that can read ``target`` (those of a REST catalog only when it has one)."""
    return {
        name: reader
        for name, reader in READERS.items()
        if target.rest_uri is not None or name not in NEEDS_REST
    }


def check_can_start() -> None:
    """Raise ``ReaderUnavailable`` for the first reader expected here that cannot start."""
    try:
        import pyiceberg.catalog.rest
        import pyiceberg.table  # noqa: F401
    except ImportError as exc:
        raise ReaderUnavailable("pyiceberg", str(exc)) from exc
    duckdb_connection().close()
