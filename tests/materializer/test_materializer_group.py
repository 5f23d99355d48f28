"""A materializer group sharing many tables (issue 24, item 4): cooperative assignment, bulk
positioning on assignment, an instance joining and one of three killed.

The group tests run real processes on the real stack and wait for conditions (never timed);
bench/ measures the same at 10,000 tables.
"""

from __future__ import annotations

import concurrent.futures
import itertools
import logging
import re
import signal
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest
from confluent_kafka import Consumer, TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from segcat import Catalog, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import ConfigError
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol.model import Operation
from segcat.catalog.protocol.names import TableName
from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.table_files import KeyFrameSearch, TableFiles
from segcat.materializer import assignment
from segcat.materializer.service import Materializer
from tests.factories import segment
from tests.materializer_support import (
    free_port,
    get_json,
    json_lines,
    namespace,
    running_materializer,
    spawn_materializer,
    wait_for_head,
)

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


class _Consumer:
    """The calls an assignment callback makes, recorded (the callbacks get the consumer passed)."""

    def __init__(self) -> None:
        self.assigned: list[list[TopicPartition]] = []
        self.unassigned: list[list[TopicPartition]] = []
        self.watermark_asks = 0

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned.append(list(partitions))

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        self.unassigned.append(list(partitions))

    def assign(self, partitions: list[TopicPartition]) -> None:
        raise AssertionError("an eager assign() would reposition every table of the instance")

    def unassign(self) -> None:
        raise AssertionError("an eager unassign() would drop every table of the instance")

    def get_watermark_offsets(self, *_: Any, **__: Any) -> tuple[int, int]:
        self.watermark_asks += 1
        raise AssertionError("a watermark round trip per table")

    def pause(self, _: list[TopicPartition]) -> None:
        pass


def _create(config: Config, tables: list[str]) -> None:
    catalog = Catalog(config)
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(catalog.create_table, tables))


def _commit(config: Config, table: str, tag: str) -> int:
    with load_catalog(config).load_table(table, writer_id=f"group-{tag}") as writer:
        return writer.commit(writer.new_commit(Operation.APPEND, adds=[segment(f"{tag}-{table}")]))


def _commit_each(config: Config, tables: list[str], tag: str) -> dict[str, int]:
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        versions = pool.map(lambda t: _commit(config, t, tag), tables)
        return dict(zip(tables, versions, strict=True))


