"""Judging a table's log for the Spark source: the accepted versions after some version.

``VersionFollower`` replays the log with the rules every party uses (newest key frame ≤ the
start, then the log) in the long-lived planner process and keeps the rows of the accepted
versions, so the offsets Spark journals and the rows it reads come from one judgement.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from typing import Any

from segcat import (
    Config,
    TableName,
)
from segcat.catalog.log.follower import Follower
from segcat.catalog.log.reader import LogReader
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol.replay import Applied
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.protocol.state import TableState
from segcat.catalog.protocol.version_change import VersionChange, change_from_delta
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.table_files import TableFiles

VERSIONS_SCHEMA = (
    "table STRING, version BIGINT, prev_version BIGINT, timestamp TIMESTAMP, commit_id STRING, "
    "operation STRING, added ARRAY<STRING>, dropped ARRAY<STRING>, rows_delta BIGINT, "
    "bytes_delta BIGINT, live_segments BIGINT, properties MAP<STRING, STRING>"
)

HINT_WAIT_S = 1.0
"""How long the records up to Redis' head may take to arrive before the head is checked against
the log's end (a head left over from an older topic of the same name would be waited for forever)."""

log = logging.getLogger("segcat.spark.stream")

VersionRow = tuple[Any, ...]
"""One row of ``VERSIONS_SCHEMA``."""


def version_row(change: VersionChange, live_segments: int | None, properties: dict[str, str]) -> VersionRow:
    """The row of one accepted version: the change's fields, then the two only an image that judged
    the version knows (its live segments after, its commit's properties)."""
    return (
        change.table,
        change.version,
        change.prev_version,
        dt.datetime.fromtimestamp(change.timestamp_ms / 1000, tz=dt.UTC),
        change.commit_id,
        change.operation,
        list(change.added),
        list(change.dropped),
        change.rows_delta,
        change.bytes_delta,
        live_segments,
        properties,
    )


class VersionFollower:
    """Judges a table's log forward from some version and remembers the accepted versions.

    Holds Kafka clients: it lives in one process and is never pickled (the readers drop it).
    Besides the follower's consumer it keeps an idle one for the log's end: a ListOffsets on a
    consumer that is fetching waits behind its pending long-poll fetch (the broker answers one
    request per connection at a time), which cost every trigger up to ``fetch.wait.max.ms``.
    """

    def __init__(self, config: Config, name: TableName, *, full: bool = False) -> None:
        self._config = config
        self._name = name
        self._full = full
        """The image starts from a full key frame (its segments keep their schemas and stats), not
        the light one, which is all the rules need to judge."""
        self._follower: Follower | None = None
        self._ends: LogReader | None = None
        self._after = -1
        """Every accepted version in (``_after``, the image's offset] is in ``_rows``."""
        self._rows: dict[int, VersionRow] = {}
        self._log_id: str | None = None
        self._identified = False

    @property
    def log_id(self) -> str | None:
        """Which log is followed: the topic id, asked once (key frames, archives and Redis heads of
        any other log, a table that had the name before, are never taken)."""
        if not self._identified:
            self._log_id = TopicAdmin(self._config).describe(self._name).topic_id
            self._identified = True
        return self._log_id

    def close(self) -> None:
        if self._follower is not None:
            self._follower.close()
            self._follower = None
        if self._ends is not None:
            self._ends.close()
            self._ends = None
        self._rows = {}

    def log_end(self) -> int:
        """The offset of the newest record in the log (-1: empty): one request, never queued."""
        if self._ends is None:
            self._ends = LogReader(self._config, self._name)
        return self._ends.watermarks()[1] - 1

    @property
    def judged(self) -> int:
        """The last log offset judged (-1: none yet)."""
        return -1 if self._follower is None else self._follower.state.version

    def _start(self, after: int) -> None:
        """Rebuild the image at ``after``: newest key frame ≤ ``after``, then the log up to it."""
        if self._follower is not None:
            self._follower.close()
            self._follower = None
        files = TableFiles(ObjectStore.from_config(self._config), self._name, self.log_id)
        follower = Follower.from_keyframe(self._config, self._name, files, at_most=after, full=self._full)
        if follower.state.version < after:
            follower.catch_up(after, exact=True)
        # no version after the last accepted one is accepted yet, so the (empty) cache is
        # complete from there on
        self._follower, self._after, self._rows = follower, follower.state.last_accepted_version, {}

    def _collect(self, applied: Applied, _: TableState) -> None:
        delta = applied.delta
        if applied.verdict.outcome is not Outcome.ACCEPTED or delta is None:
            return
        prev = -1 if delta.prev_version is None else delta.prev_version
        change = change_from_delta(self._name.qualified, prev, delta, "kafka")
        self._rows[delta.version] = version_row(change, delta.live_count, dict(delta.commit.properties))

    def _advance(self, upto: int) -> None:
        """Judge the records after the image, up to offset ``upto``."""
        assert self._follower is not None
        if upto <= self._follower.state.version:
            return
        self._follower.catch_up(upto, listener=self._collect, exact=True)

    def _ensure(self, after: int) -> None:
        if self._follower is None or after < self._after:
            self._start(after)

    def accepted_after(self, after: int, upto: int | None = None) -> list[VersionRow]:
        """The accepted versions in (``after``, ``upto``], reading the log to ``upto`` or its end."""
        self._ensure(after)
        self._advance(self.log_end() if upto is None else upto)
        return [row for v, row in self._rows.items() if v > after and (upto is None or v <= upto)]

    def reach(self, after: int, hint: int) -> int:
        """Judge the log up to offset ``hint`` (how far the materializer judged it, from Redis);
        returns the offset judged to, which is ``hint`` unless the log ends before it.

        The records are normally in the consumer's buffer already (it keeps fetching), so this
        costs no round trip. If they do not arrive within ``HINT_WAIT_S`` the hint is checked
        against the log's end and cut to it (a head left from an older topic of the same name).
        """
        self._ensure(after)
        follower = self._follower
        assert follower is not None
        deadline = time.monotonic() + HINT_WAIT_S
        while follower.state.version < hint:
            if time.monotonic() > deadline:
                hint = min(hint, self.log_end())
                self._advance(hint)
                break
            follower.poll(0.05, self._collect)
        return hint

    def last_accepted(self) -> int:
        """The newest accepted version in the log now (reads to the log's end)."""
        end = self.log_end()
        if self._follower is None:
            self._start(end)  # from the newest key frame, not from offset 0
        self._advance(end)
        assert self._follower is not None
        return self._follower.state.last_accepted_version

    def known_last_accepted(self) -> int | None:
        """The newest accepted version judged so far, without reading anything (None: nothing yet)."""
        return None if self._follower is None else self._follower.state.last_accepted_version

    def forget(self, upto: int) -> None:
        """Spark will never ask for versions ≤ ``upto`` again: free their rows."""
        if self._follower is None or upto < self._after:
            return
        self._rows = {v: row for v, row in self._rows.items() if v > upto}
        self._after = upto
