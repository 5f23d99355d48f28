"""The Redis layout of the catalog: the one module that knows key names and encodings.

The materializer writes here (docs/PROTOCOL.md §6) and readers read here first (docs/PROTOCOL.md §3). Redis
is a *cache* of what the log decides, never a source of truth, so every write is
idempotent and monotone: replaying a commit twice, or two materializers racing during a
rebalance, can never move anything backwards.

Layout (the ``{<ns.table>}`` hash tag keeps one table's keys in one cluster slot, so the
Lua scripts and MULTI blocks below are legal on Redis Cluster too):

====================================  ======  ===============================================
``segcat:{t}:head``                   hash    :class:`Head`; moved by offset compare-and-set
``segcat:{t}:deltas``                 stream  accepted commits since the Redis key frame,
                                              entry id ``<version + 1>-0``
``segcat:{t}:keyframe``               hash    ``version``, ``data`` (Arrow IPC), ``sha256``
``segcat:{t}:verdict:<commit_id>``    hash    the outcome of one commit, with a TTL
``segcat:{t}:versions``               pubsub  :class:`VersionEvent` JSON for one table
``segcat:versions``                   pubsub  the same events for every table
``segcat:tables``                     set     qualified names of materialized tables
====================================  ======  ===============================================

Versions and offsets are compared inside Lua as numbers (doubles): exact up to 2**53,
far beyond any Kafka offset a table will reach.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from types import TracebackType
from typing import Any, Protocol

import redis
from redis.backoff import ExponentialBackoff
from redis.exceptions import AuthenticationError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from segcat.catalog.config import Config
from segcat.catalog.errors import CorruptKeyFrame, ServiceUnavailable
from segcat.catalog.protocol.names import TableName, table_name

log = logging.getLogger(__name__)

KEY_PREFIX = "segcat"
GLOBAL_CHANNEL = f"{KEY_PREFIX}:versions"
TABLES_KEY = f"{KEY_PREFIX}:tables"

DEFAULT_SOCKET_TIMEOUT_S = 2.0
"""Short on purpose: a reader that cannot reach Redis falls back to object storage / Kafka."""
DEFAULT_HEALTH_CHECK_INTERVAL_S = 15
DEFAULT_VERDICT_TTL_S = 24 * 3600.0
"""Writers ask for their verdict within seconds; a day is ample and bounds the key count."""
MAX_COMMIT_ID_LENGTH = 512
"""Same bound as the protocol's id rule (``rules.MAX_ID_LENGTH``)."""

TableRef = str | TableName

# --------------------------------------------------------------------------- Lua scripts

_HEAD_FIELDS = (
    "offset",
    "version",
    "commit_id",
    "timestamp_ms",
    "live_count",
    "live_bytes",
    "live_rows",
    "keyframe_version",
)

