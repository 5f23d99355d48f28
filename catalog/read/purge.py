"""Purge a dropped table: its data, its ``_catalog/``, its Redis keys and finally its topic.

A purge and an undrop never both win (docs/LIFECYCLE.md, "Purging"):

- **Protocol ≥ 3**: before deleting anything the purge commits its fence, ``segcat.purge``
  (docs/PROTOCOL.md §3c). Only a dropped table accepts it, and once it is in, the undrop is
  REJECTED (rule ``7b-table-purging``). An undrop that lands first makes the fence INVALID:
  the purge stops with ``PurgeStopped``, having deleted nothing.
- **Protocol 2** has no fence: purge refuses unless ``allow_unfenced``; then an undrop that
  lands while files are being deleted stops the purge at its next look at the log, but what
  was deleted by then is gone.

Before every irreversible step (each batch of data files, ``_catalog/``, Redis, the topic) the
purge reads the log to its end again: a table that is no longer dropped, has lost its fence,
or whose log is shorter than what was read (the topic was replaced) stops it. The topic goes
last: until then the log still says "dropped", so a purge that stops midway (killed, storage
unreachable) is simply run again and finishes the job.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import NoReturn

from segcat.catalog.errors import InvalidArgument, PurgeStopped, ServiceUnavailable
from segcat.catalog.log.follower import Follower
from segcat.catalog.log.producer import write_commit
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol import lifecycle
from segcat.catalog.protocol.model import Commit, Operation, Protocol
from segcat.catalog.protocol.replay import Applied
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read import broker_clock
from segcat.catalog.read.table import TableReader, Tables
from segcat.catalog.storage.objectstore import ObjectStore

log = logging.getLogger("segcat.purge")

BATCH = 1_000
"""Data files deleted between two looks at the log."""

Progress = Callable[[int, int], None]
"""Called with (data files deleted, data files listed)."""


@dataclass(frozen=True)
class PurgeReport:
    table: str
    data_files: int
    catalog_objects: int
    redis_keys: int
    topic_deleted: bool
    fence_version: int | None = None
    """The version of the purge fence (None: a protocol-2 table, purged without one)."""


def purge(
    catalog: Tables, table: TableReader, *, allow_unfenced: bool = False, progress: Progress | None = None
) -> PurgeReport:
    """Delete everything of a dropped table.

    ``InvalidArgument`` if it is not dropped, or is at protocol 2 without ``allow_unfenced``;
    ``PurgeStopped`` when it is undropped (or its topic replaced) before or while the purge
    runs: the message says what was deleted by then (nothing, on a fenced table).
    """
    with _Watch.open(table, catalog.admin) as watch:
        state = watch.state
        if not state.dropped:
            raise InvalidArgument(f"table {table.name} is not dropped; drop it first (segcat table drop)")
        fenced = lifecycle.has_purge_fence(state.protocol)
        if not fenced and not allow_unfenced:
            raise InvalidArgument(
                f"table {table.name} is at protocol {state.protocol.version}: its log cannot record a purge, "
                "so an undrop running meanwhile could lose its data. Undrop it, upgrade it "
                "(segcat table upgrade), drop it and purge it; or purge it anyway with --allow-unfenced "
                "(re-checked before every batch of deletes)"
            )
        fence = watch.fence() if fenced else None
        root = state.location or table.root
        config = table.config
        data = ObjectStore.from_uri(root, s3_endpoint=config.s3_endpoint, s3_region=config.s3_region)
        watch.check("before deleting data files")
        doomed = [key for key, _, _ in data.list_files("data")]
        data_files = 0
        for start in range(0, len(doomed), BATCH):
            watch.check(f"after deleting {data_files:,} of {len(doomed):,} data files")
            for key in doomed[start : start + BATCH]:
                data.delete(key)
                data_files += 1
            if progress is not None:
                progress(data_files, len(doomed))
        watch.check(f"after deleting every data file ({data_files:,}), before _catalog/")
        catalog_objects = _delete_catalog(table)
        watch.check("before deleting its Redis keys")
        redis_keys = 0
        if catalog.redis is not None:
            try:
                redis_keys = catalog.redis.forget_table(table.name)
            except ServiceUnavailable as exc:
                raise ServiceUnavailable(
                    f"purge stopped before deleting the topic: {exc}; run it again"
                ) from exc
        watch.check("before deleting the topic")
        catalog.admin.delete(table.name)
    # a materializer may have written a key frame or Redis keys before it lost the topic
    catalog_objects += _delete_catalog(table, quiet=True)
    if catalog.redis is not None:
        try:
            redis_keys += catalog.redis.forget_table(table.name)
        except ServiceUnavailable as exc:
            log.warning(
                "redis keys of a purged table remain",
                extra={"table": table.name.qualified, "error": str(exc)},
            )
    report = PurgeReport(table.name.qualified, data_files, catalog_objects, redis_keys, True, fence)
    log.info("table purged", extra={"table": report.table, "data_files": data_files, "fence": fence})
    return report


def _delete_catalog(table: TableReader, *, quiet: bool = False) -> int:
    """Delete the table's ``_catalog/`` (key frames, archives, vacuum records); how many objects."""
    if table.files is None:
        return 0
    store = table.files.store
    deleted = 0
    try:
        for key, _, _ in store.list_files(table.files.catalog_dir):  # every log's objects
            store.delete(key)
            deleted += 1
    except OSError as exc:
        if not quiet:
            raise
        log.warning(
            "catalog objects of a purged table remain", extra={"table": table.files.base, "error": str(exc)}
        )
    return deleted


