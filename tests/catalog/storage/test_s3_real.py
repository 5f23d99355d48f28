"""segcat on a real S3 API (S3Proxy): the materializer's history, vacuum and Spark on ``s3://``.

Every object is checked twice: through a client of its own (not segcat's) and in S3Proxy's
data directory, so nothing here can pass by writing to a local path by mistake.
"""

from __future__ import annotations

import datetime as dt
import os
import time
from pathlib import Path
from typing import Any

import pyarrow.fs as pafs
import pytest
from pyspark.sql import SparkSession

import segcat.spark_integration as si
from segcat import Catalog, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.protocol.model import Segment
from segcat.catalog.read.table import Tables
from segcat.catalog.read.vacuum import vacuum
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.table_files import TableFiles
from tests.handles import reader_of, tables_of
from tests.materializer_support import (
    PrivateRedis,
    materializer_config,
    namespace,
    running_materializer,
    wait_for_head,
    wait_until_following,
    write_load,
)
from tests.s3_server import S3Server, s3_server
from tests.spark_support import s3_spark, spark

pytestmark = [pytest.mark.kafka, pytest.mark.redis]

__all__ = ["s3_server", "s3_spark", "spark"]


def _stored(server: S3Server, uri: str) -> bool:
    """``uri`` (``s3://…``) is an object on the server, seen by another client and on its disk."""
    info = server.filesystem().get_file_info(uri.removeprefix("s3://"))
    return info.type == pafs.FileType.File and server.on_disk(uri).is_file()


def _wait_for_history(files: TableFiles, frames: int, timeout_s: float = 60.0) -> list[int]:
    """Key frame versions once at least ``frames`` exist and the archives reach the newest one."""
    deadline = time.monotonic() + timeout_s
    while True:
        versions = files.keyframe_versions()
        if len(versions) >= frames and files.archived_upto() >= versions[-1]:
            return versions
        assert time.monotonic() < deadline, f"only key frames {versions} on {files.store}"
        time.sleep(0.2)


