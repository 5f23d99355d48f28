"""segcat on Redis with an ACL user, and on a three-master Redis Cluster, both started the way
``segcat stack up --secure [--redis-cluster]`` starts them (``local_stack.redis``).

Every catalog user of Redis (the materializer's scripts and pipelines, readers' MULTI loads,
``watch()``'s Pub/Sub, leases, purge's SCAN) runs as the stack's ``segcat`` user, and ``ACL LOG``
must stay empty: the rule lets in what segcat needs. What it must keep out (other keys and
channels, admin commands) is refused. A wrong password costs one warning and nothing else.
"""

from __future__ import annotations

import itertools
import logging
import stat
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

from segcat import Catalog, Table
from segcat.catalog.config import Config
from segcat.catalog.errors import ConfigError, ServiceUnavailable
from segcat.catalog.protocol.version_change import VersionChange
from segcat.catalog.storage.redis import Head, RedisStore, keys
from segcat.catalog.storage.redis import store as redis_store
from segcat.catalog.storage.redis.leases import LeaseStore
from segcat.local_stack import process
from segcat.local_stack import redis as stack_redis
from segcat.local_stack.report import LogReporter
from segcat.spark_integration.options import config_from_options, source_options
from tests.handles import reader_of
from tests.materializer_support import (
    assert_outputs_match_clean_replay,
    head_offset,
    namespace,
    running_materializer,
    wait_for_head,
    write_load,
)
from tests.redis_stack_support import StackRedis, stack_redis_running, tls_cluster

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackRedis]:
    """A secure single Redis (default user off, ``segcat`` ACL user)."""
    with stack_redis_running(tmp_path_factory.mktemp("redis-single"), cluster=False) as server:
        yield server


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackRedis]:
    """A secure three-master Redis Cluster."""
    with stack_redis_running(tmp_path_factory.mktemp("redis-cluster"), cluster=True) as server:
        yield server


@pytest.fixture(params=["single", "cluster"])
def server(request: pytest.FixtureRequest) -> StackRedis:
    found: StackRedis = request.getfixturevalue(request.param)
    return found


def _watch(table: Table, out: list[VersionChange], stop: threading.Event) -> threading.Thread:
    def run() -> None:
        with table.watch(-1, poll_s=0.2) as watcher:
            for change in watcher:
                out.append(change)
                if stop.is_set():
                    return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _tables_on_two_nodes(server: StackRedis, ns: str) -> list[str]:
    """Two table names whose keys hash to slots of different masters."""
    admin = server.admin_cluster()
    by_port: dict[int, str] = {}
    for i in itertools.count():
        name = f"{ns}.t{i}"
        node = admin.get_node_from_key(keys.head_key(name))
        assert node is not None
        by_port.setdefault(node.port, name)
        if len(by_port) == 2:
            admin.close()
            return sorted(by_port.values())
    raise AssertionError("unreachable")


# ---------------------------------------------------------------------------- the stack's API


def test_stack_specs_and_client_settings(tmp_path: Path) -> None:
    one = StackRedis(tmp_path / "one", cluster=False)
    three = StackRedis(tmp_path / "three", cluster=True)
    assert [s.name for s in stack_redis.specs(one.layout, one.settings)] == ["redis"]
    specs = stack_redis.specs(three.layout, three.settings)
    assert [s.name for s in specs] == ["redis-1", "redis-2", "redis-3"]
    assert [s.ports[0][0] for s in specs] == three.ports
    assert [s.ports[1][0] for s in specs] == [p + 10_000 for p in three.ports]  # the cluster bus
    env = three.client_env()
    assert env["SEGCAT_REDIS_URL"] == f"redis://127.0.0.1:{three.ports[0]}/0"
    assert env["SEGCAT_REDIS_CLUSTER"] == "true" and env["SEGCAT_REDIS_USERNAME"] == "segcat"
    shown = [s.shell() for s in stack_redis.client_settings(three.layout, three.settings)]
    assert env["SEGCAT_REDIS_PASSWORD"] not in "\n".join(shown)  # printed as $(cat file)
    assert env["SEGCAT_REDIS_PASSWORD"] == three.client_env()["SEGCAT_REDIS_PASSWORD"]  # made once
    open_stack = StackRedis(tmp_path / "open", cluster=False, secure=False)
    assert open_stack.client_env() == {"SEGCAT_REDIS_URL": f"redis://127.0.0.1:{open_stack.ports[0]}/0"}