# One script for every per-record write, so a commit costs one round trip and the head,
# the delta, the notification and the verdict can never disagree.
#   KEYS: head, deltas, verdict
#   ARGV[1..8]  head fields in _HEAD_FIELDS order (commit_id/timestamp '' = none; offset '' = no head)
#   ARGV[9]     '1' to append a delta: ARGV[10] stream id, ARGV[11] version, ARGV[12] prev_version,
#               ARGV[13] ts, ARGV[14] value
#   ARGV[15]    event JSON ('' = publish nothing), ARGV[16] table channel, ARGV[17] global channel
#   ARGV[18]    '1' to store a verdict: ARGV[19] offset, ARGV[20] outcome, ARGV[21] rule,
#               ARGV[22] conflicting_version, ARGV[23] original_version, ARGV[24] detail, ARGV[25] ttl ms
# Returns {head moved (0/1), delta added (0/1), verdict stored (0/1)}.
_RECORD_LUA = """
local moved = 0
local added = 0
local stored = 0
local cur = {false, false}
if ARGV[1] ~= '' then cur = redis.call('HMGET', KEYS[1], 'offset', 'keyframe_version') end
if ARGV[1] ~= '' and ((not cur[1]) or tonumber(cur[1]) < tonumber(ARGV[1])) then
  moved = 1
  if ARGV[9] == '1' then
    local ok = redis.pcall('XADD', KEYS[2], ARGV[10], 'version', ARGV[11], 'prev_version', ARGV[12],
                           'ts', ARGV[13], 'value', ARGV[14])
    if type(ok) == 'table' and ok.err then
      if not string.find(ok.err, 'equal or smaller', 1, true) then
        return redis.error_reply(ok.err)
      end
    else
      added = 1
    end
  end
  local kfv = ARGV[8]
  if cur[2] and tonumber(cur[2]) > tonumber(kfv) then kfv = cur[2] end
  redis.call('HSET', KEYS[1], 'offset', ARGV[1], 'version', ARGV[2], 'commit_id', ARGV[3],
             'timestamp_ms', ARGV[4], 'live_count', ARGV[5], 'live_bytes', ARGV[6], 'live_rows', ARGV[7],
             'keyframe_version', kfv)
  if ARGV[15] ~= '' then
    redis.call('PUBLISH', ARGV[16], ARGV[15])
    redis.call('PUBLISH', ARGV[17], ARGV[15])
  end
end
if ARGV[18] == '1' then
  local old = redis.call('HGET', KEYS[3], 'offset')
  if (not old) or tonumber(old) <= tonumber(ARGV[19]) then
    redis.call('DEL', KEYS[3])
    redis.call('HSET', KEYS[3], 'offset', ARGV[19], 'outcome', ARGV[20], 'rule', ARGV[21],
               'conflicting_version', ARGV[22], 'original_version', ARGV[23], 'detail', ARGV[24])
    redis.call('PEXPIRE', KEYS[3], ARGV[25])
    stored = 1
  end
end
return {moved, added, stored}
"""

# KEYS: keyframe, head, deltas. ARGV: version, data, sha256, trim MINID ('' = keep deltas).
_KEYFRAME_LUA = """
local cur = redis.call('HGET', KEYS[1], 'version')
if cur and tonumber(cur) >= tonumber(ARGV[1]) then return 0 end
redis.call('HSET', KEYS[1], 'version', ARGV[1], 'sha256', ARGV[3], 'data', ARGV[2])
if redis.call('EXISTS', KEYS[2]) == 1 then
  local kfv = redis.call('HGET', KEYS[2], 'keyframe_version')
  if (not kfv) or tonumber(kfv) < tonumber(ARGV[1]) then
    redis.call('HSET', KEYS[2], 'keyframe_version', ARGV[1])
  end
end
if ARGV[4] ~= '' then redis.call('XTRIM', KEYS[3], 'MINID', ARGV[4]) end
return 1
"""


# --------------------------------------------------------------------------- data types


@dataclass(frozen=True, slots=True)
class Head:
    """The newest materialized position of a table.

    ``version`` is the last ACCEPTED version; ``offset`` the last log offset applied
    (rejected commits and tombstones move it past ``version``). The CAS is on ``offset``.
    """

    version: int
    commit_id: str | None
    timestamp_ms: int | None
    live_count: int
    live_bytes: int
    live_rows: int
    keyframe_version: int
    offset: int

    def __post_init__(self) -> None:
        if self.offset < self.version:
            raise ValueError(f"head offset {self.offset} is below its version {self.version}")


@dataclass(frozen=True, slots=True)
class Delta:
    """One accepted commit since the key frame; ``value`` is the raw Kafka record value."""

    version: int
    prev_version: int
    """The previous ACCEPTED version: readers chain these to detect gaps."""
    timestamp_ms: int
    value: bytes


