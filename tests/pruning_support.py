"""Segments described the way writers describe them, and the snapshots prune runs on.

Files are written and described through ``segcat.producers.segment_files.write_files`` (the
executor path: footer stats via ``segment_from_parquet``, float stats, NaN counts and the
Bloom filter from the rows), no Spark needed, or with plain pyarrow and described from the
footer alone (``describe_footer``: what a file another writer made gets). Each snapshot is
checked twice: from a replayed ``TableState`` and from a key frame (``FrameView``), the two
sources readers use.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from segcat.catalog.protocol import rules
from segcat.catalog.protocol.expressions import Predicate
from segcat.catalog.protocol.jsonio import segment_from_json
from segcat.catalog.protocol.model import Commit, Operation, Segment
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read.snapshot import Snapshot
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.frame_view import FrameView
from segcat.catalog.storage.parquet_stats import segment_from_parquet
from segcat.producers.segment_files import FileSpec, write_files


def describe(root: Path, table: pa.Table, bloom_column: str | None = None) -> Segment:
    """Write ``table`` as one segment file under ``root`` and describe it as a writer does."""
    spec = FileSpec(root=str(root), bloom_column=bloom_column)
    out = list(write_files(iter(table.to_batches(max_chunksize=max(table.num_rows, 1))), spec))
    (segment,) = [segment_from_json(json.loads(x)) for batch in out for x in batch.column(0).to_pylist()]
    return segment


def describe_footer(root: Path, table: pa.Table, row_group_size: int) -> Segment:
    """Write ``table`` with plain pyarrow (footer stats only) and describe it from the footer."""
    segment_id = f"footer-{uuid.uuid4().hex}"
    pq.write_table(table, root / f"{segment_id}.parquet", row_group_size=row_group_size)
    return segment_from_parquet(
        str(root / f"{segment_id}.parquet"), segment_id=segment_id, relative_path=f"{segment_id}.parquet"
    )


def snapshots(segments: list[Segment]) -> list[Snapshot]:
    """The same table from a replay and from a key frame round trip."""
    state = TableState("ns.t")
    commit = Commit(Commit.new_id(), "ns.t", Operation.APPEND, -1, "w", 0, adds=tuple(segments))
    verdict = rules.apply(state, 0, 0, commit)
    assert verdict.outcome.value == "ACCEPTED", verdict
    stored = keyframe.to_parquet(keyframe.build(state))  # the object-store copy: full, segment_list() works
    frame = FrameView.from_keyframe(keyframe.from_parquet(stored))
    return [Snapshot(state, "/r"), Snapshot(frame, "/r")]


def kept(snapshot: Snapshot, predicate: Predicate) -> set[str]:
    return {s.segment_id for s in snapshot.prune(predicate).segment_list()}
