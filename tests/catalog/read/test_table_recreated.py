"""A table created again under its old name never serves the old table (issue 20, item 5).

Its topic deleted without a purge (by hand, or a Kafka cluster rebuilt while object storage and
Redis survive) and the table created again: the old table's key frames, archives and Redis values
are still there. Each is bound to the log it came from (the topic id), so the new table neither
reads nor keeps them: creation succeeds, time travel past the new log's end is ``VersionNotFound``,
the head lists the new table's segments only, writers commit, and the materializer replaces what
Redis holds of the old table (whose larger offsets would otherwise keep the new head stuck).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import (
    InvalidCommit,
    ServiceUnavailable,
    TableAlreadyExists,
    TableNotFound,
    VersionNotFound,
)
from segcat.catalog.log.producer import Delivery, SharedProducer
from segcat.catalog.log.reader import LogReader
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol import rules
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read import creation
from segcat.catalog.read.table import TableReader
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.archive import ArchivedCommit, ArchivedRecord
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.table_files import TableFiles
from tests.factories import segment
from tests.handles import reader_of, tables_of
from tests.materializer_support import (
    assert_outputs_match_clean_replay,
    head_offset,
    namespace,
    running_materializer,
    wait_for_head,
)

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


def _wait(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _delete_topic(config: Config, table: str) -> None:
    """Delete the table's topic the way an operator would (no purge), and wait until it is gone."""
    admin = TopicAdmin(config)
    name = TableName.parse(table)
    admin.delete(name)

    def gone() -> bool:
        try:
            admin.describe(name)
        except TableNotFound:
            return True
        return False

    _wait("the topic to be deleted", gone)


def _create_again(catalog: Catalog, table: str) -> Table:
    """``create_table`` once Kafka has finished deleting the old topic (until then it answers
    TOPIC_ALREADY_EXISTS for a topic marked for deletion)."""
    deadline = time.monotonic() + 60
    while True:
        try:
            return catalog.create_table(table)
        except TableAlreadyExists:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _old_table(mconfig: Config, table: str) -> list[int]:
    """Create ``table``, append nine segments, let a materializer write its key frames, archives
    and Redis values; the versions."""
    catalog = Catalog(mconfig)
    catalog.create_table(table)
    with load_catalog(mconfig).load_table(table) as writer:
        versions = [writer.append([segment(f"old{i}")]) for i in range(9)]
    return versions


def _segment_ids(snapshot: object) -> list[str]:
    return sorted(s.segment_id for s in snapshot.segment_list())  # type: ignore[attr-defined]


def test_a_table_created_again_never_serves_the_old_one(mconfig: Config) -> None:
    """The issue's reproduction: before the binding, creation raised ``InvalidCommit ... offset 0
    is INVALID`` and left the topic, ``snapshot(5)`` answered the old v5, the head listed an old
    segment and writers failed with ``ServiceUnavailable``."""
    ns, pattern = namespace()
    table = f"{ns}.t"
    store = RedisStore.from_config(mconfig)
    with running_materializer(mconfig, pattern):
        old = _old_table(mconfig, table)
        wait_for_head(store, table, head_offset(mconfig, table))
    old_head = store.head(table)
    assert old_head is not None and old_head.offset == old[-1]

    _delete_topic(mconfig, table)
    catalog = Catalog(mconfig)
    created = _create_again(catalog, table)  # before: InvalidCommit (the old archive's offset 0)
    assert created.head_offset() == 0
    assert reader_of(created).log_id is not None and reader_of(created).log_id != old_head.log_id

    handle = catalog.load_table(table)
    with pytest.raises(VersionNotFound):
        handle.snapshot(5)  # before: the old table's version 5, from object storage
    head = handle.snapshot()
    assert (head.version, _segment_ids(head)) == (0, [])  # before: served from old objects
    with load_catalog(mconfig).load_table(table) as writer:  # before: ServiceUnavailable
        assert writer.append([segment("new0")]) == 1
    assert _segment_ids(catalog.load_table(table).snapshot()) == ["new0"]
    assert _segment_ids(catalog.load_table(table).snapshot(1)) == ["new0"]

    # the materializer follows the new log: the old head (offset 8) is replaced, not kept
    with running_materializer(mconfig, pattern):
        with load_catalog(mconfig).load_table(table) as writer:
            for i in range(1, 9):
                writer.append([segment(f"new{i}")])
        end = head_offset(mconfig, table)
        _wait("the new log's head in Redis", lambda: _head_is(store, table, reader_of(created).log_id, end))
        wait_for_head(store, table, end)
    assert_outputs_match_clean_replay(mconfig, table)
    latest = catalog.load_table(table).snapshot()
    assert latest.origin == "redis"
    assert _segment_ids(latest) == sorted(f"new{i}" for i in range(9))
    for version in (3, 5, 8):
        expected = tables_of(catalog).open(table).snapshot(version, sources=("kafka",))
        got = catalog.load_table(table).snapshot(version)
        assert _segment_ids(got) == _segment_ids(expected), version


