"""Where a log's Iceberg metadata lives: beside its key frames, under ``<log dir>/iceberg/``.

The directory is the log's own (docs/PROTOCOL.md §6, *Which log*), so a re-created table starts
with no Iceberg metadata and never serves the old table's. ``iceberg/metadata/`` follows
Iceberg's file-system layout (``v<N>.metadata.json`` and ``version-hint.text``), so a reader given
the directory alone (DuckDB's ``iceberg_scan``) finds the newest version. ``N`` is the segcat
version the metadata describes; names are functions of the version, so any materializer may
write them again.
"""

from __future__ import annotations

from segcat.catalog.storage.table_files import TableFiles


def iceberg_dir(files: TableFiles) -> str:
    """The Iceberg table directory of the log (relative to the object store's root)."""
    return f"{files.base}/iceberg"


def metadata_dir(files: TableFiles) -> str:
    return f"{iceberg_dir(files)}/metadata"


def metadata_path(files: TableFiles, version: int) -> str:
    """``v<version>.metadata.json``: the table as of segcat ``version``."""
    _check(version)
    return f"{metadata_dir(files)}/v{version}.metadata.json"


def version_hint_path(files: TableFiles) -> str:
    """``version-hint.text``: the newest published version, for readers that list no catalog."""
    return f"{metadata_dir(files)}/version-hint.text"


def manifest_list_path(files: TableFiles, version: int) -> str:
    """The manifest list of the snapshot of ``version``."""
    _check(version)
    return f"{metadata_dir(files)}/snap-{version:020d}.avro"


def manifest_path(files: TableFiles, version: int, index: int) -> str:
    """The ``index``-th manifest written at ``version`` (reused by later snapshots unchanged)."""
    _check(version)
    _check(index)
    return f"{metadata_dir(files)}/m-{version:020d}-{index:05d}.avro"


def delete_file_path(files: TableFiles, version: int, index: int) -> str:
    """The ``index``-th delete file (position or equality) written for ``version``'s tombstones."""
    _check(version)
    _check(index)
    return f"{iceberg_dir(files)}/deletes/d-{version:020d}-{index:05d}.parquet"


def _check(number: int) -> None:
    if isinstance(number, bool) or not isinstance(number, int) or number < 0:
        raise ValueError(f"not a version or index: {number!r}")
