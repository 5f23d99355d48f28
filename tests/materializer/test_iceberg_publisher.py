"""The Iceberg publisher on the real stack: pyiceberg, which knows nothing of segcat, reads exactly
segcat's rows from the metadata of every version (appends, compactions, replaces, file deletes,
schema widening, a restart of the materializer), by snapshot id too; manifests are reused, so
the files written per version stay few as the table grows; a re-created table never serves the
old one's metadata."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pytest

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import TableAlreadyExists
from segcat.catalog.iceberg import layout
from segcat.catalog.iceberg.pointer import delete_pointer, read_pointer
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol.names import TableName
from segcat.catalog.read.vacuum import vacuum
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.redis import RedisStore
from segcat.materializer import iceberg_publisher
from tests.handles import reader_of
from tests.iceberg_publisher_support import iceberg_rows, parquet_segment, segcat_rows, wait_for_pointer
from tests.materializer_support import (
    PrivateRedis,
    bound_files,
    materializer_config,
    namespace,
    running_materializer,
    wait_until_following,
)

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


@pytest.fixture
def mconfig(config: Config, private_redis: PrivateRedis, tmp_path: Path) -> Config:
    return materializer_config(config, private_redis.url, tmp_path / "warehouse", every=4)


def _rows(start: int, n: int, *, extra: bool = False) -> pa.Table:
    columns: dict[str, pa.Array] = {
        "id": pa.array(range(start, start + n), pa.int64()),
        "name": pa.array([f"n{i}" for i in range(start, start + n)], pa.string()),
    }
    if extra:
        columns["score"] = pa.array([float(i) / 2 for i in range(start, start + n)], pa.float64())
    return pa.table(columns)


def _check(table: Table, config: Config, version: int) -> str:
    """pyiceberg reads segcat's rows at ``version`` from the pointer's metadata; its location."""
    pointer = wait_for_pointer(config, str(table.name), table.topic.topic_id, version)
    assert pointer.blocked_version is None, pointer.reason
    assert pointer.version == version and pointer.location is not None
    assert iceberg_rows(pointer.location) == segcat_rows(table, config, version)
    return pointer.location


def test_pyiceberg_reads_segcat_rows_at_every_version_and_after_a_restart(mconfig: Config) -> None:
    ns, pattern = namespace()
    name = f"{ns}.t"
    Catalog(mconfig).create_table(name)
    versions: list[int] = []
    with load_catalog(mconfig).load_table(name) as table:
        with running_materializer(mconfig, pattern) as service:
            wait_until_following(service, name)
            versions.append(table.append([parquet_segment(table, "a", _rows(0, 3))]))
            _check(table, mconfig, versions[-1])
            versions.append(
                table.append(
                    [parquet_segment(table, "b", _rows(3, 2)), parquet_segment(table, "c", _rows(5, 2))]
                )
            )
            _check(table, mconfig, versions[-1])
            # schema widening: a new column, null in the older files
            versions.append(table.append([parquet_segment(table, "d", _rows(7, 2, extra=True))]))
            _check(table, mconfig, versions[-1])
            versions.append(table.compact(["a", "b"], [parquet_segment(table, "ab", _rows(0, 5))]))
            _check(table, mconfig, versions[-1])
            versions.append(table.delete(drops=["c"]))
            _check(table, mconfig, versions[-1])
        # a backlog for the next instance (it starts from the newest key frame)
        versions.append(table.replace([parquet_segment(table, "r", _rows(100, 4, extra=True))]))
        versions.append(table.set_properties({"owner": "me"}))
        with running_materializer(mconfig, pattern):
            location = _check(table, mconfig, versions[-1])
            versions.append(table.append([parquet_segment(table, "e", _rows(200, 1))]))
            location = _check(table, mconfig, versions[-1])
        doc = json.loads(Path(location).read_text())
        assert doc["format-version"] == 2 and doc["properties"]["owner"] == "me"
        assert doc["properties"]["segcat.version"] == str(versions[-1])
        assert "schema.name-mapping.default" in doc["properties"]
        ops = {s["snapshot-id"]: s["summary"]["operation"] for s in doc["snapshots"]}
        assert (
            ops[versions[3]] == "replace" and ops[versions[4]] == "delete" and ops[versions[5]] == "overwrite"
        )
        assert versions[6] not in ops  # a properties version is no snapshot
        # time travel by snapshot id: each data version as segcat reads it
        for version in (versions[0], versions[2], versions[3], versions[5]):
            assert iceberg_rows(location, version) == segcat_rows(table, mconfig, version)


def test_manifests_are_reused_as_the_table_grows(mconfig: Config) -> None:
    ns, pattern = namespace()
    name = f"{ns}.t"
    Catalog(mconfig).create_table(name)
    store = ObjectStore.from_config(mconfig)
    with load_catalog(mconfig).load_table(name) as table, running_materializer(mconfig, pattern) as service:
        wait_until_following(service, name)
        files = bound_files(mconfig, name)
        written: list[int] = []
        seen: set[str] = set()
        version = -1
        for k in range(40):
            version = table.append([parquet_segment(table, f"s{k}", _rows(k * 10, 2))])
            wait_for_pointer(mconfig, name, table.topic.topic_id, version)
            now = set(store.list(layout.metadata_dir(files)))
            written.append(len(now - seen))
            seen = now
        # per version: the manifest list, the metadata, one new manifest, at most one merge
        assert max(written[1:]) <= 4, written
        doc = json.loads(store.get(layout.metadata_path(files, version)))
        assert doc["current-snapshot-id"] == version
        _check(table, mconfig, version)


def test_a_tombstone_is_published_as_delete_files(mconfig: Config) -> None:
    """A tombstone becomes delete files: the version and every later one are published, and
    pyiceberg reads segcat's rows at each."""
    ns, pattern = namespace()
    name = f"{ns}.t"
    Catalog(mconfig).create_table(name)
    with load_catalog(mconfig).load_table(name) as table, running_materializer(mconfig, pattern) as service:
        wait_until_following(service, name)
        first = table.append([parquet_segment(table, "a", _rows(0, 4))])
        _check(table, mconfig, first)
        tombstone = table.delete(predicates=["id = 1"])
        _check(table, mconfig, tombstone)
        later = table.append([parquet_segment(table, "b", _rows(10, 2))])
        _check(table, mconfig, later)


