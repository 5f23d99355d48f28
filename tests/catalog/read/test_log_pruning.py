"""Log pruning on the real broker: null records + the log cleaner, then every version read back.

The topic gets cleaner settings that make compaction happen within the test; the broker is
then asked (by reading the topic from offset 0) whether the old records are really gone.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
import redis
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import InvalidArgument, TableDropped
from segcat.catalog.log.clients import admin_config
from segcat.catalog.log.producer import write_commit
from segcat.catalog.log.reader import LogReader
from segcat.catalog.protocol.model import Commit, Operation
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.rules import Outcome
from segcat.materializer.table_materializer import TableMaterializer
from tests.factories import segment
from tests.handles import reader_of, tables_of, writer_of
from tests.materializer_support import (
    PrivateRedis,
    namespace,
    running_materializer,
    wait_for_head,
    wait_until_following,
    write_load,
)

AGGRESSIVE_CLEANER = {
    "min.compaction.lag.ms": "0",
    "segment.ms": "300",
    "min.cleanable.dirty.ratio": "0.0001",
    "delete.retention.ms": "200",
}


def _alter(config: Config, topic: str, settings: dict[str, str]) -> None:
    admin = AdminClient(admin_config(config))
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in settings.items()
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def _raw(table: str, operation: Operation, commit_id: str, base: int, **fields: object) -> Commit:
    return Commit(commit_id, table, operation, base, "raw-writer", int(time.time() * 1000), **fields)  # type: ignore[arg-type]


def _versions(table: Table, end: int) -> dict[int, tuple[int, frozenset[str], int]]:
    """Every offset's (version, live ids, timestamp) as a reader sees it."""
    out = {}
    for v in range(end + 1):
        snap = table.snapshot(version=v)
        out[v] = (snap.version, snap.segment_ids(), snap.timestamp_ms)
    return out


def _verdicts(table: Table) -> dict[int, tuple[str, str | None, str | None, int | None, int]]:
    return {
        a.verdict.offset: (
            a.verdict.outcome.value,
            a.verdict.commit_id,
            None if a.verdict.rule is None else a.verdict.rule.value,
            a.verdict.conflicting_version,
            a.timestamp_ms,
        )
        for a in table.records()
        if a.verdict.outcome is not Outcome.PRUNED
    }


def _broker_offsets(config: Config, name: TableName) -> list[tuple[int, bytes | None, bool]]:
    with LogReader(config, name) as reader:
        return [(r.offset, r.key, r.value is None) for r in reader.read(0)]


def wait_compacted_away(config: Config, name: TableName, upto: int) -> None:
    """Wait until the broker holds no record at or before ``upto`` (the log cleaner ran)."""
    deadline = time.monotonic() + 90
    while True:
        remaining = [o for o, _, _ in _broker_offsets(config, name) if o <= upto]
        if not remaining:
            return
        assert time.monotonic() < deadline, f"the cleaner left {len(remaining)} pruned records"
        time.sleep(1)


@pytest.fixture
def pconfig(config: Config, private_redis: PrivateRedis, tmp_path: Path) -> Config:
    from tests.materializer_support import materializer_config

    return materializer_config(config, private_redis.url, tmp_path / "warehouse", every=5)


