"""Every Iceberg reader sees exactly segcat's rows, at every version, on random histories.

A random list of operations runs against a fresh table on the real stack, with a materializer
(which publishes the Iceberg metadata, ``materializer/iceberg_publisher.py``) and ``segcat serve``
(its Iceberg REST catalog under ``/iceberg``): appends of Parquet files written here (described by
``segment_from_parquet``), compactions of live files into one (rows read with the core's own
reader, so the tombstones that applied to them are applied), replaces, file drops, tombstones (a
one-column ``=`` / ``IN`` that becomes an equality delete, a range and a string predicate that
become position deletes), a new nullable column, int → long widening, and tags (a version with
no new snapshot). After each version every reader (pyiceberg through the REST catalog and on the
metadata file, DuckDB's ``iceberg_scan`` and REST ``ATTACH``) must return segcat's rows of that
version; at the end, every snapshot again by id and by its broker time. segcat's rows are the
core's read (``read.changes``), ``si.read`` and, once it exists, ``table.scan().to_arrow()``
(``_scan_rows``). Spark's Iceberg reader is absent: it does not load on pyspark 4.3
(``tests/iceberg_readers.SPARK_ICEBERG_BROKEN``).
"""

from __future__ import annotations

import importlib.util
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import SparkSession

import segcat.spark_integration as si
from segcat import Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.iceberg.pointer import IcebergPointer, read_pointer
from segcat.catalog.read.changes import read_rows, reads_schema, snapshot_reads
from segcat.catalog.storage.parquet_stats import segment_from_parquet
from segcat.catalog.storage.redis import RedisStore
from tests.iceberg_readers import At, IcebergTarget, assert_same_rows, readers_for
from tests.materializer_support import bound_files, namespace, running_materializer
from tests.server_support import serving
from tests.spark_support import spark

__all__ = ["spark"]

pytestmark = [
    pytest.mark.kafka,
    pytest.mark.redis,
    pytest.mark.spark,
]

TOKEN = "engines-agree-token-0123456789abcdef"
PUBLISH_TIMEOUT_S = 60.0
PUBLISHER = "segcat.materializer.iceberg_publisher"

# ------------------------------------------------------------------ operations

ids = st.integers(0, 12)
rows = st.lists(
    st.tuples(st.one_of(st.none(), ids), st.sampled_from([None, "a", "b", "c"])), min_size=1, max_size=6
)
predicates = st.one_of(
    ids.map(lambda k: f"id = {k}"),
    st.lists(ids, min_size=1, max_size=3, unique=True).map(lambda ks: f"id IN ({', '.join(map(str, ks))})"),
    ids.map(lambda k: f"id > {k}"),
    st.sampled_from(["name = 'a'", "name IN ('b', 'c')"]),
)
operations = st.lists(
    st.one_of(
        st.tuples(st.just("append"), rows),
        st.tuples(st.just("compact"), st.integers(2, 4)),
        st.tuples(st.just("replace"), rows),
        st.tuples(st.just("drop"), st.integers(0, 7)),
        st.tuples(st.just("tombstone"), predicates),
        st.tuples(st.just("add_column"), st.none()),
        st.tuples(st.just("widen"), st.none()),
        st.tuples(st.just("tag"), st.none()),
    ),
    min_size=1,
    max_size=8,
)


@dataclass
class Writer:
    """Writes the files of the operations and remembers which versions are Iceberg snapshots."""

    table: Table
    config: Config
    root: Path
    wide: bool = False
    note: bool = False
    snapshots: list[int] = field(default_factory=list)
    tags: int = 0

    def schema(self) -> pa.Schema:
        fields = [pa.field("id", pa.int64() if self.wide else pa.int32()), pa.field("name", pa.string())]
        return pa.schema([*fields, pa.field("note", pa.string())] if self.note else fields)

    def file(self, data: pa.Table) -> Any:
        segment_id = uuid.uuid4().hex
        relative = f"data/{segment_id}.parquet"
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(data, path)
        return segment_from_parquet(str(path), segment_id=segment_id, relative_path=relative)

    def rows(self, values: list[tuple[int | None, str | None]]) -> pa.Table:
        columns: dict[str, list[Any]] = {"id": [v[0] for v in values], "name": [v[1] for v in values]}
        if self.note:
            columns["note"] = [None if v[1] is None else f"n{v[1]}" for v in values]
        return pa.table(columns, schema=self.schema())

    def live(self) -> list[Any]:
        return list(self.table.snapshot().segment_list())

    def apply(self, kind: str, arg: Any) -> int | None:
        """Run one operation; its version, or None when it had nothing to act on."""
        if kind == "append":
            return self._snapshot(self.table.append([self.file(self.rows(arg))]))
        if kind == "replace":
            return self._snapshot(self.table.replace([self.file(self.rows(arg))]))
        if kind == "compact":
            snapshot = self.table.snapshot()
            reads = snapshot_reads(snapshot)[:arg]
            if len(reads) < 2:
                return None
            schema = reads_schema(reads, self.config)
            batches = [b for r in reads for b in read_rows(r, schema, self.config)]
            merged = pa.Table.from_batches(batches, schema=schema)
            by_uri = {snapshot.resolve(s.path): s.segment_id for s in snapshot.segment_list()}
            drops = [by_uri[r.uri] for r in reads]
            return self._snapshot(self.table.compact(drops, [self.file(merged)]))
        if kind == "drop":
            live = self.live()
            if not live:
                return None
            return self._snapshot(self.table.delete(drops=[live[arg % len(live)].segment_id]))
        if kind == "tombstone":
            if not self.live():
                return None
            return self._snapshot(self.table.delete(predicates=[arg]))
        if kind == "add_column":
            if self.note:
                return None
            self.note = True
            return None
        if kind == "widen":
            if self.wide:
                return None
            self.wide = True
            return None
        if kind == "tag":
            self.tags += 1
            head = self.table.refresh().version
            return self.table.set_properties({f"segcat.tag.t{self.tags}": str(head)})
        raise AssertionError(kind)

    def _snapshot(self, version: int) -> int:
        self.snapshots.append(version)
        return version


