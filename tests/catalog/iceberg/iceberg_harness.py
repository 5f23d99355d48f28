"""A throwaway Iceberg (v2) table around given data and delete files, read by real Iceberg readers.

Built with pyiceberg's own manifest, manifest-list and metadata models (one snapshot, every
file with the data sequence number segcat's mapping gives it: a file added at version A has
A + 1, a delete file of version T has T + 1), then read by pyiceberg (``StaticTable``) and by
DuckDB's Iceberg extension (``iceberg_scan``), neither of which knows segcat.

pyiceberg 0.12 writes a manifest's ``equality_ids`` as ``list<long>`` where the Iceberg spec
says ``list<int>`` (field 135, element 136), and DuckDB 1.4.4 fails on such a manifest
(``INTERNAL Error: Expected vector of type INT32, but found vector of type INT64``);
``_spec_equality_ids`` puts the spec's type back for the manifests written here.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
from pyiceberg import manifest as pyiceberg_manifest
from pyiceberg.io.pyarrow import PyArrowFileIO, pyarrow_to_schema
from pyiceberg.manifest import (
    DataFile,
    DataFileContent,
    FileFormat,
    ManifestContent,
    ManifestEntry,
    ManifestEntryStatus,
    ManifestFile,
    ManifestWriterV2,
    write_manifest_list,
)
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC
from pyiceberg.table import StaticTable
from pyiceberg.table.metadata import TableMetadataV2
from pyiceberg.table.refs import SnapshotRef, SnapshotRefType
from pyiceberg.table.snapshots import Operation, Snapshot, Summary
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER
from pyiceberg.typedef import Record
from pyiceberg.types import IntegerType

from segcat.catalog.read.iceberg_deletes import DeleteFile

SNAPSHOT_ID = 1
_EXTENSIONS = Path(duckdb.__file__).parent.parent / "duckdb_ext" / "extensions" / "v1.4.4" / "linux_amd64"


def _spec_equality_ids() -> None:
    for version in (2, 3):
        field_type = pyiceberg_manifest.DATA_FILE_TYPE[version].field(135).field_type
        if not isinstance(field_type.element_type, IntegerType):
            object.__setattr__(field_type, "element_type", IntegerType())
            field_type.__dict__.pop("element_field", None)  # a cached_property of the old type


_spec_equality_ids()


@dataclass(frozen=True)
class DataFileAt:
    """A data file and the segcat version that added it."""

    uri: str
    added_version: int
    record_count: int


class _DeleteManifestWriter(ManifestWriterV2):
    """pyiceberg's v2 writer, for a manifest of delete files (``content`` = deletes)."""

    def content(self) -> ManifestContent:
        return ManifestContent.DELETES

    @property
    def _meta(self) -> dict[str, str]:
        return {**super()._meta, "content": "deletes"}


