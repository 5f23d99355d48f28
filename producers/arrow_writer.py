"""``segcat.write``: Arrow or pandas rows as segment files and ONE commit, without Spark.

What ``write_deltalake`` is to Delta. The rows pass through the very code Spark's executors
run (``segment_files.write_files``: files named by the writer, stats from the footer, float
stats and the Bloom filter from the rows, provenance in the footer), under a write intent
(``staging.writing_files``), and one ``APPEND`` or ``REPLACE`` publishes them; the log's rules
decide, as for any writer.

- **Types.** Each column is written as the Arrow type Spark reads it as
  (``spark_types.from_arrow`` then ``to_arrow``: ``uint8`` as ``int16``, any timestamp unit as
  microseconds, a zoned timestamp as UTC, dictionaries decoded), so every reader of the table
  sees one type per column; a value that would change (nanoseconds below a microsecond, an
  unsigned value out of range) is ``InvalidArgument`` naming the column, never rounded.
  The schema recorded in each segment is that type as Spark's JSON.
- **Field ids.** Iceberg readers match columns by ``PARQUET:field_id`` when a file has any. A
  file carries the ids the table's published Iceberg metadata gives its columns
  (``Table.iceberg_field_ids``; the publisher's ids never change) when that metadata names every
  field of it, and no id otherwise (a new column, nothing published yet): such a file is read
  through the name mapping. **Decision — the writer never numbers columns itself**: it sees only
  the head, so its numbers could disagree with the publisher's over the log's history (a column
  dropped and written again, two writers adding columns at once), and a reader would then read
  one column's values as another's.
- **Modes.** ``append`` adds the rows; its schema must read together with the live files'
  (``IncompatibleSchema`` before any file is written). **Decision — ``overwrite`` replaces the
  whole table**, as ``write_deltalake(mode="overwrite")`` does: ``partition_by`` only places the
  new files (a REPLACE of every live segment, SNAPSHOT isolation: appends committed while it
  writes survive it, as ``si.write(mode="replace")``). Empty data appends nothing (no commit;
  the version read is returned) and overwrites the table with no rows.
- **Bad input** (an unsupported object, a missing or nested partition column, a batch whose
  schema differs from the first's, a column without a type) is ``InvalidArgument`` naming
  what is wrong. A problem found while writing leaves the files already written unreferenced
  under the aborted intent, for vacuum; nothing is committed.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Literal

import pyarrow as pa

from segcat import (
    Commit,
    InvalidArgument,
    Isolation,
    Operation,
    Segment,
    Table,
    TableName,
    load_catalog,
)
from segcat.catalog.protocol import spark_types
from segcat.catalog.protocol.jsonio import segment_from_json
from segcat.catalog.protocol.names import table_name
from segcat.catalog.protocol.parquet_field_ids import stamped
from segcat.catalog.read.changes import merged_schema
from segcat.producers.segment_files import FileSpec, write_files
from segcat.producers.staging import check_partition_names, plan_replace, writing_files

Mode = Literal["append", "overwrite"]
NEW_DATA = "the data being written"


def write(
    table: Table | str | TableName,
    data: Any,
    *,
    mode: Mode = "append",
    partition_by: str | Sequence[str] | None = None,
    properties: Mapping[str, str] | None = None,
    bloom_column: str | None = None,
    max_rows_per_file: int | None = None,
) -> int:
    """Write ``data`` (a ``pyarrow.Table`` or ``RecordBatch``, an iterable of record batches, a
    ``RecordBatchReader``, any object with ``__arrow_c_stream__``, or a pandas DataFrame) to
    ``table`` as new segment files and publish one commit; return its version.

    ``mode``: ``"append"`` or ``"overwrite"`` (the whole table). ``partition_by``: columns whose
    values split the rows into partitions (``data/col=value/``). ``properties``: recorded on the
    commit. ``bloom_column``: a column to build each file's Bloom filter on (equality and ``IN``
    pruning). See the module docstring for types, field ids and errors.
    """
    if mode not in ("append", "overwrite"):
        raise InvalidArgument(f"mode is 'append' or 'overwrite', not {mode!r}")
    keys = _names_argument(partition_by, "partition_by")
    bloom = _names_argument(bloom_column, "bloom_column")
    if len(bloom) > 1 or (bloom_column is not None and not isinstance(bloom_column, str)):
        raise InvalidArgument(f"bloom_column is one column name, not {bloom_column!r}")
    props = _properties_argument(properties)
    if max_rows_per_file is not None and (
        isinstance(max_rows_per_file, bool) or not isinstance(max_rows_per_file, int) or max_rows_per_file < 1
    ):
        raise InvalidArgument(f"max_rows_per_file is a positive integer, not {max_rows_per_file!r}")
    source, batches = _batches(data)
    with _handle(table) as handle:
        state = handle.refresh().copy()  # the commit's base, frozen
        target = _target_schema(source, keys, bloom)
        live = [(s.segment.path, s.added_version, s.segment.schema) for s in state.segments.values()]
        if mode == "append":
            _check_readable(live, target, state.version)
        target = stamped(target, handle.iceberg_field_ids())
        spec = FileSpec(
            root=handle.location(),
            s3_endpoint=handle.catalog.config.s3_endpoint,
            s3_region=handle.catalog.config.s3_region,
            key_columns=keys,
            bloom_column=bloom[0] if bloom else None,
            max_rows_per_file=max_rows_per_file,
            schema_json=json.dumps(spark_types.schema_from_arrow(target), separators=(",", ":")),
        )
        commit_props = {"engine": f"pyarrow-{pa.__version__}", "segcat.write.mode": mode, **props}
        with writing_files(handle) as attempt:
            adds = _write(_conformed(batches, source, target), attempt.stamp(spec))
            check_partition_names(adds, keys)
            planned: Commit | None = None
            if mode == "append" and adds:
                planned = handle.new_commit(
                    Operation.APPEND, adds=adds, properties=commit_props, base_version=state.version
                )
            elif mode == "overwrite":
                planned = plan_replace(handle, state, adds, (), None, Isolation.SNAPSHOT, commit_props)
            if planned is None:
                if attempt.intent is not None:
                    attempt.intent.abort()
                return state.last_accepted_version
            planned = attempt.adopt(planned)
            return attempt.intent.commit(planned) if attempt.intent is not None else handle.commit(planned)


@contextlib.contextmanager
def _handle(table: object) -> Iterator[Table]:
    """The table's handle: the one passed, or one loaded from the environment's catalog (closed after)."""
    if isinstance(table, Table):
        yield table
        return
    if not isinstance(table, str | TableName):
        raise InvalidArgument(f"table is a segcat.Table or a table name, not {type(table).__name__}")
    name = table_name(table)
    with load_catalog() as catalog, catalog.load_table(name) as handle:
        yield handle


# ---------------------------------------------------------------------------- arguments


def _names_argument(value: object, field: str) -> tuple[str, ...]:
    if value is None:
        return ()
    names = (value,) if isinstance(value, str) else value
    if isinstance(names, bytes) or not isinstance(names, Sequence) or not names:
        raise InvalidArgument(f"{field} is a column name or a non-empty list of them, not {value!r}")
    out: list[str] = []
    for name in names:
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"{field}: {name!r} is not a column name")
        if name.lower() in (n.lower() for n in out):
            raise InvalidArgument(f"{field}: {name!r} is named twice")
        out.append(name)
    return tuple(out)


def _properties_argument(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidArgument(f"properties is a mapping of text to text, not {type(value).__name__}")
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise InvalidArgument(f"properties: {key!r} → {item!r} is not text → text")
    return dict(value)


def _batches(data: object) -> tuple[pa.Schema, Iterator[pa.RecordBatch]]:
    """The schema of ``data`` and its batches (an iterable's first batch is read to know it)."""
    if isinstance(data, pa.Table):
        return data.schema, iter(data.to_batches())
    if isinstance(data, pa.RecordBatch):
        return data.schema, iter([data])
    if isinstance(data, pa.RecordBatchReader):
        return data.schema, iter(data)
    if _is_pandas(data):
        try:
            frame = pa.Table.from_pandas(data, preserve_index=False)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as exc:
            raise InvalidArgument(f"data: the pandas DataFrame has no Arrow form: {exc}") from None
        return frame.schema, iter(frame.to_batches())
    if hasattr(data, "__arrow_c_stream__"):
        reader = pa.RecordBatchReader.from_stream(data)
        return reader.schema, iter(reader)
    if isinstance(data, Iterable) and not isinstance(data, str | bytes | Mapping):
        items = iter(data)
        first = next(items, None)
        if first is None:
            return pa.schema([]), iter(())
        if not isinstance(first, pa.RecordBatch):
            raise InvalidArgument(
                f"data: an iterable of data holds pyarrow.RecordBatch objects, not {type(first).__name__}"
            )

        def chained() -> Iterator[pa.RecordBatch]:
            yield first
            for k, item in enumerate(items, start=1):
                if not isinstance(item, pa.RecordBatch):
                    raise InvalidArgument(
                        f"data: item {k} is a {type(item).__name__}, not a pyarrow.RecordBatch"
                    )
                yield item

        return first.schema, chained()
    raise InvalidArgument(
        "data is a pyarrow Table, RecordBatch, RecordBatchReader, an iterable of RecordBatch or a "
        f"pandas DataFrame, not {type(data).__name__}"
    )


def _is_pandas(data: object) -> bool:
    kind = type(data)
    return kind.__name__ == "DataFrame" and kind.__module__.partition(".")[0] == "pandas"


# ---------------------------------------------------------------------------- schema


def _target_schema(source: pa.Schema, keys: tuple[str, ...], bloom: tuple[str, ...]) -> pa.Schema:
    """The Arrow schema the files are written with: each column as the type Spark reads it as."""
    if not source.names:
        return source  # no rows and no columns (an empty iterable): nothing to check or write
    seen: dict[str, str] = {}
    fields = []
    for field in source:
        if not field.name:
            raise InvalidArgument("data: a column has an empty name")
        if field.name.lower() in seen:
            raise InvalidArgument(
                f"data: columns {seen[field.name.lower()]!r} and {field.name!r} differ only in case: "
                "readers match columns case-insensitively"
            )
        seen[field.name.lower()] = field.name
        kind = _decoded(field.type)
        if _holds_null_type(kind):
            raise InvalidArgument(
                f"column {field.name!r} has no type (every value is null and none was given): "
                "give the data an explicit schema"
            )
        try:
            spark = spark_types.from_arrow(kind)
            fields.append(pa.field(field.name, spark_types.to_arrow(spark), field.nullable))
        except spark_types.UnknownType as exc:
            raise InvalidArgument(f"column {field.name!r} is {field.type}: {exc}") from None
    target = pa.schema(fields)
    for field_name, name in (*(("partition_by", k) for k in keys), *(("bloom_column", b) for b in bloom)):
        if name not in target.names:
            raise InvalidArgument(
                f"{field_name}: {name!r} is not a column of the data ({', '.join(target.names)})"
            )
        if pa.types.is_nested(target.field(name).type) and field_name == "partition_by":
            raise InvalidArgument(
                f"partition_by: {name!r} is {target.field(name).type}; partition by a plain column"
            )
    return target


def _decoded(kind: pa.DataType) -> pa.DataType:
    """``kind`` with dictionary encoding removed (pandas categoricals), at every level."""
    if pa.types.is_dictionary(kind):
        return _decoded(kind.value_type)
    if pa.types.is_struct(kind):
        return pa.struct(
            [f.with_type(_decoded(f.type)) for f in (kind.field(i) for i in range(kind.num_fields))]
        )
    if pa.types.is_large_list(kind):
        return pa.large_list(kind.value_field.with_type(_decoded(kind.value_type)))
    if pa.types.is_list(kind):
        return pa.list_(kind.value_field.with_type(_decoded(kind.value_type)))
    if pa.types.is_map(kind):
        return pa.map_(
            kind.key_field.with_type(_decoded(kind.key_type)),
            kind.item_field.with_type(_decoded(kind.item_type)),
        )
    return kind


def _holds_null_type(kind: pa.DataType) -> bool:
    if pa.types.is_null(kind):
        return True
    return (
        any(_holds_null_type(kind.field(i).type) for i in range(kind.num_fields))
        if kind.num_fields
        else False
    )


def _check_readable(live: Sequence[tuple[str, int, str | None]], target: pa.Schema, base: int) -> None:
    """``IncompatibleSchema`` when the new rows could not be read with the live files (before any
    file is written); files without a recorded schema are left to the read."""
    recorded = [f for f in live if f[2] is not None]
    new = (NEW_DATA, base + 1, json.dumps(spark_types.schema_from_arrow(target)))
    merged_schema([*recorded, new])


# ---------------------------------------------------------------------------- rows


def _conformed(
    batches: Iterator[pa.RecordBatch], source: pa.Schema, target: pa.Schema
) -> Iterator[pa.RecordBatch]:
    """Each batch as ``target`` (cast exactly: a value that would change is ``InvalidArgument``);
    a batch whose schema is not the first's is ``InvalidArgument``."""
    for k, batch in enumerate(batches):
        if not batch.schema.equals(source, check_metadata=False):
            raise InvalidArgument(
                f"data: batch {k} has the schema {_shown(batch.schema)}; the first had {_shown(source)}"
            )
        arrays = []
        for field, column in zip(target, batch.columns, strict=True):
            try:
                arrays.append(column.cast(field.type, safe=True))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise InvalidArgument(
                    f"column {field.name!r}: its {column.type} values do not all fit {field.type} exactly "
                    f"(the type every reader reads it as): {exc}"
                ) from None
        yield pa.RecordBatch.from_arrays(arrays, schema=target)


def _shown(schema: pa.Schema) -> str:
    return "(" + ", ".join(f"{f.name} {f.type}" for f in schema) + ")"


def _write(batches: Iterator[pa.RecordBatch], spec: FileSpec) -> list[Segment]:
    """The segment files of ``batches``, written by the executors' code, as segments."""
    out: list[Segment] = []
    for rows in write_files(batches, spec):
        out.extend(segment_from_json(json.loads(raw)) for raw in rows.column("segment").to_pylist())
    return out
