"""A writer process for fault tests: appends and racing compactions for a fixed time, surviving outages.

The commits of ``concurrency_worker`` (``plan_commit``), but time-boxed and tolerant: a commit
whose fate the writer cannot learn (``ServiceUnavailable`` while brokers fail over) is recorded
as UNKNOWN and the writer goes on. Every commit records when it started and how long it took,
for the latency report.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any

from segcat.catalog.config import Config
from segcat.catalog.errors import CommitConflict, ServiceUnavailable
from segcat.catalog.protocol.replay import Applied
from segcat.catalog.protocol.state import TableState
from segcat.catalog.write.writer import Writer
from tests.concurrency_worker import plan_commit


def run(config: Config, table: str, index: int, seconds: float, out: Path, start: Any = None) -> None:
    rng = random.Random(2000 + index)
    seen: dict[int, str] = {}

    def remember(applied: Applied, state: TableState) -> None:
        seen[applied.verdict.offset] = state.fingerprint()

    results: list[dict[str, Any]] = []
    with Writer(config, table, writer_id=f"load-{index}", on_applied=remember) as writer:
        if start is not None:
            start.wait()
        deadline = time.time() + seconds
        k = 0
        while time.time() < deadline:
            k += 1
            began = time.time()
            try:
                commit = plan_commit(writer, rng, f"l{index}", k)
            except ServiceUnavailable:
                time.sleep(0.2)
                continue
            entry: dict[str, Any] = {"commit_id": commit.commit_id, "started": began}
            try:
                entry |= {"outcome": "ACCEPTED", "version": writer.commit(commit)}
            except CommitConflict as conflict:
                entry |= {"outcome": "REJECTED", "version": conflict.version}
            except ServiceUnavailable as exc:
                entry |= {"outcome": "UNKNOWN", "version": None, "error": str(exc)[:300]}
            entry["latency_s"] = time.time() - began
            results.append(entry)
        for _ in range(10):
            try:
                writer.refresh()
                break
            except ServiceUnavailable:
                time.sleep(1)
    out.write_text(json.dumps({"results": results, "fingerprints": seen}))
