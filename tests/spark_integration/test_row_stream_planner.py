"""The rows stream's planner without Spark: a small batch is read by the planner itself."""

from __future__ import annotations

import pyarrow as pa
import pytest

import segcat.spark_integration as si
from segcat import Table
from segcat.catalog.config import Config
from segcat.spark_integration import row_stream
from segcat.spark_integration.read_options import SourceOptions
from segcat.spark_integration.row_batch import pin_version
from segcat.spark_integration.row_stream import Position, RowStreamReader
from tests.catalog.read.changes_support import write_segments

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


def _planner(config: Config, table: Table) -> RowStreamReader:
    options = SourceOptions.parse({"table": table.name.qualified, **si.source_options(config)})
    return RowStreamReader(options, pin_version(options))


def _keys(batches: list[pa.RecordBatch]) -> list[int]:
    return sorted(k for batch in batches for k in batch.column("k").to_pylist())


def test_a_small_batch_reaches_the_jvm_with_its_plan(
    config: Config, table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One small file: ``getCache`` hands its rows over, so no Python worker starts for the task;
    the same batch planned again, or one larger than the limit, is left to the tasks."""
    first = table.append(write_segments(table, [(1, "a", 1.0), (2, "a", 2.0)]))
    second = table.append(write_segments(table, [(3, "b", 3.0)]))
    reader = _planner(config, table)
    try:
        start = Position(first, True).to_json()
        end = Position(second, True).to_json()
        parts = reader.partitions(start, end)
        assert len(parts) == 1
        cached = reader.getCache(start, end)
        assert cached is not None and _keys(list(cached)) == [3]
        assert _keys(list(reader.read(parts[0]))) == [3]  # the tasks' code, the same rows
        assert reader.getCache(start, end) is None  # handed over once; a re-plan goes to the tasks

        monkeypatch.setattr(row_stream, "PLANNER_READ_ROWS", 0)
        assert len(reader.partitions(start, end)) == 1
        assert reader.getCache(start, end) is None
    finally:
        reader.stop()