def test_secrets_stay_in_0600_files_never_on_a_command_line(server: StackRedis) -> None:
    secrets_dir = server.layout.secrets
    assert stat.S_IMODE(secrets_dir.stat().st_mode) == 0o700
    for name in ("redis-segcat.password", "redis-segcat-admin.password", "redis-users.acl"):
        assert stat.S_IMODE((secrets_dir / name).stat().st_mode) == 0o600, name
    passwords = [server.password(), server.password(stack_redis.ADMIN_USER)]
    written = [(secrets_dir / "redis-users.acl").read_text()]
    written += [p.read_text() for p in server.layout.conf.glob("redis*.conf")]
    written += [p.read_text(errors="replace") for p in server.layout.logs.glob("redis*.log")]
    for record in server.records.values():
        written.append(Path(f"/proc/{record.pid}/cmdline").read_bytes().decode(errors="replace"))
    assert not any(pw in text for pw in passwords for text in written)


def test_finish_is_idempotent_and_the_cluster_is_ok(cluster: StackRedis) -> None:
    stack_redis.finish(cluster.layout, cluster.settings, LogReporter())
    for port in cluster.ports:
        info = cluster.admin(port).execute_command("CLUSTER INFO")
        assert info["cluster_state"] == "ok" and int(info["cluster_known_nodes"]) == 3
        assert int(info["cluster_slots_assigned"]) == 16384


# ---------------------------------------------------------------------------- the ACL user at work


