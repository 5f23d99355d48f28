"""The streaming sink across real kills: every input row exactly once in the table.

A Spark application in a subprocess (``sink_kill_job``) is killed with SIGKILL, driver JVM and
Python alike, (1) after batch 1's files are written, before its commit: the files are under
the batch's write intent, so a vacuum with no grace period keeps them; (2) after batch 2's
commit is accepted, before Spark's checkpoint records the batch. Each restart runs the batch
again from the checkpoint; the table ends with each batch committed once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import segcat.spark_integration as si
from segcat import Operation, Table
from segcat.catalog.config import Config
from segcat.spark_integration.options import source_options
from segcat.spark_integration.stream_sink import BATCH_PROPERTY
from tests.spark_integration.sink_kill_job import FAULT, PIDS
from tests.spark_integration.test_spark_sink import write_inputs
from tests.spark_support import spark

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.spark]

__all__ = ["spark"]

ROOT = Path(__file__).resolve().parents[2]
KILLED = -9


def run_job(config: Config, table: str, tmp_path: Path, fault: str | None) -> int:
    """Run the query in its own Spark application until it ends or kills itself; its exit code."""
    args = {
        "options": source_options(config),
        "table": table,
        "inputs": str(tmp_path / "in"),
        "checkpoint": str(tmp_path / "ckpt"),
    }
    env = {**os.environ, PIDS: str(tmp_path / "pids.json"), "PYTHONPATH": str(ROOT)}
    env.pop(FAULT, None)
    if fault is not None:
        env[FAULT] = fault
    done = subprocess.run(
        [sys.executable, "-m", "tests.spark_integration.sink_kill_job", json.dumps(args)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=600,
        check=False,
    )
    if done.returncode not in (0, KILLED):
        raise AssertionError(f"the job failed ({done.returncode}): {done.stderr.decode()[-3000:]}")
    return done.returncode


def test_killed_before_and_after_a_commit_every_row_lands_once(
    spark: SparkSession, config: Config, table: Table, tmp_path: Path
) -> None:
    name = table.name.qualified
    write_inputs(tmp_path / "in", [[1, 2], [3, 4], [5], [6, 7]])
    data = Path(table.location()) / "data"

    assert run_job(config, name, tmp_path, "before:1") == KILLED
    batches = [
        h.commit.properties[BATCH_PROPERTY] for h in table.history() if h.commit.operation is Operation.APPEND
    ]
    assert batches == ["0"]
    referenced = {s.path for s in table.snapshot().segment_list()}
    written = {str(p.relative_to(data.parent)) for p in data.rglob("*.parquet")}
    uncommitted = written - referenced
    assert uncommitted, "batch 1's files were written before the kill"
    report = table.vacuum(grace_ms=0)
    assert report.kept_by_intent >= len(uncommitted)
    assert all((data.parent / path).exists() for path in uncommitted)  # the intent kept them

    assert run_job(config, name, tmp_path, "after:2") == KILLED
    assert run_job(config, name, tmp_path, None) == 0
    rows = si.read(spark, name, config=config).select("id").collect()
    assert sorted(r["id"] for r in rows) == [1, 2, 3, 4, 5, 6, 7]
    batches = [
        h.commit.properties[BATCH_PROPERTY] for h in table.history() if h.commit.operation is Operation.APPEND
    ]
    assert batches == ["0", "1", "2", "3"]
