"""Keeps a ``TableState`` current by tailing the topic (as Schema Registry's KafkaStore does).

A long-lived writer or reader holds one of these, so learning the verdict on a new commit
costs one short fetch of the records since the last catch-up, not a replay.
"""

from __future__ import annotations

import time

from segcat.catalog.config import Config
from segcat.catalog.errors import ServiceUnavailable
from segcat.catalog.log.reader import LogReader
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.replay import Listener, replay
from segcat.catalog.protocol.state import TableState


class LogTailer:
    def __init__(self, config: Config, name: TableName, state: TableState | None = None) -> None:
        self.state = state if state is not None else TableState(name.qualified)
        self._reader = LogReader(config, name)
        self._timeout = config.request_timeout_s
        self._reader.seek(self.state.version + 1)
        self._position = self.state.version + 1

    def close(self) -> None:
        self._reader.close()

    def head_offset(self) -> int:
        """The offset of the newest record in the topic (-1 when empty)."""
        return self._reader.watermarks()[1] - 1

    def catch_up(self, offset: int | None = None, listener: Listener | None = None) -> TableState:
        """Apply records until the state has seen ``offset`` (default: the current head)."""
        target = self.head_offset() if offset is None else offset
        deadline = time.monotonic() + self._timeout
        while self._position <= target:
            batch = self._reader.poll_batch(0.2)
            if batch:
                replay(batch, self.state, listener=listener)
                self._position = batch[-1].offset + 1
                deadline = time.monotonic() + self._timeout
            elif time.monotonic() > deadline:
                raise ServiceUnavailable(
                    f"timed out catching up with {self.state.table} at offset {self._position} "
                    f"(waiting for {target})"
                )
            else:
                self._position = max(self._position, self._reader.position())
        return self.state
