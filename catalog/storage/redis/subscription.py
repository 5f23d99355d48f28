"""Follow version changes on one channel (redis-py Pub/Sub).

Pub/Sub is fire-and-forget: events published while disconnected are lost, so a follower
fills gaps from the stream (``RedisStore.deltas``, ``prev_version`` chaining) or the log.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator
from types import TracebackType
from typing import TYPE_CHECKING

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from segcat.catalog.errors import MalformedChange, ServiceUnavailable
from segcat.catalog.protocol.version_change import VersionChange

if TYPE_CHECKING:
    from segcat.catalog.storage.redis.store import RedisStore

log = logging.getLogger("segcat.redis")


class Subscription:
    """Version events from one channel (redis-py PubSub). Not thread-safe; close it when done.

    Pub/Sub is fire-and-forget: events published while disconnected are lost, so a
    follower must fill gaps from :meth:`RedisStore.deltas` (``prev_version`` chaining).
    """

    def __init__(self, store: RedisStore, channel: str) -> None:
        self._store = store
        self.channel = channel
        with store.guarded(f"subscribe {channel}"):
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

    def get(self, timeout: float = 1.0) -> VersionChange | None:
        """The next event, or None when none arrives within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        with self._store.guarded(f"read {self.channel}"):
            while True:
                remaining = max(deadline - time.monotonic(), 0.0)
                message = self._pubsub.get_message(timeout=remaining)
                if message is not None and message["type"] == "message":
                    try:
                        return VersionChange.from_json(message["data"])
                    except MalformedChange as exc:
                        log.warning("ignoring a malformed message on %s: %s", self.channel, exc)
                if remaining <= 0:
                    return None

    def __iter__(self) -> Iterator[VersionChange]:
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
