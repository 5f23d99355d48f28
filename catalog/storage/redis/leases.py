"""Version leases: "someone is reading version V of this table, keep its files".

A reader takes a lease on the version it reads and renews it while it reads; vacuum asks
:meth:`LeaseStore.oldest_leased_version` / :meth:`LeaseStore.leased_versions` and never
deletes a file a leased version still sees. A lease that is not renewed expires on its own,
so a reader that dies holds nothing back for longer than its TTL.

Layout (both keys carry the table's hash tag, so every script below touches one cluster slot):

====================================  ======  ===============================================
``segcat:{t}:leases``                 zset    lease id → expiry, in ms of the *Redis server's*
                                              clock
``segcat:{t}:lease-info``             hash    lease id → JSON ``{"version", "holder",
                                              "acquired_ms", "ttl_ms"}``
====================================  ======  ===============================================

Why this layout: the sorted set orders leases by expiry, so dropping the expired ones is
one ``ZRANGEBYSCORE`` + ``ZREMRANGEBYSCORE``; the hash keeps what a lease protects. Every
operation is one Lua script that reads ``TIME`` itself, so the clocks of readers, vacuum and
the CLI never matter, and expiry, pruning and reading happen atomically: a lease whose
expiry has passed (``expiry <= now``) is never returned, never renewed and never counted.
Versions travel as decimal text and are never turned into Lua numbers (exact to 2**63).
Each write also stretches both keys' own TTL to cover the longest lease in them, so a table
nobody leases any more leaves no keys behind.

The scripts live here, not in ``keys``, because nothing else runs them; the key names are
``keys.leases_key`` / ``keys.lease_info_key``.
"""

from __future__ import annotations

import json
import math
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any

from segcat.catalog.config import Config
from segcat.catalog.errors import InvalidArgument, ServiceUnavailable
from segcat.catalog.protocol.names import table_name
from segcat.catalog.storage.redis import keys
from segcat.catalog.storage.redis.keys import TableRef
from segcat.catalog.storage.redis.store import RedisClient, RedisStore

MIN_TTL_S = 1.0
MAX_TTL_S = 7 * 24 * 3600.0
"""A lease lives 1 s to 7 days between renewals."""
MAX_VERSION = 2**63 - 1
MAX_HOLDER_CHARS = 200

# The server's time in ms, and the helpers every script shares. KEYS[1] leases, KEYS[2] lease-info.
_PRELUDE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function prune()
  local gone = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now)
  for i = 1, #gone do redis.call('HDEL', KEYS[2], gone[i]) end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now) end
end
local function keep(ttl)
  for i = 1, 2 do
    if redis.call('PTTL', KEYS[i]) < ttl then redis.call('PEXPIRE', KEYS[i], ttl) end
  end
end
"""

# ARGV: lease id, ttl ms, version (decimal text), holder (a JSON string). Returns {now, expiry}.
ACQUIRE_LUA = (
    _PRELUDE
    + """
prune()
local expires = now + tonumber(ARGV[2])
redis.call('ZADD', KEYS[1], expires, ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], '{"version":' .. ARGV[3] .. ',"holder":' .. ARGV[4] ..
           ',"acquired_ms":' .. string.format('%.0f', now) .. ',"ttl_ms":' .. ARGV[2] .. '}')
keep(tonumber(ARGV[2]))
return {now, expires}
"""
)

# ARGV: lease id, ttl ms. Returns the new expiry, or 0 if the lease had expired or was released.
RENEW_LUA = (
    _PRELUDE
    + """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if (not score) or tonumber(score) <= now or redis.call('HEXISTS', KEYS[2], ARGV[1]) == 0 then
  prune()
  return 0
end
local expires = now + tonumber(ARGV[2])
if expires > tonumber(score) then redis.call('ZADD', KEYS[1], 'XX', expires, ARGV[1]) end
keep(tonumber(ARGV[2]))
return expires
"""
)

# ARGV: lease id. Returns 1 if the lease was live.
RELEASE_LUA = (
    _PRELUDE
    + """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
