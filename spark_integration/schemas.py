"""The schema a table is read with: every live file's schema, merged with safe widening.

A table's files may have been written with different schemas: a column added later (older
files lack it), or a type widened (``id int`` then ``id long``). Spark's own ``mergeSchema``
refuses the second and, reading only the files that survive pruning, would not know a column
only pruned-away files hold. So ``si.read`` reads every scan with *the table's* schema, built
here from all live files (the rule itself is the core's, ``catalog.protocol.spark_types``, shared
with the Arrow readers), as Delta's type widening and Iceberg's promotion rules allow:

- byte → short → int → long; byte, short, int → double; float → double;
- int types → a decimal with room for their digits; decimal(p, s) → decimal(p', s') with
  s' ≥ s and p' − s' ≥ p − s (at most 38 digits);
- date → timestamp_ntz;
- structs field by field (a field some file lacks reads as NULL), arrays and maps by
  element, key and value; a column missing from a file reads as NULL.

Spark 4's Parquet reader reads an older file's narrower column as the wider type. Any other
change (long → int is not one: the wider of the two is taken, whichever file came first;
long → double, timestamp ↔ timestamp_ntz, string ↔ int, …) is ``IncompatibleSchema`` naming
the column, both types and a file of each. A file's schema is the one its segment recorded
(``si.write`` records it); files without one (written by other writers) have theirs read
from their footers by Spark, in one pass over all of them (split in halves only where Spark
cannot merge them itself).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pyspark.sql import SparkSession
from pyspark.sql.types import DataType, StructType, _parse_datatype_json_value

from segcat import IncompatibleSchema
from segcat.catalog.protocol import spark_types

MAX_DECIMAL_PRECISION = spark_types.MAX_DECIMAL_PRECISION


@dataclass(frozen=True)
class Source:
    """Files that share one schema, for naming them in an error."""

    schema: StructType
    first: str
    """One of the files, as ``path (version N)``."""


class _Conflict(Exception):
    def __init__(self, path: str, left: DataType, right: DataType) -> None:
        self.path = path
        self.left = left
        self.right = right


def _type(value: spark_types.SparkType) -> DataType:
    return _parse_datatype_json_value(value)


def widen(left: DataType, right: DataType, path: str = "", case_sensitive: bool = False) -> DataType:
    """The narrowest type both ``left`` and ``right`` read as; ``_Conflict`` at ``path`` if none
    (the core's rule, ``catalog.protocol.spark_types.widen``, on the types' JSON)."""
    try:
        return _type(spark_types.widen(left.jsonValue(), right.jsonValue(), path, case_sensitive))
    except spark_types.Conflict as conflict:
        raise _Conflict(conflict.path, _type(conflict.left), _type(conflict.right)) from None


def merge_structs(
    left: StructType, right: StructType, path: str = "", case_sensitive: bool = False
) -> StructType:
    """``left``'s fields widened by ``right``'s, then ``right``'s new fields; a field one side
    lacks is nullable (files without it read NULL). Names match as Spark resolves them."""
    try:
        value = spark_types.merge_structs(left.jsonValue(), right.jsonValue(), path, case_sensitive)
    except spark_types.Conflict as conflict:
        raise _Conflict(conflict.path, _type(conflict.left), _type(conflict.right)) from None
    return StructType.fromJson(value)


def merged(sources: Sequence[Source], case_sensitive: bool = False) -> StructType:
    """The table schema of ``sources`` (oldest first: their column order is kept, new columns follow)."""
    if not sources:
        return StructType([])
    result = sources[0].schema
    for k, source in enumerate(sources[1:], start=1):
        try:
            result = merge_structs(result, source.schema, "", case_sensitive)
        except _Conflict as conflict:
            raise _incompatible(conflict, sources[:k], source, case_sensitive) from None
    return result


def _incompatible(
    conflict: _Conflict, seen: Sequence[Source], source: Source, case_sensitive: bool
) -> IncompatibleSchema:
    """Name a file holding the column's other type: the first earlier source that alone conflicts."""
    other = next(
        (s for s in seen if _conflicts(s.schema, source.schema, case_sensitive)),
        seen[0] if seen else source,
    )
    return IncompatibleSchema(
        f"column {conflict.path!r} is {conflict.left.simpleString()} in {other.first} and "
        f"{conflict.right.simpleString()} in {source.first}; no reader widens one to the other "
        '(docs/PROTOCOL.md §4a, "Schemas"): rewrite or drop one side\'s files to read the table'
    )