def build_table(
    directory: Path,
    schema: pa.Schema,
    data: Sequence[DataFileAt],
    deletes: Sequence[tuple[DeleteFile, int]],
) -> str:
    """Write the metadata of a one-snapshot table of ``data`` and ``deletes`` (each with the
    version of its tombstones) under ``directory``; the path of its ``metadata.json``.

    ``schema``'s fields carry their Iceberg field ids (``PARQUET:field_id`` metadata)."""
    metadata_dir = directory / "metadata"
    metadata_dir.mkdir(parents=True, exist_ok=True)
    iceberg_schema = pyarrow_to_schema(schema)
    io = PyArrowFileIO()
    top = max([d.added_version for d in data] + [v for _, v in deletes] + [0])
    sequence = top + 1
    manifests: list[ManifestFile] = []
    groups: list[tuple[str, type[ManifestWriterV2], list[tuple[DataFile, int]]]] = [
        ("data", ManifestWriterV2, [(_data_file(d), d.added_version + 1) for d in data]),
        ("deletes", _DeleteManifestWriter, [(_delete_file(f), v + 1) for f, v in deletes]),
    ]
    for name, writer_type, entries in groups:
        if not entries:
            continue
        output = io.new_output(str(metadata_dir / f"{name}.avro"))
        writer = writer_type(UNPARTITIONED_PARTITION_SPEC, iceberg_schema, output, SNAPSHOT_ID, "null")
        with writer:
            for entry_file, data_sequence in entries:
                writer.add_entry(
                    ManifestEntry.from_args(
                        status=ManifestEntryStatus.ADDED,
                        snapshot_id=SNAPSHOT_ID,
                        sequence_number=data_sequence,
                        file_sequence_number=data_sequence,
                        data_file=entry_file,
                    )
                )
        manifests.append(writer.to_manifest_file())
    manifest_list = str(metadata_dir / "snap.avro")
    with write_manifest_list(2, io.new_output(manifest_list), SNAPSHOT_ID, None, sequence, "null") as lists:
        lists.add_manifests(manifests)
    snapshot = Snapshot(
        **{
            "snapshot-id": SNAPSHOT_ID,
            "sequence-number": sequence,
            "timestamp-ms": 1,
            "manifest-list": manifest_list,
            "summary": Summary(Operation.DELETE),
            "schema-id": iceberg_schema.schema_id,
        }
    )
    metadata = TableMetadataV2(
        location=str(directory),
        table_uuid=uuid.uuid4(),
        last_updated_ms=1,
        last_column_id=iceberg_schema.highest_field_id,
        schemas=[iceberg_schema],
        current_schema_id=iceberg_schema.schema_id,
        partition_specs=[UNPARTITIONED_PARTITION_SPEC],
        default_spec_id=0,
        last_partition_id=999,
        sort_orders=[UNSORTED_SORT_ORDER],
        default_sort_order_id=0,
        snapshots=[snapshot],
        current_snapshot_id=SNAPSHOT_ID,
        last_sequence_number=sequence,
        refs={"main": SnapshotRef(snapshot_id=SNAPSHOT_ID, snapshot_ref_type=SnapshotRefType.BRANCH)},
    )
    path = metadata_dir / "v1.metadata.json"
    path.write_text(metadata.model_dump_json(by_alias=True, exclude_none=True))
    return str(path)


def _data_file(data: DataFileAt) -> DataFile:
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=data.uri,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=data.record_count,
        file_size_in_bytes=os.path.getsize(data.uri),
        _table_format_version=2,
    )


def _delete_file(delete: DeleteFile) -> DataFile:
    content = (
        DataFileContent.EQUALITY_DELETES if delete.content == "equality" else DataFileContent.POSITION_DELETES
    )
    return DataFile.from_args(
        content=content,
        file_path=delete.uri,
        file_format=FileFormat.PARQUET,
        partition=Record(),
        record_count=delete.record_count,
        file_size_in_bytes=delete.size_bytes,
        equality_ids=list(delete.equality_field_ids) or None,
        _table_format_version=2,
    )


def read_pyiceberg(metadata: str) -> pa.Table:
    return StaticTable.from_metadata(metadata).scan().to_arrow()


def duckdb_connection() -> duckdb.DuckDBPyConnection:
    """DuckDB with the Iceberg extension from the PyPI package, offline, on one thread."""
    con = duckdb.connect(
        config={
            "autoinstall_known_extensions": False,
            "autoload_known_extensions": False,
            "threads": 1,
        }
    )
    con.execute(f"LOAD '{_EXTENSIONS}/avro.duckdb_extension'")
    con.execute(f"LOAD '{_EXTENSIONS}/iceberg.duckdb_extension'")
    return con


def read_duckdb(con: duckdb.DuckDBPyConnection, metadata: str, columns: Sequence[str]) -> pa.Table:
    listed = ", ".join(f'"{c}"' for c in columns)
    result: Any = con.execute(f"SELECT {listed} FROM iceberg_scan('{metadata}')").fetch_arrow_table()
    return pa.table(result) if not isinstance(result, pa.Table) else result