def test_materializer_readers_and_watch_as_the_acl_user(
    server: StackRedis, config: Config, tmp_path: Path
) -> None:
    cfg = server.config(config, tmp_path / "warehouse")
    assert cfg.redis_username == "segcat" and cfg.redis_cluster == server.settings.redis_cluster
    server.reset_acl_log()
    ns, pattern = namespace()
    names = _tables_on_two_nodes(server, ns) if cfg.redis_cluster else [f"{ns}.a", f"{ns}.b"]
    catalog = Catalog(cfg)
    tables = [catalog.create_table(name) for name in names]
    store = RedisStore.from_config(cfg)
    got: list[VersionChange] = []
    stop = threading.Event()
    with running_materializer(cfg, pattern) as service:
        for table in tables:  # the materializer has its tables: what follows is published live
            write_load(cfg, table.name.qualified, 1, 99)
            wait_for_head(store, table.name.qualified, head_offset(cfg, table.name.qualified))
        watcher = _watch(tables[0], got, stop)
        time.sleep(1.0)
        for seed, table in enumerate(tables):
            write_load(cfg, table.name.qualified, 20, seed, pause_s=0.01)
        if cfg.redis_cluster:  # a node that forgets its scripts (a restart does) costs nothing
            for port in server.ports:
                server.admin(port).script_flush()
        for seed, table in enumerate(tables):
            write_load(cfg, table.name.qualified, 20, 10 + seed, pause_s=0.01)
        for table in tables:
            wait_for_head(store, table.name.qualified, head_offset(cfg, table.name.qualified))
        expected = [h.version for h in tables[0].history()]
        deadline = time.monotonic() + 20
        while len(got) < len(expected) and time.monotonic() < deadline:
            time.sleep(0.05)
        stop.set()
        healthy, doc = service.health()
        assert healthy and doc["redis"]["ok"], doc
    watcher.join(5)
    assert [c.version for c in got] == expected
    assert sum(c.source == "pubsub" for c in got) > len(got) // 2, {c.source for c in got}
    for table in tables:
        head = table.snapshot()
        assert head.origin == "redis", head.origin
        middle = table.snapshot(head.version // 2)
        assert middle.version <= head.version // 2
        assert_outputs_match_clean_replay(cfg, table.name.qualified)  # every version, every source
    with tables[1].lease(head.version, ttl_s=30) as held:
        assert held.held and LeaseStore.from_store(store).leased_versions(names[1]) == {head.version}
    assert sorted(set(names) & set(store.tables())) == names
    assert store.forget_table(names[0]) >= 3  # purge's SCAN + DEL
    if cfg.redis_cluster:  # really spread: each table's keys live on its own master
        owners = []
        for name in names:
            node = server.admin_cluster().get_node_from_key(keys.head_key(name))
            assert node is not None
            owners.append(node.port)
        assert owners[0] != owners[1]
        assert server.admin(owners[1]).exists(keys.head_key(names[1]), keys.keyframe_key(names[1])) == 2
    assert server.acl_denials() == []  # nothing segcat does was refused


def test_the_acl_user_is_refused_other_keys_channels_and_admin_commands(server: StackRedis) -> None:
    port = server.ports[0]
    user = redis.Redis(port=port, username=stack_redis.USER, password=server.password())
    key = keys.head_key("ns.acl") if not server.settings.redis_cluster else None
    if key is not None:
        user.hset(key, "version", 1)  # its own keys: fine
        user.delete(key)
    for command in (
        ("SET", "elsewhere", "1"),
        ("GET", "app:session"),
        ("PUBLISH", "other-channel", "x"),
        ("FLUSHALL",),
        ("FLUSHDB",),
        ("KEYS", "*"),
        ("CONFIG", "GET", "maxmemory"),
        ("INFO",),
        ("ACL", "LIST"),
        ("SCRIPT", "FLUSH"),
        ("EVAL", "return 1", "0"),
        ("SHUTDOWN",),
    ):
        with pytest.raises(redis.exceptions.NoPermissionError):
            user.execute_command(*command)
    with pytest.raises(redis.exceptions.RedisError):
        pubsub = user.pubsub()
        pubsub.subscribe("other-channel")
        pubsub.get_message(timeout=1.0)
    anonymous = redis.Redis(port=port, retry=Retry(NoBackoff(), 0))
    with pytest.raises(redis.exceptions.AuthenticationError):  # the default user is off
        anonymous.ping()
    assert server.admin().dbsize() >= 0  # the stack's admin may
    server.reset_acl_log()


# ---------------------------------------------------------------------------- refused credentials


def test_a_wrong_password_costs_one_warning_and_readers_still_answer(
    server: StackRedis, config: Config, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = "wrong-pw-6d1c0e"
    good = server.config(config, tmp_path / "warehouse")
    bad = server.config(config, tmp_path / "warehouse", SEGCAT_REDIS_PASSWORD=wrong)
    ns, pattern = namespace()
    table = Catalog(good).create_table(f"{ns}.t")
    with running_materializer(good, pattern):
        write_load(good, table.name.qualified, 12, 1)
        wait_for_head(
            RedisStore.from_config(good), table.name.qualified, head_offset(good, table.name.qualified)
        )
    redis_store._credentials_warned.discard(RedisStore.from_config(bad).where)
    caplog.clear()
    caplog.set_level(logging.DEBUG)
    reader = Catalog(bad).load_table(table.name.qualified)
    head = reader.snapshot()
    assert head.version == table.snapshot().version and head.origin.startswith(("object-store", "kafka"))
    assert reader.snapshot(3).version <= 3
    changes: list[VersionChange] = []
    with reader.watch(-1, poll_s=0.2) as watcher:
        for change in watcher:
            changes.append(change)
            if change.version >= head.version:
                break
    assert [c.version for c in changes] == [h.version for h in table.history()]
    with pytest.raises(ServiceUnavailable) as refused:
        RedisStore.from_config(bad).head(table.name.qualified)
    assert wrong not in str(refused.value)
    warnings = [
        r
        for r in caplog.records
        if r.levelno >= logging.WARNING and r.name.startswith("segcat") and "librdkafka" not in r.name
    ]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    assert "SEGCAT_REDIS_PASSWORD" in warnings[0].getMessage()
    for record in caplog.records:
        text = f"{record.getMessage()} {record.__dict__}"
        assert wrong not in text and server.password() not in text, record.name


def test_an_acl_without_segcat_commands_costs_one_warning_and_readers_still_answer(
    single: StackRedis, config: Config, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """NOPERM (a user that may log in but lacks segcat's commands) used to reach the reader as a
    raw ResponseError; now it is a fallback like a refused login, with one warning."""
    good = single.config(config, tmp_path / "warehouse")
    ns, pattern = namespace()
    table = Catalog(good).create_table(f"{ns}.t")
    with running_materializer(good, pattern):
        write_load(good, table.name.qualified, 9, 2)
        wait_for_head(
            RedisStore.from_config(good), table.name.qualified, head_offset(good, table.name.qualified)
        )
    password = "limited-" + uuid.uuid4().hex
    single.admin().execute_command(
        "ACL", "SETUSER", "limited", "reset", "on", f">{password}", "~segcat:*", "&segcat:*", "+ping"
    )
    limited = single.config(
        config, tmp_path / "warehouse", SEGCAT_REDIS_USERNAME="limited", SEGCAT_REDIS_PASSWORD=password
    )
    redis_store._permissions_warned.discard(RedisStore.from_config(limited).where)
    caplog.clear()
    caplog.set_level(logging.WARNING)
    reader = Catalog(limited).load_table(table.name.qualified)
    head = reader.snapshot()
    assert head.version == table.snapshot().version and head.origin.startswith(("object-store", "kafka"))
    assert reader.snapshot(4).segment_list() == table.snapshot(4).segment_list()
    with pytest.raises(ServiceUnavailable, match=r"refused .* to segcat's user"):
        RedisStore.from_config(limited).head(table.name.qualified)
    warnings = [r.getMessage() for r in caplog.records if r.name.startswith("segcat.redis")]
    assert len(warnings) == 1 and "docs/OPERATIONS.md" in warnings[0], warnings
    assert all(password not in r.getMessage() for r in caplog.records)


def test_a_materializer_with_a_wrong_password_backs_off_on_the_cluster(
    cluster: StackRedis, config: Config, tmp_path: Path
) -> None:
    """A refused AUTH while the cluster client discovers the nodes is an authentication failure
    too (redis-py wraps it in RedisClusterException): back off, keep key frames, no parked table."""
    bad = cluster.config(config, tmp_path / "warehouse", SEGCAT_REDIS_PASSWORD="wrong")
    ns, pattern = namespace()
    table = Catalog(bad).create_table(f"{ns}.t")
    with running_materializer(bad, pattern) as service:
        write_load(bad, table.name.qualified, 10, 1)
        deadline = time.monotonic() + 20
        while (doc := service.health()[1])["redis"].get("cause") != "authentication":
            assert time.monotonic() < deadline, doc
            time.sleep(0.1)
        assert not service.parked


# ---------------------------------------------------------------------------- cluster client details


def test_a_single_server_client_on_a_cluster_names_the_missing_setting(
    cluster: StackRedis, config: Config, tmp_path: Path
) -> None:
    cfg = cluster.config(config, tmp_path / "warehouse", SEGCAT_REDIS_CLUSTER="false")
    store = RedisStore.from_config(cfg)
    admin = cluster.admin_cluster()
    elsewhere = next(
        name
        for name in (f"ns.t{i}" for i in itertools.count())
        if (node := admin.get_node_from_key(keys.head_key(name))) is not None
        and node.port != cluster.ports[0]
    )
    with pytest.raises(ServiceUnavailable, match="SEGCAT_REDIS_CLUSTER=true"):
        store.head(elsewhere)


def test_cluster_settings_are_checked(tmp_path: Path) -> None:
    base = {"SEGCAT_HOME": str(tmp_path), "SEGCAT_REDIS_CLUSTER": "yes"}
    assert Config.load(env=base).redis_cluster
    with pytest.raises(ConfigError, match="SEGCAT_REDIS_CLUSTER"):
        Config.load(env={**base, "SEGCAT_REDIS_CLUSTER": "maybe"})
    for url in ("unix:///tmp/redis.sock", "redis://127.0.0.1:7000/3"):
        with pytest.raises(ConfigError, match="Redis Cluster"):
            RedisStore.from_config(Config.load(env={**base, "SEGCAT_REDIS_URL": url}))
    (tmp_path / "segcat.toml").write_text('redis_cluster = true\nredis_url = "rediss://u@10.0.0.1:7000/0"\n')
    from_toml = Config.load(env={"SEGCAT_HOME": str(tmp_path)}, path=tmp_path / "segcat.toml")
    store = RedisStore.from_config(from_toml)  # lazy: nothing is contacted yet
    assert store.cluster and store.where == "10.0.0.1:7000 (cluster)"
    plain = Config.load(env={"SEGCAT_HOME": str(tmp_path)})
    assert not plain.redis_cluster and source_options(plain)["segcat.redisCluster"] == "false"
    assert config_from_options(source_options(from_toml), base=plain).redis_cluster  # Spark workers too


def test_an_unreachable_cluster_is_unavailable_fast(tmp_path: Path) -> None:
    port = StackRedis(tmp_path, cluster=True).ports[0]  # free, nothing listens
    cfg = Config.load(
        env={
            "SEGCAT_HOME": str(tmp_path),
            "SEGCAT_REDIS_CLUSTER": "true",
            "SEGCAT_REDIS_URL": f"redis://127.0.0.1:{port}/0",
        }
    )
    store = RedisStore.from_config(cfg)
    started = time.monotonic()
    for call in (lambda: store.head("ns.t"), lambda: store.load("ns.t"), lambda: store.subscribe(None)):
        with pytest.raises(ServiceUnavailable, match=f"127.0.0.1:{port}"):
            call()
    assert time.monotonic() - started < 10


# ---------------------------------------------------------------------------- cluster life cycle


def test_a_restarted_cluster_keeps_its_nodes_and_readers_survive_a_dead_master(
    config: Config, tmp_path: Path
) -> None:
    """``finish`` after a restart only waits (nodes.conf kept the cluster); a master that dies makes
    Redis unavailable for readers, who answer from object storage and Kafka instead."""
    with stack_redis_running(tmp_path / "home", cluster=True) as server:
        ids = [server.admin(port).execute_command("CLUSTER MYID") for port in server.ports]
        server.stop()
        server.start()  # specs' start + probes + finish, as `segcat stack up` after `down`
        assert [server.admin(port).execute_command("CLUSTER MYID") for port in server.ports] == ids
        cfg = server.config(config, tmp_path / "warehouse")
        ns, pattern = namespace()
        table = Catalog(cfg).create_table(f"{ns}.t")
        name = table.name.qualified
        with running_materializer(cfg, pattern):
            write_load(cfg, name, 10, 1)
            wait_for_head(RedisStore.from_config(cfg), name, head_offset(cfg, name))
        assert table.snapshot().origin == "redis"
        owner = server.admin_cluster().get_node_from_key(keys.head_key(name))
        assert owner is not None
        dead = next(n for n, record in server.records.items() if record.address.endswith(f":{owner.port}"))
        process.stop(server.records.pop(dead), timeout_s=10)
        started = time.monotonic()
        reader = Catalog(cfg).load_table(name)
        answer = reader.snapshot()
        assert answer.version == reader_of(table).snapshot(sources=("kafka",)).version
        assert not answer.origin.startswith("redis")
        assert time.monotonic() - started < 20


def test_the_cluster_client_speaks_tls(tmp_path: Path) -> None:
    """``rediss://`` (with its ``ssl_*`` query options) reaches every master of a TLS-only cluster:
    scripts, the cluster pipeline, MULTI and Pub/Sub."""
    with tls_cluster(tmp_path) as (ports, ca_file):
        url = f"rediss://127.0.0.1:{ports[0]}/0?ssl_ca_certs={ca_file}&ssl_cert_reqs=required"
        cfg = Config.load(
            env={"SEGCAT_HOME": str(tmp_path), "SEGCAT_REDIS_CLUSTER": "true", "SEGCAT_REDIS_URL": url}
        )
        store = RedisStore.from_config(cfg)
        names = [f"ns.t{i}" for i in range(8)]
        with store.subscribe(None) as sub:
            batch = store.batch()
            for name in names:
                batch.publish_commit(name, _head(0), prev_version=-1, value=b"v", event=_event(name))
            batch.flush()
            assert {e.table for e in iter(lambda: sub.get(2.0), None)} == set(names)
        assert all(store.load(name).head == _head(0) for name in names)
        client = store.client
        assert isinstance(client, RedisCluster)
        owners = {client.get_node_from_key(keys.head_key(n)) for n in names}
        assert {node.port for node in owners if node is not None} == set(ports)  # on every master


def _head(offset: int) -> Head:
    return Head(
        version=offset,
        commit_id=None,
        timestamp_ms=1,
        live_count=0,
        live_bytes=0,
        live_rows=0,
        keyframe_version=-1,
        offset=offset,
    )


def _event(name: str) -> VersionChange:
    return VersionChange(
        table=name, version=0, prev_version=-1, timestamp_ms=1, commit_id="c", operation="APPEND"
    )


def test_heads_of_tables_on_every_node_in_one_call(
    server: StackRedis, config: Config, tmp_path: Path
) -> None:
    """The server's overview reads a page's heads with one ``heads()`` call: on a cluster the keys
    lie in many slots of every master, which redis-py's cluster pipeline sends node by node."""
    cfg = server.config(config, tmp_path / "warehouse")
    ns, _ = namespace()
    names = [f"{ns}.h{i}" for i in range(30)]
    store = RedisStore.from_config(cfg)
    try:
        for i, name in enumerate(names[:20]):
            assert store.advance_head(name, _head(i))
        found = store.heads(names)
        assert found == {name: (_head(i) if i < 20 else None) for i, name in enumerate(names)}
        if cfg.redis_cluster:
            client = store.client
            assert isinstance(client, RedisCluster)
            owners = {client.get_node_from_key(keys.head_key(n)) for n in names}
            assert len({node.port for node in owners if node is not None}) == 3
    finally:
        for name in names:
            store.forget_table(name)
        store.close()
