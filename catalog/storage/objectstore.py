"""The warehouse as a flat key → bytes store over ``pyarrow.fs`` (docs/PROTOCOL.md §6, object storage).

Every object is written whole, so a reader sees either the old object or the new one,
never a torn one: a local directory gets a temp file in the same directory, fsync and an
atomic rename; S3 (and GCS) get a single upload, which the service makes visible only
once complete (one PUT, or one completed multipart upload for large objects). Keys are
relative to the warehouse root and checked, so no caller can escape the root.
"""

from __future__ import annotations

import builtins
import contextlib
import os
import re
import secrets
import tempfile
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs

from segcat.catalog import urls
from segcat.catalog.config import Config
from segcat.catalog.errors import ConfigError
from segcat.catalog.storage.provenance import read_footer_provenance

_READ_ATTEMPTS = 8
TEMP_MARKER = ".segcat-tmp-"
"""Temp files carry this in their name; listings never show them."""

_BAD_CHARACTERS = re.compile(r"[\x00-\x1f\x7f\\]")
_SINGLE_UPLOAD: tuple[type[pafs.FileSystem], ...] = tuple(
    cls for cls in (getattr(pafs, "S3FileSystem", None), getattr(pafs, "GcsFileSystem", None)) if cls
)
"""Object stores whose one upload becomes visible only when complete (no rename needed)."""


def check_key(path: str, *, allow_root: bool = False) -> str:
    """Return ``path`` if it is a clean relative key, else raise ``ValueError``.

    Refused: absolute paths, URIs, ``.``/``..``/empty components, backslashes and control
    characters — anything that could name an object outside the root or two names for one.
    """
    if not isinstance(path, str):
        raise ValueError(f"object path must be a string, got {type(path).__name__}")
    if path == "" and allow_root:
        return path
    if not path or path.startswith("/") or "://" in path or _BAD_CHARACTERS.search(path):
        raise ValueError(f"refusing object path {path[:80]!r}: must be a clean path relative to the root")
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"refusing object path {path[:80]!r}: empty, '.' or '..' component")
    if any(TEMP_MARKER in part for part in parts):
        raise ValueError(f"refusing object path {path[:80]!r}: reserved temp-file name")
    return path


@dataclass(frozen=True)
class _Backend:
    fs: pafs.FileSystem
    root: str
    """The root in the filesystem's own path syntax (no trailing slash)."""
    local: bool