# ------------------------------------------------------------------ segcat's own rows


def core_rows(
    table: Table, config: Config, *, version: int | None = None, as_of: int | None = None
) -> pa.Table:
    """The core's read of a version (what ``si.read`` and ``table.scan`` are built on)."""
    reads = snapshot_reads(table.snapshot(version, as_of=as_of))
    schema = reads_schema(reads, config)
    return pa.Table.from_batches([b for r in reads for b in read_rows(r, schema, config)], schema=schema)


def _scan_rows(table: Table, version: int) -> pa.Table:
    """``table.scan(version=…).to_arrow()``: segcat's Arrow reader without Spark."""
    with table.scan(version=version) as scan:
        return scan.to_arrow()


def segcat_rows(spark: SparkSession, table: Table, config: Config, version: int) -> pa.Table:
    """segcat's rows of ``version``, after checking its three readers agree."""
    core = core_rows(table, config, version=version)
    frame = si.read(spark, table.name.qualified, version=version, config=config)
    assert_same_rows(core, frame.toArrow(), f"si.read at {version}")
    assert_same_rows(core, _scan_rows(table, version), f"table.scan at {version}")
    return core


# ------------------------------------------------------------------ waiting for the publisher


def wait_published(store: RedisStore, name: str, log_id: str | None, version: int) -> IcebergPointer:
    """The pointer once it names ``version`` (or a newer one); a blocked version fails the test."""
    deadline = time.monotonic() + PUBLISH_TIMEOUT_S
    while True:
        pointer = read_pointer(store, name, log_id)
        if pointer is not None:
            assert pointer.blocked_version is None, (
                f"version {pointer.blocked_version} blocked: {pointer.reason}"
            )
            if pointer.version >= version and pointer.location is not None:
                return pointer
        assert time.monotonic() < deadline, f"version {version} not published as Iceberg: {pointer}"
        time.sleep(0.05)


@pytest.fixture
def stack(mconfig: Config, iceberg_readers: None) -> Iterator[tuple[Config, str, str]]:
    """A namespace of the test's own with a materializer and ``segcat serve`` over it."""
    ns, pattern = namespace()
    with running_materializer(mconfig, pattern), serving(mconfig, token=TOKEN) as url:
        yield mconfig, ns, f"{url}/iceberg"


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=operations)
def test_every_reader_sees_segcats_rows(
    spark: SparkSession, stack: tuple[Config, str, str], tmp_path: Path, ops: list[tuple[str, Any]]
) -> None:
    if importlib.util.find_spec(PUBLISHER) is None:  # fail at once, not after a publish timeout per example
        pytest.fail(f"{PUBLISHER} is missing: no Iceberg metadata to read", pytrace=False)
    config, ns, rest_uri = stack
    name = f"{ns}.t{uuid.uuid4().hex[:8]}"
    store = RedisStore.from_config(config)
    with load_catalog(config).create_table(name) as table:
        log_id = bound_files(config, name).log_id
        writer = Writer(table, config, Path(table.location().removeprefix("file://")))
        pointer: IcebergPointer | None = None
        for kind, arg in ops:
            version = writer.apply(kind, arg)
            if version is None:
                continue
            pointer = wait_published(store, name, log_id, version)
            expected = segcat_rows(spark, table, config, version)
            target = IcebergTarget(pointer.location or "", rest_uri, name, TOKEN)
            for reader, read in readers_for(target).items():
                assert_same_rows(expected, read(target, At()), f"{reader} after {kind} at {version}")
        if pointer is None:
            return
        history = {entry.version: entry.timestamp_ms for entry in table.history()}
        target = IcebergTarget(pointer.location or "", rest_uri, name, TOKEN)
        for version in writer.snapshots:
            by_id = core_rows(table, config, version=version)
            by_time = core_rows(table, config, as_of=history[version])
            for reader, read in readers_for(target).items():
                assert_same_rows(
                    by_id, read(target, At(snapshot_id=version)), f"{reader}, snapshot {version}"
                )
                got = read(target, At(timestamp_ms=history[version]))
                assert_same_rows(by_time, got, f"{reader}, as of version {version}'s time")
