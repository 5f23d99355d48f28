"""Write intents: a writer says in the log which prefix it is about to write files under.

Vacuum deletes files no version references, so without an intent the files of a write in
flight look exactly like the files of a crashed one. An intent (an ``INTENT`` commit,
feature ``lifecycle``, docs/PROTOCOL.md §3c) names the writer, the prefix and an expiry in
broker time; it is renewed every third of its TTL while the job runs and closed by the
commit that adds the files (or by an abort when the job fails). Vacuum leaves every file
under a live intent's prefix alone; once the intent is closed or has expired, and the grace
period has passed, unreferenced files there are orphans.
"""

from __future__ import annotations

import logging
import threading
import uuid
from dataclasses import replace
from types import TracebackType
from typing import TYPE_CHECKING

from segcat.catalog.errors import CommitConflict, InvalidArgument, SegcatError
from segcat.catalog.protocol import lifecycle
from segcat.catalog.protocol.model import Commit, Intent, Operation

if TYPE_CHECKING:
    from segcat.catalog.write.writer import Writer

log = logging.getLogger("segcat.writer")

DEFAULT_INTENT_TTL_S = 600.0
"""Ten minutes: a killed job's files are protected that long (plus vacuum's grace) at most."""
MIN_INTENT_TTL_S = 1.0


class WriteIntent:
    """``with table.intent("data/day=2024-01-01/") as intent: ...; intent.commit(commit)``.

    On a table without the ``lifecycle`` feature the intent is inert (nothing is published)
    and ``active`` is False: writing works as before, only without the protection.
    """

    def __init__(
        self,
        writer: Writer,
        prefix: str,
        ttl_s: float = DEFAULT_INTENT_TTL_S,
        *,
        intent_id: str | None = None,
    ) -> None:
        if (
            isinstance(ttl_s, bool)
            or not isinstance(ttl_s, int | float)
            or not (MIN_INTENT_TTL_S <= ttl_s <= lifecycle.MAX_INTENT_TTL_MS / 1000)
        ):
            raise InvalidArgument(f"intent ttl_s must be between 1 s and 7 days, not {ttl_s!r}")
        if problem := lifecycle.prefix_problem(prefix):
            raise InvalidArgument(problem)
        if intent_id is not None and not lifecycle.is_canonical_uuid(intent_id):
            raise InvalidArgument(f"intent_id {intent_id[:60]!r} is not a UUID in canonical lowercase form")
        self.writer = writer
        self.prefix = prefix
        self.ttl_ms = int(ttl_s * 1000)
        self.intent_id = intent_id or str(uuid.uuid4())
        """Also the commit id the files will be added under, when the writer chooses so (``si.write``
        does): the files' footers then name it, and vacuum tells this write's files from others'."""
        self.version: int | None = None
        """The version of the INTENT commit that opened (or last renewed) it."""
        self.closed = False
        self.active = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> WriteIntent:
        self.open()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.abort()

    def open(self) -> int | None:
        """Publish the intent and start renewing it; its version (None: the table has no intents)."""
        state = self.writer.refresh()
        if not lifecycle.has_feature(state.protocol):
            log.warning(
                "table has no write intents (protocol feature 'lifecycle'); files are not protected "
                "from vacuum while they are written",
                extra={"table": self.writer.name.qualified},
            )
            return None
        self.active = True
        self.version = self._publish(self.ttl_ms)
        self._thread = threading.Thread(target=self._renew, name=f"intent-{self.intent_id[:8]}", daemon=True)
        self._thread.start()
        return self.version

    def adopt(self) -> bool:
        """Take over an intent with this id that another process opened (a Spark task of a
        streaming sink): nothing is published; ``commit`` and ``abort`` then close it. Whether the
        table has intents at all, by the writer's image as of its last refresh (False: the intent
        is inert, as ``open`` would leave it)."""
        self.active = lifecycle.has_feature(self.writer.state.protocol)
        return self.active

    def hand_over(self) -> None:
        """Stop renewing and leave the intent open, for another process to close with its commit
        (``adopt``); it expires after its TTL if nobody does. The writer forgets it, so closing the
        writer does not abort it."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        self.closed = True
        self.writer.forget_intent(self)

    def closing(self, commit: Commit) -> Commit:
        """``commit`` carrying this intent, so that accepting it closes the intent."""
        if not self.active:
            return commit
        return replace(commit, intent=Intent(self.intent_id, self.prefix, 0))

    def commit(self, commit: Commit) -> int:
        """Publish the data commit that closes this intent; its version."""
        version = self.writer.commit(self.closing(commit))
        self.closed = True
        self._stop.set()
        return version

    def abort(self) -> None:
        """Stop renewing; close the intent in the log unless a commit already did."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
        if self.active and not self.closed:
            self.closed = True
            try:
                self._publish(0)
            except SegcatError as exc:  # it expires on its own; vacuum then treats it as closed
                log.warning(
                    "could not close the write intent; it expires by itself",
                    extra={"table": self.writer.name.qualified, "intent": self.intent_id, "error": str(exc)},
                )

    def _publish(self, ttl_ms: int) -> int:
        commit = replace(
            self.writer.new_commit(Operation.INTENT),
            intent=Intent(self.intent_id, self.prefix, ttl_ms),
        )
        return self.writer.commit(commit)

    def _renew(self) -> None:
        interval = self.ttl_ms / 3000
        while not self._stop.wait(interval):
            try:
                self.version = self._publish(self.ttl_ms)
            except CommitConflict:
                return  # the table was dropped: nothing to protect any more
            except SegcatError as exc:
                log.warning(
                    "write intent renewal failed; retrying",
                    extra={"table": self.writer.name.qualified, "intent": self.intent_id, "error": str(exc)},
                )
