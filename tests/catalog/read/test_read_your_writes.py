"""A reader that names a version gets exactly that version; the default head is the log's end.

Regressions of issue 7 item 1 (answers from a Redis head that trailed Kafka) and item 2
(versions and times out of range answered with the head), on real Kafka and Redis.
"""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from segcat import Catalog, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import InvalidArgument, ServiceUnavailable, VersionNotFound
from segcat.catalog.read.table import TableReader
from segcat.catalog.storage.redis import RedisStore
from tests.factories import segment
from tests.handles import reader_of, writer_of
from tests.materializer_support import (
    PrivateRedis,
    materializer_config,
    namespace,
    running_materializer,
    wait_until_following,
)

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


@pytest.fixture
def mconfig(config: Config, private_redis: PrivateRedis, tmp_path: Path) -> Config:
    return materializer_config(config, private_redis.url, tmp_path / "warehouse", every=3)


def _wait_for_redis(config: Config, table: str, version: int) -> None:
    store = RedisStore.from_config(config)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        head = store.head(table)
        if head is not None and head.version >= version:
            return
        time.sleep(0.05)
    raise AssertionError(f"redis never reached version {version}")


def test_reads_see_commits_the_materializer_has_not_reached(mconfig: Config) -> None:
    ns, pattern = namespace()
    name = f"{ns}.orders"
    catalog = Catalog(mconfig)
    table = catalog.create_table(name)
    with load_catalog(mconfig).load_table(name) as writer:
        with running_materializer(mconfig, pattern):
            materialized = [writer.append([segment(f"m{i}")]) for i in range(4)]
            _wait_for_redis(mconfig, name, materialized[-1])
        # the materializer is gone: Redis' head stays at materialized[-1]
        late = [writer.append([segment(f"late{i}")]) for i in range(2)]
        writer.compact(["m0", "late0"], [segment("merged")])
        last = writer_of(writer).state.last_accepted_version
    stale = table.snapshot(stale_ok=True)
    assert (stale.version, stale.origin, stale.behind) == (materialized[-1], "redis", 3)

    head = table.snapshot()
    assert head.version == last and head.origin == "redis+kafka"
    assert head.segment_ids() == {"m1", "m2", "m3", "late1", "merged"}
    reference = reader_of(table).snapshot(sources=("kafka",))
    assert head.segment_list() == reference.segment_list()
    for version in (*materialized, *late, last):
        exact = table.snapshot(version)
        assert exact.version == version
        assert exact.segment_list() == reader_of(table).snapshot(version, sources=("kafka",)).segment_list()
    assert table.snapshot(late[0]).segment_ids() == {f"m{i}" for i in range(4)} | {"late0"}


def test_a_version_redis_holds_is_read_without_asking_kafka(mconfig: Config) -> None:
    """Redis reaching a named version proves it exists: no watermark request, so such reads
    work while Kafka is away, and a version Redis cannot answer still asks the log."""
    ns, pattern = namespace()
    name = f"{ns}.offline"
    table = Catalog(mconfig).create_table(name)
    with load_catalog(mconfig).load_table(name) as writer, running_materializer(mconfig, pattern) as service:
        wait_until_following(service, name)  # live commits: a backlog found at start gets one key frame
        versions = [writer.append([segment(f"o{i}")]) for i in range(4)]
        _wait_for_redis(mconfig, name, versions[-1])
    head = RedisStore.from_config(mconfig).head(name)
    assert head is not None and head.keyframe_version < versions[-1]
    unreachable = replace(mconfig, bootstrap_servers="127.0.0.1:9", request_timeout_s=2.0)
    offline = TableReader(unreachable, table.topic, redis=reader_of(table).redis, files=None)
    answered = [v for v in versions if v >= head.keyframe_version]
    for version in answered:
        exact = offline.snapshot(version)
        assert (exact.version, exact.origin) == (version, "redis")
        assert exact.segment_ids() == {f"o{i}" for i, v in enumerate(versions) if v <= version}
    with pytest.raises(ServiceUnavailable):
        offline.snapshot(versions[-1] + 1)


def test_versions_and_times_out_of_range_are_typed_errors(
    config: Config, catalog: Catalog, table_name: str
) -> None:
    table = catalog.create_table(table_name)
    with load_catalog(config).load_table(table_name) as writer:
        v1 = writer.append([segment("a")])
    for version in (v1 + 1, 10**6, 99999999999999999999):
        with pytest.raises(VersionNotFound, match=f"log ends at offset {v1}"):
            table.snapshot(version)
    with pytest.raises(VersionNotFound):
        table.diff(0, 40)
    for version in (-2, -5):
        with pytest.raises(InvalidArgument):
            table.snapshot(version)
    with pytest.raises(InvalidArgument):
        table.snapshot(as_of=-1)
    with pytest.raises(InvalidArgument):
        table.snapshot(True)  # type: ignore[arg-type]
    future = table.snapshot(as_of=int(time.time() * 1000) + 10 * 365 * 86_400_000)
    assert future.version == v1 and future.note is not None and "after the table's last record" in future.note
    assert table.snapshot(-1).live_count == 0 and table.snapshot(-1).version == -1
    assert table.snapshot(as_of=0).version == -1
