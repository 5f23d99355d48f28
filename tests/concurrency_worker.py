"""One writer process of the concurrency test: appends mixed with racing compactions.

Compactions pick from the few oldest live segments of a possibly stale image, so the
writers really do race for the same segments. Each writer records its outcome per
commit and the fingerprint of its own image at every offset it applied.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

from segcat.catalog.config import Config
from segcat.catalog.errors import CommitConflict
from segcat.catalog.protocol.model import Commit, Operation
from segcat.catalog.protocol.replay import Applied
from segcat.catalog.protocol.state import TableState
from segcat.catalog.write.writer import Writer
from tests.factories import segment

PARTITIONS = ("p0", "p1", "p2")


def plan_commit(writer: Writer, rng: random.Random, prefix: str, k: int) -> Commit:
    """An append, or (35 %) a compaction of 2-3 of the six oldest live segments of the writer's
    possibly stale image, so that writers race for the same segments."""
    state = writer.state
    oldest = sorted(state.segments, key=lambda sid: state.segments[sid].added_version)[:6]
    if len(oldest) >= 2 and rng.random() < 0.35:
        drops = rng.sample(oldest, k=min(len(oldest), rng.choice((2, 3))))
        adds = [segment(f"{prefix}-c{k}", rng.choice(PARTITIONS))]
        return writer.new_commit(Operation.COMPACT, drops=drops, adds=adds)
    return writer.new_commit(Operation.APPEND, adds=[segment(f"{prefix}-a{k}", rng.choice(PARTITIONS))])


def run(config: Config, table: str, index: int, commits: int, out: Path, start: Any = None) -> None:
    rng = random.Random(1000 + index)
    seen: dict[int, str] = {}

    def remember(applied: Applied, state: TableState) -> None:
        seen[applied.verdict.offset] = state.fingerprint()

    results: list[dict[str, Any]] = []
    with Writer(config, table, writer_id=f"writer-{index}", on_applied=remember) as writer:
        if start is not None:
            start.wait()
        for k in range(commits):
            commit = plan_commit(writer, rng, f"w{index}", k)
            try:
                version = writer.commit(commit)
                results.append({"commit_id": commit.commit_id, "outcome": "ACCEPTED", "version": version})
            except CommitConflict as conflict:
                results.append(
                    {
                        "commit_id": commit.commit_id,
                        "outcome": "REJECTED",
                        "version": conflict.version,
                        "rule": conflict.rule,
                        "conflicting_version": conflict.conflicting_version,
                    }
                )
            if rng.random() < 0.2:
                writer.refresh()
        writer.refresh()
    out.write_text(json.dumps({"results": results, "fingerprints": seen}))


if __name__ == "__main__":
    run(Config.load(), sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4]))
