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
"""

from __future__ import annotations

import bisect
import datetime as dt
import functools
import json
import operator
import weakref
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from decimal import Decimal

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from segcat.catalog.config import Config
from segcat.catalog.errors import InvalidPredicate
from segcat.catalog.protocol.bloom import micros
from segcat.catalog.protocol.expressions import And, Compare, IsIn, IsNull, LiteralValue, Not, Or, Predicate
from segcat.catalog.protocol.model import ColumnType, Segment, Tombstone
from segcat.catalog.protocol.names import TableName, table_name
from segcat.catalog.protocol.predicates import parse_predicate
from segcat.catalog.read.lease import HeldLease, try_hold
from segcat.catalog.read.snapshot import Snapshot
from segcat.catalog.read.table import Catalog, Table
from segcat.catalog.storage.redis.leases import MAX_VERSION, default_holder

TableRef = str | TableName | Table
AsOf = int | dt.datetime | str
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


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
    return Catalog(config or Config.load()).table(table_name(table))


def as_of_ms(value: AsOf | None) -> int | None:
    """Milliseconds since the epoch from ms, a datetime (naive = UTC) or an ISO-8601 string."""
    if value is None or isinstance(value, int):
        return value
    moment = dt.datetime.fromisoformat(value) if isinstance(value, str) else value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return int(moment.timestamp() * 1000)


def read(
    spark: SparkSession,
    table: TableRef,
    version: int | None = None,
    as_of: AsOf | None = None,
    where: Predicate | Column | str | None = None,
    filter: str | None = None,
    config: Config | None = None,
) -> DataFrame:
    """The table's rows at ``version`` / ``as_of`` (default: the head).

    ``where`` as a ``segcat.catalog.protocol.expressions`` predicate prunes segments by their stats *and*
    filters rows (both with Spark SQL's semantics, docs/PROTOCOL.md §4a); as a pyspark
    ``Column`` or a Spark SQL string (or ``filter``) it only filters rows after reading
    (Spark still skips row groups by their Parquet stats).

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
        version, at_ms = opened.resolve_version(None, at_ms).bound, None
    lease = (
        try_hold(opened.redis, opened.name, version, holder=_holder("read")) if _leasable(version) else None
    )
    try:
        snapshot = opened.snapshot(version=version, as_of_ms=at_ms)
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
    """``read`` for a snapshot already in hand (a coordinator's, a compaction's)."""
    if where is not None and not isinstance(where, Predicate | Column | str):
        raise TypeError(
            f"where= takes a catalog.expressions predicate, a pyspark Column or SQL text, "
            f"not {type(where).__name__}"
        )
    everything = scan_files(snapshot)
    chosen = list(everything.values())
    if isinstance(where, Predicate):
        kept = snapshot.prune(where).segment_ids()
        chosen = [item for sid, item in everything.items() if sid in kept]
    frame = scan(spark, chosen, snapshot.tombstones)
    if frame is None:
        schema = common_schema(list(everything.values()))
        frame = spark.createDataFrame([], schema or StructType([]))
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


def scan(spark: SparkSession, files: Sequence[ScanFile], tombstones: Sequence[Tombstone]) -> DataFrame | None:
    """Rows of ``files`` with every tombstone newer than a file applied to it; None if no files."""
    if not files:
        return None
    ordered = sorted(tombstones, key=lambda t: t.version)
    versions = [t.version for t in ordered]
    classes: dict[int, list[ScanFile]] = {}
    for item in files:
        # tombstones[k:] are newer than the file: they delete from it
        classes.setdefault(bisect.bisect_right(versions, item.added_version), []).append(item)
    frames = []
    for k in sorted(classes):
        frame = parquet(spark, classes[k])
        deleted = deleted_rows([t.predicate for t in ordered[k:]], columns=frame.columns)
        frames.append(frame if deleted is None else frame.where(~deleted))
    return functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)


