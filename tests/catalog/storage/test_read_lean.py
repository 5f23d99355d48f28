"""Lean reader views on real Kafka and Redis: every source answers a named version exactly as a
replay does, time travel skips a newer Redis key frame without fetching it, and a Redis key
frame in the old format (whole, SHA-256) is read, a damaged one falls back."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.log.producer import Delivery, SharedProducer
from segcat.catalog.protocol.model import ColumnStats, ColumnType, Segment
from segcat.catalog.read import lookup
from segcat.catalog.read.snapshot import Snapshot
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.redis import RedisStore, keys
from segcat.catalog.storage.table_files import TableFiles
from tests.factories import segment
from tests.handles import reader_of
from tests.keyframe_support import ipc_format1, sha256_digest
from tests.materializer_support import (
    PrivateRedis,
    materializer_config,
    namespace,
    running_materializer,
)

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


@pytest.fixture
def mconfig(config: Config, private_redis: PrivateRedis, tmp_path: Path) -> Config:
    return materializer_config(config, private_redis.url, tmp_path / "warehouse", every=4)


def _rich(i: int) -> Segment:
    return Segment(
        segment_id=f"r{i:03d}",
        path=f"data/r{i:03d}.parquet",
        size_bytes=1_000 + i,
        row_count=10 + i,
        partition=f"p{i % 3}",
        stats=(
            ColumnStats("id", ColumnType.INT, min=i, max=i + 9, null_count=0),
            ColumnStats("name", ColumnType.STRING, min="a", max=f"z{i}", null_count=1),
            ColumnStats("x", ColumnType.FLOAT, min=-1.0, max=float(i), null_count=0, nan_count=0),
            ColumnStats("day", ColumnType.DATE, min=dt.date(2024, 1, 1 + i % 28), max=dt.date(2024, 2, 1)),
            ColumnStats(
                "at", ColumnType.TIMESTAMP, min=dt.datetime(2024, 1, 1, tzinfo=dt.UTC), max=None, null_count=2
            ),
        ),
        schema='{"fields": []}',
    )


def _wait_for_head(store: RedisStore, table: str, version: int) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        head = store.head(table)
        if head is not None and head.version >= version:
            return
        time.sleep(0.05)
    raise AssertionError(f"redis never reached version {version}")


def _same(got: Snapshot, expected: Snapshot, where: str) -> None:
    assert got.version == expected.version, where
    mine, theirs = got.segments, expected.segments
    assert sorted(mine.column_names) == sorted(theirs.column_names), where
    mine = mine.select(theirs.column_names).sort_by("segment_id")  # sources may order columns apart
    assert mine.schema == theirs.schema, where
    for column in theirs.column_names:
        assert mine.column(column).equals(theirs.sort_by("segment_id").column(column)), f"{where}: {column}"
    assert got.files_arrow().to_pylist() == got.files(), where
    assert sorted(got.files()) == sorted(expected.files()), where
    assert got.segment_list() == expected.segment_list(), where
    assert (got.live_rows, got.live_bytes, got.live_count) == (
        expected.live_rows,
        expected.live_bytes,
        expected.live_count,
    ), where
    assert (got.properties, got.tombstones, got.schema) == (
        expected.properties,
        expected.tombstones,
        expected.schema,
    )


def _build(mconfig: Config) -> tuple[Table, list[int]]:
    ns, pattern = namespace()
    name = f"{ns}.lean"
    table = Catalog(mconfig).create_table(name)
    with load_catalog(mconfig).load_table(name) as writer, running_materializer(mconfig, pattern):
        versions = [writer.append([_rich(3 * k), _rich(3 * k + 1), _rich(3 * k + 2)]) for k in range(5)]
        versions.append(writer.compact(["r000", "r004"], [segment("c0", "p0")]))
        versions.append(writer.set_properties({"k": "v"}))
        versions.append(writer.delete(predicates=["id = 3"]))
        versions += [writer.append([_rich(100 + k)]) for k in range(4)]
        versions.append(writer.compact(["r100", "c0"], [_rich(200)]))
        _wait_for_head(RedisStore.from_config(mconfig), name, versions[-1])
    return table, versions


def test_every_source_answers_every_version_as_a_replay_does(
    mconfig: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    table, versions = _build(mconfig)
    cut_back: list[int] = []
    real_next = lookup.from_next_keyframe

    def counting_next(files: TableFiles, bound: int) -> lookup.Found | None:
        found = real_next(files, bound)
        if found is not None:
            cut_back.append(bound)
        return found

    monkeypatch.setattr(lookup, "from_next_keyframe", counting_next)
    redis = reader_of(table).redis
    assert redis is not None
    kfv = redis.keyframe_version(table.name.qualified)
    assert kfv is not None and kfv > 0  # deltas after it: usually (K = 4), unless a frame was cut last
    fetched: list[str] = []
    real_load = redis.load

    def counting_load(name: object) -> object:
        fetched.append(str(name))
        return real_load(name)  # type: ignore[arg-type]

    redis.load = counting_load  # type: ignore[method-assign,assignment]
    for version in [-1, 0, *versions]:
        expected = reader_of(table).snapshot(version, sources=("kafka",))
        for sources in (("redis", "object-store", "kafka"), ("object-store", "kafka"), ("redis", "kafka")):
            fetched.clear()
            got = reader_of(table).snapshot(version, sources=sources)
            _same(got, expected, f"{sources} at {version}")
            if version >= 0 and version < kfv:
                assert not fetched, f"the newer Redis key frame was fetched for version {version}"
            if "redis" in sources and version >= kfv:
                assert got.origin == "redis", (version, got.origin)
    appends = {*versions[:5], *versions[8:12]}  # _build's APPENDs (the rest change more)
    assert reader_of(table).files is not None
    frames = reader_of(table).files.keyframe_versions()
    eligible = [
        v
        for previous, frame in zip([-1, *frames], frames, strict=False)
        for v in range(previous + 1, frame)
        if v in versions
        and all(w in appends for w in versions if v < w <= frame)
        and any(previous < w <= v for w in versions)
    ]
    # the materializer places the frames; wherever only APPENDs follow a version up to the next
    # frame, that frame answered it
    assert set(eligible) <= set(cut_back), (eligible, cut_back, frames)
    head = table.snapshot()
    assert head.origin == "redis"
    assert head._view.lean
    _same(head, reader_of(table).snapshot(sources=("kafka",)), "head")
    older = table.snapshot(versions[2])
    assert older.diff(head) == reader_of(table).snapshot(versions[2], sources=("kafka",)).diff(
        reader_of(table).snapshot(sources=("kafka",))
    )
    assert head.segment_page("r005", 3) == [s for s in head.segment_list() if s.segment_id > "r005"][:3]

    # Segment objects of a lean Redis view come from the Parquet copy of its key frame; without
    # it (a frame Redis got from a rebuild only), from object storage and Kafka afresh
    assert reader_of(table).files is not None
    reader_of(table).files.store.delete(reader_of(table).files.keyframe_path(kfv))
    again = table.snapshot()
    assert again.origin == "redis"
    _same(again, reader_of(table).snapshot(sources=("kafka",)), "head without the Parquet copy")


def test_an_old_format_redis_key_frame_is_read_and_a_damaged_one_falls_back(mconfig: Config) -> None:
    table, versions = _build(mconfig)
    redis = reader_of(table).redis
    assert redis is not None and reader_of(table).files is not None
    name = table.name.qualified
    kfv = redis.keyframe_version(name)
    assert kfv is not None
    expected = reader_of(table).snapshot(sources=("kafka",))
    lean = redis.keyframe(name)
    assert lean is not None and keyframe.from_ipc(lean[1], verified_bytes=True).lean

    whole = reader_of(table).files.read_keyframe(kfv).table
    old = ipc_format1(whole)
    redis.client.hset(keys.keyframe_key(name), mapping={"sha256": sha256_digest(old), "data": old})
    got = table.snapshot()
    assert got.origin == "redis"
    _same(got, expected, "format-1 value")
    assert "segment_avro" not in got.segments.column_names

    redis.client.hset(keys.keyframe_key(name), "data", old[:-10])  # torn: fails the SHA-256
    fell_back = table.snapshot()
    assert fell_back.origin.startswith("object-store")
    _same(fell_back, expected, "damaged format-1 value")

    bad = bytearray(lean[1])
    bad[len(bad) // 2] ^= 0x01  # a flipped bit in a format-2 value: fails the CRC-32
    redis.client.hset(keys.keyframe_key(name), mapping={"sha256": f"crc32:{0:08x}", "data": bytes(bad)})
    _same(table.snapshot(), expected, "damaged format-2 value")
    assert table.snapshot().origin.startswith("object-store")
    assert isinstance(table.snapshot(versions[0]).files_arrow(), pa.ChunkedArray)


def test_segments_of_a_redis_view_from_the_empty_frame(
    config: Config, private_redis: PrivateRedis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A materializer that finds a new topic before its first record puts the empty table's frame
    (version -1) in Redis; commits then chain onto it, with no key frame in object storage yet.
    ``Segment`` objects come from that empty frame and the same commits (this once asked object
    storage for key frame -1: ValueError, seen in CI on the secure stack's Spark read)."""
    mconfig = materializer_config(config, private_redis.url, tmp_path / "warehouse", every=1_000)
    ns, pattern = namespace()
    name = f"{ns}.fresh"
    store = RedisStore.from_config(mconfig)
    real_write = SharedProducer.write

    def after_the_empty_frame(producer: SharedProducer, *args: Any, **kwargs: Any) -> Delivery:
        """The creation record (the catalog's shared producer writes it) waits for the empty frame."""
        deadline = time.monotonic() + 60
        while store.keyframe_version(name) != -1:
            assert time.monotonic() < deadline, "the empty table's frame never reached redis"
            time.sleep(0.05)
        return real_write(producer, *args, **kwargs)

    monkeypatch.setattr(SharedProducer, "write", after_the_empty_frame)
    with running_materializer(mconfig, pattern):
        table = Catalog(mconfig).create_table(name)
        with load_catalog(mconfig).load_table(name) as writer:
            versions = [writer.append([_rich(k)]) for k in range(3)]
        _wait_for_head(store, name, versions[-1])
    assert reader_of(table).files is not None and reader_of(table).files.keyframe_versions() == []
    assert store.keyframe_version(name) == -1
    got = table.snapshot()
    assert got.origin == "redis"
    _same(got, reader_of(table).snapshot(sources=("kafka",)), "chained onto the empty frame")
    assert [s.segment_id for s in got.segment_list()] == ["r000", "r001", "r002"]