def test_an_unrepresentable_tombstone_blocks_until_the_files_it_deletes_in_are_gone(
    mconfig: Config,
) -> None:
    """No reader is handed rows that differ from segcat's: a version whose tombstone cannot be
    exported is not published (the pointer says which and why), nor is any later one while a file
    the tombstone deletes in is live; once those files are gone, versions are published again."""
    ns, pattern = namespace()
    name = f"{ns}.t"
    Catalog(mconfig).create_table(name)
    with load_catalog(mconfig).load_table(name) as table, running_materializer(mconfig, pattern) as service:
        wait_until_following(service, name)
        log_id = table.topic.topic_id
        first = table.append([parquet_segment(table, "a", _rows(0, 4))])
        _check(table, mconfig, first)
        # a string literal on a numeric column: Spark's answer is not pinned down (UnsupportedPredicate)
        tombstone = table.delete(predicates=["id = '1'"])
        later = table.append([parquet_segment(table, "b", _rows(10, 2))])
        pointer = wait_for_pointer(mconfig, name, log_id, later, published=False)
        assert (pointer.version, pointer.blocked_version) == (first, tombstone)
        assert pointer.reason and "id" in pointer.reason
        assert pointer.location is not None
        assert iceberg_rows(pointer.location) == segcat_rows(table, mconfig, first)
        # the tombstone deletes in nothing live any more: published again
        replaced = table.replace([parquet_segment(table, "c", _rows(20, 3))])
        _check(table, mconfig, replaced)


def test_turned_off_dropped_and_purged(mconfig: Config) -> None:
    """``segcat.iceberg.enabled=false`` stops the metadata (the pointer says so) and turning it on
    publishes the table as it is; a drop stops it too; a purge removes the files and pointer."""
    ns, pattern = namespace()
    name = f"{ns}.t"
    catalog = Catalog(mconfig)
    catalog.create_table(name)
    store = ObjectStore.from_config(mconfig)
    with running_materializer(mconfig, pattern) as service:
        wait_until_following(service, name)
        with load_catalog(mconfig).load_table(name) as table:
            log_id = table.topic.topic_id
            first = table.append([parquet_segment(table, "a", _rows(0, 2))])
            _check(table, mconfig, first)
            off = table.set_properties({"segcat.iceberg.enabled": "false"})
            hidden = table.append([parquet_segment(table, "b", _rows(2, 2))])
            pointer = wait_for_pointer(mconfig, name, log_id, hidden, published=False)
            assert (pointer.version, pointer.blocked_version) == (first, off)
            assert pointer.reason is not None and "segcat.iceberg.enabled=false" in pointer.reason
            on = table.set_properties({"segcat.iceberg.enabled": None})
            _check(table, mconfig, on)
            files = bound_files(mconfig, name)
            assert store.list(layout.iceberg_dir(files))
        dropped = catalog.drop_table(name)
        pointer = wait_for_pointer(mconfig, name, log_id, dropped, published=False)
        assert pointer.version == on and pointer.blocked_version == dropped
        assert pointer.reason == "the table is dropped"
    catalog.purge_table(name)
    assert read_pointer(RedisStore.from_config(mconfig), TableName.parse(name), log_id) is None
    assert not store.list(layout.iceberg_dir(files))


