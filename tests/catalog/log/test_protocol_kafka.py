"""Protocol versions on a real broker: new tables, old logs, upgrades, unknown versions and features."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import (
    EXIT_INVALID,
    ColumnTypeConflict,
    CommitConflict,
    InvalidArgument,
    MalformedCommit,
    UnsupportedProtocol,
    exit_code,
)
from segcat.catalog.log.reader import LogReader
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol import codec, lifecycle, versions
from segcat.catalog.protocol.model import ColumnStats, ColumnType, Commit, Operation, Protocol, Segment
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.rules import Outcome, Rule
from segcat.catalog.protocol.state import LOCATION_PROPERTY
from tests.factories import produce_raw, segment
from tests.handles import reader_of

pytestmark = pytest.mark.kafka


def _high(config: Config, table: Table) -> int:
    with LogReader(config, table.name) as reader:
        return reader.watermarks()[1]


def _raw_commit(table: Table, operation: Operation, base: int, **fields: object) -> tuple[bytes, bytes]:
    commit = Commit(Commit.new_id(), table.name.qualified, operation, base, "raw", 0, **fields)  # type: ignore[arg-type]
    return commit.commit_id.encode(), codec.encode_commit(commit)


def test_a_new_table_records_its_protocol_and_absolute_location_first(
    catalog: Catalog, config: Config, table_name: str
) -> None:
    table = catalog.create_table(table_name)
    (first,) = list(table.records())
    assert first.verdict.offset == 0 and first.verdict.outcome is Outcome.ACCEPTED
    assert first.commit is not None and first.commit.operation is Operation.UPGRADE_PROTOCOL
    assert (
        table.protocol()
        == versions.new_table_protocol()
        == Protocol(versions.CURRENT_VERSION, ("lifecycle",))
    )
    location = table.location()
    assert os.path.isabs(location) and location == first.commit.table_properties[LOCATION_PROPERTY]
    assert location.endswith(table_name.replace(".", "/"))


def test_the_location_is_fixed_at_creation_not_guessed_from_the_working_directory(
    config: Config, table_name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression (item 10): the same table resolved under each reader's own directory."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    relative = Config.load(
        env={
            "SEGCAT_BOOTSTRAP_SERVERS": config.bootstrap_servers,
            "SEGCAT_REDIS_URL": config.redis_url,
            "SEGCAT_WAREHOUSE": "warehouse",
        }
    )
    monkeypatch.chdir(tmp_path / "a")
    created = Catalog(relative).create_table(table_name)
    with load_catalog(relative).load_table(table_name) as writer:
        writer.append([segment("s1")])
    monkeypatch.chdir(tmp_path / "b")
    reader = Catalog(relative).load_table(table_name)
    snap = reader.snapshot()
    expected = str(tmp_path / "a" / "warehouse" / table_name.replace(".", "/"))
    assert created.location() == expected == snap.root
    assert snap.files() == [f"{expected}/data/2020-01/s1.parquet"]


def test_an_unknown_protocol_version_is_refused_by_readers_and_writers(config: Config, table: Table) -> None:
    with load_catalog(config).load_table(table.name) as writer:
        before = writer.append([segment("a")])
    (upgrade_at,) = produce_raw(
        config,
        table.name.topic,
        [_raw_commit(table, Operation.UPGRADE_PROTOCOL, before, protocol=Protocol(99, ()))],
    )
    with pytest.raises(UnsupportedProtocol, match=r"protocol version 99 .* upgrade segcat"):
        table.snapshot()
    with pytest.raises(UnsupportedProtocol):
        reader_of(table).state()
    assert table.snapshot(before).live_count == 1  # versions before the upgrade stay readable
    high = _high(config, table)
    with load_catalog(config).load_table(table.name) as writer, pytest.raises(UnsupportedProtocol):
        writer.append([segment("b")])
    assert _high(config, table) == high == upgrade_at + 1  # nothing was written


def test_an_unknown_feature_is_refused(config: Config, table: Table) -> None:
    produce_raw(
        config,
        table.name.topic,
        [_raw_commit(table, Operation.UPGRADE_PROTOCOL, 0, protocol=Protocol(2, ("row-tracking",)))],
    )
    with pytest.raises(UnsupportedProtocol, match="'row-tracking'"):
        table.snapshot()
    with pytest.raises(UnsupportedProtocol):
        list(table.records())


def test_an_old_log_keeps_protocol_1_until_upgraded(
    config: Config, catalog: Catalog, table_name: str
) -> None:
    name = TableName.parse(table_name)
    TopicAdmin(config).create(name)  # a topic as segcat made them before protocol versions
    table = catalog.load_table(name)
    produce_raw(
        config,
        name.topic,
        [_raw_commit(table, Operation.APPEND, -1, adds=(segment("a"),), table_properties={"owner": "x"})],
    )
    snap = table.snapshot()
    assert snap.protocol == Protocol(1, ()) and snap.location is None
    assert snap.properties == {"owner": "x"}  # protocol 1's verdict on this commit: ACCEPTED
    upgraded_at = table.upgrade_protocol()
    snap = table.snapshot()
    assert snap.version == upgraded_at and snap.protocol.version == versions.CURRENT_VERSION
    assert snap.location == reader_of(table).root
    assert table.upgrade_protocol() == upgraded_at  # nothing left to do
    (again,) = produce_raw(
        config,
        name.topic,
        [
            _raw_commit(
                table, Operation.APPEND, upgraded_at, adds=(segment("b"),), table_properties={"k": "v"}
            )
        ],
    )
    verdict = next(iter(table.records(again))).verdict
    assert verdict.outcome is Outcome.INVALID and "table_properties" in verdict.detail
    with load_catalog(config).load_table(name) as writer, pytest.raises(MalformedCommit):
        writer.commit(writer.new_commit(Operation.APPEND, adds=[segment("c")], table_properties={"k": "v"}))


def test_a_protocol_2_table_gets_the_lifecycle_feature_by_an_explicit_upgrade(
    config: Config, catalog: Catalog, table_name: str
) -> None:
    name = TableName.parse(table_name)
    TopicAdmin(config).create(name)  # a table as segcat created them before the lifecycle feature
    table = catalog.load_table(name)
    produce_raw(
        config,
        name.topic,
        [
            _raw_commit(
                table,
                Operation.UPGRADE_PROTOCOL,
                -1,
                protocol=Protocol(2, ()),
                table_properties={LOCATION_PROPERTY: reader_of(table).root},
            )
        ],
    )
    assert table.protocol() == Protocol(2, ())
    with load_catalog(config).load_table(name) as writer, writer.intent("data/") as intent:
        assert not intent.active  # inert: the table has no intents yet
    with pytest.raises(InvalidArgument, match="segcat table upgrade"):
        table.prune_log()
    upgraded_at = table.upgrade_protocol()
    assert table.protocol() == versions.new_table_protocol()
    assert table.upgrade_protocol() == upgraded_at  # nothing left to do
    with load_catalog(config).load_table(name) as writer, writer.intent("data/") as intent:
        assert intent.active and intent.version is not None
        assert writer.refresh().intents[intent.intent_id].prefix == "data/"


def _legacy_table(config: Config, catalog: Catalog, table_name: str) -> Table:
    """A topic as segcat made them before protocol versions (a protocol-1 table)."""
    name = TableName.parse(table_name)
    TopicAdmin(config).create(name)
    return catalog.load_table(name)


def test_writers_never_name_a_feature_below_the_version_that_gives_it_meaning(
    config: Config, catalog: Catalog, table_name: str
) -> None:
    """Issue 20, item 9: the rules accept {version 1, features [lifecycle]} (protocol 1 did), yet
    the feature would be inert and every intent INVALID; a writer refuses to send it (§3b)."""
    table = _legacy_table(config, catalog, table_name)
    high = _high(config, table)
    with load_catalog(config).load_table(table.name) as writer:
        inert = writer.new_commit(Operation.UPGRADE_PROTOCOL, protocol=Protocol(1, (versions.LIFECYCLE,)))
        with pytest.raises(MalformedCommit, match=r"'lifecycle' means nothing below protocol version 2"):
            writer.commit(inert)
    assert _high(config, table) == high  # nothing was written
    upgraded_at = table.upgrade_protocol()  # the way to the feature
    assert table.protocol() == versions.new_table_protocol() and upgraded_at == high


def test_an_upgrade_is_refused_before_sending_while_a_reserved_key_is_plain_text(
    config: Config, catalog: Catalog, table_name: str
) -> None:
    """§3b: from protocol 3 the upgrade bringing ``lifecycle`` is INVALID over a plain-text
    ``segcat.dropped`` (the table would count as dropped by accident); ``upgrade_protocol`` says so
    before anything is written, and goes through once the key is removed."""
    table = _legacy_table(config, catalog, table_name)
    dropped = {lifecycle.DROPPED_PROPERTY: "1000"}
    produce_raw(
        config, table.name.topic, [_raw_commit(table, Operation.SET_PROPERTIES, -1, table_properties=dropped)]
    )
    high = _high(config, table)
    with pytest.raises(MalformedCommit, match=r"holds 'segcat.dropped', set as plain text"):
        table.upgrade_protocol()
    assert _high(config, table) == high and table.protocol() == Protocol(1, ())
    with load_catalog(config).load_table(table.name) as writer:
        writer.set_properties({lifecycle.DROPPED_PROPERTY: None})
    table.upgrade_protocol()
    assert table.protocol() == versions.new_table_protocol() and not table.snapshot().dropped


def _twice(table: Table) -> tuple[Segment, Segment]:
    """One file, spelled relative to the table's root and as an absolute URI."""
    first = segment("a")
    return first, replace(segment("b"), path=f"file://{table.location()}/{first.path}")


