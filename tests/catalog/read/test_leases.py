"""Version leases on a real Redis: acquire / renew / release / expiry, the held lease's renewals,
``segcat leases``, and Spark reads that hold leases but never fail because of them."""

from __future__ import annotations

import datetime as dt
import gc
import json
import logging
import math
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st
from pyspark.sql import DataFrame, SparkSession

import segcat.spark_integration as si
from segcat import Table
from segcat.catalog.config import Config
from segcat.catalog.errors import (
    EXIT_INVALID,
    EXIT_UNAVAILABLE,
    InvalidArgument,
    InvalidTableName,
    ServiceUnavailable,
)
from segcat.catalog.read.lease import DEFAULT_TTL_S, acquire_lease, try_hold
from segcat.catalog.storage.redis import RedisStore, keys
from segcat.catalog.storage.redis.leases import (
    MAX_TTL_S,
    MAX_VERSION,
    Lease,
    LeaseStore,
    check_holder,
    check_ttl,
    check_version,
)
from segcat.cli import cli, exit_code
from segcat.spark_integration.reader import lease_of
from tests.materializer_support import PrivateRedis
from tests.spark_support import spark
from tests.strategies import SETTINGS

pytestmark = pytest.mark.redis

__all__ = ["spark"]


@pytest.fixture
def store(config: Config) -> Iterator[LeaseStore]:
    s = LeaseStore.from_config(config)
    yield s
    s.close()


@pytest.fixture
def name(store: LeaseStore, table_name: str) -> Iterator[str]:
    """A fresh table name whose lease keys are deleted afterwards (the server is shared)."""
    yield table_name
    store.client.delete(keys.leases_key(table_name), keys.lease_info_key(table_name))


def ids(leases: list[Lease]) -> set[str]:
    return {lease.lease_id for lease in leases}


def wait_until(check: Any, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.05)


# ---------------------------------------------------------------------------- LeaseStore


def test_acquire_list_renew_release(store: LeaseStore, name: str) -> None:
    first = store.acquire(name, 7, 60, holder="job-a")
    second = store.acquire(name, 3, 30)
    assert first.table == name and first.version == 7 and first.holder == "job-a"
    assert first.ttl_ms == 60_000 and first.expires_ms - first.acquired_ms == 60_000
    assert second.holder.startswith("segcat@")  # the default: kind@host:pid
    live = store.live(name)
    assert [lease.version for lease in live] == [3, 7]  # by version
    assert ids(live) == {first.lease_id, second.lease_id}
    assert all(0 < lease.expires_in_ms <= lease.ttl_ms for lease in live)
    stored = json.loads(store.client.hget(keys.lease_info_key(name), first.lease_id) or b"")
    assert stored == {"version": 7, "holder": "job-a", "acquired_ms": first.acquired_ms, "ttl_ms": 60_000}

    time.sleep(0.05)
    assert store.renew(first)
    (renewed,) = [lease for lease in store.live(name) if lease.lease_id == first.lease_id]
    assert renewed.expires_ms > first.expires_ms

    store.release(first)
    assert ids(store.live(name)) == {second.lease_id}
    assert not store.renew(first)  # released: renewing does not bring it back
    store.release(first)  # releasing twice is harmless
    store.release(second)
    assert store.live(name) == []
    assert store.client.exists(keys.leases_key(name), keys.lease_info_key(name)) == 0


def test_expiry_really_happens(store: LeaseStore, name: str) -> None:
    short = store.acquire(name, 1, 1)
    long = store.acquire(name, 2, 30)
    assert store.oldest_leased_version(name) == 1
    time.sleep(1.2)
    assert ids(store.live(name)) == {long.lease_id}
    assert store.oldest_leased_version(name) == 2
    assert not store.renew(short)  # expired: never renewed back to life
    assert store.client.hget(keys.lease_info_key(name), short.lease_id) is None  # pruned with it
    store.release(long)


