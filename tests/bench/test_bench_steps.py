"""Benchmark steps that redo what segcat does in-process run against the real stack.

They call segcat's own functions by name, so a change there must show up here, not in the
middle of an hour-long benchmark run.
"""

from __future__ import annotations

import pytest

from bench.read_processes import make_segment
from bench.serve_snapshot import SNAPSHOT_STEP, server_steps
from segcat import Table, load_catalog
from segcat.catalog.config import Config

pytestmark = [pytest.mark.kafka]


def test_the_snapshot_route_s_steps_run_on_a_real_table(config: Config, table: Table) -> None:
    with load_catalog(config).load_table(table.name.qualified) as writer:
        writer.append([make_segment("steps", i) for i in range(20)])
    steps = server_steps(config, table.name.qualified, limit=20, reps=1)
    assert SNAPSHOT_STEP in steps["median_ms"]
    assert any(label.startswith("JSON") for label in steps["median_ms"])
    assert steps["json_segments_bytes"] > 0 and steps["arrow_bytes"] > 0
