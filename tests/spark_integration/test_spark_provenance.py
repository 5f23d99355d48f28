"""Every data file names the commit that meant to add it (table, commit id, writer id in its footer)."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

import segcat.spark_integration as si
from segcat import Table
from segcat.catalog.config import Config
from segcat.catalog.errors import CommitConflict
from segcat.catalog.protocol.jsonio import segment_from_json
from segcat.catalog.protocol.model import Commit, Operation, Segment
from segcat.producers.segment_files import PROVENANCE_KEYS, FileSpec, read_provenance, write_files
from tests.handles import reader_of
from tests.spark_support import spark

__all__ = ["spark"]

SCHEMA = "id BIGINT, day DATE, user STRING, amount DOUBLE"
D1, D2 = dt.date(2024, 1, 1), dt.date(2024, 1, 2)


def rows_for(day: dt.date, ids: range) -> list[tuple[Any, ...]]:
    return [(i, day, f"u{i % 3}", float(i) * 1.5) for i in ids]


# ---------------------------------------------------------------------------- executor side, no services


def _written(tmp_path: Path, spec: FileSpec) -> list[Segment]:
    batch = pa.RecordBatch.from_pydict(
        {
            "id": pa.array(range(20), pa.int64()),
            "day": pa.array([D1] * 12 + [D2] * 8, pa.date32()),
            "user": pa.array([f"u{i % 4}" for i in range(20)]),
            "amount": pa.array([math.nan if i == 3 else i * 0.5 for i in range(20)], pa.float64()),
        }
    )
    out = list(write_files(iter([batch]), spec))
    return [segment_from_json(json.loads(s)) for b in out for s in b.column("segment").to_pylist()]


def test_files_record_provenance_and_nothing_else_changes(tmp_path: Path) -> None:
    base = FileSpec(root=str(tmp_path / "plain"), key_columns=("day",), bloom_column="user", schema_json="{}")
    stamped = FileSpec(
        root=str(tmp_path / "stamped"),
        key_columns=("day",),
        bloom_column="user",
        schema_json="{}",
        table="ns.t",
        commit_id="c-1",
        writer_id="w-1",
    )
    plain, marked = _written(tmp_path, base), _written(tmp_path, stamped)

    def described(segments: list[Segment]) -> list[tuple[Any, ...]]:
        return sorted((s.partition, s.row_count, s.stats, s.bloom, s.schema) for s in segments)

    assert described(plain) == described(marked)  # stats (NaN counts included), Bloom filters, schema
    for segment in marked:
        path = tmp_path / "stamped" / segment.path
        assert read_provenance(str(path)) == {"table": "ns.t", "commit_id": "c-1", "writer_id": "w-1"}
        metadata = pq.read_metadata(path).metadata
        assert {metadata[k.encode()] for k in PROVENANCE_KEYS.values()} == {b"ns.t", b"c-1", b"w-1"}
    for segment in plain:
        assert read_provenance(str(tmp_path / "plain" / segment.path)) is None  # no spec fields, no keys

    # the footers differ only by the three keys: same row groups, same column statistics
    by_partition = {s.partition: s for s in plain}
    for segment in marked:
        a = pq.read_metadata(tmp_path / "plain" / by_partition[segment.partition].path)
        b = pq.read_metadata(tmp_path / "stamped" / segment.path)
        assert a.num_row_groups == b.num_row_groups and a.num_rows == b.num_rows
        for rg in range(a.num_row_groups):
            for c in range(a.num_columns):
                sa, sb = a.row_group(rg).column(c).statistics, b.row_group(rg).column(c).statistics
                assert (sa is None) == (sb is None)
                if sa is not None and sb is not None:
                    assert sa.to_dict() == sb.to_dict()
        assert set(b.metadata) - set(a.metadata) == {k.encode() for k in PROVENANCE_KEYS.values()}


def test_provenance_fields_left_out_when_unknown(tmp_path: Path) -> None:
    spec = FileSpec(root=str(tmp_path), commit_id="only-the-id")
    (segment,) = _written(tmp_path, spec)
    assert read_provenance(str(tmp_path / segment.path)) == {"commit_id": "only-the-id"}
    assert read_provenance(f"file://{tmp_path / segment.path}") == {"commit_id": "only-the-id"}


# ---------------------------------------------------------------------------- Spark + Kafka


def _assert_files_name(table: Table, segments: tuple[Segment, ...], commit: Commit) -> None:
    assert segments
    expected = {"table": table.name.qualified, "commit_id": commit.commit_id, "writer_id": commit.writer_id}
    for segment in segments:
        assert read_provenance(str(Path(table.location()) / segment.path)) == expected, segment.path


@pytest.mark.kafka
@pytest.mark.redis
def test_written_and_compacted_files_name_their_accepted_commit(
    spark: SparkSession, config: Config, table: Table
) -> None:
    name = table.name.qualified
    frame = spark.createDataFrame(rows_for(D1, range(0, 10)) + rows_for(D2, range(10, 15)), SCHEMA)
    si.write(frame, name, partition_by="day", config=config)
    appended = table.history()[-1].commit
    assert appended.operation is Operation.APPEND and appended.writer_id.startswith("spark-")
    _assert_files_name(table, appended.adds, appended)

    si.write(
        spark.createDataFrame(rows_for(D2, range(20, 25)), SCHEMA),
        name,
        "replace",
        partition_by="day",
        config=config,
    )
    replaced = table.history()[-1].commit
    assert replaced.operation is Operation.REPLACE and replaced.writer_id != appended.writer_id
    _assert_files_name(table, replaced.adds, replaced)

    si.write(
        spark.createDataFrame(rows_for(D1, range(30, 33)), SCHEMA), name, partition_by="day", config=config
    )
    si.compact(spark, name, target_file_rows=1_000, config=config)
    compacted = table.history()[-1].commit
    assert compacted.operation is Operation.COMPACT
    _assert_files_name(table, compacted.adds, compacted)
    assert si.read(spark, name, config=config).count() == 10 + 5 + 3  # Spark reads the stamped files


@pytest.mark.kafka
@pytest.mark.redis
def test_losing_compaction_files_name_the_rejected_commit(
    spark: SparkSession, config: Config, table: Table
) -> None:
    name = table.name.qualified
    for k in range(3):
        si.write(spark.createDataFrame(rows_for(D1, range(k * 5, k * 5 + 5)), SCHEMA), name, config=config)
    first = si.stage_compaction(spark, name, target_file_rows=1_000, config=config)
    second = si.stage_compaction(spark, name, target_file_rows=1_000, config=config)
    with first, second:
        assert first.planned is not None and second.planned is not None
        # staged files already name the commit that will be sent, before it is sent
        _assert_files_name(table, first.adds, first.planned)
        _assert_files_name(table, second.adds, second.planned)
        first.commit()
        with pytest.raises(CommitConflict):
            second.commit()
    accepted = table.history()[-1].commit
    assert accepted.commit_id == first.planned.commit_id
    _assert_files_name(table, accepted.adds, accepted)
    rejected = second.planned
    assert rejected.commit_id not in {entry.commit.commit_id for entry in table.history()}
    for segment in rejected.adds:
        found = read_provenance(str(Path(table.location()) / segment.path))
        assert found is not None and found["commit_id"] == rejected.commit_id
        assert found["writer_id"] == rejected.writer_id != accepted.writer_id


def test_a_killed_spark_job_s_files_survive_vacuum_while_its_intent_lives(
    config: Config, table: Table, tmp_path: Path
) -> None:
    """The job writes its files under a write intent, then dies before its commit (kill -9)."""
    import os
    import subprocess
    import sys
    import time

    from segcat.catalog.read.vacuum import vacuum

    script = f"""
