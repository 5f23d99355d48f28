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
from collections.abc import Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from catalog.config import Config
from catalog.expressions import And, Compare, IsIn, IsNull, Or, Predicate
from catalog.model import Tombstone
from catalog.names import TableName, table_name
from catalog.snapshot import Snapshot
from catalog.table import Catalog, Table

TableRef = str | TableName | Table
AsOf = int | dt.datetime | str


@dataclass(frozen=True)
class ScanFile:
    """One segment file to read: where it is, when it was added, the schema it was written with."""

    uri: str
    added_version: int
    schema: str | None = None


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
    where: Predicate | str | None = None,
    filter: str | None = None,
    config: Config | None = None,
) -> DataFrame:
    """The table's rows at ``version`` / ``as_of`` (default: the head).

    ``where`` as a ``catalog.expressions`` predicate prunes segments by their stats *and*
    filters rows; as a Spark SQL string (or ``filter``) it only filters rows after reading
    (Spark still skips row groups by their Parquet stats).
    """
    snapshot = open_table(table, config).snapshot(version=version, as_of_ms=as_of_ms(as_of))
    return read_snapshot(spark, snapshot, where=where, filter=filter)


def read_snapshot(
    spark: SparkSession,
    snapshot: Snapshot,
    where: Predicate | str | None = None,
    filter: str | None = None,
) -> DataFrame:
    """``read`` for a snapshot already in hand (a coordinator's, a compaction's)."""
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
    elif isinstance(where, str):
        frame = frame.where(where)
    if filter:
        frame = frame.where(filter)
    return frame


def scan_files(snapshot: Snapshot) -> dict[str, ScanFile]:
    """The snapshot's live files by segment id: location, version added, recorded schema."""
    table = snapshot.segments
    if table.num_rows == 0:
        return {}
    schemas = {s.segment_id: s.schema for s in snapshot.segment_list()}
    ids, paths, versions = (table.column(c).to_pylist() for c in ("segment_id", "path", "added_version"))
    return {
        sid: ScanFile(snapshot.resolve(path), int(version), schemas.get(sid))
        for sid, path, version in zip(ids, paths, versions, strict=True)
    }


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
        deleted = deleted_rows([t.predicate for t in ordered[k:]])
        frames.append(frame if deleted is None else frame.where(~deleted))
    return functools.reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), frames)


def deleted_rows(predicates: Sequence[str]) -> Column | None:
    """TRUE exactly for rows some predicate matches (a NULL match deletes nothing, as in SQL DELETE)."""
    if not predicates:
        return None
    matched = functools.reduce(lambda a, b: a | b, [F.expr(f"({p})") for p in predicates])
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
    """One scan of exactly ``files``: their recorded schema when shared, else Spark merges footers."""
    schema = common_schema(files)
    reader = spark.read.schema(schema) if schema is not None else spark.read.option("mergeSchema", "true")
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


def to_column(predicate: Predicate) -> Column:
    """The Spark row filter equivalent to a ``catalog.expressions`` predicate."""
    if isinstance(predicate, And):
        return to_column(predicate.left) & to_column(predicate.right)
    if isinstance(predicate, Or):
        return to_column(predicate.left) | to_column(predicate.right)
    if isinstance(predicate, IsNull):
        return _name(predicate.column).isNotNull() if predicate.negate else _name(predicate.column).isNull()
    if isinstance(predicate, IsIn):
        return _name(predicate.column).isin(list(predicate.values))
    if isinstance(predicate, Compare):
        left, right = _name(predicate.column), F.lit(predicate.value)
        ops = {
            "==": left == right,
            "!=": left != right,
            "<": left < right,
            "<=": left <= right,
            ">": left > right,
            ">=": left >= right,
        }
        return ops[predicate.op]
    raise TypeError(f"cannot turn {type(predicate).__name__} into a Spark filter")


def table_ref(table: TableRef) -> TableName:
    return table.name if isinstance(table, Table) else table_name(table)