class ObjectStore:
    """Whole-object put/get/list/delete under one root (a local directory or a bucket prefix)."""

    def __init__(self, fs: pafs.FileSystem, root: str) -> None:
        local = isinstance(fs, pafs.LocalFileSystem)
        root = root.rstrip("/") or "/"
        if local:
            root = os.path.abspath(root)
        self._backend = _Backend(fs, root, local)
        self._uri_prefix = root if local else f"{fs.type_name}://{root}"

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_config(cls, config: Config) -> ObjectStore:
        """The store for ``config.warehouse``: a directory path, ``s3://bucket/prefix`` or any URI."""
        return cls.from_uri(config.warehouse, s3_endpoint=config.s3_endpoint, s3_region=config.s3_region)

    @classmethod
    def from_uri(
        cls, warehouse: str, *, s3_endpoint: str | None = None, s3_region: str | None = None
    ) -> ObjectStore:
        """The store for ``warehouse``; ``ConfigError`` (never echoing credentials) if it names none."""
        urls.check_warehouse(warehouse, "the warehouse address")
        if s3_endpoint is not None:
            urls.check_endpoint(s3_endpoint, "the S3 endpoint")
        try:
            if warehouse.startswith("s3://"):
                parsed = urlsplit(warehouse)
                root = f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")
                return cls(s3_filesystem(parsed.netloc, s3_endpoint, s3_region), root)
            if "://" in warehouse:
                fs, root = pafs.FileSystem.from_uri(warehouse)
                return cls(fs, root)
        except (ValueError, pa.ArrowException) as exc:  # ArrowInvalid: a bucket or scheme pyarrow refuses
            raise ConfigError(f"the warehouse {warehouse!r} cannot be opened: {exc}") from None
        return cls(pafs.LocalFileSystem(), warehouse)

    # ------------------------------------------------------------------ operations

    @property
    def root(self) -> str:
        return self._uri_prefix

    def uri(self, path: str) -> str:
        """A printable full name of ``path`` (for logs and errors)."""
        return f"{self._uri_prefix.rstrip('/')}/{check_key(path)}"

    def _full(self, path: str) -> str:
        return f"{self._backend.root.rstrip('/')}/{check_key(path)}"

    def put(self, path: str, data: bytes) -> None:
        """Write ``data`` as the whole object ``path``, replacing any previous one atomically."""
        full = self._full(path)
        if self._backend.local:
            _put_local(full, data)
        elif isinstance(self._backend.fs, _SINGLE_UPLOAD):
            with self._backend.fs.open_output_stream(full) as out:
                out.write(data)
        else:  # other filesystems (HDFS, …): write beside it, then rename
            parent, name = full.rsplit("/", 1)
            self._backend.fs.create_dir(parent, recursive=True)
            temp = f"{parent}/.{name}{TEMP_MARKER}{secrets.token_hex(8)}"
            try:
                with self._backend.fs.open_output_stream(temp) as out:
                    out.write(data)
                self._backend.fs.move(temp, full)
            except BaseException:
                with contextlib.suppress(OSError):
                    self._backend.fs.delete_file(temp)
                raise

    def get(self, path: str) -> bytes:
        """The whole object; ``FileNotFoundError`` if it does not exist."""
        full = self._full(path)
        if self._backend.local:
            with open(full, "rb") as handle:
                return handle.read()
        return self._get_remote(full)

    def _get_remote(self, full: str) -> bytes:
        """Read an object that may be overwritten meanwhile, returning one whole version of it.

        pyarrow reads S3 as HEAD (size) + one ranged GET; if the object is replaced in
        between by one of another size, the GET returns a prefix of the new object. So the
        read is bracketed by two HEADs and retried unless both agree with what was read.
        """
        fs = self._backend.fs
        for attempt in range(_READ_ATTEMPTS):
            if attempt:
                time.sleep(0.02 * 2**attempt)  # let a burst of rewrites settle
            before = fs.get_file_info(full)
            if before.type != pafs.FileType.File:
                raise FileNotFoundError(f"no object {full}")
            with fs.open_input_file(full) as handle:
                size = handle.size()
                data = bytes(handle.read())
            after = fs.get_file_info(full)
            if len(data) == size == before.size and (after.type, after.size, after.mtime) == (
                before.type,
                before.size,
                before.mtime,
            ):
                return data
        raise OSError(f"object {full} kept changing while it was read ({_READ_ATTEMPTS} attempts)")

    def exists(self, path: str) -> bool:
        return bool(self._backend.fs.get_file_info(self._full(path)).type == pafs.FileType.File)

    def delete(self, path: str, *, missing_ok: bool = True) -> None:
        """Remove the object; absent is fine by default (deletes are retried, so they must be idempotent)."""
        full = self._full(path)
        try:
            if self._backend.local:
                os.unlink(full)
            else:
                self._backend.fs.delete_file(full)
        except FileNotFoundError:
            if not missing_ok:
                raise

    @property
    def uses_temp_files(self) -> bool:
        """Whether ``put`` writes a temp file beside the object (not S3 / GCS: one upload)."""
        return not isinstance(self._backend.fs, _SINGLE_UPLOAD)

    def remove_stale_temp_files(self, prefix: str, older_than_s: float) -> list[str]:
        """Delete the temp files under the directory ``prefix`` last written ``older_than_s`` ago.

        A process killed inside ``put`` leaves its temp file behind (listings hide it, so it
        would stay forever). Only old ones go: a younger one may belong to a ``put`` running
        right now in another process. Returns the keys removed, relative to the root.
        """
        if not self.uses_temp_files:
            return []
        root = self._backend.root.rstrip("/")
        infos = self._infos(prefix)
        cutoff_ns = time.time_ns() - int(older_than_s * 1e9)
        removed = []
        for info in infos:
            if info.type != pafs.FileType.File or TEMP_MARKER not in info.base_name:
                continue
            if info.mtime_ns is None or info.mtime_ns > cutoff_ns:
                continue
            try:
                if self._backend.local:
                    os.unlink(info.path)
                else:
                    self._backend.fs.delete_file(info.path)
            except FileNotFoundError:
                continue  # removed meanwhile (its put finished, or another sweeper)
            removed.append(info.path[len(root) + 1 :])
        return sorted(removed)

    def _infos(self, prefix: str) -> list[pafs.FileInfo]:
        """Everything below the directory ``prefix`` (recursively); [] when it does not exist."""
        check_key(prefix.rstrip("/"), allow_root=True)
        root = self._backend.root.rstrip("/")
        base = f"{root}/{prefix.strip('/')}".rstrip("/") if prefix.strip("/") else root
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        try:
            infos: list[pafs.FileInfo] = self._backend.fs.get_file_info(selector)
        except NotADirectoryError:
            return []
        return infos

    def list(self, prefix: str = "") -> list[str]:
        """Every object under the directory ``prefix`` (recursively), sorted, relative to the root."""
        root = self._backend.root.rstrip("/")
        infos = self._infos(prefix)
        strip = len(root) + 1
        found = (
            info.path[strip:]
            for info in infos
            if info.type == pafs.FileType.File and TEMP_MARKER not in info.base_name
        )
        return sorted(found)

    def provenance(self, path: str) -> dict[str, str] | None:
        """The provenance a data file records in its Parquet footer (``storage.provenance``)."""
        return read_footer_provenance(self._backend.fs, self._full(path))

    def list_files(self, prefix: str = "") -> builtins.list[tuple[str, int, int]]:
        """``(key, size, mtime_ms)`` of every file under ``prefix``, temp files included (vacuum);
        ``mtime_ms`` is -1 when the storage does not say (an unknown age: never old enough)."""
        root = self._backend.root.rstrip("/")
        strip = len(root) + 1
        return [
            (
                info.path[strip:],
                int(info.size or 0),
                -1 if info.mtime_ns is None else info.mtime_ns // 1_000_000,
            )
            for info in self._infos(prefix)
            if info.type == pafs.FileType.File
        ]

    def clock_ms(self, path: str) -> int | None:
        """The storage's own time now: the modification time (ms) of ``path`` written afresh.

        File ages (``list_files``' ``mtime_ms``) are in the storage's clock, which need not be
        this machine's; comparing them with this value compares like with like. ``path`` should
        sit in a folder of its own (the folder is listed). None when the storage keeps no
        modification times."""
        self.put(path, b"")
        full = self._full(path)
        # read back the way ``list_files`` reads ages (a listing of its folder), never by a HEAD:
        # S3 lists times in milliseconds but heads them in whole seconds, and a clock a second
        # behind the listed ages would make every file written in that second look too young
        for info in self._infos(path.rsplit("/", 1)[0] if "/" in path else path):
            if info.path == full:
                return None if info.mtime_ns is None else int(info.mtime_ns) // 1_000_000
        return None

    def __repr__(self) -> str:
        return f"ObjectStore({self._uri_prefix!r})"


