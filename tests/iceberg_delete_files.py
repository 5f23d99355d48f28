"""Iceberg delete files added to a pyiceberg table, to prove the readers on them (tests only).

pyiceberg 0.12 writes only copy-on-write deletes, yet segcat's tombstones become position and
equality delete files, so the harness needs tables that hold such files before it judges
segcat's. ``add_position_delete`` / ``add_equality_delete`` write the delete file (Parquet, with
the field ids the spec reserves: ``file_path`` 2147483546, ``pos`` 2147483545; an equality
delete's columns carry their table field ids) and commit it in a delete manifest of a new
snapshot, through pyiceberg's own snapshot producer (an internal API: its fast append, with
one more manifest).

pyiceberg's manifest schema types ``equality_ids`` (field 135) as ``list<long>``; the spec says
``list<int>``, and DuckDB 1.4.4 fails on the long form ("INTERNAL Error: Expected vector of type
INT32, but found vector of type INT64"). The delete manifest here is written with the spec's
type (``_spec_data_file_type``), as segcat's publisher must write it.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

POS_FILE_PATH_ID = 2147483546
POS_POS_ID = 2147483545


@contextlib.contextmanager
def _spec_data_file_type() -> Iterator[None]:
    """pyiceberg's v2 data-file struct with ``equality_ids`` as ``list<int>`` while writing."""
    import pyiceberg.manifest as manifest
    from pyiceberg.types import IntegerType, ListType, NestedField, StructType

    original = manifest.DATA_FILE_TYPE[2]
    fixed = [
        NestedField(
            f.field_id,
            f.name,
            ListType(element_id=136, element_type=IntegerType(), element_required=True),
            required=f.required,
            doc=f.doc,
        )
        if f.field_id == 135
        else f
        for f in original.fields
    ]
    manifest.DATA_FILE_TYPE[2] = StructType(*fixed)
    try:
        yield
    finally:
        manifest.DATA_FILE_TYPE[2] = original


def _commit_delete_file(
    table: Any, path: str, content: Any, records: int, equality_ids: list[int] | None
) -> None:
    from pyiceberg.manifest import (
        DataFile,
        FileFormat,
        ManifestContent,
        ManifestEntry,
        ManifestEntryStatus,
        ManifestWriterV2,
    )
    from pyiceberg.typedef import Record

    class DeleteManifestWriter(ManifestWriterV2):
        def content(self) -> ManifestContent:
            return ManifestContent.DELETES

        @property
        def _meta(self) -> dict[str, str]:
            return {**super()._meta, "content": "deletes"}

    delete_file = DataFile.from_args(
        _table_format_version=2,
        content=content,
        file_path=f"file://{path}",
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=records,
        file_size_in_bytes=os.path.getsize(path),
        equality_ids=equality_ids,
        spec_id=0,
    )
    with _spec_data_file_type(), table.transaction() as tx:
        append = tx.update_snapshot().fast_append()
        data_manifests = append._manifests

        def manifests() -> list[Any]:
            out = data_manifests()
            writer = DeleteManifestWriter(
                tx.table_metadata.spec(),
                tx.table_metadata.schema(),
                append.new_manifest_output(),
                append._snapshot_id,
                append._compression,
            )
            with writer:
                writer.add(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED,
                        snapshot_id=append._snapshot_id,
                        sequence_number=None,
                        file_sequence_number=None,
                        data_file=delete_file,
                    )
                )
            return [*out, writer.to_manifest_file()]

        append._manifests = manifests
        append.commit()


def add_position_delete(table: Any, path: str, data_file: str, positions: list[int]) -> None:
    """Delete rows ``positions`` of ``data_file`` (as the manifests spell it) in a new snapshot."""
    schema = pa.schema(
        [
            pa.field("file_path", pa.string(), False, {b"PARQUET:field_id": str(POS_FILE_PATH_ID).encode()}),
            pa.field("pos", pa.int64(), False, {b"PARQUET:field_id": str(POS_POS_ID).encode()}),
        ]
    )
    rows = pa.table({"file_path": [data_file] * len(positions), "pos": positions}, schema=schema)
    pq.write_table(rows, path)
    from pyiceberg.manifest import DataFileContent

    _commit_delete_file(table, path, DataFileContent.POSITION_DELETES, len(positions), None)


def add_equality_delete(table: Any, path: str, column: str, values: list[Any]) -> None:
    """Delete the rows whose ``column`` equals one of ``values`` (older data only) in a new snapshot."""
    from pyiceberg.io.pyarrow import schema_to_pyarrow
    from pyiceberg.manifest import DataFileContent

    field = table.schema().find_field(column)
    arrow = schema_to_pyarrow(table.schema()).field(column)
    pq.write_table(pa.table({column: pa.array(values, arrow.type)}, schema=pa.schema([arrow])), path)
    _commit_delete_file(table, path, DataFileContent.EQUALITY_DELETES, len(values), [field.field_id])
