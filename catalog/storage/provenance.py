"""Provenance in a data file's Parquet footer: the table, commit id and writer id that wrote it.

Every file segcat writes records them (key-value metadata), so any file on storage can be
traced to the commit that meant to add it; vacuum uses the commit id to tell a live write's
files from a dead one's under the same write intent prefix.
"""

from __future__ import annotations

import pyarrow.fs as pafs
import pyarrow.parquet as pq

PROVENANCE_KEYS = {"table": "segcat.table", "commit_id": "segcat.commit_id", "writer_id": "segcat.writer_id"}


def read_footer_provenance(fs: pafs.FileSystem, path: str) -> dict[str, str] | None:
    """``{"table", "commit_id", "writer_id"}`` (those present) from the footer of ``path`` in
    ``fs``; None when the file records none. Only the footer is read."""
    with fs.open_input_file(path) as handle:
        metadata = pq.read_metadata(handle).metadata or {}
    found = {
        name: value.decode("utf-8", errors="replace")
        for name, key in PROVENANCE_KEYS.items()
        if (value := metadata.get(key.encode())) is not None
    }
    return found or None
