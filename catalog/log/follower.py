"""Follow a table's log: one image kept current by the rules, each record handed out judged.

Start from an image (a writer's, a reader's judging image) or from the newest key frame at
or before a version, then read the records after it in order; every record goes through
the rules, and a listener sees each one judged (the accepted ones with their delta). The
writer's image, a reader's Kafka tail, ``watch()`` without Redis and the Spark source all
follow a table this way (as Schema Registry's KafkaStore follows its topic), so learning
the verdict on a new commit costs one short fetch, not a replay.
"""

from __future__ import annotations

import contextlib
import logging
import time
from types import TracebackType
from typing import Any

from segcat.catalog.config import Config
from segcat.catalog.errors import ArchiveGap, CorruptArchive, LogPruned, ServiceUnavailable
from segcat.catalog.log.reader import LogReader
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.model import LogRecord
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.replay import Applied, Listener, replay
from segcat.catalog.protocol.rules import Outcome, OwnRecords
from segcat.catalog.protocol.state import TableState
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.table_files import TableFiles

log = logging.getLogger("segcat.follower")


def collect_accepted(into: list[CommitDelta], *, after: int = -1) -> Listener:
    """A listener that keeps the deltas of the accepted versions after ``after``."""

    def collect(applied: Applied, _: TableState) -> None:
        delta = applied.delta
        if applied.verdict.outcome is Outcome.ACCEPTED and delta is not None and delta.version > after:
            into.append(delta)

    return collect