def deleted_rows(predicates: Sequence[str], columns: Collection[str] | None = None) -> Column | None:
    """TRUE exactly for rows some predicate matches (a NULL match deletes nothing, as in SQL DELETE).

    A predicate in the tombstone grammar (every protocol-2 tombstone) is applied through
    ``to_column``, the very semantics pruning uses; a column it names that the data lacks
    (``columns``: the scan's columns) reads as NULL, as a column added later reads for
    older files. Protocol-1 free text that does not parse is handed to Spark as it is.
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
            tests.append(to_column(parsed, columns=columns))
    matched = functools.reduce(lambda a, b: a | b, tests)
    return F.coalesce(matched, F.lit(False))


def common_schema(files: Sequence[ScanFile]) -> StructType | None:
    """The schema every file was written with, when they all agree and recorded it."""
    schemas = {f.schema for f in files}
    if len(schemas) != 1 or None in schemas:
        return None
    (raw,) = schemas
    assert raw is not None
    parsed = StructType.fromJson(json.loads(raw))
    return parsed


def parquet(spark: SparkSession, files: Sequence[ScanFile]) -> DataFrame:
    """One scan of exactly ``files``: their recorded schema when shared, else Spark merges footers.

    Spark's own row-group skipping must not drop rows segcat's rules match (docs/PROTOCOL.md §4a):
    Parquet dictionary filtering compares doubles with Java's ``equals`` (-0.0 ≠ 0.0), so it is
    off; footer min/max skip NaN, so statistics and page-index filtering are off for scans of
    files that may hold NaN (segcat's writer leaves float columns without footer stats).
    """
    schema = common_schema(files)
    reader = spark.read.schema(schema) if schema is not None else spark.read.option("mergeSchema", "true")
    reader = reader.option("parquet.filter.dictionary.enabled", "false")
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


def _name(column: str) -> Column:
    return F.col("`" + column.replace("`", "``") + "`")


def to_column(predicate: Predicate, columns: Collection[str] | None = None) -> Column:
    """The Spark row filter equivalent to a ``segcat.catalog.protocol.expressions`` predicate.

    Literals go to Spark as Spark reads them in SQL text: naive datetimes are UTC, integers
    beyond BIGINT are decimals, a time with nanoseconds (Spark holds microseconds) becomes
    the exact comparison on its floor / ceiling. With ``columns`` (the data's columns), a
    column the data lacks reads as NULL (Spark resolves names case-insensitively).
    """
    present = None if columns is None else {c.lower() for c in columns}

    def name(column: str) -> Column:
        if present is not None and column.lower() not in present:
            return F.lit(None)
        return _name(column)

    def build(node: Predicate) -> Column:
        if isinstance(node, And | Or):
            parts = [build(part) for part in _chain(node)]
            return functools.reduce(operator.and_ if isinstance(node, And) else operator.or_, parts)
        if isinstance(node, Not):
            return ~build(node.operand)
        if isinstance(node, IsNull):
            return name(node.column).isNotNull() if node.negate else name(node.column).isNull()
        if isinstance(node, IsIn):
            return _isin(name(node.column), node.values)
        if isinstance(node, Compare):
            return _compare(name(node.column), node.op, node.value)
        try:
            inverse = node.negated()
        except NotImplementedError:
            inverse = None
        if isinstance(inverse, IsIn):  # NOT IN, made by negating an IsIn
            return ~build(inverse)
        raise TypeError(f"cannot turn {type(node).__name__} into a Spark filter")

    return build(predicate)


def _chain(node: And | Or) -> list[Predicate]:
    """The operands of a left-deep chain of the same connective (no recursion on long chains)."""
    parts: list[Predicate] = []
    current: Predicate = node
    while isinstance(current, type(node)):
        parts.append(current.right)
        current = current.left
    parts.append(current)
    return parts[::-1]


def _sub_micro(value: LiteralValue) -> bool:
    return isinstance(value, dt.datetime) and bool(getattr(value, "nanosecond", 0))


def _lit(value: LiteralValue) -> Column:
    """A Spark literal with the value Spark SQL text would give it (see ``to_column``)."""
    if isinstance(value, int) and not isinstance(value, bool) and not -(2**63) <= value < 2**63:
        return F.lit(Decimal(value))
    if isinstance(value, dt.datetime):
        aware = value if value.tzinfo else value.replace(tzinfo=dt.UTC)
        return F.lit(aware.astimezone(dt.UTC))
    return F.lit(value)


def _compare(left: Column, op: str, value: LiteralValue) -> Column:
    if _sub_micro(value):
        # x < t ⇔ x <= floor(t) and x > t ⇔ x >= ceil(t) for microsecond x; never equal
        assert isinstance(value, dt.datetime)
        floor = _EPOCH + dt.timedelta(microseconds=micros(value))
        ceil = floor + dt.timedelta(microseconds=1)
        never = F.when(left.isNotNull(), F.lit(False))
        exact = {
            "<": left <= F.lit(floor),
            "<=": left <= F.lit(floor),
            ">": left >= F.lit(ceil),
            ">=": left >= F.lit(ceil),
            "==": never,
            "!=": ~never,
        }
        return exact[op]
    right = _lit(value)
    ops = {
        "==": left == right,
        "!=": left != right,
        "<": left < right,
        "<=": left <= right,
        ">": left > right,
        ">=": left >= right,
    }
    return ops[op]


def _isin(left: Column, values: tuple[LiteralValue, ...]) -> Column:
    kept = [_lit(v) for v in values if not _sub_micro(v)]
    if len(kept) == len(values):
        return left.isin(kept)
    # a nanosecond value equals no microsecond x: NULL for a NULL x, else the rest decides
    never = F.when(left.isNotNull(), F.lit(False))
    return left.isin(kept) | never if kept else never


def table_ref(table: TableRef) -> TableName:
    return table.name if isinstance(table, Table) else table_name(table)
