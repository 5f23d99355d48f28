"""The materializer's periodic work follows activity: once its tables are idle, a tick does no
per-table I/O (Redis commands, object-store calls, Kafka admin requests), however many tables it
owns; a flushed Redis is still noticed (one sentinel round trip per tick) and rebuilt in slices."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import redis
from redis.exceptions import ConnectionError as RedisConnectionError

from segcat.catalog.config import Config
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.model import Commit, LogRecord, Operation
from segcat.catalog.protocol.names import TableName
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.redis import keys
from segcat.catalog.storage.table_files import TableFiles
from segcat.materializer import service as service_module
from segcat.materializer.service import Materializer
from segcat.materializer.table_materializer import TableMaterializer
from tests.factories import segment
from tests.materializer_support import PrivateRedis, materializer_config


class CountingStore:
    """An object store that counts every call made through it."""

    def __init__(self, store: ObjectStore) -> None:
        self._store = store
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return counted


class CountingAdmin:
    """Stands in for the lag thread's Kafka admin client: counts its requests."""

    def __init__(self) -> None:
        self.requests: Counter[str] = Counter()
        self.asked: list[list[TableName]] = []

    def log_ends(self, names: list[TableName]) -> dict[TableName, int]:
        self.requests["log_ends"] += 1
        self.asked.append(names)
        return {name: 0 for name in names}

    def topic_ids(self, names: list[TableName]) -> dict[TableName, str | None]:
        self.requests["topic_ids"] += 1
        return {}

    def list_tables(self) -> list[str]:
        self.requests["list_tables"] += 1
        return []


class IdleConsumer:
    """A consumer with nothing to read (the tables are idle)."""

    def poll(self, timeout: float) -> None:
        return None

    def consume(self, num_messages: int, timeout: float) -> list[Any]:
        return []

    def pause(self, partitions: list[Any]) -> None: ...

    def resume(self, partitions: list[Any]) -> None: ...

    def seek(self, partition: Any) -> None: ...


def _service(config: Config, tables: int, ns: str) -> tuple[Materializer, CountingStore]:
    service = Materializer(config, instance_id=f"idle-{ns}")
    store = CountingStore(service.store)
    for i in range(tables):
        name = TableName.parse(f"{ns}.t{i:04d}")
        assert service.redis is not None
        table = TableMaterializer(
            name,
            config,
            service.redis,
            TableFiles(store, name),
            service.gate,  # type: ignore[arg-type]
        )
        service._table_added(name.topic, table)
        table.recover()
    return service, store


def _settle(service: Materializer, consumer: IdleConsumer) -> None:
    """Run the loop's work until no table has anything due (each table's first tick rebuilt its
    Redis keys)."""
    deadline = time.monotonic() + 60
    while service.schedule.next_deadline() is not None:
        assert time.monotonic() < deadline, "tables stayed due"
        service._poll(consumer)  # type: ignore[arg-type]


def _commands(client: redis.Redis[bytes]) -> int:
    stats = client.info("commandstats")
    ours = ("cmdstat_info", "cmdstat_config", "cmdstat_config|resetstat")  # the test's own
    return sum(int(v["calls"]) for k, v in stats.items() if k not in ours)


def _idle_io(config: Config, client: redis.Redis[bytes], tables: int, ns: str) -> tuple[int, int, int]:
    """(Redis commands, object-store calls, Kafka admin requests) of five ticks of ``tables`` idle
    tables."""
    service, store = _service(config, tables, ns)
    consumer = IdleConsumer()
    admin = CountingAdmin()
    service._admin = admin  # type: ignore[assignment]
    _settle(service, consumer)
    client.config_resetstat()
    store.calls.clear()
    for _ in range(5):
        service._tick(consumer)  # type: ignore[arg-type]
        service._poll(consumer)  # type: ignore[arg-type]
        service._measure_lag()
    return _commands(client), sum(store.calls.values()), sum(admin.requests.values())