def test_an_expired_lease_never_counts_even_before_it_is_pruned(store: LeaseStore, name: str) -> None:
    short = store.acquire(name, 1, 1)
    store.acquire(name, 5, 30)  # keeps the keys alive past the short lease
    assert store.client.zscore(keys.leases_key(name), short.lease_id) == short.expires_ms
    time.sleep(1.1)
    # nothing has pruned it yet (no call since it expired) ...
    assert store.client.zscore(keys.leases_key(name), short.lease_id) == short.expires_ms
    # ... but no answer counts it, and the first answer drops it
    assert store.oldest_leased_version(name) == 5
    assert store.leased_versions(name) == {5}
    assert store.client.zscore(keys.leases_key(name), short.lease_id) is None


def test_the_keys_expire_with_their_last_lease(store: LeaseStore, name: str) -> None:
    store.acquire(name, 0, 1)
    pttl = store.client.pttl(keys.leases_key(name))
    assert 0 < pttl <= 1_000 and 0 < store.client.pttl(keys.lease_info_key(name)) <= 1_000
    store.acquire(name, 0, 20)  # a longer lease stretches the keys' TTL, a shorter one never shrinks it
    assert store.client.pttl(keys.leases_key(name)) > 10_000
    store.acquire(name, 0, 1)
    assert store.client.pttl(keys.lease_info_key(name)) > 10_000


def test_oldest_and_leased_versions(store: LeaseStore, name: str) -> None:
    assert store.oldest_leased_version(name) is None and store.leased_versions(name) == set()
    a = store.acquire(name, 10, 60)
    b = store.acquire(name, 4, 60)
    c = store.acquire(name, 4, 60)  # two readers on one version
    store.acquire(name, MAX_VERSION, 60)  # exact beyond 2**53: versions never become Lua numbers
    assert store.oldest_leased_version(name) == 4
    assert store.leased_versions(name) == {4, 10, MAX_VERSION}
    store.release(b)
    assert store.oldest_leased_version(name) == 4
    store.release(c)
    assert store.oldest_leased_version(name) == 10
    store.release(a)
    assert store.oldest_leased_version(name) == MAX_VERSION


def test_leases_are_per_table(store: LeaseStore, name: str) -> None:
    other = f"{name}x"
    try:
        store.acquire(name, 1, 60)
        store.acquire(other, 2, 60)
        assert store.leased_versions(name) == {1} and store.leased_versions(other) == {2}
        assert keys.leases_key(name) == f"segcat:{{{name}}}:leases"  # the hash tag: one cluster slot
    finally:
        store.client.delete(keys.leases_key(other), keys.lease_info_key(other))


def test_a_malformed_lease_makes_the_answer_unavailable_not_smaller(store: LeaseStore, name: str) -> None:
    lease = store.acquire(name, 3, 60)
    store.client.hset(keys.lease_info_key(name), lease.lease_id, "garbage")
    with pytest.raises(ServiceUnavailable, match="malformed lease"):
        store.oldest_leased_version(name)


# ---------------------------------------------------------------------------- arguments

BAD_ARGUMENTS: list[tuple[dict[str, Any], str]] = [
    ({"version": -1}, "version"),
    ({"version": True}, "version"),
    ({"version": 1.0}, "version"),
    ({"version": "3"}, "version"),
    ({"version": None}, "version"),
    ({"version": MAX_VERSION + 1}, "version"),
    ({"ttl_s": 0}, "ttl_s"),
    ({"ttl_s": 0.999}, "ttl_s"),
    ({"ttl_s": MAX_TTL_S + 0.001}, "ttl_s"),
    ({"ttl_s": math.nan}, "ttl_s"),
    ({"ttl_s": math.inf}, "ttl_s"),
    ({"ttl_s": True}, "ttl_s"),
    ({"ttl_s": "60"}, "ttl_s"),
    ({"ttl_s": None}, "ttl_s"),
    ({"holder": ""}, "holder"),
    ({"holder": "x" * 201}, "holder"),
    ({"holder": 5}, "holder"),
]


@pytest.mark.parametrize(("bad", "named"), BAD_ARGUMENTS)
def test_bad_arguments_are_invalid_before_any_io(
    store: LeaseStore, name: str, bad: dict[str, Any], named: str
) -> None:
    arguments: dict[str, Any] = {"version": 1, "ttl_s": 60, "holder": "h", **bad}
    with pytest.raises(InvalidArgument, match=named) as raised:
        store.acquire(name, **arguments)
    assert exit_code(raised.value) == EXIT_INVALID
    with pytest.raises(InvalidArgument, match=named):
        acquire_lease(store, name, **arguments)  # checked when made, not when entered
    assert store.live(name) == []