def test_materializer_history_on_s3_answers_old_versions(
    s3_server: S3Server, config: Config, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    """Key frames and commit archives go to the s3:// warehouse, and old versions are read from
    them alone (no Redis, no Kafka replay) exactly as a replay from offset 0 has them."""
    base = materializer_config(config, private_redis.url, tmp_path / "unused", every=4)
    cfg = s3_server.config(base)
    ns, pattern = namespace()
    name = f"{ns}.events"
    catalog = Catalog(cfg)
    table = catalog.create_table(name)
    assert table.location().startswith(f"s3://{s3_server.bucket}/")
    with running_materializer(cfg, pattern) as service:
        wait_until_following(service, name)  # live commits: a backlog found at start gets one key frame
        write_load(cfg, name, 14, seed=5)
        assert tables_of(catalog).redis is not None
        wait_for_head(tables_of(catalog).redis, name, table.head_offset())
        assert reader_of(table).files is not None
        versions = _wait_for_history(reader_of(table).files, frames=2)

    files = reader_of(table).files
    store = files.store
    assert store.root == cfg.warehouse
    catalog_objects = store.list(f"{ns}/events/_catalog")
    archives = [p for p in catalog_objects if p.startswith(f"{files.base}/commits/")]
    assert archives, catalog_objects
    for version in versions:
        assert _stored(s3_server, store.uri(files.keyframe_path(version)))
    assert all(_stored(s3_server, store.uri(path)) for path in archives)

    reader = Tables(cfg, use_redis=False).open(name)
    checked = 0
    for version in range(versions[0], files.archived_upto() + 1):
        from_s3 = reader.snapshot(version=version, sources=("object-store",))
        replayed = reader.snapshot(version=version, sources=("kafka",))
        assert from_s3.origin == "object-store"
        assert (from_s3.version, from_s3.segment_ids(), from_s3.live_rows) == (
            replayed.version,
            replayed.segment_ids(),
            replayed.live_rows,
        ), version
        checked += 1
    assert checked >= 5


def test_vacuum_on_s3_deletes_unreferenced_files_and_keeps_live_ones(
    s3_server: S3Server, config: Config, table_name: str
) -> None:
    cfg = s3_server.config(config)
    table = Catalog(cfg).create_table(table_name)
    root = table.location()
    assert root.startswith("s3://")
    data = ObjectStore.from_uri(root, s3_endpoint=cfg.s3_endpoint, s3_region=cfg.s3_region)

    def segment(sid: str) -> Segment:
        relative = f"data/part=p0/{sid}.parquet"
        data.put(relative, os.urandom(64))
        return Segment(sid, relative, 64, 1, "p0")

    with load_catalog(cfg).load_table(table.name) as writer:
        writer.append([segment("a"), segment("b")])
        writer.compact(["a", "b"], [segment("ab")])
        writer.compact(["ab"], [segment("final")])
    data.put("data/part=p0/orphan.parquet", b"x" * 10)
    # S3 keeps whole seconds: a file of the vacuum's own second is too young even with grace 0
    (orphan_ms,) = (m for key, _, m in data.list_files("data") if key.endswith("orphan.parquet"))
    while (data.clock_ms("_catalog/_clock/now") or 0) <= orphan_ms:
        time.sleep(0.1)
    doomed = {"a.parquet", "b.parquet", "ab.parquet", "orphan.parquet"}

    dry = vacuum(reader_of(table), retain_versions=1, grace_ms=0, dry_run=True)
    assert {Path(f.path).name for f in dry.files} == doomed
    assert all(f.path.startswith(root + "/") for f in dry.files)
    assert all(_stored(s3_server, f.path) for f in dry.files)  # a dry run deletes nothing

    report = vacuum(reader_of(table), retain_versions=1, grace_ms=0)
    assert report.deleted == 4
    assert report.by_reason() == {
        "dropped": {"files": 3, "bytes": 192},
        "orphan": {"files": 1, "bytes": 10},
    }
    for f in report.files:
        assert not _stored(s3_server, f.path) and not s3_server.on_disk(f.path).exists()
    assert _stored(s3_server, f"{root}/data/part=p0/final.parquet")
    assert data.list("data") == ["data/part=p0/final.parquet"]
    assert table.snapshot().segment_ids() == {"final"}
    assert vacuum(reader_of(table), retain_versions=1, grace_ms=0).files == []  # nothing left to do


SCHEMA = "id BIGINT, day DATE, user STRING, amount DOUBLE"


def _rows(day: dt.date, ids: range) -> list[tuple[Any, ...]]:
    return [(i, day, f"u{i % 3}", i * 1.5) for i in ids]


@pytest.mark.spark
def test_spark_writes_and_reads_a_table_on_s3_through_s3a(
    s3_spark: SparkSession, s3_server: S3Server, config: Config, table_name: str
) -> None:
    cfg = s3_server.config(config)
    table = Catalog(cfg).create_table(table_name)
    rows = _rows(dt.date(2024, 1, 1), range(0, 6)) + _rows(dt.date(2024, 1, 2), range(6, 10))
    version = si.write(s3_spark.createDataFrame(rows, SCHEMA), table_name, partition_by="day", config=cfg)

    snap = table.snapshot(version)
    assert snap.live_count == 2 and snap.live_rows == len(rows)
    root = table.location()
    for seg in snap.segment_list():  # written by the executors, straight to the server
        assert _stored(s3_server, f"{root}/{seg.path}")

    df = si.read(s3_spark, table_name, config=cfg)
    files = df.inputFiles()
    assert len(files) == 2 and all(f.startswith(f"s3a://{s3_server.bucket}/") for f in files)
    got = sorted(tuple(r) for r in df.select("id", "day", "user", "amount").collect())
    assert got == sorted(rows)

    more = _rows(dt.date(2024, 1, 2), range(10, 12))
    si.write(s3_spark.createDataFrame(more, SCHEMA), table_name, partition_by="day", config=cfg)
    at_first = si.read(s3_spark, table_name, version=version, config=cfg)
    assert at_first.count() == len(rows)  # an old version still reads its own files from S3
    assert si.read(s3_spark, table_name, config=cfg).count() == len(rows) + len(more)
