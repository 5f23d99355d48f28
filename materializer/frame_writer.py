"""Key frames and commit archives written off the hot path: one writer thread per materializer.

A key frame costs time in proportion to the live segments (sort, checksum, Parquet, IPC) and
is written to object storage (fsynced) and Redis; done inside ``apply()`` it would hold back
every record behind it, and with it their notifications. The main loop hands each table's
jobs to this thread and goes on publishing; a table's jobs run one at a time, in the order
they were submitted, so its archive still precedes the key frame that relies on it, and its
Redis key frame only ever moves forward (the store's scripts refuse an older one anyway).

A job handles its own errors (the table notes them and the main loop parks the table at its
next step); this thread only ever stops when the service closes it.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

log = logging.getLogger("segcat.materializer")

Job = Callable[[], None]


class FrameWriter:
    """A FIFO of ``(table, job)`` run by one daemon thread; ``drain(table)`` waits for a table's."""

    def __init__(self, name: str = "segcat-keyframes") -> None:
        self._queue: deque[tuple[str, Job]] = deque()
        self._pending: dict[str, int] = {}
        """Jobs per table submitted and not finished (queued or running)."""
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, table: str, job: Job) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("the key-frame writer is closed")
            self._queue.append((table, job))
            self._pending[table] = self._pending.get(table, 0) + 1
            self._cond.notify_all()

    def pending(self, table: str) -> int:
        """How many of ``table``'s jobs are queued or running."""
        with self._cond:
            return self._pending.get(table, 0)

    def drain(self, table: str | None = None, timeout_s: float | None = None) -> bool:
        """Wait until ``table``'s jobs (every job for None) are done; whether they are."""
        with self._cond:
            return self._cond.wait_for(
                lambda: not (self._pending.get(table, 0) if table is not None else self._pending),
                timeout_s,
            )

    def close(self, timeout_s: float = 60.0) -> None:
        """Finish what was submitted (up to ``timeout_s``), then stop the thread."""
        if not self.drain(timeout_s=timeout_s):
            log.warning("key-frame writer stopped with jobs left", extra={"jobs": len(self._queue)})
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: self._queue or self._closed)
                if not self._queue:
                    return
                table, job = self._queue.popleft()
            try:
                job()
            except Exception:  # jobs report their own errors; never let one kill the thread
                log.exception("key-frame job failed", extra={"table": table})
            finally:
                with self._cond:
                    left = self._pending[table] - 1
                    if left:
                        self._pending[table] = left
                    else:
                        del self._pending[table]
                    self._cond.notify_all()
