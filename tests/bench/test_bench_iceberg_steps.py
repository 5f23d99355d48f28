"""The Arrow-scan benchmark's three catalogs over one set of files hold the same rows (real stack).

``bench.scan_arrow`` claims a fair comparison because segcat, pyiceberg and delta-rs read the
same bytes; this builds its three tables at a tiny size and checks they return identical rows.
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path

import pytest

from bench import scan_arrow
from bench.runner import Context
from segcat.catalog.config import Config
from tests.iceberg_readers import assert_same_rows

pytestmark = [pytest.mark.kafka]


def test_the_scan_benchmark_s_readers_read_the_same_rows(config: Config, tmp_path: Path) -> None:
    args = argparse.Namespace(keep=False, rows=None)
    ctx = Context(args, config, quick=True, only=scan_arrow.SCENARIOS)
    p = scan_arrow.Params(rows=3_000, files=3, rounds=1)
    name = f"benchscan_{uuid.uuid4().hex[:8]}.rows"
    try:
        segcat_read, paths, _ = scan_arrow._segcat(ctx, name, p)
        assert len(paths) == 3
        expected = segcat_read()
        assert expected.num_rows == p.rows
        assert_same_rows(expected, scan_arrow._pyiceberg(tmp_path, paths)(), "pyiceberg")
        assert_same_rows(expected, scan_arrow._delta(tmp_path, paths)(), "delta-rs")
    finally:
        scan_arrow._forget(ctx, name)
