"""The Iceberg publisher on the real stack: pyiceberg, which knows nothing of segcat, reads exactly
segcat's rows from the metadata of every version (appends, compactions, replaces, file deletes,
schema widening, a restart of the materializer), by snapshot id too; manifests are reused, so
the files written per version stay few as the table grows; a re-created table never serves the
old one's metadata."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.iceberg import layout
from segcat.catalog.storage.objectstore import ObjectStore
from tests.iceberg_support import iceberg_rows, parquet_segment, segcat_rows, wait_for_pointer
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