def _conflicts(left: StructType, right: StructType, case_sensitive: bool) -> bool:
    try:
        merge_structs(left, right, "", case_sensitive)
    except _Conflict:
        return True
    return False


def parse_recorded(raw: str | None) -> StructType | None:
    """A segment's recorded schema (Spark's JSON), None when it has none or it is not a Spark schema."""
    if raw is None:
        return None
    try:
        parsed = StructType.fromJson(json.loads(raw))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return parsed if isinstance(parsed, StructType) else None


def infer(spark: SparkSession, paths: Sequence[str], case_sensitive: bool = False) -> StructType:
    """The merged footer schema of ``paths`` (Spark's paths), read by Spark.

    One ``mergeSchema`` pass when Spark can merge them all itself; where it cannot (``int``
    in one file, ``long`` in another), the files are split in halves and the halves merged
    here, so the cost grows with the number of disagreements, not of files. A single file
    Spark cannot read raises what Spark raised.
    """
    try:
        return spark.read.option("mergeSchema", "true").parquet(*paths).schema
    except Exception:
        if len(paths) == 1:
            raise
    middle = len(paths) // 2
    left, right = infer(spark, paths[:middle], case_sensitive), infer(spark, paths[middle:], case_sensitive)
    try:
        return merge_structs(left, right, "", case_sensitive)
    except _Conflict as conflict:
        seen = [Source(left, f"one of {paths[0]} …")]
        raise _incompatible(conflict, seen, Source(right, f"one of {paths[-1]} …"), case_sensitive) from None


def table_schema(
    spark: SparkSession,
    files: Iterable[tuple[str, int, str | None]],
    spark_path: Callable[[str], str],
) -> StructType:
    """The schema to read a table's ``files`` (uri, added version, recorded schema JSON) with."""
    case_sensitive = str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"
    ordered = sorted(files, key=lambda f: (f[1], f[0]))
    sources: list[Source] = []
    by_json: dict[str, int] = {}
    unknown: list[tuple[str, int]] = []
    for uri, version, raw in ordered:
        if raw is not None and raw in by_json:
            continue  # files written with one schema: parsed once
        schema = parse_recorded(raw)
        if schema is None:
            unknown.append((uri, version))
        else:
            by_json[raw] = len(sources)  # type: ignore[index]
            sources.append(Source(schema, f"{uri} (version {version})"))
    if unknown:
        schema = infer(spark, [spark_path(uri) for uri, _ in unknown], case_sensitive)
        uri, version = unknown[0]
        sources.append(Source(schema, f"{uri} (version {version}) or another file without a recorded schema"))
    return merged(sources, case_sensitive)


def check_append(
    spark: SparkSession, files: Iterable[tuple[str, int, str | None]], schema: StructType
) -> None:
    """``IncompatibleSchema`` when rows of ``schema`` could not be read with the live ``files``
    (uri, added version, recorded schema JSON): an append refuses before it writes a file,
    instead of leaving a table no reader can read. Files without a recorded schema are left to
    the read (their footers are not read here)."""
    case_sensitive = str(spark.conf.get("spark.sql.caseSensitive", "false")).lower() == "true"
    sources: dict[str, Source] = {}
    for uri, version, raw in sorted(files, key=lambda f: (f[1], f[0])):
        if raw is None or raw in sources:
            continue
        recorded = parse_recorded(raw)
        if recorded is not None:
            sources[raw] = Source(recorded, f"{uri} (version {version})")
    merged([*sources.values(), Source(schema, "the DataFrame being appended")], case_sensitive)
