"""``RedisStore``: typed reads and writes of the cache, each raising ``ServiceUnavailable`` on trouble.

The materializer writes here and readers read here first. Every method that talks to Redis
raises :class:`ServiceUnavailable` when it cannot be reached in time, so a reader falls back
to object storage or Kafka (slower, never wrong).
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeAlias
from urllib.parse import urlsplit

import redis
from isal import isal_zlib
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.commands.core import Script
from redis.exceptions import (
    AskError,
    AuthenticationError,
    ClusterError,
    NoPermissionError,
    NoScriptError,
    RedisClusterException,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from segcat.catalog.config import Config
from segcat.catalog.errors import ConfigError, CorruptKeyFrame, ServiceUnavailable
from segcat.catalog.protocol.names import table_name
from segcat.catalog.protocol.version_change import VersionChange
from segcat.catalog.storage.redis import keys
from segcat.catalog.storage.redis.batch import RecordBatch
from segcat.catalog.storage.redis.keys import TableRef
from segcat.catalog.storage.redis.subscription import Subscription
from segcat.catalog.storage.redis.types import CachedTable, Head, StreamEntry

log = logging.getLogger("segcat.redis")

DEFAULT_SOCKET_TIMEOUT_S = 2.0
"""Short on purpose: a reader that cannot reach Redis falls back to object storage / Kafka."""
DEFAULT_HEALTH_CHECK_INTERVAL_S = 15


def _opt_int(raw: bytes | None) -> int | None:
    return None if raw is None or raw == b"" else int(raw)


def _opt_str(raw: bytes | None) -> str | None:
    return None if raw is None or raw == b"" else raw.decode()


def _parse_head(table: TableRef, raw: dict[bytes, bytes]) -> Head | None:
    if not raw:
        return None
    try:
        return Head(
            version=int(raw[b"version"]),
            commit_id=_opt_str(raw.get(b"commit_id")),
            timestamp_ms=_opt_int(raw.get(b"timestamp_ms")),
            live_count=int(raw[b"live_count"]),
            live_bytes=int(raw[b"live_bytes"]),
            live_rows=int(raw[b"live_rows"]),
            keyframe_version=int(raw[b"keyframe_version"]),
            offset=int(raw[b"offset"]),
            log_id=_opt_str(raw.get(b"log_id")),
        )
    except (KeyError, ValueError) as exc:
        # Only the materializer writes heads; a broken one means Redis cannot be trusted for the table.
        raise ServiceUnavailable(
            f"Redis holds a malformed head for {table}: {exc}; fall back to the log"
        ) from exc


def _pairs(raw: dict[bytes, bytes] | Sequence[bytes]) -> dict[bytes, bytes]:
    """A hash (HGETALL, a stream entry's fields) as a dict. redis-py 8's cluster MULTI/EXEC hands
    back the raw ``[field, value, ...]`` list: it skips the reply callbacks a single server applies."""
    if isinstance(raw, dict):
        return raw
    flat = list(raw)
    return dict(zip(flat[::2], flat[1::2], strict=True))


def _parse_entry(fields: dict[bytes, bytes]) -> StreamEntry:
    return StreamEntry(
        version=int(fields[b"version"]),
        prev_version=int(fields[b"prev_version"]),
        timestamp_ms=int(fields[b"ts"]),
        value=fields[b"value"],
    )


CRC32_PREFIX = b"crc32:"
"""A key frame's digest field holds ``crc32:<8 hex>`` (Redis key-frame format 2) or, in values
written before it, a SHA-256 hex digest (format 1). The threat is torn or flipped bytes, not an
adversary: a CRC-32 catches those at a third of SHA-256's cost. A reader that knows only SHA-256
sees a mismatch and falls back: slower, never wrong."""


def keyframe_digest(data: bytes) -> str:
    """The digest ``put_keyframe`` stores beside a key frame's bytes: zlib's CRC-32, computed by
    ISA-L with SIMD instructions (the same value as ``zlib.crc32``, so either verifies the other's
    frames), because every reader's open of a big table hashes the whole frame."""
    return f"{CRC32_PREFIX.decode()}{isal_zlib.crc32(data):08x}"


def _digest_matches(data: bytes, digest: bytes) -> bool:
    if digest.startswith(CRC32_PREFIX):
        return digest == keyframe_digest(data).encode()
    return hashlib.sha256(data).hexdigest().encode() == digest


def _verify_keyframe(table: TableRef, raw: Sequence[bytes | None]) -> tuple[int, bytes] | None:
    version, digest, data = raw
    if version is None and data is None:
        return None
    if version is None or digest is None or data is None:
        raise CorruptKeyFrame(f"the Redis key frame of {table} is incomplete")
    if not _digest_matches(data, digest):
        raise CorruptKeyFrame(
            f"the Redis key frame of {table} at version {int(version)} fails its checksum; "
            "fall back to object storage"
        )
    return int(version), data


RedisClient: TypeAlias = "redis.Redis[bytes] | RedisCluster[bytes]"
"""A single server or a Redis Cluster: every call ``RedisStore`` makes works on both."""

_credentials_warned: set[str] = set()
"""The Redis deployments (``where``) whose refusal was logged already."""
_credentials_lock = threading.Lock()


def _warn_credentials_once(where: str, exc: AuthenticationError) -> None:
    """Wrong Redis credentials make every reader fall back (slower, never wrong): say so once, loudly.

    Once per process and Redis deployment, so many stores (a Catalog per Spark task) cost one
    line. Names the settings to fix, never their values (the password stays out of every log line).
    """
    with _credentials_lock:
        if where in _credentials_warned:
            return
        _credentials_warned.add(where)
    log.warning(
        "Redis at %s refused the credentials (%s): readers fall back to object storage and Kafka, "
        "which is slower; check SEGCAT_REDIS_USERNAME / SEGCAT_REDIS_PASSWORD (or redis_username / "
        "redis_password in the config file)",
        where,
        type(exc).__name__,
    )


_permissions_warned: set[str] = set()


def _warn_permission_once(where: str, op: str, exc: NoPermissionError) -> None:
    """A Redis ACL that lacks one of segcat's commands or keys: readers fall back, said once."""
    with _credentials_lock:
        if where in _permissions_warned:
            return
        _permissions_warned.add(where)
    log.warning(
        "Redis at %s refused %s to segcat's user (%s): readers fall back to object storage and "
        "Kafka, which is slower; grant the user segcat's commands, keys ~segcat:* and channels "
        "&segcat:* (docs/OPERATIONS.md has the ACL rule)",
        where,
        op,
        exc,
    )


def _cluster_where(url: str) -> str:
    """``host:port (cluster)`` of ``url`` for messages: never its user or password."""
    parts = urlsplit(url)
    try:
        port = parts.port or 6379
    except ValueError:
        port = 6379
    return f"{parts.hostname}:{port} (cluster)"


def _connection_cause(exc: BaseException) -> RedisConnectionError | RedisTimeoutError | None:
    """The connection error (refused AUTH included) redis-py wrapped in a cluster error, if any."""
    seen = exc.__cause__
    for _ in range(8):
        if seen is None or isinstance(seen, RedisConnectionError | RedisTimeoutError):
            return seen
        seen = seen.__cause__
    return None


class RedisStore:
    """Typed access to the catalog's Redis keys, on one server or a Redis Cluster. Thread-safe.

    Every key of a table carries the ``{ns.table}`` hash tag (``keys``), so each script and
    MULTI touches one slot and runs unchanged on a cluster; the global set and channel are
    single keys. ``client`` is a redis-py client, or (for a cluster) a function that makes one
    on first use: ``RedisCluster`` connects while it is made, and a reader must still be
    constructible while Redis is down.
    """

    def __init__(
        self,
        client: RedisClient | Callable[[], RedisClient],
        *,
        socket_timeout_s: float = DEFAULT_SOCKET_TIMEOUT_S,
        where: str | None = None,
    ) -> None:
        self.socket_timeout_s = socket_timeout_s
        self._lock = threading.Lock()
        self._scripts: dict[str, Script] = {}
        self._loaded: dict[str, str] = {}
        """Script → SHA of the scripts ``run_pipelined`` loaded on every cluster primary."""
        self._client: RedisClient | None = None
        self._connect: Callable[[], RedisClient] | None = None
        if isinstance(client, redis.Redis | RedisCluster):
            self._client = client
        else:
            self._connect = client
        self.cluster = not isinstance(client, redis.Redis)
        """Whether this store talks to a Redis Cluster (where scripts are pipelined differently)."""
        self.where = where or (_client_where(self._client) if self._client is not None else "redis")
        """Host, port and db for messages; never the password."""

    @classmethod
    def from_config(cls, config: Config, *, socket_timeout_s: float = DEFAULT_SOCKET_TIMEOUT_S) -> RedisStore:
        """A store on ``config.redis_url`` (``rediss://`` for TLS) with the configured ACL user;
        with ``config.redis_cluster`` a ``RedisCluster`` that discovers the other nodes from it."""
        extra: dict[str, Any] = {}
        if config.redis_username:
            extra["username"] = config.redis_username
        if config.redis_password:
            extra["password"] = config.redis_password
        options: dict[str, Any] = {
            "socket_timeout": socket_timeout_s,
            "socket_connect_timeout": socket_timeout_s,
            "health_check_interval": DEFAULT_HEALTH_CHECK_INTERVAL_S,
            # One quick retry survives a stale pooled connection (a Redis restart, a failover on a
            # cluster); more would only delay the reader's fallback. Our scripts are idempotent.
            "retry": Retry(ExponentialBackoff(cap=0.1, base=0.01), 1),
            "decode_responses": False,
            **extra,
        }
        if not config.redis_cluster:
            return cls(redis.Redis.from_url(config.redis_url, **options), socket_timeout_s=socket_timeout_s)
        _check_cluster_url(config.redis_url)
        where = _cluster_where(config.redis_url)

        def connect() -> RedisClient:
            try:
                return RedisCluster.from_url(config.redis_url, **options)
            except RedisClusterException as exc:
                cause = _connection_cause(exc)
                if cause is not None:  # a fresh copy: re-raising ``cause`` itself would chain in a loop
                    raise type(cause)(str(cause)) from exc
                # "Cluster mode is not enabled" also stands for a CLUSTER SLOTS refused by the ACL
                raise ServiceUnavailable(
                    f"Redis at {where} cannot serve as a Redis Cluster ({exc}); check SEGCAT_REDIS_CLUSTER, "
                    "and that the user may run CLUSTER SLOTS and COMMAND"
                ) from exc

        return cls(connect, socket_timeout_s=socket_timeout_s, where=where)

    @property
    def client(self) -> RedisClient:
        """The redis-py client. A cluster's is made on first use; if no node answers that raises
        redis' ``ConnectionError`` family, which :meth:`guarded` turns into ``ServiceUnavailable``."""
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    assert self._connect is not None
                    self._client = self._connect()
                client = self._client
        return client

    def script(self, text: str) -> Script:
        """``text`` registered on this store's client (once; the SHA is computed locally)."""
        found = self._scripts.get(text)
        if found is None:
            # types-redis 4.6 does not know RedisCluster.register_script (redis-py has it since 4.1)
            client: Any = self.client
            found = self._scripts.setdefault(text, client.register_script(text))
        return found

    @property
    def record_script(self) -> Script:
        """The per-record script (``keys.RECORD_LUA``); ``RecordBatch`` pipelines its calls."""
        return self.script(keys.RECORD_LUA)

    def run_pipelined(
        self, text: str, calls: Sequence[tuple[Sequence[str], Sequence[str | int | bytes]]]
    ) -> None:
        """Run script ``text`` once per (keys, args) in ``calls``, in order, in one round trip per
        node. Call inside :meth:`guarded`.

        The script is loaded once (on a cluster, ``SCRIPT LOAD`` goes to every primary) and the
        calls are queued as raw EVALSHA commands: a cluster pipeline refuses EVALSHA by name, and
        redis-py's script objects cost a ``SCRIPT EXISTS`` round trip per pipeline. A server that
        lost its scripts (restarted, flushed) makes the batch load and run once more, which the
        scripts' offset compare-and-set makes harmless.
        """
        client: Any = self.client  # types-redis 4.6 lacks RedisCluster.script_load
        for attempt in range(2):
            sha = self._loaded.get(text)
            if attempt or sha is None:
                sha = self._loaded[text] = str(client.script_load(text))
            pipe = client.pipeline(transaction=False)
            for call_keys, args in calls:
                pipe.execute_command("EVALSHA", sha, len(call_keys), *call_keys, *args)
            try:
                pipe.execute()
                return
            except NoScriptError:
                if attempt:
                    raise

    @contextlib.contextmanager
    def guarded(self, op: str) -> Iterator[None]:
        """Turn Redis' connection errors during ``op`` into ``ServiceUnavailable`` (one message).

        On a cluster these include a cluster that is down or re-forming (CLUSTERDOWN, TRYAGAIN,
        an uncovered slot, no node reachable); on a single server a MOVED reply means that the
        server is a cluster node and ``SEGCAT_REDIS_CLUSTER`` is missing.
        """
        try:
            yield
        except NoPermissionError as exc:  # an ACL without one of our commands / keys: not our bug
            _warn_permission_once(self.where, op, exc)
            raise ServiceUnavailable(
                f"Redis at {self.where} refused {op} to segcat's user: {exc} (readers fall back to "
                "object storage and Kafka; docs/OPERATIONS.md has the ACL segcat needs)"
            ) from exc
        except (RedisConnectionError, RedisTimeoutError, ClusterError, TryAgainError) as exc:
            if isinstance(exc, AuthenticationError):
                _warn_credentials_once(self.where, exc)
            raise ServiceUnavailable(
                f"Redis at {self.where} unavailable during {op}: {exc} (readers fall back to object "
                "storage and Kafka; check that Redis runs and SEGCAT_REDIS_URL / credentials are right)"
            ) from exc
        except AskError as exc:  # MovedError is an AskError; the cluster client follows both itself
            if self.cluster:
                raise
            raise ServiceUnavailable(
                f"Redis at {self.where} is a Redis Cluster node ({exc}): set SEGCAT_REDIS_CLUSTER=true "
                "(readers fall back to object storage and Kafka meanwhile)"
            ) from exc
        except RedisClusterException as exc:
            if _connection_cause(exc) is None and not isinstance(exc, SlotNotCoveredError):
                raise  # a usage error (keys in two slots), not an outage
            raise ServiceUnavailable(
                f"Redis at {self.where} unavailable during {op}: {exc} (readers fall back to object "
                "storage and Kafka)"
            ) from exc

    def close(self) -> None:
        """Close the connections; a cluster client made here is made again on next use."""
        if self._connect is None:
            self.client.close()
            return
        with self._lock:
            client, self._client = self._client, None
            self._scripts.clear()
            self._loaded.clear()
        if client is not None:
            client.close()

    # ------------------------------------------------------------------ per-record writes

    def _run_record(
        self,
        table: TableRef,
        head: Head,
        *,
        delta: tuple[int, bytes] | None = None,
        event: VersionChange | None = None,
    ) -> bool:
        call_keys, args = keys.record_call(table, head, delta=delta, event=event)
        with self.guarded(f"record offset {head.offset} of {table_name(table)}"):
            moved, _ = self.record_script(keys=call_keys, args=args)
        return bool(moved)

    def advance_head(self, table: TableRef, head: Head) -> bool:
        """Store ``head`` only if its offset is beyond the stored one; whether it moved.

        ``keyframe_version`` never goes back either (a concurrent :meth:`put_keyframe` may
        have raised it). A record that changed no state (REJECTED, INVALID, DUPLICATE) moves
        only the head's offset this way.
        """
        return self._run_record(table, head)

    def publish_commit(
        self, table: TableRef, head: Head, *, prev_version: int, value: bytes, event: VersionChange | None
    ) -> bool:
        """Everything one ACCEPTED commit changes, atomically and in one round trip.

        ``head.version`` is the commit's version. If the head moves, the entry is appended and
        the event published on both channels; a replay of an already-applied commit changes
        nothing and publishes nothing. ``event=None`` publishes nothing (a quiet catch-up).
        Returns whether the head moved.
        """
        return self._run_record(table, head, delta=(prev_version, value), event=event)

    def batch(self) -> RecordBatch:
        """Queue record-script calls and send them in one round trip (a materializer catching up)."""
        return RecordBatch(self)

    def head(self, table: TableRef) -> Head | None:
        with self.guarded(f"read head of {table}"):
            raw: dict[bytes, bytes] = self.client.hgetall(keys.head_key(table))
        return _parse_head(table, raw)

    def heads(self, tables: Sequence[TableRef]) -> dict[str, Head | None]:
        """The heads of ``tables`` (qualified name → head, None where there is none) in one
        pipelined round trip; on a cluster redis-py's pipeline sends one batch per node holding
        some of the keys. A malformed head is left out of the answer (read that table from the
        log) rather than failing every other table's."""
        names = [table_name(table).qualified for table in tables]
        if not names:
            return {}
        with self.guarded(f"read the heads of {len(names)} tables"):
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.hgetall(keys.head_key(name))
            raws = pipe.execute()
        found: dict[str, Head | None] = {}
        for name, raw in zip(names, raws, strict=True):
            try:
                found[name] = _parse_head(name, _pairs(raw))
            except ServiceUnavailable:
                continue
        return found

    def deltas(self, table: TableRef, after_version: int, upto: int | None = None) -> list[StreamEntry]:
        """Stream entries with ``after_version < version <= upto``, oldest first."""
        if upto is not None and upto <= after_version:
            return []
        low = keys.stream_id(after_version + 1)
        high = "+" if upto is None else keys.stream_id(upto)
        with self.guarded(f"read deltas of {table}"):
            entries = self.client.xrange(keys.deltas_key(table), min=low, max=high)
        return [_parse_entry(fields) for _, fields in entries]

    # ------------------------------------------------------------------ key frames

    def put_keyframe(
        self, table: TableRef, version: int, ipc: bytes, *, trim: bool = False, log_id: str | None = None
    ) -> bool:
        """Store the key frame at ``version`` if it is newer than the stored one; whether it was.

        With ``trim`` the entries it covers are dropped in the same script, so a reader's MULTI
        read (:meth:`load`) never sees the new key frame without its entries or vice versa.
        ``log_id``: the log the frame was built from; the table's keys holding another log's
        values are cleared first (``keys._BIND_LUA``).
        """
        digest = keyframe_digest(ipc)
        minid = keys.stream_id(version + 1) if trim else ""
        name = table_name(table)
        with self.guarded(f"write key frame {version} of {name}"):
            stored = self.script(keys.KEYFRAME_LUA)(
                keys=[keys.keyframe_key(name), keys.head_key(name), keys.deltas_key(name)],
                args=[version, ipc, digest, minid, log_id or ""],
            )
        return bool(stored)

    def keyframe_version(self, table: TableRef, log_id: str | None = None) -> int | None:
        """The version of the key frame Redis holds, without fetching it (None: there is none, or,
        with ``log_id``, it is another log's: one ``HMGET`` decides both)."""
        with self.guarded(f"read key frame version of {table}"):
            raw, stored_log = self.client.hmget(keys.keyframe_key(table), ["version", "log_id"])
        if log_id is not None and _opt_str(stored_log) != log_id:
            return None
        try:
            return None if raw is None else int(raw)
        except ValueError:
            return None  # unreadable: as good as missing (the materializer rewrites it)

    def keyframe(self, table: TableRef) -> tuple[int, bytes] | None:
        """The newest key frame as (version, Arrow IPC bytes); CorruptKeyFrame if its checksum fails
        (CRC-32, or SHA-256 for a value written before Redis key-frame format 2)."""
        with self.guarded(f"read key frame of {table}"):
            raw = self.client.hmget(keys.keyframe_key(table), ["version", "sha256", "data"])
        return _verify_keyframe(table, raw)

    def load(self, table: TableRef) -> CachedTable:
        """Head, key frame and the entries after it, read atomically (one MULTI/EXEC).

        Check :attr:`CachedTable.complete` before trusting it; a corrupt key frame raises
        CorruptKeyFrame (fall back to object storage, then use :meth:`deltas`).
        """
        name = table_name(table)
        with self.guarded(f"load {name}"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(keys.head_key(name))
            pipe.hmget(keys.keyframe_key(name), ["version", "sha256", "data", "log_id"])
            pipe.xrange(keys.deltas_key(name), min="-", max="+")
            raw_head, raw_keyframe, entries = pipe.execute()
        head = _parse_head(name, _pairs(raw_head))
        frame = _verify_keyframe(name, raw_keyframe[:3])
        keyframe_version = -1 if frame is None else frame[0]
        parsed = (_parse_entry(_pairs(fields)) for _, fields in entries)
        deltas = [e for e in parsed if e.version > keyframe_version]
        return CachedTable(
            head, keyframe_version, None if frame is None else frame[1], deltas, _opt_str(raw_keyframe[3])
        )

    # ------------------------------------------------------------------ notifications and registry

    def subscribe(self, table: TableRef | None = None) -> Subscription:
        """Events of one table, or of every table for ``None``; subscribed when this returns."""
        return Subscription(self, keys.channel(table))

    def register_table(self, table: TableRef) -> None:
        with self.guarded(f"register {table}"):
            self.client.sadd(keys.TABLES_KEY, table_name(table).qualified)

    def forget_table(self, table: TableRef) -> int:
        """Delete every key of ``table`` (head, key frame, deltas, leases) and unregister it (purge)."""
        name = table_name(table).qualified
        prefix = keys.key(table, "")
        with self.guarded(f"forget {name}"):
            doomed = [k for k in self.client.scan_iter(match=f"{_glob_escape(prefix)}*", count=1000)]
            removed = int(self.client.delete(*doomed)) if doomed else 0
            self.client.srem(keys.TABLES_KEY, name)
        return removed

    def tables(self) -> list[str]:
        with self.guarded("list tables"):
            members: set[bytes] = self.client.smembers(keys.TABLES_KEY)
        return sorted(m.decode() for m in members)


def _client_where(client: RedisClient) -> str:
    """``where`` of a client built elsewhere (tests, ``LeaseStore(client)``)."""
    if isinstance(client, RedisCluster):
        node = client.get_default_node()
        return "cluster" if node is None else f"{node.host}:{node.port} (cluster)"
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return str(kwargs["path"])
    return f"{kwargs.get('host')}:{kwargs.get('port')}/{kwargs.get('db', 0)}"


def _check_cluster_url(url: str) -> None:
    """Redis Cluster speaks TCP only and has database 0 only: say so before connecting."""
    parts = urlsplit(url)
    if parts.scheme == "unix":
        raise ConfigError(
            "SEGCAT_REDIS_URL is a unix:// socket, but a Redis Cluster (SEGCAT_REDIS_CLUSTER) needs TCP"
        )
    db = parts.path.strip("/")
    if db not in ("", "0"):
        raise ConfigError(
            f"SEGCAT_REDIS_URL selects database {db[:20]!r}, but a Redis Cluster (SEGCAT_REDIS_CLUSTER) "
            "has database 0 only"
        )


def _glob_escape(text: str) -> str:
    """``text`` with Redis glob metacharacters escaped (table names may hold none, but be exact)."""
    return "".join(f"\\{ch}" if ch in "*?[]\\" else ch for ch in text)