@dataclass(frozen=True, slots=True)
class VersionEvent:
    """A version-change notification, as published on the table and global channels."""

    table: str
    version: int
    prev_version: int
    timestamp_ms: int
    commit_id: str
    operation: str
    added: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    rows_delta: int = 0
    bytes_delta: int = 0

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, raw: str | bytes) -> VersionEvent:
        """Parse a published event; ``ValueError`` when it is not one."""
        try:
            data = json.loads(raw)
            return cls(
                table=str(data["table"]),
                version=int(data["version"]),
                prev_version=int(data["prev_version"]),
                timestamp_ms=int(data["timestamp_ms"]),
                commit_id=str(data["commit_id"]),
                operation=str(data["operation"]),
                added=[str(s) for s in data.get("added", [])],
                dropped=[str(s) for s in data.get("dropped", [])],
                rows_delta=int(data.get("rows_delta", 0)),
                bytes_delta=int(data.get("bytes_delta", 0)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not a version event: {raw[:200]!r}") from exc


class VerdictLike(Protocol):
    """What :meth:`RedisStore.publish_commit` needs of a verdict (``rules.Verdict`` fits)."""

    @property
    def outcome(self) -> str: ...
    @property
    def offset(self) -> int: ...
    @property
    def commit_id(self) -> str | None: ...
    @property
    def rule(self) -> str | None: ...
    @property
    def detail(self) -> str: ...
    @property
    def conflicting_version(self) -> int | None: ...
    @property
    def original_version(self) -> int | None: ...


@dataclass(frozen=True, slots=True)
class RedisState:
    """Head, key frame and deltas read in one MULTI block, so they are mutually consistent."""

    head: Head | None
    keyframe_version: int
    """-1 when Redis holds no key frame (deltas then chain from the empty table)."""
    keyframe: bytes | None
    deltas: list[Delta]

    @property
    def complete(self) -> bool:
        """Whether key frame + deltas rebuild the head's version without touching Kafka."""
        if self.head is None:
            return False
        return chain_is_complete(self.keyframe_version, self.deltas, end_version=self.head.version)


def chain_is_complete(start_version: int, deltas: Sequence[Delta], end_version: int | None = None) -> bool:
    """Whether ``deltas`` continue the state at ``start_version`` with no accepted commit missing.

    The first delta's ``prev_version`` may be *below* ``start_version`` (a state at a
    non-accepted offset S continues with the first commit after S, whose predecessor is the
    last accepted version ≤ S); every later delta must name its neighbour exactly. With
    ``end_version`` (normally the head's version) the chain must also reach it.
    """
    previous = start_version
    for i, delta in enumerate(deltas):
        if delta.version <= previous:
            return False
        if (delta.prev_version > previous) if i == 0 else (delta.prev_version != previous):
            return False
        previous = delta.version
    return end_version is None or previous >= end_version


class Subscription:
    """Version events from one channel (redis-py PubSub). Not thread-safe; close it when done.

    Pub/Sub is fire-and-forget: events published while disconnected are lost, so a
    follower must fill gaps from :meth:`RedisStore.deltas` (``prev_version`` chaining).
    """

    def __init__(self, store: RedisStore, channel: str) -> None:
        self._store = store
        self.channel = channel
        with store._guard(f"subscribe {channel}"):
            self._pubsub = store.client.pubsub(ignore_subscribe_messages=False)
            self._pubsub.subscribe(channel)
            # Wait for the confirmation: only then is every later PUBLISH guaranteed to reach us.
            deadline = time.monotonic() + store.socket_timeout_s
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._pubsub.close()
                    raise ServiceUnavailable(f"Redis at {store.where} did not confirm SUBSCRIBE {channel}")
                message = self._pubsub.get_message(timeout=remaining)
                if message is not None and message["type"] == "subscribe":
                    break

    def get(self, timeout: float = 1.0) -> VersionEvent | None:
        """The next event, or None when none arrives within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._store._guard(f"read {self.channel}"):
            while True:
                remaining = max(deadline - time.monotonic(), 0.0)
                message = self._pubsub.get_message(timeout=remaining)
                if message is not None and message["type"] == "message":
                    try:
                        return VersionEvent.from_json(message["data"])
                    except ValueError:
                        log.warning("ignoring a malformed message on %s", self.channel)
                if remaining <= 0:
                    return None

    def __iter__(self) -> Iterator[VersionEvent]:
        """Events forever (until closed or Redis fails with ServiceUnavailable)."""
        while True:
            event = self.get(timeout=1.0)
            if event is not None:
                yield event

    def close(self) -> None:
        with contextlib.suppress(RedisConnectionError, RedisTimeoutError):  # a dead connection is closed
            self._pubsub.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


# --------------------------------------------------------------------------- the store


def _key(table: TableRef, suffix: str) -> str:
    return f"{KEY_PREFIX}:{{{table_name(table).qualified}}}:{suffix}"


def _stream_id(version: int) -> str:
    """Stream id of a version: +1 because Redis refuses the id ``0-0``."""
    return f"{version + 1}-0"


def _opt(value: object | None) -> str:
    return "" if value is None else str(value)


def _opt_int(raw: bytes | None) -> int | None:
    return None if raw is None or raw == b"" else int(raw)


def _opt_str(raw: bytes | None) -> str | None:
    return None if raw is None or raw == b"" else raw.decode()


_PackedVerdict = tuple[str, int, str, str | None, int | None, int | None, str]
"""commit_id, offset, outcome, rule, conflicting_version, original_version, detail."""


def _pack_verdict(verdict: VerdictLike | None) -> _PackedVerdict | None:
    if verdict is None or not verdict.commit_id:
        return None  # a record without a usable key (INVALID garbage) has nobody to answer
    return (
        _check_commit_id(verdict.commit_id),
        verdict.offset,
        str(verdict.outcome),
        None if verdict.rule is None else str(verdict.rule),
        verdict.conflicting_version,
        verdict.original_version,
        verdict.detail,
    )


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
        )
    except (KeyError, ValueError) as exc:
        # Only this module writes heads; a broken one means Redis cannot be trusted for the table.
        raise ServiceUnavailable(
            f"Redis holds a malformed head for {table}: {exc}; fall back to the log"
        ) from exc


def _parse_delta(fields: dict[bytes, bytes]) -> Delta:
    return Delta(
        version=int(fields[b"version"]),
        prev_version=int(fields[b"prev_version"]),
        timestamp_ms=int(fields[b"ts"]),
        value=fields[b"value"],
    )


def _verify_keyframe(table: TableRef, raw: Sequence[bytes | None]) -> tuple[int, bytes] | None:
    version, digest, data = raw
    if version is None and data is None:
        return None
    if version is None or digest is None or data is None:
        raise CorruptKeyFrame(f"the Redis key frame of {table} is incomplete")
    if hashlib.sha256(data).hexdigest() != digest.decode():
        raise CorruptKeyFrame(
            f"the Redis key frame of {table} at version {int(version)} fails its sha256 check; "
            "fall back to object storage"
        )
    return int(version), data


def _check_commit_id(commit_id: str) -> str:
    if not commit_id or len(commit_id) > MAX_COMMIT_ID_LENGTH:
        raise ValueError(f"commit id must be 1-{MAX_COMMIT_ID_LENGTH} characters, got {commit_id[:60]!r}")
    return commit_id


_credentials_warned = threading.Event()


def _warn_credentials_once(where: str, exc: AuthenticationError) -> None:
    """Wrong Redis credentials make every reader fall back (slower, never wrong): say so once, loudly.

    Names the settings to fix, never their values (the password stays out of every log line).
    """
    if _credentials_warned.is_set():
        return
    _credentials_warned.set()
    log.warning(
        "Redis at %s refused the credentials (%s): readers fall back to object storage and Kafka, "
        "which is slower; check SEGCAT_REDIS_USERNAME / SEGCAT_REDIS_PASSWORD (or redis_username / "
        "redis_password in the config file)",
        where,
        type(exc).__name__,
    )


class RedisStore:
    """Typed access to the catalog's Redis keys. Thread-safe (redis-py's connection pool).

    Every method raises :class:`ServiceUnavailable` when Redis cannot be reached in time, so a
    reader can fall back to object storage or Kafka.
    """

    def __init__(
        self,
        client: redis.Redis[bytes],
        *,
        verdict_ttl_s: float = DEFAULT_VERDICT_TTL_S,
        socket_timeout_s: float = DEFAULT_SOCKET_TIMEOUT_S,
    ) -> None:
        self.client = client
        self.verdict_ttl_s = verdict_ttl_s
        self.socket_timeout_s = socket_timeout_s
        self._record = client.register_script(_RECORD_LUA)
        self._keyframe = client.register_script(_KEYFRAME_LUA)
        kwargs = client.connection_pool.connection_kwargs
        self.where = (
            str(kwargs["path"]) if "path" in kwargs else f"{kwargs.get('host')}:{kwargs.get('port')}"
        ) + f"/{kwargs.get('db', 0)}"
        """Host, port and db for messages; never the password."""

    @classmethod
    def from_config(
        cls,
        config: Config,
        *,
        socket_timeout_s: float = DEFAULT_SOCKET_TIMEOUT_S,
        verdict_ttl_s: float = DEFAULT_VERDICT_TTL_S,
    ) -> RedisStore:
        """A store on ``config.redis_url`` (``rediss://`` for TLS) with the configured ACL user."""
        extra: dict[str, Any] = {}
        if config.redis_username:
            extra["username"] = config.redis_username
        if config.redis_password:
            extra["password"] = config.redis_password
        client = redis.Redis.from_url(
            config.redis_url,
            socket_timeout=socket_timeout_s,
            socket_connect_timeout=socket_timeout_s,
            health_check_interval=DEFAULT_HEALTH_CHECK_INTERVAL_S,
            # One quick retry survives a stale pooled connection (a Redis restart); more would
            # only delay the reader's fallback. Our scripts are idempotent, so a retry is safe.
            retry=Retry(ExponentialBackoff(cap=0.1, base=0.01), 1),
            decode_responses=False,
            **extra,
        )
        return cls(client, verdict_ttl_s=verdict_ttl_s, socket_timeout_s=socket_timeout_s)

    @contextlib.contextmanager
    def _guard(self, op: str) -> Iterator[None]:
        try:
            yield
        except (RedisConnectionError, RedisTimeoutError) as exc:
            if isinstance(exc, AuthenticationError):
                _warn_credentials_once(self.where, exc)
            raise ServiceUnavailable(
                f"Redis at {self.where} unavailable during {op}: {exc} (readers fall back to object "
                "storage and Kafka; check that Redis runs and SEGCAT_REDIS_URL / credentials are right)"
            ) from exc

    def ping(self) -> None:
        """Raise ServiceUnavailable unless Redis answers."""
        with self._guard("PING"):
            self.client.ping()

    def close(self) -> None:
        self.client.close()

    # ------------------------------------------------------------------ keys and channels

    @staticmethod
    def head_key(table: TableRef) -> str:
        return _key(table, "head")

    @staticmethod
    def deltas_key(table: TableRef) -> str:
        return _key(table, "deltas")

    @staticmethod
    def keyframe_key(table: TableRef) -> str:
        return _key(table, "keyframe")

    @staticmethod
    def verdict_key(table: TableRef, commit_id: str) -> str:
        return _key(table, f"verdict:{_check_commit_id(commit_id)}")

    @staticmethod
    def channel(table: TableRef | None = None) -> str:
        """The table's channel, or the global one for ``None``."""
        return GLOBAL_CHANNEL if table is None else _key(table, "versions")

    # ------------------------------------------------------------------ per-record writes

    def _run_record(
        self,
        table: TableRef,
        head: Head | None,
        *,
        delta: tuple[int, bytes] | None = None,
        event: VersionEvent | None = None,
        verdict: _PackedVerdict | None = None,
    ) -> tuple[bool, bool, bool]:
        """One call of the record script: returns (head moved, delta added, verdict stored)."""
        name = table_name(table)
        keys, args = self._record_call(name, head, delta=delta, event=event, verdict=verdict)
        what = f"offset {head.offset}" if head is not None else "a verdict"
        with self._guard(f"record {what} of {name}"):
            moved, added, stored = self._record(keys=keys, args=args)
        return bool(moved), bool(added), bool(stored)

    def _record_call(
        self,
        name: TableName,
        head: Head | None,
        *,
        delta: tuple[int, bytes] | None = None,
        event: VersionEvent | None = None,
        verdict: _PackedVerdict | None = None,
    ) -> tuple[list[str], list[str | int | bytes]]:
        """The keys and arguments of one record-script call."""
        verdict_key = self.verdict_key(name, verdict[0]) if verdict is not None else _key(name, "verdict:-")
        keys = [self.head_key(name), self.deltas_key(name), verdict_key]
        args: list[str | int | bytes]
        if head is None:
            args = ["", "", "", "", "", "", "", ""]
        else:
            args = [
                head.offset,
                head.version,
                _opt(head.commit_id),
                _opt(head.timestamp_ms),
                head.live_count,
                head.live_bytes,
                head.live_rows,
                head.keyframe_version,
            ]
        if delta is None or head is None:
            args += ["0", "", "", "", "", ""]
        else:
            prev_version, value = delta
            if prev_version >= head.version:
                raise ValueError(f"prev_version {prev_version} must be below version {head.version}")
            args += [
                "1",
                _stream_id(head.version),
                head.version,
                prev_version,
                _opt(head.timestamp_ms),
                value,
            ]
        if event is None:
            args += ["", "", ""]
        else:
            args += [event.to_json(), self.channel(name), GLOBAL_CHANNEL]
        if verdict is None:
            args += ["0", "", "", "", "", "", "", ""]
        else:
            _, offset, outcome, rule, conflicting, original, detail = verdict
            ttl_ms = max(int(self.verdict_ttl_s * 1000), 1)
            args += ["1", offset, outcome, _opt(rule), _opt(conflicting), _opt(original), detail, ttl_ms]
        return keys, args

    def batch(self) -> RecordBatch:
        """Queue record-script calls and send them in one round trip (a materializer catching up)."""
        return RecordBatch(self)

    def advance_head(self, table: TableRef, head: Head) -> bool:
        """Store ``head`` only if its offset is beyond the stored one; whether it moved.

        ``keyframe_version`` never goes back either (a concurrent :meth:`put_keyframe` may
        have raised it).
        """
        return self._run_record(table, head)[0]

    def publish_commit(
        self,
        table: TableRef,
        head: Head,
        *,
        prev_version: int,
        value: bytes,
        event: VersionEvent | None,
        verdict: VerdictLike | None = None,
    ) -> bool:
        """Everything one ACCEPTED commit changes, atomically and in one round trip.

        ``head.version`` is the commit's version. If the head moves, the delta is appended
        and the event published on both channels; a replay of an already-applied commit
        changes nothing and publishes nothing. ``event=None`` publishes nothing (a quiet
        catch-up replay). The verdict (if given) is stored either way.
        Returns whether the head moved.
        """
        packed = _pack_verdict(verdict)
        return self._run_record(table, head, delta=(prev_version, value), event=event, verdict=packed)[0]

    def record_outcome(self, table: TableRef, head: Head, verdict: VerdictLike) -> bool:
        """For a record that changed no state (REJECTED, INVALID, DUPLICATE): move the head's
        offset and store the verdict in one round trip. Returns whether the head moved."""
        return self._run_record(table, head, verdict=_pack_verdict(verdict))[0]

    def head(self, table: TableRef) -> Head | None:
        with self._guard(f"read head of {table}"):
            raw: dict[bytes, bytes] = self.client.hgetall(self.head_key(table))
        return _parse_head(table, raw)

    # ------------------------------------------------------------------ deltas

    def append_delta(
        self, table: TableRef, version: int, prev_version: int, timestamp_ms: int, value: bytes
    ) -> bool:
        """Append one accepted commit; False when this version (or a later one) is already there."""
        if prev_version >= version:
            raise ValueError(f"prev_version {prev_version} must be below version {version}")
        fields: dict[str, str | int | bytes] = {
            "version": version,
            "prev_version": prev_version,
            "ts": timestamp_ms,
            "value": value,
        }
        with self._guard(f"append delta {version} of {table}"):
            try:
                self.client.xadd(self.deltas_key(table), fields, id=_stream_id(version))
            except ResponseError as exc:
                if "equal or smaller" in str(exc):
                    return False
                raise
        return True

    def deltas(self, table: TableRef, after_version: int, upto: int | None = None) -> list[Delta]:
        """Deltas with ``after_version < version <= upto``, oldest first."""
        low = _stream_id(after_version + 1)
        high = "+" if upto is None else _stream_id(upto)
        if upto is not None and upto <= after_version:
            return []
        with self._guard(f"read deltas of {table}"):
            entries = self.client.xrange(self.deltas_key(table), min=low, max=high)
        return [_parse_delta(fields) for _, fields in entries]

    def trim_deltas(self, table: TableRef, upto_version: int) -> int:
        """Drop deltas with version ≤ ``upto_version`` (a key frame covers them); how many went."""
        with self._guard(f"trim deltas of {table}"):
            removed: int = self.client.xtrim(
                self.deltas_key(table), minid=_stream_id(upto_version + 1), approximate=False
            )
        return removed

    # ------------------------------------------------------------------ key frames

    def put_keyframe(self, table: TableRef, version: int, ipc: bytes, *, trim: bool = False) -> bool:
        """Store the key frame at ``version`` if it is newer than the stored one; whether it was.

        With ``trim`` the deltas it covers are dropped in the same script, so a reader's MULTI
        read (:meth:`load`) never sees the new key frame without its deltas or vice versa.
        """
        digest = hashlib.sha256(ipc).hexdigest()
        minid = _stream_id(version + 1) if trim else ""
        name = table_name(table)
        with self._guard(f"write key frame {version} of {name}"):
            stored = self._keyframe(
                keys=[self.keyframe_key(name), self.head_key(name), self.deltas_key(name)],
                args=[version, ipc, digest, minid],
            )
        return bool(stored)

    def keyframe(self, table: TableRef) -> tuple[int, bytes] | None:
        """The newest key frame as (version, Arrow IPC bytes); CorruptKeyFrame if its checksum fails."""
        with self._guard(f"read key frame of {table}"):
            raw = self.client.hmget(self.keyframe_key(table), ["version", "sha256", "data"])
        return _verify_keyframe(table, raw)

    # ------------------------------------------------------------------ consistent read

    def load(self, table: TableRef) -> RedisState:
        """Head, key frame and the deltas after it, read atomically (one MULTI/EXEC).

        Check :attr:`RedisState.complete` before trusting it; a corrupt key frame raises
        CorruptKeyFrame (fall back to object storage, then use :meth:`deltas`).
        """
        name = table_name(table)
        with self._guard(f"load {name}"):
            pipe = self.client.pipeline(transaction=True)
            pipe.hgetall(self.head_key(name))
            pipe.hmget(self.keyframe_key(name), ["version", "sha256", "data"])
            pipe.xrange(self.deltas_key(name), min="-", max="+")
            raw_head, raw_keyframe, entries = pipe.execute()
        head = _parse_head(name, raw_head)
        frame = _verify_keyframe(name, raw_keyframe)
        keyframe_version = -1 if frame is None else frame[0]
        deltas = [d for d in (_parse_delta(fields) for _, fields in entries) if d.version > keyframe_version]
        return RedisState(head, keyframe_version, None if frame is None else frame[1], deltas)

    # ------------------------------------------------------------------ notifications

    def publish(self, event: VersionEvent) -> None:
        """Publish on the table's channel and the global one (one round trip)."""
        payload = event.to_json()
        with self._guard(f"publish version {event.version} of {event.table}"):
            pipe = self.client.pipeline(transaction=False)
            pipe.publish(self.channel(event.table), payload)
            pipe.publish(GLOBAL_CHANNEL, payload)
            pipe.execute()

    def subscribe(self, table: TableRef | None = None) -> Subscription:
        """Events of one table, or of every table for ``None``; subscribed when this returns."""
        return Subscription(self, self.channel(table))

    # ------------------------------------------------------------------ verdicts

    def put_verdict(
        self,
        table: TableRef,
        commit_id: str,
        offset: int,
        outcome: str,
        rule: str | None = None,
        conflicting_version: int | None = None,
        original_version: int | None = None,
        detail: str = "",
    ) -> bool:
        """Store a commit's verdict for ``verdict_ttl_s``; the one with the highest offset wins
        (a DUPLICATE retry replaces the original ACCEPTED, naming it as ``original_version``).
        Returns whether it was stored."""
        packed = (
            _check_commit_id(commit_id),
            offset,
            str(outcome),
            rule,
            conflicting_version,
            original_version,
            detail,
        )
        return self._run_record(table, None, verdict=packed)[2]

    def verdict(self, table: TableRef, commit_id: str) -> dict[str, Any] | None:
        """``{commit_id, offset, outcome, rule, conflicting_version, original_version, detail}``."""
        with self._guard(f"read verdict {commit_id} of {table}"):
            raw: dict[bytes, bytes] = self.client.hgetall(self.verdict_key(table, commit_id))
        if not raw or b"offset" not in raw or b"outcome" not in raw:
            return None
        return {
            "commit_id": commit_id,
            "offset": int(raw[b"offset"]),
            "outcome": raw[b"outcome"].decode(),
            "rule": _opt_str(raw.get(b"rule")),
            "conflicting_version": _opt_int(raw.get(b"conflicting_version")),
            "original_version": _opt_int(raw.get(b"original_version")),
            "detail": raw.get(b"detail", b"").decode(),
        }

    # ------------------------------------------------------------------ table registry

    def register_table(self, table: TableRef) -> None:
        with self._guard(f"register {table}"):
            self.client.sadd(TABLES_KEY, table_name(table).qualified)

    def tables(self) -> list[str]:
        with self._guard("list tables"):
            members: set[bytes] = self.client.smembers(TABLES_KEY)
        return sorted(m.decode() for m in members)

    def forget_table(self, table: TableRef) -> None:
        """Delete everything Redis holds for a table (it is only a cache of the log)."""
        name = table_name(table)
        with self._guard(f"forget {name}"):
            verdicts = list(self.client.scan_iter(match=_key(name, "verdict:*"), count=1000))
            self.client.delete(self.head_key(name), self.deltas_key(name), self.keyframe_key(name), *verdicts)
            self.client.srem(TABLES_KEY, name.qualified)


class RecordBatch:
    """``publish_commit`` / ``record_outcome`` calls queued and sent as one pipeline.

    Each call is still its own atomic script run, in order; only the round trips are shared,
    so catching up over thousands of records costs a few round trips, not one per record.
    """

    def __init__(self, store: RedisStore) -> None:
        self._store = store
        self._calls: list[tuple[list[str], list[str | int | bytes]]] = []

    def __len__(self) -> int:
        return len(self._calls)

    def publish_commit(
        self,
        table: TableRef,
        head: Head,
        *,
        prev_version: int,
        value: bytes,
        event: VersionEvent | None,
        verdict: VerdictLike | None = None,
    ) -> None:
        """Queue what :meth:`RedisStore.publish_commit` does (validated the same way)."""
        packed = _pack_verdict(verdict)
        call = self._store._record_call(
            table_name(table), head, delta=(prev_version, value), event=event, verdict=packed
        )
        self._calls.append(call)

    def record_outcome(self, table: TableRef, head: Head, verdict: VerdictLike | None) -> None:
        self._calls.append(self._store._record_call(table_name(table), head, verdict=_pack_verdict(verdict)))

    def flush(self) -> None:
        """Send everything queued (ServiceUnavailable if Redis is gone; the queue is dropped)."""
        if not self._calls:
            return
        calls, self._calls = self._calls, []
        with self._store._guard(f"flush {len(calls)} records"):
            pipe = self._store.client.pipeline(transaction=False)
            for keys, args in calls:
                self._store._record(keys=keys, args=args, client=pipe)
            pipe.execute()
