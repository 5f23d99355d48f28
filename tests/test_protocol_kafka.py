"""Protocol versions on a real broker: new tables, old logs, upgrades, unknown versions and features."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from segcat.catalog.config import Config
from segcat.catalog.errors import InvalidArgument, MalformedCommit, UnsupportedProtocol
from segcat.catalog.log.reader import LogReader
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol import codec, versions
from segcat.catalog.protocol.model import Commit, Operation, Protocol
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.protocol.state import LOCATION_PROPERTY
from segcat.catalog.read.table import Catalog, Table
from segcat.producers import TableWriter
from tests.factories import produce_raw, segment

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
    with TableWriter(relative, table_name) as writer:
        writer.append([segment("s1")])
    monkeypatch.chdir(tmp_path / "b")
    reader = Catalog(relative).table(table_name)
    snap = reader.snapshot()
    expected = str(tmp_path / "a" / "warehouse" / table_name.replace(".", "/"))
    assert created.location() == expected == snap.root
    assert snap.files() == [f"{expected}/data/2020-01/s1.parquet"]


def test_an_unknown_protocol_version_is_refused_by_readers_and_writers(config: Config, table: Table) -> None:
    with TableWriter(config, table.name) as writer:
        before = writer.append([segment("a")])
    (upgrade_at,) = produce_raw(
        config,
        table.name.topic,
        [_raw_commit(table, Operation.UPGRADE_PROTOCOL, before, protocol=Protocol(99, ()))],
    )
    with pytest.raises(UnsupportedProtocol, match=r"protocol version 99 .* upgrade segcat"):
        table.snapshot()
    with pytest.raises(UnsupportedProtocol):
        table.state()
    assert table.snapshot(before).live_count == 1  # versions before the upgrade stay readable
    high = _high(config, table)
    with TableWriter(config, table.name) as writer, pytest.raises(UnsupportedProtocol):
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
    table = catalog.table(name)
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
    assert snap.location == table.root
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
    with TableWriter(config, name) as writer, pytest.raises(MalformedCommit):
        writer.commit(writer.new_commit(Operation.APPEND, adds=[segment("c")], table_properties={"k": "v"}))


def test_a_protocol_2_table_gets_the_lifecycle_feature_by_an_explicit_upgrade(
    config: Config, catalog: Catalog, table_name: str
) -> None:
    name = TableName.parse(table_name)
    TopicAdmin(config).create(name)  # a table as segcat created them before the lifecycle feature
    table = catalog.table(name)
    produce_raw(
        config,
        name.topic,
        [
            _raw_commit(
                table,
                Operation.UPGRADE_PROTOCOL,
                -1,
                protocol=Protocol(2, ()),
                table_properties={LOCATION_PROPERTY: table.root},
            )
        ],
    )
    assert table.protocol() == Protocol(2, ())
    with TableWriter(config, name) as writer, writer.intent("data/") as intent:
        assert not intent.active  # inert: the table has no intents yet
    with pytest.raises(InvalidArgument, match="segcat table upgrade"):
        table.prune_log()
    upgraded_at = table.upgrade_protocol()
    assert table.protocol() == versions.new_table_protocol()
    assert table.upgrade_protocol() == upgraded_at  # nothing left to do
    with TableWriter(config, name) as writer, writer.intent("data/") as intent:
        assert intent.active and intent.version is not None
        assert writer.refresh().intents[intent.intent_id].prefix == "data/"