def test_one_file_under_two_spellings_is_invalid_at_protocol_3_and_refused_by_writers(
    config: Config, table: Table
) -> None:
    """Regression (issue 20, item 6): one APPEND adding ``data/e1.parquet`` and
    ``file://<location>/data/e1.parquet`` was ACCEPTED and ``files()`` listed the file twice."""
    twice = _twice(table)
    high = _high(config, table)
    with (
        load_catalog(config).load_table(table.name) as writer,
        pytest.raises(MalformedCommit, match="name the same file"),
    ):
        writer.append(twice)
    assert _high(config, table) == high  # refused before sending
    (offset,) = produce_raw(config, table.name.topic, [_raw_commit(table, Operation.APPEND, 0, adds=twice)])
    verdict = next(iter(table.records(offset))).verdict
    assert verdict.outcome is Outcome.INVALID and "name the same file" in verdict.detail
    assert table.snapshot().files() == []


def test_a_protocol_2_log_keeps_one_file_twice_and_writers_still_refuse_it(
    config: Config, catalog: Catalog, table_name: str
) -> None:
    table = _legacy_table(config, catalog, table_name)
    creation = {LOCATION_PROPERTY: reader_of(table).root}
    twice = _twice(table)
    produce_raw(
        config,
        table.name.topic,
        [
            _raw_commit(
                table, Operation.UPGRADE_PROTOCOL, -1, protocol=Protocol(2, ()), table_properties=creation
            ),
            _raw_commit(table, Operation.APPEND, 0, adds=twice),
        ],
    )
    snap = table.snapshot()
    assert snap.protocol == Protocol(2, ()) and snap.live_count == 2  # protocol 2's verdict, kept
    assert len(snap.files()) == 2  # one file, listed under both spellings
    with (
        load_catalog(config).load_table(table.name) as writer,
        pytest.raises(MalformedCommit, match="name the same file"),
    ):
        writer.append(
            [replace(s, segment_id=f"{s.segment_id}2", path=s.path.replace("/a.", "/c.")) for s in twice]
        )