def _head_is(store: RedisStore, table: str, log_id: str | None, offset: int) -> bool:
    head = store.head(table)
    return head is not None and head.log_id == log_id and head.offset == offset


def test_the_materializer_follows_a_topic_created_again_while_it_runs(mconfig: Config) -> None:
    """Deleted and created again while a materializer holds the table: its head and key frames
    become the new log's (the old image, at a larger offset, judged nothing of the new log)."""
    ns, pattern = namespace()
    table = f"{ns}.t"
    store = RedisStore.from_config(mconfig)
    catalog = Catalog(mconfig)
    with running_materializer(mconfig, pattern):
        _old_table(mconfig, table)
        wait_for_head(store, table, head_offset(mconfig, table))
        _delete_topic(mconfig, table)
        created = _create_again(catalog, table)
        with load_catalog(mconfig).load_table(table) as writer:
            for i in range(8):  # a key frame every 7 commits: the new log gets one
                writer.append([segment(f"new{i}")])
        end = head_offset(mconfig, table)
        _wait("the new log's head in Redis", lambda: _head_is(store, table, reader_of(created).log_id, end))
        wait_for_head(store, table, end)
    head = catalog.load_table(table).snapshot(stale_ok=True)
    assert head.origin == "redis" and head.behind == 0
    assert _segment_ids(head) == [f"new{i}" for i in range(8)]
    assert_outputs_match_clean_replay(mconfig, table)


# ---------------------------------------------------------------------- creation is all or nothing


