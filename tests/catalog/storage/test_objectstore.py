"""ObjectStore: whole-object writes, listing and path refusal, on a directory and on real S3 (S3Proxy)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from segcat.catalog.config import Config
from segcat.catalog.errors import ConfigError
from segcat.catalog.storage.objectstore import TEMP_MARKER, ObjectStore
from tests.s3_server import BUCKET, S3Server, s3_server

__all__ = ["open_store", "s3_server"]


def make_config(warehouse: str, home: Path, s3_endpoint: str | None = None) -> Config:
    env = {"SEGCAT_HOME": str(home), "SEGCAT_WAREHOUSE": warehouse}
    if s3_endpoint:
        env["SEGCAT_S3_ENDPOINT"] = s3_endpoint
    return Config.load(env=env)


def open_store(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """A fresh, empty store of ``kind`` ("local" or "s3") built from a Config, as services do."""
    if kind == "local":
        return ObjectStore.from_config(make_config(str(tmp_path / "warehouse"), tmp_path))
    server: S3Server = request.getfixturevalue("s3_server")
    return ObjectStore.from_config(make_config(server.warehouse(), tmp_path, server.endpoint))


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    return open_store(request.param, request, tmp_path)


@pytest.fixture
def local(tmp_path: Path) -> ObjectStore:
    return ObjectStore.from_config(make_config(str(tmp_path / "warehouse"), tmp_path))


def _files_on_disk(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


# ---------------------------------------------------------------------------- both backends


def test_put_get_overwrite_exists_delete(store: ObjectStore) -> None:
    assert not store.exists("ns/t/a.bin")
    with pytest.raises(FileNotFoundError):
        store.get("ns/t/a.bin")
    store.put("ns/t/a.bin", b"first")
    assert store.exists("ns/t/a.bin")
    assert store.get("ns/t/a.bin") == b"first"
    store.put("ns/t/a.bin", b"second, longer")
    assert store.get("ns/t/a.bin") == b"second, longer"
    store.put("ns/t/a.bin", b"")
    assert store.get("ns/t/a.bin") == b""
    store.delete("ns/t/a.bin")
    assert not store.exists("ns/t/a.bin")
    store.delete("ns/t/a.bin")  # idempotent by default
    with pytest.raises(FileNotFoundError):
        store.delete("ns/t/a.bin", missing_ok=False)


def test_list_is_sorted_recursive_and_relative_to_the_root(store: ObjectStore) -> None:
    for path in ("ns/t/_catalog/b", "ns/t/_catalog/a", "ns/t/_catalog/sub/c", "ns/tt/x", "ns/t.txt", "top"):
        store.put(path, path.encode())
    assert store.list("ns/t/_catalog") == ["ns/t/_catalog/a", "ns/t/_catalog/b", "ns/t/_catalog/sub/c"]
    assert store.list("ns/t/_catalog/") == store.list("ns/t/_catalog")
    assert store.list("ns/t") == ["ns/t/_catalog/a", "ns/t/_catalog/b", "ns/t/_catalog/sub/c"]
    assert store.list("ns") == [
        "ns/t.txt",
        "ns/t/_catalog/a",
        "ns/t/_catalog/b",
        "ns/t/_catalog/sub/c",
        "ns/tt/x",
    ]
    assert "top" in store.list()
    assert store.list("missing/prefix") == []
    assert store.list("top") == []  # a file is not a directory


def test_concurrent_readers_only_ever_see_whole_objects(store: ObjectStore) -> None:
    versions = [bytes([i]) * (200_000 + i) for i in range(6)]
    store.put("k", versions[0])
    seen: list[bytes] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.append(store.get("k"))

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for data in versions[1:]:
            store.put("k", data)
    finally:
        stop.set()
        thread.join()
    assert seen
    assert all(data in versions for data in seen)
    assert store.get("k") == versions[-1]
    assert store.list() == ["k"]


# ---------------------------------------------------------------------------- local directory


def test_atomic_put_leaves_no_temp_files(local: ObjectStore, tmp_path: Path) -> None:
    for i in range(5):
        local.put(f"ns/t/_catalog/obj{i % 2}", str(i).encode() * 1000)
    assert _files_on_disk(tmp_path / "warehouse") == ["ns/t/_catalog/obj0", "ns/t/_catalog/obj1"]
    assert local.get("ns/t/_catalog/obj0") == b"4" * 1000


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_a_failed_put_keeps_the_old_object_and_leaves_no_temp_file(
    local: ObjectStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    local.put("ns/t/obj", b"old")

    def boom(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, failing, boom)
    with pytest.raises(OSError, match="disk full"):
        local.put("ns/t/obj", b"new")
    monkeypatch.undo()
    assert local.get("ns/t/obj") == b"old"
    assert _files_on_disk(tmp_path / "warehouse") == ["ns/t/obj"]


def test_a_crashed_writers_temp_file_is_never_listed(local: ObjectStore, tmp_path: Path) -> None:
    local.put("ns/t/obj", b"x")
    (tmp_path / "warehouse" / "ns" / "t" / f".obj{TEMP_MARKER}abc").write_bytes(b"half")
    assert local.list("ns") == ["ns/t/obj"]


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "/etc/passwd",
        "../escape",
        "a/../../escape",
        "a/./b",
        "a//b",
        "a/",
        ".",
        "..",
        "s3://other-bucket/x",
        "a\\..\\b",
        "a\x00b",
        "a\nb",
        f"a/.x{TEMP_MARKER}1",
    ],
)
def test_paths_outside_the_root_or_ambiguous_are_refused(
    local: ObjectStore, tmp_path: Path, bad: str
) -> None:
    for call in (
        lambda: local.put(bad, b"x"),
        lambda: local.get(bad),
        lambda: local.exists(bad),
        lambda: local.delete(bad),
    ):
        with pytest.raises(ValueError, match="refusing"):
            call()
    if bad not in ("", "a/"):  # "" and a trailing slash name the root / a directory for list()
        with pytest.raises(ValueError, match="refusing"):
            local.list(bad)
    assert not (tmp_path / "escape").exists()
    assert not (tmp_path / "warehouse").exists() or _files_on_disk(tmp_path / "warehouse") == []


def test_from_config_local_and_uri_forms(tmp_path: Path) -> None:
    relative = ObjectStore.from_config(make_config("relative-warehouse", tmp_path))
    assert relative.root == os.path.abspath("relative-warehouse")
    by_uri = ObjectStore.from_config(make_config(f"file://{tmp_path}/w2", tmp_path))
    by_uri.put("ns/t/x", b"1")
    assert (tmp_path / "w2" / "ns" / "t" / "x").read_bytes() == b"1"
    assert by_uri.uri("ns/t/x") == f"{tmp_path}/w2/ns/t/x"
    with pytest.raises(ConfigError, match="bucket"):
        ObjectStore.from_uri("s3:///nobucket")


def test_s3_store_names_its_root(s3_server: S3Server, tmp_path: Path) -> None:
    s3_endpoint = s3_server.endpoint
    store = ObjectStore.from_config(make_config(f"s3://{BUCKET}/pre/fix/", tmp_path, s3_endpoint))
    assert store.root == f"s3://{BUCKET}/pre/fix"
    store.put("ns/t/x", b"hello")
    assert store.uri("ns/t/x") == f"s3://{BUCKET}/pre/fix/ns/t/x"
    other = ObjectStore.from_config(make_config(f"s3://{BUCKET}/pre", tmp_path, s3_endpoint))
    assert other.list("fix") == ["fix/ns/t/x"]