class _Watch:
    """The table's image, kept current before each irreversible step of the purge."""

    def __init__(self, table: TableReader, follower: Follower, admin: TopicAdmin | None = None) -> None:
        self.table = table
        self.follower = follower
        self.admin = admin
        """Asked before each step whether the topic is still the log the purge read (its id)."""
        self.undropped_at: int | None = None

    @classmethod
    def open(cls, table: TableReader, admin: TopicAdmin | None = None) -> _Watch:
        follower = Follower.from_keyframe(table.config, table.name, table.files)
        watch = cls(table, follower, admin)
        try:
            follower.catch_up(listener=watch._listen)
        except BaseException:
            follower.close()
            raise
        return watch

    def __enter__(self) -> _Watch:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.follower.close()

    @property
    def state(self) -> TableState:
        return self.follower.state

    def _listen(self, applied: Applied, _: TableState) -> None:
        commit = applied.commit
        if applied.verdict.outcome is Outcome.ACCEPTED and commit is not None and lifecycle.undrops(commit):
            self.undropped_at = applied.verdict.offset

    def fence(self) -> int:
        """Commit the purge fence (or find one already in: a purge run again); its version.

        ``PurgeStopped`` when the table was undropped before it: nothing is deleted then."""
        if self.state.purging_version >= 0:
            return self.state.purging_version
        commit = Commit(
            commit_id=Commit.new_id(),
            table=self.table.name.qualified,
            operation=Operation.SET_PROPERTIES,
            base_version=self.state.version,
            writer_id=f"segcat-purge-{os.getpid()}",
            timestamp_ms=int(time.time() * 1000),
            table_properties={lifecycle.PURGE_PROPERTY: Commit.new_id()},
        )
        offset = write_commit(self.table.config, self.table.name, commit).offset
        self.follower.catch_up(offset, listener=self._listen, exact=True)
        if self.state.purging_version >= 0:  # ours, or a concurrent purge's that came first
            return self.state.purging_version
        self._stop("before deleting anything")

    def check(self, when: str) -> None:
        """Read the log to its end; ``PurgeStopped`` unless the table is still dropped (and fenced)
        and its topic is still the log the purge read."""
        if self.admin is not None and self.table.log_id is not None:
            now_id = self.admin.topic_ids([self.table.name]).get(self.table.name)
            if now_id != self.table.log_id:
                raise PurgeStopped(
                    f"purge of {self.table.name} stopped {when}: its topic is no longer the log the purge "
                    "read (deleted or created again); nothing more was deleted"
                )
        end = self.follower.log_end()
        if end < self.follower.position - 1:
            raise PurgeStopped(
                f"purge of {self.table.name} stopped {when}: its log now ends at offset {end}, before "
                f"offset {self.follower.position - 1} which the purge read (the topic was replaced)"
            )
        self.follower.catch_up(end, listener=self._listen, exact=True)
        state = self.state
        fenced = lifecycle.has_purge_fence(state.protocol)
        if not state.dropped or (fenced and state.purging_version < 0):
            self._stop(when)

    def _stop(self, when: str) -> NoReturn:
        at = f" at version {self.undropped_at}" if self.undropped_at is not None else ""
        raise PurgeStopped(
            f"purge of {self.table.name} stopped {when}: the table was undropped{at} "
            "and is readable again; nothing more was deleted"
        )


@dataclass(frozen=True)
class DropInfo:
    """What the log says of a dropped table's drop: its version, its record's broker time, and
    the protocol in force (whether a purge can fence it)."""

    version: int
    broker_ms: int
    protocol: Protocol


def drop_info(table: TableReader) -> DropInfo | None:
    """The drop of ``table`` as the log records it (None when it is not dropped)."""
    with _Watch.open(table) as watch:
        state = watch.state
    if not state.dropped:
        return None
    broker_ms = state.dropped_timestamp_ms
    if broker_ms < 0:  # an image from a key frame written before it carried the drop's time
        broker_ms = broker_clock.record_time_ms(table, state.dropped_version)
    return DropInfo(state.dropped_version, broker_ms, state.protocol)
