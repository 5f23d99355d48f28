"""What a table's loader hands its publishers: a delta and the image after it (as Kafka's
``MetadataPublisher`` gets a ``MetadataDelta`` and the new ``MetadataImage``).

The loader (``table_materializer``) judges each record, folds it into its working image and
hands every publisher, in their order, the same ``(delta, image)``. A delta is one of:

- ``Loaded``: the loader (re)started from the newest key frame (or from nothing); the image is
  that state, every record after it follows. First after every recovery.
- ``RecordDelta``: one record judged; ``live`` says whether it is published as it happens or is
  part of a backlog being caught up (see ``table_materializer``).
- ``CaughtUp``: the backlog is applied; records are live from here on.

The image is an immutable ``TableImage``: the loader's working ``TableState`` is folded in
place (a copy per record would cost more than judging it) and never leaves the loader; a
publisher that needs more of it at some moment (the key-frame publisher: a whole frame) asks
the loader's ``FrameBuilder`` (``frames``), which takes its own copy.

Per loader lifetime a publisher sees every record after the loaded image once, in offset order.
A restart loads the newest key frame again, so the records after it come again, identical: a
publisher whose output outlives the process writes idempotently, by version (as the Redis
scripts do with their offset compare-and-set).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.model import LogRecord
from segcat.catalog.protocol.model import Protocol as TableProtocol
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.rules import Verdict
from segcat.catalog.storage.table_files import TableFiles


@dataclass(frozen=True, slots=True)
class TableImage:
    """One table after every record up to ``offset``, as publishers see it."""

    table: str
    log_id: str | None
    """The log (Kafka topic id) the image is of (None: the broker gives no topic id)."""
    offset: int
    """The last log offset applied (-1: none)."""
    version: int
    """The last ACCEPTED version (-1: none); ``offset`` is past it after other records."""
    timestamp_ms: int | None
    """The broker's time of ``version`` (None: no version yet)."""
    commit_id: str | None
    live_count: int
    live_bytes: int
    live_rows: int
    schema: str | None
    properties: Mapping[str, str]
    """The table's properties (read-only)."""
    protocol: TableProtocol

    @property
    def at_version(self) -> bool:
        """Whether the last record applied was accepted (a key frame is cut only there)."""
        return self.offset == self.version


@dataclass(frozen=True, slots=True)
class Loaded:
    """The loader (re)started: the image is the newest valid key frame's state (or the empty table)."""

    files: TableFiles
    """The table's objects, bound to the log the loader follows now."""
    from_keyframe: bool
    """False: no valid key frame was found; the image is the empty table."""
    unreadable: tuple[int, ...]
    """Versions of newer key frames that failed to load (the key-frame publisher rewrites them)."""


@dataclass(frozen=True, slots=True)
class RecordDelta:
    """One record judged."""

    record: LogRecord
    verdict: Verdict
    commit: CommitDelta | None
    """The accepted commit's delta; None when the record changed nothing but the offset."""
    live: bool
    """Published as it happens (False: part of a backlog being caught up)."""


@dataclass(frozen=True, slots=True)
class CaughtUp:
    """The backlog found on loading (or filled from the archives) is applied."""


TableDelta = Loaded | RecordDelta | CaughtUp


class Publisher(Protocol):
    """One destination of a table's images (Kafka's ``MetadataPublisher``): Redis, key frames on
    object storage, or any other. Adding one touches no other.

    Every call comes from the loader's thread, in the loader's order of publishers. A publisher
    handles the failures that are routine for it (Redis being away: back off, rebuild later);
    anything it raises stops the table: the service parks it (its partition paused, retried
    with back-off by recovering from the newest key frame) while the other tables go on.
    """

    @property
    def name(self) -> str:
        """Names the publisher in logs, and the stage a table failing in it is parked at."""
        ...

    def publish(self, delta: TableDelta, image: TableImage) -> None:
        """``delta`` was applied; ``image`` is the table after it."""
        ...

    def flush(self) -> None:
        """A poll batch ended: send what was queued for it (one round trip per batch)."""
        return None

    def tick(self, image: TableImage) -> None:
        """Work that is due by time rather than by record: called once ``due`` has passed (and
        whenever the loader is ticked for another publisher's sake)."""
        return None

    def due(self, image: TableImage) -> float | None:
        """When ``tick`` next has work (a ``time.monotonic()`` value; None: nothing until the
        next delta). Asked after every delta, flush and tick: the service ticks a table only
        when one of its publishers is due, so an idle table costs nothing per tick. A publisher
        that does not define it is ticked about once a second."""
        return None

    def close(self) -> None:
        """The table left this loader (revoked, or the service stops)."""
        return None


PublisherFactory = Callable[[TableName], Publisher]
"""Makes one table's instance of a publisher (the service calls it for every table assigned)."""