class Follower:
    """A table's image, and a reader positioned right after the last record it applied."""

    def __init__(
        self,
        config: Config,
        name: TableName,
        image: TableState | None = None,
        *,
        files: TableFiles | None = None,
        guard: contextlib.AbstractContextManager[Any] | None = None,
    ) -> None:
        self.state = image if image is not None else TableState(name.qualified)
        self._guard: contextlib.AbstractContextManager[Any] = (
            guard if guard is not None else contextlib.nullcontext()
        )
        """Held while the image changes, never while waiting for Kafka: a writer judging new
        commits on the image in another thread sees it whole, and is not held up by fetches."""
        self._name = name
        self._reader = LogReader(config, name)
        self._timeout = config.request_timeout_s
        self._files = files
        """With object storage, the records the commit archives hold are read there, never from
        Kafka: a pruned log no longer has them (docs/PROTOCOL.md §3c)."""
        self._archived: int | None = None
        self._reader.seek(self.state.version + 1)
        self._position = self.state.version + 1

    @classmethod
    def from_keyframe(
        cls,
        config: Config,
        name: TableName,
        files: TableFiles | None,
        *,
        at_most: int | None = None,
        full: bool = False,
        guard: contextlib.AbstractContextManager[Any] | None = None,
    ) -> Follower:
        """Start from the newest valid key frame with version ≤ ``at_most`` (any, if None),
        reading the archived records after it from object storage and Kafka only after them.

        ``full`` loads every segment's stats (an image that writes key frames); otherwise the
        light image, which is all the rules need to judge. Without a usable key frame (none,
        or object storage unreachable) the image is the empty table, at offset -1.
        """
        frame = None
        if files is not None and (at_most is None or at_most >= 0):
            try:
                frame = files.newest_valid_keyframe(at_most=at_most, lean=not full)
            except OSError as exc:
                log.warning("object storage unavailable; following from offset 0", extra={"error": str(exc)})
        image = None if frame is None else (frame.state() if full else keyframe.light_state(frame))
        return cls(config, name, image, files=files, guard=guard)

    def __enter__(self) -> Follower:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._reader.close()

    @property
    def position(self) -> int:
        """The next offset the follower will apply."""
        return self._position

    def log_end(self) -> int:
        """The offset of the newest record in the topic (-1 when empty): one watermark request."""
        return self._reader.watermarks()[1] - 1

    def catch_up(
        self,
        upto: int | None = None,
        listener: Listener | None = None,
        *,
        exact: bool = False,
        own: OwnRecords | None = None,
    ) -> TableState:
        """Apply records until the image has seen offset ``upto`` (default: the log's end now).

        With ``exact`` the image stops at ``upto`` even when a fetch brought records after
        it (a reader asked for a version); otherwise it applies whatever the fetch brought.
        Records the commit archives hold are taken from there, Kafka only after them.
        ``own`` recognises the records a writer produced itself (``rules.apply_record``).
        """
        target = self.log_end() if upto is None else upto
        deadline = time.monotonic() + self._timeout
        while self._position <= target:
            if self._from_archives(target, listener):
                continue
            batch = self._reader.poll_batch(0.2)
            if batch:
                if not self._contiguous(batch, listener):
                    continue  # the archives filled a hole; read Kafka again after them
                with self._guard:
                    replay(batch, self.state, upto=target if exact else None, listener=listener, own=own)
                    self._position = self.state.version + 1
                if exact and batch[-1].offset > target:
                    self._reader.seek(self._position)
                deadline = time.monotonic() + self._timeout
            elif time.monotonic() > deadline:
                raise ServiceUnavailable(
                    f"timed out catching up with {self.state.table} at offset {self._position} "
                    f"(waiting for {target})"
                )
            else:
                self._position = max(self._position, self._reader.position())
        return self.state

    def poll(self, timeout_s: float, listener: Listener | None = None) -> TableState:
        """Apply whatever arrives within ``timeout_s`` (the next records after the image)."""
        if self._from_archives(None, listener):
            return self.state
        batch = self._reader.poll_batch(timeout_s)
        if batch and self._contiguous(batch, listener):
            with self._guard:
                replay(batch, self.state, listener=listener)
                self._position = self.state.version + 1
        return self.state

    def _archive_end(self, refresh: bool) -> int:
        """The last offset the archives cover without a gap (cached; -1 without object storage)."""
        if self._files is None:
            return -1
        if self._archived is None or refresh:
            try:
                self._archived = self._files.archived_upto()
            except (ArchiveGap, CorruptArchive, OSError) as exc:
                log.warning(
                    "commit archives unreadable; reading the log from Kafka",
                    extra={"table": self.state.table, "error": str(exc)},
                )
                self._archived = -1
        return self._archived

    def _from_archives(self, target: int | None, listener: Listener | None, *, refresh: bool = False) -> bool:
        """Apply the archived records after the image, up to ``target`` (None: all); whether any were."""
        end = self._archive_end(refresh)
        if self._position > end:
            return False
        upto = end if target is None else min(target, end)
        assert self._files is not None
        try:
            records = list(self._files.records_between(self.state.version, upto))
        except (ArchiveGap, CorruptArchive, OSError) as exc:
            log.warning(
                "commit archives unreadable; reading the log from Kafka",
                extra={"table": self.state.table, "error": str(exc)},
            )
            self._archived = -1
            return False
        with self._guard:
            replay(records, self.state, upto=upto, listener=listener)
            self.state.version = max(self.state.version, upto)  # the archives cover every offset up to it
            self._position = self.state.version + 1
        self._reader.seek(self._position)
        return True

    def _contiguous(self, batch: list[LogRecord], listener: Listener | None) -> bool:
        """Never judge past a hole: records missing from Kafka (pruned or compacted away) would
        make the image silently wrong. Newer archives may hold them (False: they were applied,
        poll again); otherwise ``LogPruned``."""
        expected = self._position
        for record in batch:
            if record.offset > expected and record.offset > self.state.version + 1:
                if self._from_archives(record.offset - 1, listener, refresh=True):
                    return False
                raise LogPruned(
                    f"{self._name}: the log no longer holds offsets {expected}..{record.offset - 1} "
                    "(pruned or compacted) and the commit archives on object storage do not cover them"
                )
            expected = record.offset + 1
        return True
