"""``read``: a DataFrame over the live segment files of one version, pruned, tombstones applied.

Pruning is the catalog's (min/max/null counts and Bloom filters, vectorised over the
snapshot's segments); Spark then reads exactly the surviving files, never lists a directory
(a directory holds orphans and files of uncommitted or losing writers too).

Soft deletes follow IOx: a tombstone (predicate, version V) removes matching rows only from
segments added before V. The live segments therefore fall into classes by how many
tombstones are newer than them (tombstones are ordered by version, so that is a suffix of
the list); each class is one Parquet scan with one filter, and the classes are unioned.
Data appended after a delete is untouched by it; data compacted after it no longer holds
the deleted rows (``compact`` applies tombstones while rewriting, and rule 3b rejects a
rewrite that raced a delete).

Every scan reads with the table's schema (``schemas``), so files written with an older,
narrower schema read as the table's and a column only pruned-away files hold still resolves.
Predicates become Spark filters in ``filters``: a row filter means what it means in the
caller's session, a tombstone what it means at UTC.
"""

from __future__ import annotations

import bisect
import functools
import weakref
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from segcat import (
    ColumnType,
    Config,
    HeldLease,
    InvalidPredicate,
    Predicate,
    Segment,
    Snapshot,
    Table,
    TableName,
    Tombstone,
    load_catalog,
    parse_predicate,
)
from segcat.catalog.protocol.names import table_name
from segcat.catalog.read.as_of import AsOf, as_of_ms
from segcat.catalog.read.lease import hold_or_warn
from segcat.catalog.storage.redis.leases import MAX_VERSION, default_holder
from segcat.spark_integration import schemas
from segcat.spark_integration.filters import balanced, session_semantics, to_column

TableRef = str | TableName | Table


@dataclass(frozen=True)
class ScanFile:
    """One segment file to read: where it is, when it was added, the schema it was written with."""

    uri: str
    added_version: int
    schema: str | None = None
    nan_free: bool = True
    """No float column may hold NaN (its stats say ``nan_count == 0``): Spark may skip its row
    groups by footer min/max, which are blind to NaN (see ``parquet``)."""


def nan_free(segment: Segment) -> bool:
    """Whether every FLOAT column of ``segment`` is known to hold no NaN."""
    return all(s.nan_count == 0 for s in segment.stats if s.type is ColumnType.FLOAT)


def open_table(table: TableRef, config: Config | None) -> Table:
    """A ``Table`` for a name (with ``config`` or the environment's) or the table itself."""
    if isinstance(table, Table):
        return table
    return load_catalog(config).load_table(table_name(table))


def read(
    spark: SparkSession,
    table: TableRef,
    version: int | str | None = None,
    as_of: AsOf | None = None,
    where: Predicate | Column | str | None = None,
    filter: str | None = None,
    config: Config | None = None,
) -> DataFrame:
    """The table's rows at ``version`` (an offset, or a tag's name) / ``as_of`` (default: the head).

    ``where`` as a ``segcat.catalog.protocol.expressions`` predicate prunes segments by their stats *and*
    filters rows (both with Spark SQL's semantics in this session, its time zone included:
    the rows ``df.filter`` over every live file would return, docs/PROTOCOL.md §4a); as a
    pyspark ``Column`` or a Spark SQL string (or ``filter``) it only filters rows after
    reading (Spark still skips row groups by their Parquet stats). ``as_of``: ms since the
    epoch (a fraction is floored: versions have whole-ms broker times), a datetime or date
    (naive = UTC) or an ISO-8601 string; anything else is ``InvalidArgument``.

    **Version lease.** The read holds a version lease (``catalog.read.lease``) so vacuum keeps
    the version's files. A DataFrame is lazy: its files are read by whatever action runs on it
    later, so the lease cannot end with this call. It is taken before the snapshot is read (for
    the head or ``as_of``, right after the version is resolved: one watermark request, as
    before), held while the driver plans, and then handed to the returned DataFrame: renewed
    in the background for as long as that DataFrame object lives, released when it is garbage
    collected (or the driver exits; a killed driver's lease expires after its TTL). Keep the
    DataFrame ``read`` returned referenced until its actions are done — ``df = si.read(...)``
    is enough; a DataFrame *derived* from it (``si.read(...).where(...)``) does not carry the
    lease, so name the one ``read`` returned. :func:`lease_of` gives the lease (its ``lost``
    flag, or ``release()`` to end it early). Without Redis the read works the same, unprotected
    from vacuum, after one warning: reading never fails because of leases.
    """
    opened = open_table(table, config)
    at_ms = as_of_ms(as_of)
    if version is None:  # the version to lease first; the snapshot then reads exactly that one
        version, at_ms = opened.resolve_version(as_of=at_ms), None
    elif isinstance(version, str):  # a tag: the version it names now
        version = opened.resolve_version(version, as_of=at_ms)
    lease = hold_or_warn(opened.lease(version, holder=_holder("read"))) if _leasable(version) else None
    try:
        snapshot = opened.snapshot(version, as_of=at_ms)
        frame = read_snapshot(spark, snapshot, where=where, filter=filter)
    except BaseException:
        if lease is not None:
            lease.release()
        raise
    if lease is not None:
        keep_lease(frame, lease)
    return frame