def test_an_assignment_is_positioned_in_bulk_and_reads_only_its_tables_key_frames(
    mconfig: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One ListOffsets and one DescribeTopics per assignment, no watermark round trip per table,
    a key frame looked up for each assigned table only, and incremental (un)assignment: a
    second assignment or a revocation leaves the tables kept as they are."""
    ns, pattern = namespace()
    tables = [f"{ns}.t{i}" for i in range(8)]
    _create(mconfig, tables)
    versions = _commit_each(mconfig, tables[:3], "bulk")
    searched: list[str] = []
    asked: dict[str, list[int]] = {"log_ends": [], "topic_ids": []}
    find = TableFiles.find_newest_valid_keyframe

    def counting_find(files: TableFiles, *args: Any, **kwargs: Any) -> KeyFrameSearch:
        searched.append(files.name.qualified)
        return find(files, *args, **kwargs)

    def counting(method: str) -> Callable[..., Any]:
        original = getattr(TopicAdmin, method)

        def wrapper(admin: TopicAdmin, names: list[TableName], *args: Any, **kwargs: Any) -> Any:
            asked[method].append(len(names))
            return original(admin, names, *args, **kwargs)

        return wrapper

    monkeypatch.setattr(TableFiles, "find_newest_valid_keyframe", counting_find)
    for method in asked:
        monkeypatch.setattr(TopicAdmin, method, counting(method))
    service = Materializer(mconfig, pattern=pattern, instance_id="bulk")
    consumer = _Consumer()

    first = tables[:5]
    service._on_assign(consumer, [TopicPartition(TableName.parse(t).topic, 0) for t in first])  # type: ignore[arg-type]
    assert sorted(searched) == sorted(first)
    assert asked == {"log_ends": [5], "topic_ids": [5]}
    assert consumer.watermark_asks == 0
    (assigned,) = consumer.assigned
    offsets = {tp.topic: tp.offset for tp in assigned}
    assert offsets == {TableName.parse(t).topic: 0 for t in first}  # no key frame yet: from the start
    heads = {t: versions.get(t, 0) for t in first}
    assert service._catching_up == {TableName.parse(t).topic: heads[t] for t in first}
    kept = {topic: service.tables[topic] for topic in offsets}

    searched.clear()
    service._on_assign(consumer, [TopicPartition(TableName.parse(t).topic, 0) for t in tables[5:]])  # type: ignore[arg-type]
    assert sorted(searched) == sorted(tables[5:]), "the tables kept were recovered again"
    assert asked == {"log_ends": [5, 3], "topic_ids": [5, 3]}
    assert all(service.tables[topic] is table for topic, table in kept.items())

    gone = TableName.parse(tables[0]).topic
    service._on_revoke(consumer, [TopicPartition(gone, 0)])  # type: ignore[arg-type]
    assert [[tp.topic for tp in partitions] for partitions in consumer.unassigned] == [[gone]]
    assert gone not in service.tables and len(service.tables) == 7

    rest = [TopicPartition(topic, 0) for topic in service.tables]
    service._on_lost(consumer, rest)  # type: ignore[arg-type]
    assert sorted(tp.topic for tp in consumer.unassigned[-1]) == sorted(tp.topic for tp in rest)
    assert service.tables == {}


def test_recoveries_run_in_parallel_within_the_bound_and_fail_one_by_one() -> None:
    running, most = 0, 0
    lock = threading.Lock()
    release = threading.Event()

    class _Table:
        def __init__(self, n: int) -> None:
            self.n = n

        def recover(self) -> int:
            nonlocal running, most
            with lock:
                running += 1
                most = max(most, running)
                if most == 3:
                    release.set()
            release.wait(10)
            with lock:
                running -= 1
            if self.n == 4:
                raise OSError("object store unreachable")
            return self.n * 10

    done = assignment.recover_all([_Table(n) for n in range(10)], threads=3)  # type: ignore[misc]
    assert most == 3
    assert [d.offset for d in done] == [n * 10 if n != 4 else None for n in range(10)]
    assert [type(d.error) for d in done] == [OSError if n == 4 else type(None) for n in range(10)]


def test_an_instance_joining_a_group_of_eager_members_says_what_to_do(
    mconfig: Config, caplog: pytest.LogCaptureFixture
) -> None:
    """An older instance (eager assignor) still in the group: Kafka refuses the new one's join;
    its warning says why and what to do instead of only the broker's words."""
    ns, pattern = namespace()
    Catalog(mconfig).create_table(f"{ns}.t")
    group = f"mixed-{ns}"
    old = Consumer(
        {
            "bootstrap.servers": mconfig.bootstrap_servers,
            "group.id": group,
            "partition.assignment.strategy": "range,roundrobin",
            "session.timeout.ms": 6_000,
        }
    )
    old.subscribe([pattern])
    try:
        _wait("the eager member owns the table", lambda: old.poll(0.1) is None and bool(old.assignment()))
        caplog.set_level(logging.WARNING, logger="segcat.materializer")
        with running_materializer(mconfig, pattern, group):
            _wait(
                "the refusal is explained",
                lambda: any("stop the old instances" in str(getattr(r, "hint", "")) for r in caplog.records),
                timeout_s=60,
            )
    finally:
        old.close()


# ---------------------------------------------------------------------- the group, as processes

_RECOVERIES = re.compile(r'^segcat_materializer_recoveries_total\{source="[^"]*",table="([^"]+)"\} (\S+)$')


def _owned(port: int) -> set[str] | None:
    try:
        _, doc = get_json(f"http://127.0.0.1:{port}/healthz")
    except OSError:
        return None
    return set(doc["tables_assigned"])


def _recoveries(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        text = answer.read().decode()
    counts: dict[str, float] = {}
    for line in text.splitlines():
        found = _RECOVERIES.match(line)
        if found is not None:
            counts[found[1]] = counts.get(found[1], 0.0) + float(found[2])
    return counts


def _wait(what: str, check: Callable[[], bool], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, f"not within {timeout_s:g} s: {what}"
        time.sleep(0.2)


def _shared(ports: list[int], tables: list[str]) -> Callable[[], bool]:
    """Every table owned by exactly one of the instances, each instance owning some."""

    def check() -> bool:
        owned = [_owned(port) for port in ports]
        if any(not o for o in owned):
            return False
        sets = [o for o in owned if o is not None]
        return sorted(itertools.chain.from_iterable(sets)) == sorted(tables)

    return check


class _Group:
    """Materializer processes of one group, each with its metrics port; stopped at the end."""

    def __init__(self, config: Config, pattern: str, group: str) -> None:
        self.config, self.pattern, self.group = config, pattern, group
        self.procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}

    def start(self, instance: str, stderr: IO[bytes] | int = subprocess.DEVNULL) -> int:
        port = free_port()
        proc = spawn_materializer(
            self.config,
            self.pattern,
            self.group,
            instance,
            metrics_port=port,
            session_timeout_ms=6_000,
            stderr=stderr,
        )
        self.procs[instance] = (proc, port)
        return port

    def port(self, instance: str) -> int:
        return self.procs[instance][1]

    def kill(self, instance: str) -> None:
        proc, _ = self.procs.pop(instance)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)

    def close(self) -> None:
        for proc, _ in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc, _ in self.procs.values():
            assert proc.wait(60) == 0, "graceful shutdown on SIGTERM"


@pytest.mark.slow
def test_a_joining_instance_moves_only_some_tables_and_the_kept_ones_are_not_recovered_again(
    mconfig: Config,
) -> None:
    ns, pattern = namespace()
    tables = [f"{ns}.t{i:02d}" for i in range(24)]
    _create(mconfig, tables)
    store = RedisStore.from_config(mconfig)
    group = _Group(mconfig, pattern, f"join-{ns}")
    seen: dict[str, list[int]] = {t: [] for t in tables}
    done = threading.Event()

    def monitor() -> None:  # every table's head, over and over: it must never move back
        while not done.is_set():
            for t in tables:
                head = store.head(t)
                if head is not None:
                    seen[t].append(head.offset)
            time.sleep(0.01)

    try:
        a = group.start("a")
        _wait("instance a owns every table", lambda: _owned(a) == set(tables))
        versions = _commit_each(mconfig, tables, "before")
        for t, version in versions.items():
            wait_for_head(store, t, version)
        assert _recoveries(a) == dict.fromkeys(tables, 1.0)
        watcher = threading.Thread(target=monitor, daemon=True)
        watcher.start()

        b = group.start("b")
        _wait("a and b share the tables", _shared([a, b], tables))
        kept, moved = _owned(a) or set(), _owned(b) or set()
        assert kept and moved
        counts = _recoveries(a)
        assert {t: counts[t] for t in kept} == dict.fromkeys(kept, 1.0), "a recovered tables it kept"
        assert _recoveries(b) == dict.fromkeys(moved, 1.0), "b read key frames of tables not its own"

        versions = _commit_each(mconfig, tables, "after")
        for t, version in versions.items():
            wait_for_head(store, t, version)
    finally:
        done.set()
        group.close()
    for t, offsets in seen.items():
        assert all(x <= y for x, y in itertools.pairwise(offsets)), f"the head of {t} moved back"


@pytest.mark.slow
def test_killing_one_of_three_instances_hands_its_tables_to_the_others_with_fresh_heads(
    mconfig: Config,
) -> None:
    ns, pattern = namespace()
    tables = [f"{ns}.t{i:02d}" for i in range(60)]
    _create(mconfig, tables)
    store = RedisStore.from_config(mconfig)
    group = _Group(mconfig, pattern, f"failover-{ns}")
    try:
        ports = [group.start(instance) for instance in ("a", "b", "c")]
        _wait("three instances share the tables", _shared(ports, tables))
        survivors = [group.port("a"), group.port("b")]
        before = {port: _owned(port) or set() for port in survivors}
        victims = _owned(group.port("c")) or set()
        assert victims

        group.kill("c")
        _wait("a and b own every table", _shared(survivors, tables))
        for port in survivors:
            owned = _owned(port) or set()
            assert before[port] <= owned, "a survivor lost a table it had"
            counts = _recoveries(port)
            assert {t: counts[t] for t in before[port]} == dict.fromkeys(before[port], 1.0)
        versions = _commit_each(mconfig, sorted(victims), "moved")
        for t, version in versions.items():
            wait_for_head(store, t, version)
    finally:
        group.close()


@pytest.mark.slow
def test_an_instance_cut_off_past_the_session_timeout_gives_its_tables_up_and_rejoins(
    mconfig: Config, tmp_path: Path
) -> None:
    """SIGSTOP past the session timeout: the group hands the stopped instance's tables to the
    other; on SIGCONT it finds them lost (``on_lost``), closes them and rejoins, and every
    table's head follows new commits again, whoever owns it."""
    ns, pattern = namespace()
    tables = [f"{ns}.t{i:02d}" for i in range(12)]
    _create(mconfig, tables)
    store = RedisStore.from_config(mconfig)
    group = _Group(mconfig, pattern, f"lost-{ns}")
    stderr = tmp_path / "b.stderr"
    try:
        a = group.start("a")
        with open(stderr, "wb") as sink:
            b = group.start("b", stderr=sink)
        _wait("a and b share the tables", _shared([a, b], tables))
        stopped, _ = group.procs["b"]
        stopped.send_signal(signal.SIGSTOP)
        try:
            _wait("a owns every table", lambda: _owned(a) == set(tables))
        finally:
            stopped.send_signal(signal.SIGCONT)
        _wait(
            "b said it lost its tables",
            lambda: any(line.get("msg") == "tables lost to the group" for line in json_lines(stderr)),
        )
        _wait("a and b share the tables again", _shared([a, b], tables))
        versions = _commit_each(mconfig, tables, "after")
        for t, version in versions.items():
            wait_for_head(store, t, version)
    finally:
        group.close()


def test_a_materializer_on_the_consumer_group_protocol_follows_its_pattern_s_tables(
    mconfig: Config,
) -> None:
    """KIP-848 (``--group-protocol consumer``): the broker assigns, matching the topic regex
    against whole names; before the pattern was rewritten for it (``broker_pattern``) the
    materializer was handed no table at all."""
    ns, pattern = namespace()
    prefix = pattern.removesuffix(".*")  # as a user writes it (and the bench does): a prefix
    tables = [f"{ns}.t{i}" for i in range(4)]
    Catalog(mconfig).create_tables(tables)
    store = RedisStore.from_config(mconfig)
    with running_materializer(mconfig, prefix, group_protocol=assignment.CONSUMER):
        versions = _commit_each(mconfig, tables, "kip848")
        for table in tables:
            wait_for_head(store, table, versions[table])


def test_group_protocol_options_are_checked(mconfig: Config) -> None:
    with pytest.raises(ConfigError, match="--group-protocol"):
        Materializer(mconfig, group_protocol="eager")
    with pytest.raises(ConfigError, match="--session-timeout-ms applies to the classic"):
        Materializer(mconfig, group_protocol=assignment.CONSUMER, session_timeout_ms=10_000)
    conf = Materializer(mconfig, group_protocol=assignment.CONSUMER, instance_id="x")._consumer_config()
    assert conf["group.protocol"] == "consumer" and conf["group.instance.id"] == "x"
    assert not set(assignment.CLASSIC_ONLY) & conf.keys()


@given(st.from_regex(r"\^[a-z.\\]{0,8}(\$)?", fullmatch=True), st.text("segcat.ab", max_size=12))
def test_the_broker_s_whole_name_pattern_matches_what_librdkafka_s_search_does(
    pattern: str, topic: str
) -> None:
    try:
        re.compile(pattern)
    except re.error:
        return
    assert bool(re.match(pattern, topic)) == bool(re.fullmatch(assignment.broker_pattern(pattern), topic))
