"""The server's Redis client, time-boxed: a Redis that stops answering costs one short timeout,
then is skipped for a while, so every read falls back to object storage and Kafka at once.

Readers already fall back when a Redis call fails (``catalog.read.lookup``); what makes a frozen
Redis (a stopped process, a full network buffer) expensive is the wait: without the gate every call
of every table would wait out the socket timeout and a retry. Here the first call that times out
or cannot connect opens the gate for ``SKIP_S``: calls meanwhile raise ``ServiceUnavailable``
without touching the network, and the first call after it tries Redis again.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from segcat import Config, ServiceUnavailable
from segcat.catalog.storage.redis import RedisStore

TIMEOUT_S = 1.0
"""Socket (and connect) timeout of the server's Redis calls."""
SKIP_S = 5.0
"""How long Redis is skipped after a call timed out or could not connect."""


class TimeBoxedRedis(RedisStore):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._skip_until = 0.0
        self._gate = threading.Lock()

    @classmethod
    def for_server(cls, config: Config) -> TimeBoxedRedis:
        store = cls.from_config(config, socket_timeout_s=TIMEOUT_S)
        assert isinstance(store, TimeBoxedRedis)
        return store

    @property
    def skipping(self) -> bool:
        """Whether Redis is being skipped now (it failed less than ``SKIP_S`` ago)."""
        return time.monotonic() < self._skip_until

    @contextlib.contextmanager
    def guarded(self, op: str) -> Iterator[None]:
        if self.skipping:
            raise ServiceUnavailable(
                f"Redis at {self.where} did not answer in the last {SKIP_S:g} s; {op} skipped "
                "(readers fall back to object storage and Kafka)"
            )
        try:
            with super().guarded(op):
                yield
        except ServiceUnavailable as exc:
            if isinstance(exc.__cause__, RedisConnectionError | RedisTimeoutError):
                with self._gate:
                    self._skip_until = time.monotonic() + SKIP_S
            raise
