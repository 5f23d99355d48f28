"""Several writer processes on one table of a real broker; a checker proves docs/PROTOCOL.md §4 holds.

Checked: every party (each writer, a fresh reader) computes the same state at every
version; every ACCEPTED commit appears exactly once; every REJECTED one is justified by
a rule, checked against an independent model; no version holds a dropped segment.
"""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path
from typing import Any

import pytest

from segcat import Table
from segcat.catalog.config import Config
from segcat.catalog.protocol.model import Operation
from segcat.catalog.protocol.replay import Applied
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.protocol.state import TableState
from tests import concurrency_worker

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

WRITERS = 4
COMMITS_EACH = 250


def _run_writers(config: Config, table: Table, tmp_path: Path) -> list[dict[str, Any]]:
    ctx = multiprocessing.get_context("spawn")
    start = ctx.Barrier(WRITERS)
    procs = []
    for index in range(WRITERS):
        out = tmp_path / f"writer-{index}.json"
        proc = ctx.Process(
            target=concurrency_worker.run,
            args=(config, table.name.qualified, index, COMMITS_EACH, out, start),
        )
        proc.start()
        procs.append((proc, out))
    for proc, _ in procs:
        proc.join(timeout=600)
        assert proc.exitcode == 0, f"writer process failed with exit code {proc.exitcode}"
    return [json.loads(out.read_text()) for _, out in procs]


def test_concurrent_writers_agree_with_a_fresh_reader(config: Config, table: Table, tmp_path: Path) -> None:
    reports = _run_writers(config, table, tmp_path)

    # a fresh reader replays the whole log, noting each version's content
    fresh: dict[int, str] = {}
    applied: list[Applied] = []
    live_at: dict[int, frozenset[str]] = {}

    def note(record: Applied, state: TableState) -> None:
        fresh[record.verdict.offset] = state.fingerprint()
        live_at[record.verdict.offset] = state.live_ids()
        applied.append(record)

    from segcat.catalog.log.reader import LogReader
    from segcat.catalog.protocol.replay import replay

    final = TableState(table.name.qualified)
    with LogReader(config, table.name) as reader:
        replay(reader.read(0), final, listener=note)
    creation, applied = applied[0], applied[1:]  # offset 0: the table's protocol record
    assert creation.commit is not None and creation.commit.operation is Operation.UPGRADE_PROTOCOL
    sent = [r for report in reports for r in report["results"] if r["version"] is not None]
    assert len(applied) == len(sent) >= WRITERS * COMMITS_EACH * 0.95

    # 1. every party computes the same state at every version it saw
    for report in reports:
        for offset, digest in report["fingerprints"].items():
            assert fresh[int(offset)] == digest, f"writer disagrees at offset {offset}"

    # 2. each writer's outcome is the log's verdict; every ACCEPTED commit appears exactly once
    by_offset = {a.verdict.offset: a for a in applied}
    accepted_ids = [a.verdict.commit_id for a in applied if a.verdict.outcome is Outcome.ACCEPTED]
    assert len(accepted_ids) == len(set(accepted_ids))
    claimed = set()
    logged_ids = {a.verdict.commit_id for a in applied}
    for report in reports:
        for result in report["results"]:
            if result["version"] is None:  # a conflict the writer saw before sending: not in the log
                assert result["outcome"] == "REJECTED" and result["commit_id"] not in logged_ids
                continue
            record = by_offset[result["version"]]
            assert record.verdict.commit_id == result["commit_id"]
            assert record.verdict.outcome.value == result["outcome"]
            if result["outcome"] == "ACCEPTED":
                claimed.add(result["commit_id"])
    assert claimed == set(accepted_ids)

    # 3. an independent model: live = accepted adds - accepted drops; rejections justified
    live: set[str] = set()
    dropped_at: dict[str, int] = {}
    rejected = 0
    for record in applied:
        commit, verdict = record.commit, record.verdict
        assert commit is not None
        if verdict.outcome is Outcome.REJECTED:
            rejected += 1
            gone = [d for d in commit.drops if d not in live]
            dup = [s.segment_id for s in commit.adds if s.segment_id in live]
            assert gone or dup, f"rejection at {verdict.offset} is not justified by rule 3 or 4"
            if gone:
                assert verdict.conflicting_version == dropped_at.get(gone[0])
        else:
            assert verdict.outcome is Outcome.ACCEPTED
            assert all(d in live for d in commit.drops)
            for drop in commit.drops:
                live.discard(drop)
                dropped_at[drop] = verdict.offset
            live.update(s.segment_id for s in commit.adds)
        # 4. no version holds a segment that was dropped before it
        assert live_at[verdict.offset] == frozenset(live)
        assert not (live_at[verdict.offset] & {s for s, v in dropped_at.items() if v <= verdict.offset})
    assert final.live_ids() == frozenset(live)
    assert rejected > 0, "the writers never raced; the test proves nothing"
    assert final.accepted + final.rejected == len(sent) + 1
