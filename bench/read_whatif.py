"""What-if measurements on the very key frame Redis holds, for the read-path report.

Nothing here changes segcat: each experiment takes the key frame the materializer wrote
and times an alternative encoding, transport or listing step in isolation, so a change to
the Redis path can be weighed on measured figures instead of guesses.

- size and read time of the Arrow IPC key frame as stored, uncompressed, with ZSTD buffer
  compression, and without the ``segment_avro`` column (readers never use it when listing);
- the transfer of each variant from Redis with redis-py as configured (pure-Python RESP
  parser) and with a bare socket reading straight into one buffer (what a C parser such
  as hiredis gets close to); variants are written to a benchmark-owned key, deleted after;
- hashing the transferred bytes: SHA-256 (what ``RedisStore.load`` does), BLAKE2b, CRC-32;
- listing: ``Snapshot.files()`` against the same paths left as an Arrow array (no Python
  strings) and the ``to_pylist`` alone.
"""

from __future__ import annotations

import hashlib
import io
import socket
import statistics
import time
import zlib
from collections.abc import Callable
from functools import partial
from typing import Any, cast
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.compute as pc

from bench.runner import NS_PER_MS
from segcat.catalog.config import Config
from segcat.catalog.read.snapshot import Snapshot
from segcat.catalog.read.table import TableReader
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.frame_view import FrameView
from segcat.catalog.storage.redis import RedisStore, keys

BENCH_KEY_PREFIX = "segcat-bench:read-paths"


def _median_ms(fn: Callable[[], object], reps: int) -> float:
    fn()
    samples = []
    for _ in range(reps):
        start = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - start) / NS_PER_MS)
    return round(statistics.median(samples), 3)


def _ipc(table: pa.Table, compression: str | None) -> bytes:
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(compression=compression)
    with pa.ipc.new_stream(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return bytes(sink.getvalue().to_pybytes())


def _read_ipc(data: bytes) -> pa.Table:
    with pa.ipc.open_stream(pa.BufferReader(data)) as reader:
        return reader.read_all()


class RawGet:
    """``GET key`` over a bare socket, the reply read into one preallocated buffer."""

    def __init__(self, config: Config) -> None:
        url = urlsplit(config.redis_url)
        self.available = not (config.redis_password or url.password or url.scheme == "rediss")
        self._address = (url.hostname or "127.0.0.1", url.port or 6379)
        self._db = int((url.path or "/0").strip("/") or 0)

    def get(self, key: str) -> bytearray:
        with socket.create_connection(self._address, timeout=30) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            commands = b""
            if self._db:
                db = str(self._db).encode()
                commands += b"*2\r\n$6\r\nSELECT\r\n$%d\r\n%s\r\n" % (len(db), db)
            raw_key = key.encode()
            commands += b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(raw_key), raw_key)
            sock.sendall(commands)
            reader = cast(io.BufferedReader, sock.makefile("rb", buffering=65536))
            if self._db:
                reader.readline()
            header = reader.readline()
            if not header.startswith(b"$"):
                raise RuntimeError(f"unexpected reply {header[:40]!r}")
            length = int(header[1:])
            out = bytearray(length)
            view = memoryview(out)
            got = reader.readinto(view)
            while got < length:
                more = reader.readinto(view[got:])
                if not more:
                    raise RuntimeError("connection closed mid-value")
                got += more
            return out  # no copy into ``bytes`` on purpose


def keyframe_whatif(config: Config, redis: RedisStore, table: TableReader, reps: int = 5) -> dict[str, Any]:
    name = table.name.qualified
    raw = redis.client.hget(keys.keyframe_key(name), "data")
    assert isinstance(raw, bytes)
    stored = keyframe.from_ipc(raw, verified_bytes=True)  # lean since Redis key-frame format 2
    if "segment_avro" in stored.table.column_names:
        rows = stored.table
    else:  # the whole frame, for the variants that carry segment_avro: its Parquet copy
        assert table.files is not None
        try:
            rows = table.files.read_keyframe(stored.version).table
        except FileNotFoundError:  # a frame Redis got from a rebuild only: the newest whole one
            newest = table.files.newest_valid_keyframe()
            assert newest is not None
            rows = newest.table
    frame = keyframe.verify(rows)
    slim = rows.drop_columns(["segment_avro"])
    raw_get = RawGet(config)
    key = f"{BENCH_KEY_PREFIX}:{name}:whatif"
    variants: dict[str, dict[str, Any]] = {}
    try:
        for label, source, compression in (
            ("as stored in Redis", None, None),
            ("whole frame, lz4 (Redis format 1)", rows, "lz4"),
            ("uncompressed", rows, None),
            ("zstd", rows, "zstd"),
            ("without segment_avro, uncompressed", slim, None),
            ("without segment_avro, lz4", slim, "lz4"),
            ("without segment_avro, zstd", slim, "zstd"),
        ):
            data = raw if source is None else _ipc(source, compression)
            redis.client.set(key, data)
            entry: dict[str, Any] = {
                "bytes": len(data),
                "redis_py_get_ms": _median_ms(partial(redis.client.get, key), reps),
                "read_ipc_ms": _median_ms(partial(_read_ipc, data), reps),
                "sha256_ms": _median_ms(partial(hashlib.sha256, data), reps),
                "blake2b_ms": _median_ms(partial(hashlib.blake2b, data), reps),
                "crc32_ms": _median_ms(partial(zlib.crc32, data), reps),
            }
            if source is not None:
                entry["encode_ms"] = _median_ms(partial(_ipc, source, compression), max(1, reps // 2))
            if raw_get.available:
                got = raw_get.get(key)
                if bytes(got) != data:
                    raise AssertionError("raw GET returned other bytes")
                entry["raw_socket_get_ms"] = _median_ms(lambda: raw_get.get(key), reps)
            variants[label] = entry
    finally:
        redis.client.delete(key)

    snap = Snapshot(FrameView.from_keyframe(frame), table.root)
    paths = snap.segments.column("path")
    root = table.root.rstrip("/")

    def arrow_only() -> pa.ChunkedArray:
        if hasattr(snap, "files_arrow"):  # segcat's own Arrow listing, where this tree has it
            listed: pa.ChunkedArray = snap.files_arrow()
            return listed
        joined = pc.binary_join_element_wise(pa.scalar(root), paths, "/")
        return pc.if_else(pc.match_substring(paths, "://"), paths, joined)

    listed = arrow_only()
    if sorted(listed.to_pylist()) != sorted(snap.files()):
        raise AssertionError("the Arrow listing differs from Snapshot.files()")
    listing = {
        "files_ms": _median_ms(snap.files, reps),
        "arrow_array_only_ms": _median_ms(arrow_only, reps),
        "to_pylist_only_ms": _median_ms(listed.to_pylist, reps),
    }
    return {
        "rows": rows.num_rows,
        "variants": variants,
        "listing": listing,
        "keyframe_checksum_ms": _median_ms(lambda: keyframe.verify(rows), reps),
    }
