"""Which tables move, for the all-tables stream, without a feed per table of the catalog.

Redis' global channel names a table the moment the materializer publishes one of its
versions; a ListOffsets request over every table (every ``PROBE_S``) keeps ``ends`` current
for the streams to compare with what they saw when they began (the materializer may be down).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from segcat import SegcatError, TableName
from segcat.catalog.read.table import Tables

log = logging.getLogger("segcat.serve")

PROBE_S = 2.0
RETRY_S = 1.0


class TableScout:
    def __init__(self, catalog: Tables, on_moved: Callable[[str], None]) -> None:
        self._catalog = catalog
        self._on_moved = on_moved
        self._stopped = threading.Event()
        self.ends: dict[TableName, int] = {}
        """Every table's log end as of the last probe."""
        self._threads = [
            threading.Thread(target=self._listen, name="segcat-scout-pubsub", daemon=True),
            threading.Thread(target=self._probe, name="segcat-scout-probe", daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _listen(self) -> None:
        redis = self._catalog.redis
        if redis is None:
            return
        while not self._stopped.is_set():
            try:
                with redis.subscribe(None) as sub:
                    while not self._stopped.is_set():
                        event = sub.get(timeout=0.5)
                        if event is not None:
                            self._on_moved(event.table)
            except SegcatError as exc:
                log.info("global channel unavailable, retrying", extra={"reason": str(exc)})
                self._stopped.wait(RETRY_S)

    def _probe(self) -> None:
        while not self._stopped.wait(PROBE_S):
            try:
                names = self._catalog.list_tables()
                self.ends = self._catalog.admin.log_ends(names)
            except SegcatError as exc:
                log.info("probe of the log ends failed", extra={"reason": str(exc)})

    def stop(self) -> None:
        self._stopped.set()
        for thread in self._threads:
            thread.join(2.0)