def test_a_recreated_table_never_serves_the_old_table_s_metadata(mconfig: Config) -> None:
    ns, pattern = namespace()
    name = f"{ns}.t"
    catalog = Catalog(mconfig)
    catalog.create_table(name)
    with running_materializer(mconfig, pattern) as service:
        wait_until_following(service, name)
        with load_catalog(mconfig).load_table(name) as table:
            old_log = table.topic.topic_id
            _check(table, mconfig, table.append([parquet_segment(table, "old", _rows(0, 3))]))
        admin = TopicAdmin(mconfig)
        admin.delete(TableName.parse(name))
        deadline = time.monotonic() + 60
        while True:
            try:
                catalog.create_table(name)
                break
            except TableAlreadyExists:
                assert time.monotonic() < deadline
                time.sleep(0.2)
        with load_catalog(mconfig).load_table(name) as table:
            assert table.topic.topic_id != old_log
            assert (
                read_pointer(RedisStore.from_config(mconfig), TableName.parse(name), table.topic.topic_id)
                is None
            )
            version = table.append([parquet_segment(table, "new", _rows(50, 2))])
            location = _check(table, mconfig, version)
            assert iceberg_rows(location) == _rows(50, 2).to_pylist()
            doc = json.loads(Path(location).read_text())
            assert [s["snapshot-id"] for s in doc["snapshots"]] == [version]


def test_history_retention_removes_iceberg_files_no_kept_metadata_needs(mconfig: Config) -> None:
    """Vacuum treats the metadata like key frames: what a kept version's (or a tagged version's)
    metadata references stays and reads; the rest of the old metadata goes."""
    ns, pattern = namespace()
    name = f"{ns}.t"
    Catalog(mconfig).create_table(name)
    store = ObjectStore.from_config(mconfig)
    with load_catalog(mconfig).load_table(name) as table:
        with running_materializer(mconfig, pattern) as service:
            wait_until_following(service, name)
            table.set_properties(
                {"segcat.history.retain.versions": "3", "segcat.iceberg.snapshots.keep": "2"}
            )
            versions = [table.append([parquet_segment(table, f"s{k}", _rows(k * 10, 2))]) for k in range(3)]
            tagged = versions[1]
            table.set_properties({"segcat.tag.keep": str(tagged)})
            versions += [
                table.append([parquet_segment(table, f"t{k}", _rows(100 + k, 1))]) for k in range(10)
            ]
            location = _check(table, mconfig, versions[-1])
        files = bound_files(mconfig, name)
        before = set(store.list(layout.iceberg_dir(files)))
        report = vacuum(reader_of(table), grace_ms=0, ignore_leases=True)
        gone = {f.path for f in report.files if "/iceberg/" in f.path}
        after = set(store.list(layout.iceberg_dir(files)))
        assert gone and len(after) < len(before)
        assert store.uri(layout.metadata_path(files, versions[-1])) not in gone
        assert store.uri(layout.metadata_path(files, tagged)) not in gone
        doc = json.loads(Path(location).read_text())
        kept = [s["snapshot-id"] for s in doc["snapshots"]]
        assert tagged in kept and doc["refs"]["keep"] == {"snapshot-id": tagged, "type": "tag"}
        for snapshot_id in kept:  # every snapshot the newest metadata lists still reads
            assert iceberg_rows(location, snapshot_id) == segcat_rows(table, mconfig, snapshot_id)


