"""The all-tables follower (``server.version_bus``) against a model of logs, a materializer and
its channel: whatever the interleaving of appends, materialized records, lost or repeated channel
events and probes (slices of the catalog taking turns), every accepted version after the
baseline is published once, in order per table, each naming the one before."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from segcat import TableName, VersionChange
from segcat.catalog.storage.redis import Head
from segcat.server import version_bus
from segcat.server.version_bus import STALL_S, Follower

TABLES = [TableName("ns", f"t{i}") for i in range(3)]


@dataclass
class _Log:
    name: str
    accepted: list[bool] = field(default_factory=list)
    materialized: int = -1
    head_version: int = -1

    def versions(self, after: int, upto: int) -> list[int]:
        return [o for o in range(after + 1, min(upto, len(self.accepted) - 1) + 1) if self.accepted[o]]

    def prev(self, offset: int) -> int:
        earlier = [o for o in range(offset) if self.accepted[o]]
        return earlier[-1] if earlier else -1


def _change(name: str, version: int, prev: int) -> VersionChange:
    return VersionChange(
        table=name,
        version=version,
        prev_version=prev,
        timestamp_ms=1,
        commit_id=f"c{version}",
        operation="APPEND",
    )


class _World:
    """Kafka (log ends, topic ids, the logs judged), Redis (heads) and the directory, in memory."""

    def __init__(self) -> None:
        self.logs = {t.qualified: _Log(t.qualified) for t in TABLES}
        self.catalog = self
        self.admin = self
        self.redis = self

    # the directory
    def names(self) -> list[TableName]:
        return list(TABLES)

    def open(self, name: str) -> Any:
        log = self.logs[name]

        class _Table:
            def changes(self, after: int, upto: int) -> list[VersionChange]:
                found, prev = [], after
                for version in log.versions(after, upto):
                    found.append(_change(name, version, prev))
                    prev = version
                return found

        return _Table()

    def add(self, name: TableName) -> None:
        pass

    # the admin client
    def log_ends(self, names: list[TableName]) -> dict[TableName, int]:
        return {n: len(self.logs[n.qualified].accepted) - 1 for n in names}

    def topic_ids(self, names: list[TableName]) -> dict[TableName, str | None]:
        return {n: f"id-{n.qualified}" for n in names}

    # Redis
    def heads(self, names: list[TableName]) -> dict[str, Head | None]:
        out: dict[str, Head | None] = {}
        for n in names:
            log = self.logs[n.qualified]
            out[n.qualified] = (
                None
                if log.materialized < 0
                else Head(
                    version=log.head_version,
                    commit_id=None,
                    timestamp_ms=1,
                    live_count=0,
                    live_bytes=0,
                    live_rows=0,
                    keyframe_version=-1,
                    offset=log.materialized,
                    log_id=f"id-{n.qualified}",
                )
            )
        return out


OPS = st.one_of(
    st.tuples(st.just("append"), st.integers(0, 2), st.booleans()),
    st.tuples(st.just("materialize"), st.integers(0, 2), st.sampled_from(["sent", "lost", "twice"])),
    st.tuples(st.just("probe"), st.floats(0.0, 3 * STALL_S)),
)


@settings(max_examples=300, deadline=None)
@given(
    before=st.lists(st.tuples(st.integers(0, 2), st.booleans()), max_size=6),
    ops=st.lists(OPS, max_size=60),
    batch=st.integers(1, 4),
)
def test_every_version_after_the_baseline_is_published_once_in_order(
    before: list[tuple[int, bool]], ops: list[tuple[Any, ...]], batch: int
) -> None:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(version_bus, "PROBE_BATCH", batch)
        world = _World()
        for t, accepted in before:
            world.logs[TABLES[t].qualified].accepted.append(accepted)
        published: list[VersionChange] = []
        follower = Follower(world, published.append)  # type: ignore[arg-type]
        follower.baseline()
        start = {name: len(log.accepted) - 1 for name, log in world.logs.items()}
        for log in world.logs.values():  # the materializer had caught up before
            log.materialized = len(log.accepted) - 1
            log.head_version = log.prev(len(log.accepted))
        now = 0.0

        def materialize(log: _Log, how: str) -> None:
            offset = log.materialized + 1
            log.materialized = offset
            if log.accepted[offset]:
                event = _change(log.name, offset, log.head_version)
                log.head_version = offset
                for _ in range({"sent": 1, "lost": 0, "twice": 2}[how]):
                    follower.heard(event)

        for op in ops:
            if op[0] == "append":
                world.logs[TABLES[op[1]].qualified].accepted.append(op[2])
            elif op[0] == "materialize":
                log = world.logs[TABLES[op[1]].qualified]
                if log.materialized < len(log.accepted) - 1:
                    materialize(log, op[2])
            else:
                now += op[1]
                follower.probe_once(now)
        for log in world.logs.values():
            while log.materialized < len(log.accepted) - 1:
                materialize(log, "lost")
        for _ in range(3 * (len(TABLES) // batch + 1)):  # every slice probed, stalls judged
            now += STALL_S
            follower.probe_once(now)

    for name, log in world.logs.items():
        mine = [c for c in published if c.table == name]
        assert [c.version for c in mine] == log.versions(start[name], len(log.accepted) - 1), name
        assert all(b.prev_version == a.version for a, b in pairwise(mine)), name
