"""What the table page draws from the records it read (server/static/records.js, run under node):
a minute's commits are drawn whole or not at all, and every section counts on the same basis.

The page read the newest 2,000 records; a minute with 20,000 commits was drawn as 2,000, and its
sections counted different things without saying so (timeline 300, plots 2,000, log 200 of 2,000).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

RECORDS_JS = Path(__file__).resolve().parents[2] / "server" / "static" / "records.js"
MINUTE_MS = 60_000
T0 = 1_800_000_000_000 - 1_800_000_000_000 % MINUTE_MS  # a minute's start


def _node(script: str) -> Any:
    node = shutil.which("node") or shutil.which("nodejs")
    if node is None:
        if os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}:
            pytest.fail("node is missing: apt-get install nodejs", pytrace=False)
        pytest.skip("node is missing: apt-get install nodejs")
    program = f"const r = require({json.dumps(str(RECORDS_JS))});\n{script}"
    done = subprocess.run([node, "-"], input=program, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _records(first: int, count: int, at_ms: int, step_ms: float = 0.0) -> list[dict[str, Any]]:
    return [
        {
            "offset": first + i,
            "timestamp_ms": int(at_ms + i * step_ms),
            "outcome": "ACCEPTED",
            "operation": "APPEND",
        }
        for i in range(count)
    ]


def _minutes(records: list[dict[str, Any]], read_from: int, log_start: int) -> dict[str, Any]:
    script = f"""
const found = r.minuteCounts({json.dumps(records)}, {read_from}, {log_start},
  (rec) => rec.operation, (rec) => rec.outcome === 'ACCEPTED');
const counts = {{}};
for (const [minute, byKey] of found.counts) counts[minute] = Object.fromEntries(byKey);
console.log(JSON.stringify({{counts, from: found.from, partial: found.partial}}));
"""
    result: dict[str, Any] = _node(script)
    return result


def test_a_minute_is_drawn_whole_or_not_at_all() -> None:
    # 20,000 commits in one minute; the page read the newest 2,000 of them
    busy = _records(2, 20_000, T0 + 1000, step_ms=2.5)
    read = busy[-2000:]
    found = _minutes(read, read[0]["offset"], 0)
    assert found["counts"] == {} and found["partial"] is True  # not 2,000: unknown
    # read from the log's start, the minute is whole
    found = _minutes(busy, 0, 0)
    assert found["counts"] == {str(T0 // 1000): {"APPEND": 20_000}}
    # a partly read minute before whole ones: the whole ones are exact, the partial one left out
    spread = _records(10, 300, T0 + 30_000, step_ms=1000)  # one a second from 30 s into minute 0
    found = _minutes(spread[100:], 110, 0)  # read from 2:10 on: minute 2 is partly read
    assert found["partial"] is True and found["from"] == T0 // 1000 + 180
    whole = {str(T0 // 1000 + 60 * k): {"APPEND": 60} for k in range(3, 5)}
    assert found["counts"] == {**whole, str(T0 // 1000 + 300): {"APPEND": 30}}


def test_every_section_counts_the_records_read() -> None:
    read = [*_records(18_002, 1999, T0), {"offset": 20_001, "timestamp_ms": T0, "outcome": "REJECTED"}]
    counts = _node(
        f"console.log(JSON.stringify(r.sectionCounts({json.dumps(read)}, 18002, 20002, 0, 20001, 300, 200)))"
    )
    assert counts == {
        "records": 2000,
        "versions": 1999,
        "timeline": 300,
        "log": 200,
        "window": 2000,
        "inLog": 20002,
        "complete": False,
    }