def test_prune_then_compaction_keeps_every_version_and_verdict(
    pconfig: Config, private_redis: PrivateRedis
) -> None:
    ns, pattern = namespace()
    name = f"{ns}.pruned"
    catalog = Catalog(pconfig)
    table = catalog.create_table(name)
    tname = TableName.parse(name)
    # A rejected commit whose id comes back later, accepted (both ≤ P and > P).
    retried = str(uuid.uuid4())
    write_load(pconfig, name, 18, seed=3)
    write_commit(pconfig, tname, _raw(name, Operation.COMPACT, retried, 0, drops=("no-such-segment",)))
    write_load(pconfig, name, 12, seed=4)
    with running_materializer(pconfig, pattern):
        wait_for_head(tables_of(catalog).redis, name, table.head_offset())  # type: ignore[arg-type]
        end_before = table.head_offset()
        versions_before = _versions(table, end_before)
        verdicts_before = _verdicts(table)
        assert verdicts_before[end_before - 12 - 0][0] in {"ACCEPTED", "REJECTED"}

        # The retried id goes to the log again after P, accepted this time.
        retry_offset = write_commit(
            pconfig, tname, _raw(name, Operation.APPEND, retried, end_before, adds=(segment("retried"),))
        ).offset
        assert (
            reader_of(table).expect_accepted(_raw(name, Operation.APPEND, retried, 0), retry_offset)
            == retry_offset
        )
        with pytest.raises(InvalidArgument):
            table.prune_log(retain_versions=0)
        dry = table.prune_log(retain_versions=8, dry_run=True)
        assert dry.marker_version is None and dry.plan.prunes
        prune_point = dry.plan.prune_point
        assert prune_point <= retry_offset - 8
        assert table.log_start() == 0  # a dry run writes nothing

        _alter(pconfig, tname.topic, AGGRESSIVE_CLEANER)
        result = table.prune_log(retain_versions=8)
        assert result.plan.prune_point == prune_point
        assert retried.encode() in result.plan.kept_keys
        assert retried.encode() not in result.plan.nulls
        assert result.marker_version is not None
        assert table.log_start() == prune_point + 1
        wait_for_head(tables_of(catalog).redis, name, result.marker_version)  # type: ignore[arg-type]
        # roll the active segment so the cleaner can use the null records
        time.sleep(0.5)
        with load_catalog(pconfig).load_table(name) as writer:
            writer.append([segment("after-prune")])
        wait_compacted_away(pconfig, tname, prune_point)
        survivors = {o: k for o, k, _ in _broker_offsets(pconfig, tname)}
        assert survivors.get(retry_offset) == retried.encode()  # the later record of the id survived

        assert _versions(table, end_before) == versions_before
        after = _verdicts(table)
        assert {o: v for o, v in after.items() if o <= end_before} == {
            o: v for o, v in verdicts_before.items()
        }
        assert after[retry_offset][0] == "ACCEPTED"
        history = {h.version: h.timestamp_ms for h in table.history()}
        assert {v: history[v] for v in history if v <= end_before} == {
            o: v[4] for o, v in verdicts_before.items() if v[0] == "ACCEPTED"
        }

    # Redis flushed, a new materializer, a new writer and a new reader on the pruned topic
    redis.Redis.from_url(private_redis.url).flushall()
    fresh = Catalog(pconfig).load_table(name)
    assert _versions(fresh, end_before) == versions_before
    with load_catalog(pconfig).load_table(name) as writer:
        assert writer_of(writer).state.log_start == prune_point + 1
        writer.append([segment("new-writer")])
    with running_materializer(pconfig, pattern):
        head = wait_for_head(reader_of(fresh).redis, name, fresh.head_offset())  # type: ignore[arg-type]
        assert head.offset == fresh.head_offset()
    assert "new-writer" in fresh.snapshot().segment_ids()


def test_recover_on_a_pruned_topic_starts_from_the_key_frame(pconfig: Config) -> None:
    ns, pattern = namespace()
    name = f"{ns}.recover"
    catalog = Catalog(pconfig)
    table = catalog.create_table(name)
    write_load(pconfig, name, 12, seed=9)
    with running_materializer(pconfig, pattern):
        wait_for_head(tables_of(catalog).redis, name, table.head_offset())  # type: ignore[arg-type]
        result = table.prune_log()
    assert result.plan.prunes and result.marker_version is not None
    files = reader_of(table).files
    assert files is not None
    materializer = TableMaterializer(TableName.parse(name), pconfig, None, files)
    assert materializer.recover() > result.plan.prune_point