def test_a_failing_iceberg_write_never_stops_the_table(
    mconfig: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Storage refusing the Iceberg files: the pointer says why, the head (Redis, key frames) goes
    on; once storage takes them again, the table is published whole after the pause."""
    monkeypatch.setattr(iceberg_publisher, "RETRY_AFTER_S", 0.2)
    ns, pattern = namespace()
    name = f"{ns}.t"
    Catalog(mconfig).create_table(name)
    files = bound_files(mconfig, name)
    blocker = Path(ObjectStore.from_config(mconfig).uri(layout.iceberg_dir(files)))
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_bytes(b"not a directory")
    with load_catalog(mconfig).load_table(name) as table, running_materializer(mconfig, pattern) as service:
        wait_until_following(service, name)
        version = table.append([parquet_segment(table, "a", _rows(0, 2))])
        pointer = wait_for_pointer(mconfig, name, table.topic.topic_id, version, published=False)
        # the first version not published: the table's creation, or this one after the pause
        assert pointer.version == -1 and pointer.blocked_version is not None
        assert pointer.blocked_version <= version
        assert pointer.reason is not None and pointer.reason.startswith("writing the Iceberg metadata failed")
        blocker.unlink()
        _check(table, mconfig, table.append([parquet_segment(table, "b", _rows(2, 2))]))


def test_metadata_lost_is_rebuilt_from_the_key_frame(mconfig: Config) -> None:
    """No metadata at or before the key frame a restart loads: the publisher rebuilds the table's
    Iceberg view from the frame's live files, then follows the log again."""
    ns, pattern = namespace()
    name = f"{ns}.t"
    Catalog(mconfig).create_table(name)
    store = ObjectStore.from_config(mconfig)
    with load_catalog(mconfig).load_table(name) as table:
        with running_materializer(mconfig, pattern) as service:
            wait_until_following(service, name)
            for k in range(6):
                version = table.append([parquet_segment(table, f"s{k}", _rows(k * 10, 2))])
            merged = pa.concat_tables([_rows(0, 2), _rows(10, 2)])
            version = table.compact(["s0", "s1"], [parquet_segment(table, "s01", merged)])
            _check(table, mconfig, version)
        files = bound_files(mconfig, name)
        for path in store.list(layout.iceberg_dir(files)):
            store.delete(path)
        delete_pointer(RedisStore.from_config(mconfig), TableName.parse(name))
        with running_materializer(mconfig, pattern):
            _check(table, mconfig, version)
            later = table.delete(drops=["s2"])
            location = _check(table, mconfig, later)
        doc = json.loads(Path(location).read_text())
        assert doc["current-snapshot-id"] == later


def test_a_widened_column_keeps_its_field_id(mconfig: Config) -> None:
    """int then long in one column: one field id, the type promoted (as Iceberg allows), and
    pyiceberg reads the narrow file widened, as segcat does."""
    ns, pattern = namespace()
    name = f"{ns}.t"
    Catalog(mconfig).create_table(name)
    with load_catalog(mconfig).load_table(name) as table, running_materializer(mconfig, pattern) as service:
        wait_until_following(service, name)
        narrow = pa.table({"id": pa.array([1, 2], pa.int32()), "name": ["a", "b"]})
        first = _check(table, mconfig, table.append([parquet_segment(table, "n", narrow)]))
        wide = pa.table({"id": pa.array([2**40], pa.int64()), "name": ["c"]})
        location = _check(table, mconfig, table.append([parquet_segment(table, "w", wide)]))
    before, after = (json.loads(Path(p).read_text()) for p in (first, location))
    old = {f["name"]: (f["id"], f["type"]) for f in before["schemas"][-1]["fields"]}
    new = {f["name"]: (f["id"], f["type"]) for f in after["schemas"][-1]["fields"]}
    assert old["id"][1] == "int" and new["id"] == (old["id"][0], "long")
    assert after["current-schema-id"] != before["current-schema-id"]


def test_a_table_without_live_files_keeps_its_last_schema(mconfig: Config) -> None:
    """No live file: no row, and the last schema stays (an Iceberg table always has one; DuckDB
    refuses a table of no column); the columns keep their ids when files come back."""
    from pyiceberg.table import StaticTable

    ns, pattern = namespace()
    name = f"{ns}.t"
    Catalog(mconfig).create_table(name)
    with load_catalog(mconfig).load_table(name) as table, running_materializer(mconfig, pattern) as service:
        wait_until_following(service, name)
        first = _check(table, mconfig, table.append([parquet_segment(table, "a", _rows(0, 2))]))
        empty = _check(table, mconfig, table.delete(drops=["a"]))
        read = StaticTable.from_metadata(empty).scan().to_arrow()
        assert read.num_rows == 0 and read.column_names == ["id", "name"]
        again = _check(table, mconfig, table.append([parquet_segment(table, "b", _rows(5, 1))]))
    docs = [json.loads(Path(p).read_text()) for p in (first, empty, again)]
    current = [next(s for s in d["schemas"] if s["schema-id"] == d["current-schema-id"]) for d in docs]
    assert [{f["name"]: f["id"] for f in c["fields"]} for c in current] == [{"id": 1, "name": 2}] * 3
