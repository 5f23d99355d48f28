"""``Table.watch(from_version)``: every accepted version after ``from_version``, with no gaps.

Pub/Sub brings new versions within milliseconds. Each event names the accepted version
before it (``prev_version``), so a missed event shows as a broken chain and is filled
from the Redis stream of deltas, or from the log itself when the stream cannot prove it
covers the gap. Without Redis the watcher tails Kafka and judges records with the same
rules, on a light image rebuilt from the newest key frame at or before ``from_version``.
Whichever way a version arrives, it is handed on as one ``VersionChange``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator

from segcat.catalog.config import Config
from segcat.catalog.errors import DecodeError, ServiceUnavailable
from segcat.catalog.log.follower import Follower, collect_accepted
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.version_change import VersionChange, change_from_delta
from segcat.catalog.storage.redis import RedisStore, Subscription, chain_is_complete
from segcat.catalog.storage.table_files import TableFiles

log = logging.getLogger("segcat.watch")


class Watcher:
    """``for change in table.watch(v): ...``; ``close()`` (or leaving ``with``) stops it."""

    def __init__(
        self,
        config: Config,
        name: TableName,
        redis: RedisStore | None,
        files: TableFiles | None,
        from_version: int,
        *,
        poll_s: float = 0.5,
        log_id: str | None = None,
    ) -> None:
        """``log_id``: the log being watched (the topic id); events and Redis values of another
        log (a table that had this name before) are ignored."""
        self._config = config
        self._name = name
        self._redis = redis
        self._files = files
        self._log_id = log_id
        self.last = from_version
        self._poll_s = poll_s
        self._sub: Subscription | None = None
        self._follower: Follower | None = None
        self._closed = False

    def __enter__(self) -> Watcher:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def stop(self) -> None:
        """Ask the iterating thread to finish (safe from any thread: it releases what it holds)."""
        self._closed = True

    def close(self) -> None:
        self._closed = True
        self._drop_subscription()
        if self._follower is not None:
            self._follower.close()
            self._follower = None

    def __iter__(self) -> Iterator[VersionChange]:
        while not self._closed:
            if self._sub is None and self._redis is not None:
                try:
                    self._sub = self._redis.subscribe(self._name.qualified)
                    yield from self._fill_from_stream_or_log(None)  # subscribed first: nothing falls between
                except ServiceUnavailable as exc:
                    log.info("pub/sub unavailable, tailing the log", extra={"reason": str(exc)})
                    self._drop_subscription()
            if self._sub is None:
                found: list[CommitDelta] = []
                self._kafka().poll(self._poll_s, listener=collect_accepted(found))
                yield from self._emit(found, "kafka")
                continue
            try:
                event = self._sub.get(timeout=self._poll_s)
            except ServiceUnavailable:
                self._drop_subscription()
                continue
            if event is None or event.version <= self.last or not self._ours(event.log_id):
                continue
            if event.prev_version > self.last:
                yield from self._fill_from_stream_or_log(event.prev_version)
            if event.version > self.last:
                self.last = event.version
                # checked to be the watched log's: handed on as the stream and the log hand theirs
                yield dataclasses.replace(event, log_id=None)

    # ------------------------------------------------------------------ gap filling

    def _fill_from_stream_or_log(self, upto: int | None) -> Iterator[VersionChange]:
        items = self._from_stream(upto)
        if items is not None:
            yield from self._emit(items, "stream")
            return
        follower = self._kafka()
        found: list[CommitDelta] = []
        follower.catch_up(upto, listener=collect_accepted(found))
        yield from self._emit(found, "kafka")

    def _from_stream(self, upto: int | None) -> list[CommitDelta] | None:
        """The accepted commits in (last, upto] from Redis, or None if it can't prove coverage."""
        if self._redis is None:
            return None
        try:
            head = self._redis.head(self._name.qualified)
            if head is None or not self._ours(head.log_id):
                return None
            target = head.version if upto is None else min(upto, head.version)
            if target <= self.last:
                return [] if upto is None or upto <= head.version else None
            deltas = self._redis.deltas(self._name.qualified, self.last, target)
        except ServiceUnavailable:
            return None
        if not chain_is_complete(self.last, deltas, end_version=target):
            return None
        items: list[CommitDelta] = []
        for entry in deltas:
            try:
                items.append(CommitDelta(entry.version, entry.timestamp_ms, codec.decode_commit(entry.value)))
            except DecodeError:
                return None
        return items

    def _ours(self, log_id: str | None) -> bool:
        """Whether a value of ``log_id`` belongs to the log watched (any does when it has no id)."""
        return self._log_id is None or log_id == self._log_id

    def _emit(self, items: list[CommitDelta], source: str) -> Iterator[VersionChange]:
        for delta in items:
            if delta.version > self.last:
                change = change_from_delta(self._name.qualified, self.last, delta, source)
                self.last = delta.version
                yield change

    def _kafka(self) -> Follower:
        if self._follower is None:
            self._follower = Follower.from_keyframe(self._config, self._name, self._files, at_most=self.last)
            # the image at the last version emitted (or the log's end, if that is before it)
            self._follower.catch_up(min(self.last, self._follower.log_end()), exact=True)
        return self._follower

    def _drop_subscription(self) -> None:
        if self._sub is not None:
            with contextlib.suppress(ServiceUnavailable):
                self._sub.close()
            self._sub = None