import os, sys
import segcat.spark_integration as si
import segcat.producers.staging as staging
import segcat.spark_integration.writer as spark_writer
from segcat.catalog.config import Config
from segcat.spark_integration.session import local_session
staging.INTENT_TTL_S = 6.0
spark = local_session("killed-job", "local[1]", shuffle_partitions=1)
frame = spark.createDataFrame([(i, "x") for i in range(20)], "id long, v string")
staged = spark_writer.stage_write(frame, {table.name.qualified!r}, partition_by="v", config=Config.load())
print("STAGED", len(staged.adds), flush=True)
os._exit(9)
"""
    env = {
        **os.environ,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SEGCAT_BOOTSTRAP_SERVERS": config.bootstrap_servers,
        "SEGCAT_REDIS_URL": config.redis_url or "",
        "SEGCAT_WAREHOUSE": config.warehouse,
    }
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert "STAGED 1" in done.stdout, done.stdout + done.stderr[-3000:]
    killed_at = time.monotonic()
    written = sorted((Path(table.location()) / "data").rglob("*.parquet"))
    assert len(written) == 1 and table.snapshot().live_count == 0  # written, never committed
    report = vacuum(reader_of(table), grace_ms=0)
    assert written[0].exists() and report.kept_by_intent == 1 and report.open_intents == 1
    time.sleep(max(0.0, 6.5 - (time.monotonic() - killed_at)))  # the intent expires unrenewed
    report = vacuum(reader_of(table), grace_ms=0)
    assert not written[0].exists() and [f.reason for f in report.files] == ["orphan"]