def _accepted_version(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_VERSION


@SETTINGS
@given(
    st.one_of(
        st.integers(),
        st.integers(-5, 5),
        st.booleans(),
        st.floats(allow_nan=True, allow_infinity=True),
        st.text(max_size=5),
        st.none(),
    )
)
def test_version_validator_property(value: object) -> None:
    if _accepted_version(value):
        assert check_version(value) == value
    else:
        with pytest.raises(InvalidArgument, match="version"):
            check_version(value)


@SETTINGS
@given(
    st.one_of(
        st.floats(allow_nan=True, allow_infinity=True),
        st.floats(0.5, MAX_TTL_S + 2),
        st.integers(-10, 10**7),
        st.booleans(),
        st.text(max_size=3),
        st.none(),
    )
)
def test_ttl_validator_property(value: object) -> None:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(value, int | float) and number and math.isfinite(value) and 1 <= value <= MAX_TTL_S:
        ms = check_ttl(value)
        assert 1_000 <= ms <= MAX_TTL_S * 1000
        assert abs(ms - value * 1000) < 1
    else:
        with pytest.raises(InvalidArgument, match="ttl_s"):
            check_ttl(value)


@SETTINGS
@given(st.one_of(st.text(max_size=250), st.integers(), st.none(), st.binary(max_size=5)))
def test_holder_validator_property(value: object) -> None:
    if isinstance(value, str) and 1 <= len(value) <= 200:
        assert check_holder(value) == value
    else:
        with pytest.raises(InvalidArgument, match="holder"):
            check_holder(value)


# ---------------------------------------------------------------------------- HeldLease


def test_held_lease_renews_beyond_its_ttl(store: LeaseStore, name: str) -> None:
    with acquire_lease(store, name, 5, ttl_s=1, holder="long-reader") as held:
        assert held.held and held.version == 5 and held.lease_id is not None
        time.sleep(3.2)  # three TTLs
        live = store.live(name)
        assert ids(live) == {held.lease_id} and not held.lost
        assert live[0].holder == "long-reader" and live[0].version == 5
    assert not held.held and held.lease_id is not None  # the id stays, for messages
    assert store.live(name) == []


def test_held_lease_takes_a_redis_store_or_a_client(config: Config, store: LeaseStore, name: str) -> None:
    redis_store = RedisStore.from_config(config)
    try:
        with acquire_lease(redis_store, name, 1) as a, acquire_lease(redis_store.client, name, 2) as b:
            assert a.lease is not None and a.lease.ttl_ms == DEFAULT_TTL_S * 1000
            assert store.leased_versions(name) == {1, 2} and b.held
        assert store.live(name) == []
    finally:
        redis_store.close()


def test_held_lease_sees_its_lease_lost(store: LeaseStore, name: str) -> None:
    held = acquire_lease(store, name, 9, ttl_s=1)
    with held:
        assert held.lease is not None
        store.release(held.lease)  # someone removed it (an operator, a flushed Redis)
        wait_until(lambda: held.lost, timeout_s=3)
        assert not held.held
    assert "lost" in repr(held)


def test_held_lease_is_not_reentrant(store: LeaseStore, name: str) -> None:
    held = acquire_lease(store, name, 1)
    with held, pytest.raises(RuntimeError, match="already held"):
        held.acquire()
    first = held.lease_id
    with held:  # but it can be taken again once released, under a new id
        assert held.held and held.lease_id != first


def test_no_redis_means_no_lease(name: str) -> None:
    with pytest.raises(ServiceUnavailable, match="no Redis"), acquire_lease(None, name, 1):
        pass
    assert try_hold(None, name, 1) is None


def test_redis_down(config: Config, private_redis: PrivateRedis, name: str, caplog: Any) -> None:
    down = LeaseStore.from_config(config.with_services(config.bootstrap_servers, private_redis.url))
    lease = down.acquire(name, 3, 60)
    held = acquire_lease(down, name, 4, ttl_s=1).acquire()
    private_redis.stop()
    for call in (
        lambda: down.acquire(name, 3, 60),
        lambda: down.renew(lease),
        lambda: down.release(lease),
        lambda: down.live(name),
        lambda: down.oldest_leased_version(name),
    ):
        with pytest.raises(ServiceUnavailable, match="unavailable") as raised:
            call()
        assert exit_code(raised.value) == EXIT_UNAVAILABLE
    with pytest.raises(ServiceUnavailable), acquire_lease(down, name, 3):
        pass
    with caplog.at_level(logging.WARNING, logger="segcat.lease"):
        assert try_hold(down, name, 3) is None
        assert try_hold(down, name, 3) is None
    unprotected = [r for r in caplog.records if "without a version lease" in r.getMessage()]
    assert len(unprotected) == 1  # one warning, not one per read
    # the held lease cannot be renewed: after a whole TTL without renewal it counts as lost
    wait_until(lambda: held.lost, timeout_s=5)
    held.release()  # and letting it go does not raise either
    down.close()


# ---------------------------------------------------------------------------- segcat leases


def _invoke(config: Config, *args: str) -> Any:
    env: dict[str, str | None] = {
        "SEGCAT_BOOTSTRAP_SERVERS": config.bootstrap_servers,
        "SEGCAT_REDIS_URL": config.redis_url,
        "SEGCAT_WAREHOUSE": config.warehouse,
        "SEGCAT_CONFIG": None,
    }
    return CliRunner().invoke(cli, list(args), env=env)


def test_cli_lists_leases(config: Config, store: LeaseStore, name: str) -> None:
    empty = _invoke(config, "leases", name)
    assert empty.exit_code == 0, empty.output
    assert "no live leases" in empty.output

    a = store.acquire(name, 12, 600, holder="nightly-job")
    b = store.acquire(name, 8, 90, holder="adhoc")
    as_json = _invoke(config, "leases", name, "--json")
    assert as_json.exit_code == 0, as_json.output
    doc = json.loads(as_json.output)
    assert doc["table"] == name and doc["oldest_leased_version"] == 8
    assert [(x["lease_id"], x["version"], x["holder"]) for x in doc["leases"]] == [
        (b.lease_id, 8, "adhoc"),
        (a.lease_id, 12, "nightly-job"),
    ]
    assert 0 < doc["leases"][0]["expires_in_ms"] <= 90_000

    text = _invoke(config, "leases", name)
    assert text.exit_code == 0, text.output
    assert f"leases on {name}" in text.output and "nightly-job" in text.output and "adhoc" in text.output
    assert "oldest leased version: 8" in text.output
    assert "1m" in text.output and "9m" in text.output  # expires in 1m 29s / 9m 59s


def test_cli_failures(config: Config, private_redis: PrivateRedis) -> None:
    bad = _invoke(config, "leases", "no-dot")
    assert isinstance(bad.exception, InvalidTableName)
    assert exit_code(bad.exception) == EXIT_INVALID
    private_redis.stop()
    down = _invoke(config.with_services(config.bootstrap_servers, private_redis.url), "leases", "ns.t")
    assert isinstance(down.exception, ServiceUnavailable)
    assert exit_code(down.exception) == EXIT_UNAVAILABLE


# ---------------------------------------------------------------------------- Spark

SCHEMA = "id BIGINT, day DATE"


def _write(spark: SparkSession, config: Config, table: Table, ids_: range) -> int:
    rows = [(i, dt.date(2024, 1, 1 + i % 3)) for i in ids_]
    return si.write(spark.createDataFrame(rows, SCHEMA), table.name.qualified, config=config)


def _down_config(config: Config, private_redis: PrivateRedis) -> Config:
    private_redis.stop()
    return config.with_services(config.bootstrap_servers, private_redis.url)


@pytest.mark.kafka
@pytest.mark.spark
def test_spark_read_holds_a_lease_for_the_dataframes_life(
    spark: SparkSession, config: Config, table: Table, store: LeaseStore
) -> None:
    first = _write(spark, config, table, range(0, 10))
    _write(spark, config, table, range(10, 25))
    name = table.name.qualified
    try:
        old = si.read(spark, name, version=first, config=config)
        head = si.read(spark, name, config=config)
        held_old, held_head = lease_of(old), lease_of(head)
        assert held_old is not None and held_head is not None
        assert held_old.version == first and held_head.version > first
        assert store.leased_versions(name) == {first, held_head.version}
        assert old.count() == 10 and head.count() == 25
        assert held_old.holder is not None and held_old.holder.startswith("spark-read@")
        del head
        gc.collect()
        assert ids(store.live(name)) == {held_old.lease_id}  # collected: released
        assert lease_of(old.where("id > 3")) is None  # a derived DataFrame does not carry it
    finally:
        store.client.delete(keys.leases_key(name), keys.lease_info_key(name))


@pytest.mark.kafka
@pytest.mark.spark
def test_spark_read_works_without_redis(
    spark: SparkSession, config: Config, table: Table, private_redis: PrivateRedis, caplog: Any
) -> None:
    version = _write(spark, config, table, range(0, 7))
    down = _down_config(config, private_redis)
    with caplog.at_level(logging.WARNING, logger="segcat.lease"):
        frame = si.read(spark, table.name.qualified, version=version, config=down)
        assert frame.count() == 7 and lease_of(frame) is None
        assert si.read(spark, table.name.qualified, config=down).count() == 7
    assert any("without a version lease" in r.getMessage() for r in caplog.records)


class LeasesPerBatch:
    """A ``foreachBatch`` sink recording, per batch, its last version and the leases held meanwhile."""

    def __init__(self, store: LeaseStore, name: str) -> None:
        self.store, self.name = store, name
        self.seen: list[tuple[int, set[int]]] = []
        self._lock = threading.Lock()

    def __call__(self, df: DataFrame, batch_id: int) -> None:
        versions = [r["version"] for r in df.select("version").collect()]
        if versions:
            with self._lock:
                self.seen.append((max(versions), self.store.leased_versions(self.name)))


def _stream(spark: SparkSession, config: Config, table: Table) -> DataFrame:
    return (
        spark.readStream.format("segcat")
        .option("view", "versions")
        .option("table", table.name.qualified)
        .options(**si.source_options(config))
        .option("maxVersionsPerTrigger", "1")
        .load()
    )


@pytest.mark.kafka
@pytest.mark.spark
def test_stream_holds_a_lease_on_the_batch_it_processes(
    spark: SparkSession, config: Config, table: Table, store: LeaseStore, tmp_path: Any
) -> None:
    versions = [_write(spark, config, table, range(k, k + 2)) for k in range(2)]
    name = table.name.qualified
    sink = LeasesPerBatch(store, name)
    query = (
        _stream(spark, config, table)
        .writeStream.foreachBatch(sink)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        finished = query.awaitTermination(180)
    finally:
        query.stop()
    assert finished, f"the availableNow query did not finish: {sink.seen}"
    try:
        lasts = [last for last, _ in sink.seen]  # one version per batch
        assert lasts == sorted(set(lasts)) and {0, *versions} <= set(lasts), sink.seen
        for last, leased in sink.seen:
            assert leased == {last}, sink.seen  # the batch's version; the previous batch's let go
        # the stream stopped: its planner let the lease go (Spark ends it with SIGTERM)
        wait_until(lambda: store.leased_versions(name) == set(), timeout_s=60)
    finally:
        store.client.delete(keys.leases_key(name), keys.lease_info_key(name))


@pytest.mark.kafka
@pytest.mark.spark
def test_stream_runs_without_redis(
    spark: SparkSession, config: Config, table: Table, private_redis: PrivateRedis, tmp_path: Any
) -> None:
    version = _write(spark, config, table, range(0, 3))
    down = _down_config(config, private_redis)
    rows = (
        _stream(spark, down, table)
        .writeStream.format("memory")
        .queryName(f"leases_down_{table.name.table[-8:]}")
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        rows.awaitTermination(180)
    finally:
        rows.stop()
    seen = spark.sql(f"SELECT version FROM leases_down_{table.name.table[-8:]}").collect()
    emitted = sorted(r["version"] for r in seen)
    assert emitted[0] == 0 and emitted[-1] == version  # every version, as with Redis