_LEASE_ATTRIBUTE = "_segcat_lease"


def keep_lease(frame: DataFrame, lease: HeldLease) -> None:
    """Tie ``lease`` to ``frame``: held while the object lives, released when it is collected."""
    vars(frame)[_LEASE_ATTRIBUTE] = lease
    weakref.finalize(frame, lease.release)


def lease_of(frame: DataFrame) -> HeldLease | None:
    """The version lease a DataFrame returned by :func:`read` holds (None: no Redis, or not ``read``'s)."""
    lease = vars(frame).get(_LEASE_ATTRIBUTE)
    return lease if isinstance(lease, HeldLease) else None


def _leasable(version: object) -> bool:
    """A version a lease can name; anything else goes to ``snapshot`` untouched, to be refused there."""
    return isinstance(version, int) and not isinstance(version, bool) and 0 <= version <= MAX_VERSION


def _holder(kind: str) -> str:
    return default_holder(f"spark-{kind}")


def read_snapshot(
    spark: SparkSession,
    snapshot: Snapshot,
    where: Predicate | Column | str | None = None,
    filter: str | None = None,
) -> DataFrame:
    """``read`` for a snapshot already in hand (a coordinator's, a compaction's).

    Every scan reads with the table's schema (``schemas``: every live file's, merged with safe
    widening), whichever files pruning keeps, so a column only pruned-away files hold still
    resolves (as NULL) and older files with narrower types read as the wider ones. Pruning
    answers in this session's time zone, knowing which columns are TIMESTAMP_NTZ, as the row
    filter (``df.filter`` in this session) does.
    """
    if where is not None and not isinstance(where, Predicate | Column | str):
        raise InvalidPredicate(
            f"where= takes a catalog.expressions predicate, a pyspark Column or SQL text, "
            f"not {type(where).__name__}"
        )
    everything = scan_files(snapshot)
    schema = table_schema(spark, everything.values())
    chosen = list(everything.values())
    if isinstance(where, Predicate):
        kept = snapshot.prune(where, session_semantics(spark, schema)).segment_ids()
        chosen = [item for sid, item in everything.items() if sid in kept]
    frame = scan(spark, chosen, snapshot.tombstones, schema=schema)
    if frame is None:
        frame = spark.createDataFrame([], schema)
        if not frame.columns:
            return frame  # an empty table has no columns to filter on
    if isinstance(where, Predicate):
        frame = frame.where(to_column(where))
    elif where is not None:
        frame = frame.where(where)
    if filter:
        frame = frame.where(filter)
    return frame


def scan_files(snapshot: Snapshot) -> dict[str, ScanFile]:
    """The snapshot's live files by segment id: location, version added, recorded schema."""
    table = snapshot.segments
    if table.num_rows == 0:
        return {}
    segments = {s.segment_id: s for s in snapshot.segment_list()}
    ids, paths, versions = (table.column(c).to_pylist() for c in ("segment_id", "path", "added_version"))
    out = {}
    for sid, path, version in zip(ids, paths, versions, strict=True):
        segment = segments.get(sid)
        if segment is None:
            out[sid] = ScanFile(snapshot.resolve(path), int(version))
        else:
            out[sid] = ScanFile(snapshot.resolve(path), int(version), segment.schema, nan_free(segment))
    return out


