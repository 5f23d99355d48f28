"""The materializer's Redis sentinel: one round trip per check notices a flushed, restarted or
rolled-back Redis, on a single server and on each master of a Redis Cluster, as the ACL user."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from segcat.catalog.config import Config
from segcat.catalog.storage.redis import RedisStore
from segcat.materializer.redis_sentinel import RedisSentinel
from tests.redis_stack_support import StackRedis, stack_redis_running

pytestmark = [pytest.mark.redis]


@pytest.fixture(scope="module", params=["single", "cluster"])
def server(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackRedis]:
    cluster = request.param == "cluster"
    with stack_redis_running(tmp_path_factory.mktemp(f"sentinel-{request.param}"), cluster=cluster) as found:
        yield found


def _store(server: StackRedis, config: Config, tmp_path: Path) -> RedisStore:
    return RedisStore.from_config(server.config(config, tmp_path / "warehouse"))


def test_each_masters_loss_is_noticed_once(server: StackRedis, config: Config, tmp_path: Path) -> None:
    store = _store(server, config, tmp_path)
    sentinel = RedisSentinel(store)
    assert sentinel.check()  # the first check only sets
    assert sentinel.check()
    assert len(sentinel._written) == len(server.ports)  # one sentinel per master
    for port in server.ports:  # each master losing its keys on its own
        server.admin(port).flushall()
        assert not sentinel.check(), f"a flush of the master on {port} went unnoticed"
        assert sentinel.check()
    assert server.acl_denials() == []


def test_a_redis_rolled_back_to_an_older_value_is_noticed(
    server: StackRedis, config: Config, tmp_path: Path
) -> None:
    store = _store(server, config, tmp_path)
    sentinel = RedisSentinel(store)
    for _ in range(3):
        assert sentinel.check()
    key = next(iter(sentinel._written))
    older = f"{sentinel._token}:{sentinel._written[key] - 1}"
    store.client.set(key, older)  # as a restore from a snapshot taken a tick ago
    assert not sentinel.check()
    assert sentinel.check()


def test_a_failed_check_judges_nothing_and_the_next_one_starts_over(
    server: StackRedis, config: Config, tmp_path: Path
) -> None:
    store = _store(server, config, tmp_path)
    sentinel = RedisSentinel(store)
    assert sentinel.check()
    sentinel._written = {}  # as after a check that raised
    for port in server.ports:
        server.admin(port).flushall()
    assert sentinel.check()  # nothing to compare with: the service rechecks every table anyway
    assert sentinel.check()