def test_a_creation_that_fails_midway_leaves_no_topic(
    config: Config, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first commit read back as not accepted: the topic is deleted again (before, only a
    failed produce deleted it; the issue's InvalidCommit left the topic behind)."""

    def refuse(table: TableReader, commit: object, value: bytes, landed: Delivery) -> None:
        raise InvalidCommit("refused for the test", version=landed.offset)

    monkeypatch.setattr(creation, "confirm_creation", refuse)
    with pytest.raises(InvalidCommit, match="its topic was deleted again"):
        Catalog(config).create_table(table_name)
    with pytest.raises(TableNotFound):
        TopicAdmin(config).describe(TableName.parse(table_name))


def test_a_creation_whose_commit_is_not_delivered_leaves_no_topic(
    config: Config, table_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def undelivered(*_: object) -> Delivery:
        raise ServiceUnavailable("no delivery report (the test)")

    monkeypatch.setattr(SharedProducer, "write", undelivered)
    with pytest.raises(ServiceUnavailable, match="nothing was created"):
        Catalog(config).create_table(table_name)
    with pytest.raises(TableNotFound):
        TopicAdmin(config).describe(TableName.parse(table_name))
    monkeypatch.undo()  # the name is free again: the next creation succeeds
    assert Catalog(config).create_table(table_name).head_offset() == 0


# ---------------------------------------------------------------------- objects from before the binding


def _old_table_with_flat_history(mconfig: Config, table: str) -> Catalog:
    """A table with six appends whose outputs lie in the flat layout (written before the binding)."""
    catalog = Catalog(mconfig)
    catalog.create_table(table)
    with load_catalog(mconfig).load_table(table) as writer:
        for i in range(6):
            writer.append([segment(f"old{i}")])
    _write_flat_history(mconfig, table)
    return catalog


def _write_flat_history(config: Config, table: str) -> int:
    """What segcat wrote before objects were bound to their log: one archive of the whole log and
    a key frame of its last accepted version, in the flat layout, unbound. The frame's version."""
    name = TableName.parse(table)
    files = TableFiles(ObjectStore.from_config(config), name)
    state = TableState(name.qualified)
    commits: list[ArchivedCommit] = []
    others: list[ArchivedRecord] = []
    with LogReader(config, name) as reader:
        records = list(reader.read(0))
    for record in records:
        applied = rules.apply_record(state, record)
        at, key, value = record.offset, record.key, record.value
        if applied.delta is not None and value is not None:
            operation = applied.delta.operation.value
            commits.append(ArchivedCommit(at, record.timestamp_ms, applied.delta.commit_id, operation, value))
        else:
            outcome = applied.verdict.outcome.value
            others.append(ArchivedRecord(at, record.timestamp_ms, key, value, outcome))
    files.write_archive(0, records[-1].offset, commits, others)
    files.write_keyframe(keyframe.build(state), state.last_accepted_version)
    return state.last_accepted_version


def test_objects_from_before_the_binding_are_read_only_by_their_own_log(
    mconfig: Config, tmp_path: Path
) -> None:
    """Flat objects (written before the binding) of the old table: the new table's readers never
    take them, its materializer finds them foreign and says so in ``_catalog/_log``. A table's own
    flat objects are adopted (claimed) and read again, history included."""
    ns, pattern = namespace()
    table = f"{ns}.t"
    catalog = _old_table_with_flat_history(mconfig, table)
    name = TableName.parse(table)
    files = TableFiles(ObjectStore.from_config(mconfig), name)

    # the same log: its materializer adopts the flat objects, and readers take them again
    with running_materializer(mconfig, pattern):
        _wait("the claim", lambda: files.read_claim() is not None)
        own_id = tables_of(catalog).open(table).log_id
        claim = files.read_claim()
        assert claim is not None and claim.log_id == own_id
        wait_for_head(RedisStore.from_config(mconfig), table, head_offset(mconfig, table))
    got = tables_of(catalog).open(table).snapshot(3, sources=("object-store",))
    assert _segment_ids(got) == ["old0", "old1", "old2"]

    # created again: the claim names the old log, so the new one reads only its own directory
    _delete_topic(mconfig, table)
    created = _create_again(catalog, table)
    assert (
        reader_of(created).files is not None
        and reader_of(created).files.base == f"{files.catalog_dir}/logs/{reader_of(created).log_id}"
    )
    with pytest.raises(VersionNotFound):
        reader_of(created).snapshot(3, sources=("object-store", "kafka"))
    assert _segment_ids(created.snapshot()) == []


def test_unclaimed_flat_objects_of_another_log_are_found_foreign(mconfig: Config) -> None:
    """The issue's case with objects written before the binding: the old table's flat objects
    and no claim. Readers of the new table never take them (before: the old v5 and head); its
    materializer compares them with the log and records that they are another log's."""
    ns, pattern = namespace()
    table = f"{ns}.t"
    catalog = _old_table_with_flat_history(mconfig, table)
    _delete_topic(mconfig, table)
    created = _create_again(catalog, table)  # before: InvalidCommit from the flat archive
    with pytest.raises(VersionNotFound):
        catalog.load_table(table).snapshot(5)
    assert _segment_ids(catalog.load_table(table).snapshot()) == []
    with load_catalog(mconfig).load_table(table) as writer:
        assert writer.append([segment("new0")]) == 1
    files = TableFiles(ObjectStore.from_config(mconfig), TableName.parse(table))
    with running_materializer(mconfig, pattern):
        _wait("the claim", lambda: files.read_claim() is not None)
        wait_for_head(RedisStore.from_config(mconfig), table, head_offset(mconfig, table))
    claim = files.read_claim()
    assert claim is not None and claim.log_id is None, claim
    assert reader_of(created).log_id is not None
    assert_outputs_match_clean_replay(mconfig, table)


def test_the_spark_sources_planner_never_follows_the_old_tables_objects(mconfig: Config) -> None:
    """The streaming source's planner starts from key frames and archives: bound to the topic's log,
    it lists the new table's versions only (before: the old table's archived versions 0..6)."""
    from segcat.spark_integration.version_follower import VersionFollower

    ns, _ = namespace()
    table = f"{ns}.t"
    catalog = _old_table_with_flat_history(mconfig, table)
    _delete_topic(mconfig, table)
    _create_again(catalog, table)
    with load_catalog(mconfig).load_table(table) as writer:
        writer.append([segment("new0")])
    follower = VersionFollower(mconfig, TableName.parse(table))
    try:
        rows = follower.accepted_after(-1)
    finally:
        follower.close()
    assert [(row[1], row[6]) for row in rows] == [(0, []), (1, ["new0"])]