def test_a_column_type_change_is_a_typed_error_that_no_retry_can_win(config: Config, table: Table) -> None:
    """Issue 20 (smaller): rule 4d came out as ``CommitConflict`` (exit 3, "retry") though a retry
    never succeeds; it is ``ColumnTypeConflict`` (exit 2), before sending and after a race alike.
    The log's verdict stays REJECTED 4d."""
    text = (ColumnStats("id", ColumnType.STRING, "a", "z", 0),)
    with (
        load_catalog(config).load_table(table.name) as first,
        load_catalog(config).load_table(table.name) as late,
    ):
        late.refresh()  # its image: no type for "id" yet
        fixed_at = first.append([segment("a")])  # INT stats for "id"
        with pytest.raises(ColumnTypeConflict) as raced:
            late.append([replace(segment("b"), stats=text)])
        assert raced.value.version is not None and raced.value.conflicting_version == fixed_at
        verdict = next(iter(table.records(raced.value.version))).verdict
        assert verdict.outcome is Outcome.REJECTED and verdict.rule is Rule.COLUMN_TYPE_CHANGE
        high = _high(config, table)
        with pytest.raises(ColumnTypeConflict) as seen:
            late.commit_with_retry(
                lambda _: late.new_commit(Operation.APPEND, adds=[replace(segment("c"), stats=text)])
            )
        assert seen.value.version is None and _high(config, table) == high  # not sent, not retried
    assert exit_code(seen.value) == EXIT_INVALID and not isinstance(seen.value, CommitConflict)
