"""Follow a table's log: one image kept current by the rules, each record handed out judged.

Start from an image (a writer's, a reader's judging image) or from the newest key frame at
or before a version, then read the records after it in order; every record goes through
the rules, and a listener sees each one judged (the accepted ones with their delta). The
writer's image, a reader's Kafka tail, ``watch()`` without Redis and the Spark source all
follow a table this way (as Schema Registry's KafkaStore follows its topic), so learning
the verdict on a new commit costs one short fetch, not a replay.
"""

from __future__ import annotations

import logging
import time
from types import TracebackType

from segcat.catalog.config import Config
from segcat.catalog.errors import ArchiveGap, CorruptArchive, LogPruned, ServiceUnavailable
from segcat.catalog.log.reader import LogReader
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.model import LogRecord
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.replay import Applied, Listener, replay
from segcat.catalog.protocol.rules import Outcome
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
    ) -> None:
        self.state = image if image is not None else TableState(name.qualified)
        self._name = name
        self._reader = LogReader(config, name)
        self._timeout = config.request_timeout_s
        self._files = files
        """With object storage, the records the commit archives hold are read there, never from
        Kafka: a pruned log no longer has them (docs/PROTOCOL.md §3c)."""
        self._archives_checked = files is None
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
    ) -> Follower:
        """Start from the newest valid key frame with version ≤ ``at_most`` (any, if None),
        reading the archived records after it from object storage and Kafka only after them."""
        follower = cls._from_keyframe(config, name, files, at_most=at_most, full=full)
        follower._files = files
        follower._archives_checked = files is None
        return follower

    @classmethod
    def _from_keyframe(
        cls,
        config: Config,
        name: TableName,
        files: TableFiles | None,
        *,
        at_most: int | None = None,
        full: bool = False,
    ) -> Follower:
        """Start from the newest valid key frame with version ≤ ``at_most`` (any, if None).

        ``full`` loads every segment's stats (an image that writes key frames); otherwise the
        light image, which is all the rules need to judge. Without a usable key frame (none,
        or object storage unreachable) the image is the empty table, at offset -1.
        """
        frame = None
        if files is not None and (at_most is None or at_most >= 0):
            try:
                frame = files.newest_valid_keyframe(at_most=at_most)
            except OSError as exc:
                log.warning("object storage unavailable; following from offset 0", extra={"error": str(exc)})
        image = None if frame is None else (frame.state() if full else keyframe.light_state(frame))
        return cls(config, name, image)

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
        self, upto: int | None = None, listener: Listener | None = None, *, exact: bool = False
    ) -> TableState:
        """Apply records until the image has seen offset ``upto`` (default: the log's end now).

        With ``exact`` the image stops at ``upto`` even when a fetch brought records after
        it (a reader asked for a version); otherwise it applies whatever the fetch brought.
        """
        target = self.log_end() if upto is None else upto
        if not self._archives_checked:
            self._replay_archives(target, listener)
        deadline = time.monotonic() + self._timeout
        while self._position <= target:
            batch = self._reader.poll_batch(0.2)
            if batch:
                self._check_contiguous(batch)
                replay(batch, self.state, upto=target if exact else None, listener=listener)
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

    def _replay_archives(self, target: int, listener: Listener | None) -> None:
        """Apply the archived records after the image (up to ``target``), then read Kafka after them."""
        self._archives_checked = True
        assert self._files is not None
        start = self.state.version
        try:
            records = list(self._files.records_between(start, target))
        except ArchiveGap as exc:
            if exc.covered_upto <= start:
                return  # nothing archived after the image: Kafka has it (or says it is gone)
            records = list(self._files.records_between(start, exc.covered_upto))
        except (CorruptArchive, OSError) as exc:
            log.warning(
                "commit archives unreadable; reading the log from Kafka",
                extra={"table": self.state.table, "error": str(exc)},
            )
            return
        if not records:
            return
        replay(records, self.state, upto=target, listener=listener)
        covered = max(self.state.version, min(records[-1].offset, target))
        self.state.version = covered
        self._position = covered + 1
        self._reader.seek(self._position)

    def _check_contiguous(self, batch: list[LogRecord]) -> None:
        """Refuse to judge past a hole: records missing from Kafka (pruned or compacted away)
        would make the image silently wrong; object storage must supply them."""
        expected = self._position
        for record in batch:
            if record.offset > expected and record.offset > self.state.version + 1:
                raise LogPruned(
                    f"{self._name}: the log no longer holds offsets {expected}..{record.offset - 1} "
                    "(pruned or compacted); they are only on object storage, which did not answer"
                )
            expected = record.offset + 1

    def poll(self, timeout_s: float, listener: Listener | None = None) -> TableState:
        """Apply whatever arrives within ``timeout_s`` (the next records after the image)."""
        if not self._archives_checked:
            self._replay_archives(self.log_end(), listener)
        batch = self._reader.poll_batch(timeout_s)
        if batch:
            self._check_contiguous(batch)
            replay(batch, self.state, listener=listener)
            self._position = self.state.version + 1
        return self.state
