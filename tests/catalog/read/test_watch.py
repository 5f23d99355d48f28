"""``watch()``: every accepted version exactly once and in order, however it is delivered."""

from __future__ import annotations

import itertools
import threading
import time
from pathlib import Path

import pytest
import redis

from segcat import Catalog, Table
from segcat.catalog.config import Config
from segcat.catalog.protocol.version_change import VersionChange
from segcat.catalog.storage.redis import RedisStore
from tests.materializer_support import (
    PrivateRedis,
    head_offset,
    materializer_config,
    namespace,
    running_materializer,
    wait_for_head,
    write_load,
)

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


@pytest.fixture
def mconfig(config: Config, private_redis: PrivateRedis, tmp_path: Path) -> Config:
    return materializer_config(config, private_redis.url, tmp_path / "warehouse", every=5)


def _collect(table: Table, from_version: int, until: int, out: list[VersionChange]) -> threading.Thread:
    def run() -> None:
        with table.watch(from_version, poll_s=0.2) as watcher:
            for change in watcher:
                out.append(change)
                if change.version >= until:
                    return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _accepted(table: Table, after: int) -> list[int]:
    return [h.version for h in table.history() if h.version > after]


def test_live_changes_arrive_by_pubsub_in_order(mconfig: Config) -> None:
    ns, pattern = namespace()
    table = Catalog(mconfig).create_table(f"{ns}.t")
    with running_materializer(mconfig, pattern):
        got: list[VersionChange] = []
        _collect(table, -1, 10**9, got)
        time.sleep(1.0)
        write_load(mconfig, table.name.qualified, 40, 1, pause_s=0.01)
        wait_for_head(
            RedisStore.from_config(mconfig), table.name.qualified, head_offset(mconfig, table.name.qualified)
        )
        deadline = time.monotonic() + 20
        expected = _accepted(table, -1)
        while len(got) < len(expected) and time.monotonic() < deadline:
            time.sleep(0.05)
    assert [c.version for c in got] == expected
    assert all(b.prev_version == a.version for a, b in itertools.pairwise(got))
    assert sum(c.source == "pubsub" for c in got) > len(got) // 2
    assert all(c.rows_delta is not None for c in got if c.source == "pubsub")


def test_a_watcher_far_behind_and_a_killed_subscription_lose_nothing(
    mconfig: Config, private_redis: PrivateRedis
) -> None:
    ns, pattern = namespace()
    table = Catalog(mconfig).create_table(f"{ns}.t")
    store = RedisStore.from_config(mconfig)
    with running_materializer(mconfig, pattern):
        write_load(mconfig, table.name.qualified, 30, 2)  # key frames every 5: the stream was trimmed
        wait_for_head(store, table.name.qualified, head_offset(mconfig, table.name.qualified))
        behind: list[VersionChange] = []
        _collect(table, 3, 10**9, behind)
        time.sleep(1.0)
        redis.Redis.from_url(private_redis.url).client_kill_filter(_type="pubsub")  # drop every subscriber
        write_load(mconfig, table.name.qualified, 30, 3, pause_s=0.01)
        last = head_offset(mconfig, table.name.qualified)
        wait_for_head(store, table.name.qualified, last)
        expected = _accepted(table, 3)
        deadline = time.monotonic() + 30
        while (not behind or behind[-1].version < expected[-1]) and time.monotonic() < deadline:
            time.sleep(0.05)
    assert [c.version for c in behind] == expected
    assert {c.source for c in behind} & {"kafka", "stream"}, "the backlog was filled"