def test_drop_and_undrop(pconfig: Config) -> None:
    table = Catalog(pconfig).create_table(f"{namespace()[0]}.dropme")
    with load_catalog(pconfig).load_table(table.name.qualified) as writer:
        writer.append([segment("a")])
    version = table.catalog.drop_table(table.name)
    with pytest.raises(TableDropped):
        table.snapshot()
    with pytest.raises(TableDropped):
        table.catalog.drop_table(table.name)
    with (
        load_catalog(pconfig).load_table(table.name.qualified) as writer,
        pytest.raises(Exception, match="dropped"),
    ):
        writer.append([segment("b")])
    assert table.snapshot(include_dropped=True).dropped
    assert table.snapshot(version=version - 1).version == version - 1
    table.catalog.undrop_table(table.name)
    assert set(table.snapshot().segment_ids()) == {"a"}


def test_the_materializer_prunes_and_purges_by_table_properties(pconfig: Config) -> None:
    from segcat.materializer import metrics
    from segcat.materializer.maintenance import Maintenance, TableFacts

    ns, pattern = namespace()
    name = f"{ns}.upkeep"
    catalog = Catalog(pconfig)
    table = catalog.create_table(name)
    write_load(pconfig, name, 12, seed=5)
    with load_catalog(pconfig).load_table(name) as writer:
        writer.set_properties({"segcat.log.retain.versions": "3"})

    def facts() -> list[TableFacts]:
        head = table.snapshot(include_dropped=True)
        return [TableFacts(name, head.properties, head.dropped, head.log_start, 0)]

    with running_materializer(pconfig, pattern):
        wait_for_head(tables_of(catalog).redis, name, table.head_offset())  # type: ignore[arg-type]
        upkeep = Maintenance(pconfig, facts)
        upkeep.run_once()
        assert table.log_start() > 0
        upkeep.run_once()
        assert metrics.LOG_START.labels(name)._value.get() == table.log_start()
        with load_catalog(pconfig).load_table(name) as writer:
            writer.set_properties({"segcat.dropped.retain.ms": "0"})
        table.catalog.drop_table(table.name)
        wait_for_head(tables_of(catalog).redis, name, table.head_offset())  # type: ignore[arg-type]
        # the drop's key frame is written off the hot path: after the head, not before it
        files = reader_of(table).files
        assert files is not None
        dropped_at = table.snapshot(include_dropped=True).version
        deadline = time.monotonic() + 30
        while dropped_at not in files.keyframe_versions() and time.monotonic() < deadline:
            time.sleep(0.05)
        upkeep.run_once()
    assert name not in {str(t) for t in catalog.list_tables()}
    files = reader_of(table).files
    assert files is not None and files.keyframe_versions() == []


def test_a_materializer_recovering_from_an_older_key_frame_reads_the_archives_not_the_holes(
    pconfig: Config,
) -> None:
    ns, pattern = namespace()
    name = f"{ns}.holes"
    catalog = Catalog(pconfig)
    table = catalog.create_table(name)
    tname = TableName.parse(name)
    with running_materializer(pconfig, pattern) as service:
        wait_until_following(service, name)  # live commits: a backlog found at start gets one frame
        write_load(pconfig, name, 25, seed=11)
        wait_for_head(tables_of(catalog).redis, name, table.head_offset())  # type: ignore[arg-type]
        result = table.prune_log(retain_versions=2)
        assert result.marker_version is not None
        wait_for_head(tables_of(catalog).redis, name, result.marker_version)  # type: ignore[arg-type]
    _alter(pconfig, tname.topic, AGGRESSIVE_CLEANER)
    time.sleep(0.5)
    with load_catalog(pconfig).load_table(name) as writer:
        writer.append([segment("after")])
    wait_compacted_away(pconfig, tname, result.plan.prune_point)
    files = reader_of(table).files
    assert files is not None
    frames = files.keyframe_versions()
    assert len(frames) >= 3
    for version in frames[-2:]:  # the newest frames are damaged: recovery falls back to an older one
        files.store.put(files.keyframe_path(version), b"garbage")
    materializer = TableMaterializer(tname, pconfig, None, files)
    start = materializer.recover()
    assert start > result.plan.prune_point  # the archives brought it past the pruned records
    with LogReader(pconfig, tname) as reader:
        for record in reader.read(start):
            materializer.apply(record)
    expected = reader_of(table).state()
    assert materializer.state.fingerprint() == expected.fingerprint()
    assert materializer.state.version == expected.version