prune()
if score and tonumber(score) > now then return 1 end
return 0
"""
)

# Returns {now, id1, expiry1, info1, id2, ...}, live leases only; info is false if missing.
LIVE_LUA = (
    _PRELUDE
    + """
prune()
local ids = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local out = {now}
for i = 1, #ids, 2 do
  out[#out + 1] = ids[i]
  out[#out + 1] = ids[i + 1]
  out[#out + 1] = redis.call('HGET', KEYS[2], ids[i])
end
return out
"""
)


# ---------------------------------------------------------------------------- arguments


def check_version(version: object) -> int:
    """A leasable version: an int offset ≥ 0 (``bool`` refused); else ``InvalidArgument``."""
    if isinstance(version, bool) or not isinstance(version, int):
        raise InvalidArgument(f"version must be an integer offset ≥ 0, not {type(version).__name__}")
    if not 0 <= version <= MAX_VERSION:
        raise InvalidArgument(f"version {version} cannot be leased: it must be an offset from 0 to 2**63-1")
    return version


def check_ttl(ttl_s: object) -> int:
    """A lease TTL in seconds, a finite number in [1, 7 days]; returns it in whole ms."""
    if isinstance(ttl_s, bool) or not isinstance(ttl_s, int | float):
        raise InvalidArgument(f"ttl_s must be a number of seconds, not {type(ttl_s).__name__}")
    if not math.isfinite(ttl_s) or not MIN_TTL_S <= ttl_s <= MAX_TTL_S:
        raise InvalidArgument(
            f"ttl_s {ttl_s!r} is out of range: a lease lives from {MIN_TTL_S:g} s to 7 days "
            f"({MAX_TTL_S:g} s) between renewals"
        )
    return int(ttl_s * 1000)


def check_holder(holder: object) -> str:
    """Who holds a lease, for people reading ``segcat leases``: 1-200 characters."""
    if not isinstance(holder, str):
        raise InvalidArgument(f"holder must be a string, not {type(holder).__name__}")
    if not 1 <= len(holder) <= MAX_HOLDER_CHARS:
        raise InvalidArgument(f"holder must be 1-{MAX_HOLDER_CHARS} characters, not {len(holder)}")
    return holder


def default_holder(kind: str = "segcat") -> str:
    """``<kind>@<host>:<pid>``: enough to find the process that holds a lease."""
    return f"{kind}@{socket.gethostname()}:{os.getpid()}"[:MAX_HOLDER_CHARS]


# ---------------------------------------------------------------------------- the records


@dataclass(frozen=True, slots=True)
class Lease:
    """One lease, as Redis knew it at ``server_ms`` (all times are the Redis server's)."""

    table: str
    """The qualified table name."""
    lease_id: str
    version: int
    holder: str
    acquired_ms: int
    expires_ms: int
    ttl_ms: int
    server_ms: int
    """The server's time when this record was read or written."""

    @property
    def expires_in_ms(self) -> int:
        return max(0, self.expires_ms - self.server_ms)

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "lease_id": self.lease_id,
            "version": self.version,
            "holder": self.holder,
            "acquired_ms": self.acquired_ms,
            "expires_ms": self.expires_ms,
            "expires_in_ms": self.expires_in_ms,
            "ttl_ms": self.ttl_ms,
        }


def _parse_live(table: str, raw: list[Any]) -> list[Lease]:
    now = int(raw[0])
    leases = []
    for i in range(1, len(raw), 3):
        lease_id, score, info = raw[i].decode(), raw[i + 1], raw[i + 2]
        try:
            if info is None:
                raise ValueError("its info is missing")
            fields = json.loads(info)
            version, holder = fields["version"], fields["holder"]
            if isinstance(version, bool) or not isinstance(version, int) or not isinstance(holder, str):
                raise ValueError(f"bad fields {info[:80]!r}")
            leases.append(
                Lease(
                    table=table,
                    lease_id=lease_id,
                    version=version,
                    holder=holder,
                    acquired_ms=int(fields["acquired_ms"]),
                    expires_ms=int(float(score)),
                    ttl_ms=int(fields["ttl_ms"]),
                    server_ms=now,
                )
            )
        except (KeyError, TypeError, ValueError) as exc:
            # Without its version nobody can say what the lease protects: refuse to answer
            # rather than let vacuum believe less is leased than is.
            raise ServiceUnavailable(
                f"Redis holds a malformed lease {lease_id} on {table} ({exc}); it expires on its own "
                f"within its TTL, or delete it from {keys.leases_key(table)}"
            ) from exc
    return sorted(leases, key=lambda lease: (lease.version, lease.acquired_ms, lease.lease_id))


# ---------------------------------------------------------------------------- the store


class LeaseStore:
    """Acquire, renew, release and list version leases. Thread-safe (redis-py's connection pool).

    Every method raises ``ServiceUnavailable`` when Redis cannot be reached (the same mapping
    and message as ``RedisStore``), ``InvalidArgument`` for arguments that can never be right.
    """

    def __init__(self, client: RedisClient | None = None, *, store: RedisStore | None = None) -> None:
        if store is None:
            if client is None:
                raise TypeError("LeaseStore needs a redis-py client or a RedisStore")
            store = RedisStore(client)
        self._store = store
        """Its client, scripts and ``guarded``: one mapping of Redis errors for the whole cache."""

    @property
    def client(self) -> RedisClient:
        return self._store.client

    @classmethod
    def from_store(cls, store: RedisStore) -> LeaseStore:
        """Leases on the client (and connection pool) of an existing ``RedisStore``."""
        return cls(store=store)

    @classmethod
    def from_config(cls, config: Config) -> LeaseStore:
        """Leases on ``config.redis_url``, connected as ``RedisStore.from_config`` connects."""
        return cls.from_store(RedisStore.from_config(config))

    @property
    def where(self) -> str:
        """Host, port and db for messages; never the password."""
        return self._store.where

    def close(self) -> None:
        self._store.close()

    @staticmethod
    def _keys(table: TableRef) -> list[str]:
        return [keys.leases_key(table), keys.lease_info_key(table)]

    def acquire(self, table: TableRef, version: int, ttl_s: float, holder: str | None = None) -> Lease:
        """A new lease on ``version`` of ``table`` for ``ttl_s`` seconds (renew it to keep it)."""
        name = table_name(table).qualified
        check_version(version)
        ttl_ms = check_ttl(ttl_s)
        who = check_holder(default_holder() if holder is None else holder)
        lease_id = str(uuid.uuid4())
        with self._store.guarded(f"acquire a lease on version {version} of {name}"):
            now, expires = self._store.script(ACQUIRE_LUA)(
                keys=self._keys(name), args=[lease_id, ttl_ms, str(version), json.dumps(who)]
            )
        return Lease(name, lease_id, version, who, int(now), int(expires), ttl_ms, int(now))

    def renew(self, lease: Lease) -> bool:
        """Push the lease's expiry to now + its TTL; False if it had expired or been released."""
        with self._store.guarded(f"renew lease {lease.lease_id} of {lease.table}"):
            renew = self._store.script(RENEW_LUA)
            expires = renew(keys=self._keys(lease.table), args=[lease.lease_id, lease.ttl_ms])
        return bool(expires)

    def release(self, lease: Lease) -> None:
        """Drop the lease (nothing happens if it had already expired or been released)."""
        with self._store.guarded(f"release lease {lease.lease_id} of {lease.table}"):
            self._store.script(RELEASE_LUA)(keys=self._keys(lease.table), args=[lease.lease_id])

    def live(self, table: TableRef) -> list[Lease]:
        """The live leases of ``table`` by version; expired ones are dropped in the same script."""
        name = table_name(table).qualified
        with self._store.guarded(f"list the leases of {name}"):
            raw = self._store.script(LIVE_LUA)(keys=self._keys(name))
        return _parse_live(name, raw)

    def leased_versions(self, table: TableRef) -> set[int]:
        """Every version some live lease holds."""
        return {lease.version for lease in self.live(table)}

    def oldest_leased_version(self, table: TableRef) -> int | None:
        """The lowest version a live lease holds; None when nothing is leased."""
        return min(self.leased_versions(table), default=None)