def table_schema(spark: SparkSession, files: Iterable[ScanFile]) -> StructType:
    """The schema every scan of ``files`` reads with (``schemas.table_schema``)."""
    return schemas.table_schema(spark, ((f.uri, f.added_version, f.schema) for f in files), spark_path)


def scan(
    spark: SparkSession,
    files: Sequence[ScanFile],
    tombstones: Sequence[Tombstone],
    schema: StructType | None = None,
) -> DataFrame | None:
    """Rows of ``files`` with every tombstone newer than a file applied to it; None if no files.

    ``schema``: what to read with (default: the merged schema of ``files``).
    """
    if not files:
        return None
    schema = table_schema(spark, files) if schema is None else schema
    ordered = sorted(tombstones, key=lambda t: t.version)
    versions = [t.version for t in ordered]
    classes: dict[int, list[ScanFile]] = {}
    for item in files:
        # tombstones[k:] are newer than the file: they delete from it
        classes.setdefault(bisect.bisect_right(versions, item.added_version), []).append(item)
    frames = []
    for k in sorted(classes):
        frame = parquet(spark, classes[k], schema)
        deleted = deleted_rows(
            [t.predicate for t in ordered[k:]], columns=_columns(classes[k], schema), schema=schema
        )
        frames.append(frame if deleted is None else frame.where(~deleted))
    return functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)


def _columns(files: Sequence[ScanFile], schema: StructType) -> list[str]:
    """The columns ``files`` hold: a tombstone's column they all lack reads as a NULL literal.

    From the schemas the files recorded; a file without one may hold any column of the table.
    """
    found: set[str] = set()
    for raw in {item.schema for item in files}:  # files written with one schema: parsed once
        recorded = schemas.parse_recorded(raw)
        if recorded is None:
            return schema.fieldNames()
        found.update(recorded.fieldNames())
    return [name for name in schema.fieldNames() if name in found]


def deleted_rows(
    predicates: Sequence[str], columns: Collection[str] | None = None, schema: StructType | None = None
) -> Column | None:
    """TRUE exactly for rows some predicate matches (a NULL match deletes nothing, as in SQL DELETE).

    A predicate in the tombstone grammar (every protocol-2 tombstone) is applied through
    ``to_column`` with the meaning the protocol gives it, whatever the session's time zone
    (``utc``; the column types come from ``schema``); a column it names that the data lacks
    (``columns``: the scan's columns) reads as NULL, as a column added later reads for older
    files. Protocol-1 free text that does not parse is handed to Spark as it is.
    """
    if not predicates:
        return None
    tests = []
    for text in predicates:
        try:  # lenient: what protocol 1 and 2 accepted (a protocol-3 tombstone parses either way)
            parsed = parse_predicate(text, lenient=True)
        except InvalidPredicate:
            tests.append(F.expr(f"({text})"))
        else:
            tests.append(to_column(parsed, columns=columns, schema=schema, utc=True))
    return F.coalesce(balanced(tests, "or"), F.lit(False))


def parquet(spark: SparkSession, files: Sequence[ScanFile], schema: StructType) -> DataFrame:
    """One scan of exactly ``files``, read with ``schema`` (the table's).

    Spark's own row-group skipping must not drop rows segcat's rules match (docs/PROTOCOL.md §4a):
    Parquet dictionary filtering compares doubles with Java's ``equals`` (-0.0 ≠ 0.0), so it is
    off; footer min/max skip NaN, so statistics and page-index filtering are off for scans of
    files that may hold NaN (segcat's writer leaves float columns without footer stats).
    """
    reader = spark.read.schema(schema).option("parquet.filter.dictionary.enabled", "false")
    if not all(f.nan_free for f in files):
        reader = reader.option("parquet.filter.stats.enabled", "false")
        reader = reader.option("parquet.filter.columnindex.enabled", "false")
    return reader.parquet(*[spark_path(f.uri) for f in files])


def spark_path(uri: str) -> str:
    """A path Spark's Hadoop layer reads literally: ``s3a://`` for S3, glob characters escaped."""
    if uri.startswith("s3://"):
        uri = "s3a://" + uri[len("s3://") :]
    for ch in "\\{}[]*?":
        uri = uri.replace(ch, "\\" + ch)
    return uri


def table_ref(table: TableRef) -> TableName:
    return table.name if isinstance(table, Table) else table_name(table)