def test_a_tick_over_many_idle_tables_does_no_per_table_io(
    config: Config, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    mconfig = materializer_config(config, private_redis.url, tmp_path / "warehouse")
    client = redis.Redis.from_url(private_redis.url)
    few = _idle_io(mconfig, client, 20, "idlefew")
    many = _idle_io(mconfig, client, 300, "idlemany")
    # one sentinel round trip per tick, one ListOffsets per lag measurement (and one topic-id request)
    assert few == many, f"idle I/O grows with the tables: 20 tables {few}, 300 tables {many}"
    redis_commands, store_calls, admin_requests = many
    assert redis_commands <= 2 * 5  # the sentinel's GET and SET, one round trip per tick
    assert store_calls == 0
    assert admin_requests <= 10


def test_a_flushed_redis_is_noticed_and_rebuilt_in_bounded_slices(
    config: Config, private_redis: PrivateRedis, tmp_path: Path, monkeypatch: Any
) -> None:
    mconfig = materializer_config(config, private_redis.url, tmp_path / "warehouse")
    client = redis.Redis.from_url(private_redis.url)
    service, _ = _service(mconfig, 250, "flushed")
    consumer = IdleConsumer()
    _settle(service, consumer)
    service._tick(consumer)  # the sentinel's first value
    heads = sorted(k for k in client.keys("segcat:*:head") if b"flushed" in k)
    assert len(heads) == 250
    client.flushall()
    service._tick(consumer)  # one round trip notices it; every table is due now
    assert len(service.schedule) == 250
    monkeypatch.setattr(service_module, "DUE_BUDGET_S", 60.0)  # count tables, not milliseconds
    ticked = []
    while (due := service.schedule.next_deadline()) is not None and due <= time.monotonic():
        before = len(service.schedule)
        service._run_due(consumer)  # type: ignore[arg-type]
        ticked.append(before - len(service.schedule))
    assert ticked and max(ticked) <= service_module.DUE_BUDGET_TABLES
    assert sum(ticked) == 250
    assert sorted(k for k in client.keys("segcat:*:head") if b"flushed" in k) == heads


def test_lag_requests_ask_about_a_bounded_slice_of_the_tables_round_robin(
    config: Config, private_redis: PrivateRedis, tmp_path: Path, monkeypatch: Any
) -> None:
    mconfig = materializer_config(config, private_redis.url, tmp_path / "warehouse")
    service, _ = _service(mconfig, 20, "lagslices")
    admin = CountingAdmin()
    service._admin = admin  # type: ignore[assignment]
    monkeypatch.setattr(service_module, "KAFKA_SLICE", 7)
    for _ in range(3):
        service._measure_lag()
    assert [len(names) for names in admin.asked] == [7, 7, 7]
    assert {name for names in admin.asked for name in names} == {t.name for t in service.tables.values()}


def test_a_key_frame_is_cut_t_seconds_after_a_commit_by_the_schedule(
    config: Config, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    mconfig = replace(
        materializer_config(config, private_redis.url, tmp_path / "warehouse"), keyframe_every_seconds=0.5
    )
    service, _ = _service(mconfig, 30, "bytime")
    consumer = IdleConsumer()
    _settle(service, consumer)
    topic, table = next(iter(service.tables.items()))
    commit = Commit(
        Commit.new_id(), table.name.qualified, Operation.APPEND, -1, "w", 0, adds=(segment("s0"),)
    )
    table.apply(LogRecord(0, 1_700_000_000_000, commit.commit_id.encode(), codec.encode_commit(commit)))
    table.flush()
    service._reschedule(topic, table)  # as a poll batch that touched it does
    deadline = service.schedule.deadline(topic)
    assert deadline is not None and 0 < deadline - time.monotonic() <= 0.5
    assert len(service.schedule) == 1  # the idle tables have nothing due
    assert table.files.latest() is None
    give_up = time.monotonic() + 30
    while table.files.latest() is None:
        assert time.monotonic() < give_up, "no key frame T seconds after the commit"
        service._poll(consumer)  # type: ignore[arg-type]
    assert table.files.latest() is not None and table.files.latest()[0] == 0  # type: ignore[index]
    assert service.schedule.deadline(topic) is None


def test_after_redis_failed_every_table_checks_its_keys_once(
    config: Config, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    """A write that failed (in the key-frame writer thread, say) marks nothing the loop looks at:
    the gate's failure count makes every table check its keys once Redis answers again."""
    mconfig = materializer_config(config, private_redis.url, tmp_path / "warehouse")
    client = redis.Redis.from_url(private_redis.url)
    service, _ = _service(mconfig, 40, "gatefail")
    consumer = IdleConsumer()
    _settle(service, consumer)
    service._tick(consumer)
    lost = next(iter(service.tables.values())).name
    assert client.delete(keys.head_key(lost)) == 1  # the write Redis never took
    service.gate.failed(RedisConnectionError("connection reset"), lost.qualified)
    service.gate._retry_at = 0.0  # the back-off has passed
    service._tick(consumer)  # the sentinel answers as before, but Redis failed meanwhile
    assert len(service.schedule) == 40
    _settle(service, consumer)
    assert client.exists(keys.head_key(lost))
    client.config_resetstat()
    service._tick(consumer)
    service._poll(consumer)  # type: ignore[arg-type]
    assert _commands(client) <= 2  # checked once: idle again


def test_with_no_table_assigned_the_lag_thread_asks_kafka_one_small_request(
    config: Config, private_redis: PrivateRedis, tmp_path: Path, monkeypatch: Any
) -> None:
    """An instance of a group left without tables (the others own them all) still proves the
    brokers answer for its health answer, with one cluster description, not a listing of every
    topic each second (which kept a spare instance busy at 10,000 tables)."""
    mconfig = materializer_config(config, private_redis.url, tmp_path / "warehouse")
    service = Materializer(mconfig, pattern="^segcat\\.nothing-here\\.")
    listed: list[int] = []
    admin = service._topic_admin()
    monkeypatch.setattr(admin, "list_tables", lambda: listed.append(1) or [])
    service._brokers_down = True
    service._measure_lag()
    assert not listed
    assert service._brokers_down is False