def _put_local(full: str, data: bytes) -> None:
    """Temp file in the same directory + fsync + ``os.replace`` + fsync of the directory."""
    directory, name = os.path.split(full)
    os.makedirs(directory, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=f".{name}{TEMP_MARKER}", dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, full)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    _fsync_directory(directory)


def _fsync_directory(directory: str) -> None:
    """Make the rename itself durable (POSIX); a no-op where directories cannot be opened."""
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)


def s3_filesystem(
    bucket: str, endpoint: str | None, region: str | None, *, create_buckets: bool = False
) -> pafs.S3FileSystem:
    """An S3 filesystem: credentials from the standard AWS variables (or the SDK's usual chain).

    ``create_buckets`` lets ``create_dir`` make a bucket: only a stack's set-up asks for it
    (``warehouse_ready``); the catalog itself never creates buckets.

    ``endpoint`` may carry a scheme (``http://127.0.0.1:9000`` for MinIO); a warehouse on a
    custom endpoint defaults to region ``us-east-1`` instead of asking AWS where the bucket is.
    """
    scheme: str | None = None
    if endpoint and "://" in endpoint:
        parsed = urlsplit(endpoint)
        scheme, endpoint = parsed.scheme, parsed.netloc + parsed.path.rstrip("/")
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region is None:
        if endpoint:
            region = "us-east-1"
        else:
            with contextlib.suppress(OSError):
                region = pafs.resolve_s3_region(bucket)
    access_key = os.environ.get("AWS_ACCESS_KEY_ID")
    secret_key = os.environ.get("AWS_SECRET_ACCESS_KEY")
    explicit = bool(access_key and secret_key)
    return pafs.S3FileSystem(
        access_key=access_key if explicit else None,
        secret_key=secret_key if explicit else None,
        session_token=os.environ.get("AWS_SESSION_TOKEN") if explicit else None,
        region=region,
        scheme=scheme,
        endpoint_override=endpoint or None,
        allow_bucket_creation=create_buckets,
    )


def filesystem(root: str, s3_endpoint: str | None, s3_region: str | None) -> tuple[pafs.FileSystem, str]:
    """The filesystem holding ``root`` (a local path, ``s3://bucket/key`` or any URI pyarrow
    opens) and ``root`` in that filesystem's own path syntax: how executors write segment files
    and readers outside Spark open them (``catalog.read.changes``)."""
    if root.startswith("s3://"):
        parsed = urlsplit(root)
        base = f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")
        return s3_filesystem(parsed.netloc, s3_endpoint, s3_region), base
    if "://" in root:
        fs, base = pafs.FileSystem.from_uri(root)
        return fs, base.rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(root)
