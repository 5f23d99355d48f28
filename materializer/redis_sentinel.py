"""Notice a flushed, restarted or rolled-back Redis in one round trip per tick for all tables.

Redis is a cache the materializer rebuilds from its images; it must notice when the cache lost
what it wrote. Asking every table's head each second costs two round trips per table, which at
ten thousand mostly idle tables is the whole tick. Instead each materializer process keeps a
*sentinel* key of its own and moves it on every check: before it is set to ``<token>:<n>`` it
must read ``<token>:<n-1>`` (GET and SET in one pipeline). Any other answer means the keys
written before are gone or older than they were (FLUSHALL/FLUSHDB, a restart without
persistence, a restore from an older RDB/AOF, a failover to a replica that lagged): the service
then has every table it owns rebuild its keys, spread over the following ticks.

On a Redis Cluster every primary holds a part of the keys and can lose them on its own, so there
is one sentinel per primary (a hash tag chosen to land in one of its slots); a cluster pipeline
sends one request per node. The keys expire (``TTL_MS``) so a process that is gone leaves
nothing behind; a check that did not run for that long reads as a loss, which costs a rebuild
and nothing else.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from typing import Any

from redis.cluster import RedisCluster

from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.redis.keys import KEY_PREFIX

log = logging.getLogger("segcat.materializer")

TTL_MS = 3_600_000
"""How long a sentinel outlives its last check."""
_TAG_TRIES = 100_000
"""Hash tags tried per primary for one that lands in its slots (a few dozen suffice for 3)."""


class RedisSentinel:
    """One process's sentinel keys. ``check`` raises what the store's calls raise (Redis away);
    after a failed check the next one cannot judge and reports nothing lost: the service treats
    every failure of Redis as a possible loss anyway."""

    def __init__(self, store: RedisStore, token: str | None = None) -> None:
        self._store = store
        self._token = token or uuid.uuid4().hex
        self._written: dict[str, int] = {}
        """Each sentinel key and the count last written to it (empty: the next check only sets)."""

    def _keys(self) -> list[str]:
        base = f"{KEY_PREFIX}:materializer-sentinel:{self._token}"
        client: Any = self._store.client
        if not isinstance(client, RedisCluster):
            return [base]
        keys = []
        for node in client.get_primaries():
            for i in itertools.count():
                key = f"{base}:{{s{i}}}"
                owner = client.get_node_from_key(key)
                if owner is not None and owner.name == node.name:
                    keys.append(key)
                    break
                if i >= _TAG_TRIES:  # pragma: no cover - a primary without slots
                    break
        return keys

    def check(self) -> bool:
        """Move every sentinel; whether Redis still holds everything written before this check
        (True also on the first check, and on the first after a failure: nothing to judge)."""
        written, self._written = self._written, {}
        with self._store.guarded("sentinel check"):
            keys = list(written) or self._keys()
            pipe: Any = self._store.client.pipeline(transaction=False)
            for key in keys:  # GET then SET rather than SET … GET (Redis ≥ 6.2): only we write it
                pipe.get(key)
                pipe.set(key, f"{self._token}:{written.get(key, 0) + 1}", px=TTL_MS)
            answers = pipe.execute()[::2]
        intact = True
        for key, old in zip(keys, answers, strict=True):
            expected = written.get(key)
            if expected is not None and old != f"{self._token}:{expected}".encode():
                intact = False
                log.warning(
                    "redis lost what the materializer wrote (flushed, restarted or restored): "
                    "rebuilding every table's keys",
                    extra={"sentinel": key, "found": None if old is None else old.decode(errors="replace")},
                )
        self._written = {key: written.get(key, 0) + 1 for key in keys}
        return intact
