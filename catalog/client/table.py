"""``Table``: everything a user does with one table, on one object.

Reading (``snapshot``, ``history``, ``records``, ``diff``, ``watch``, ``lease``) goes to the
read side (``catalog.read.table.TableReader``); writing (``append``, ``commit``, ``submit``,
``compact``, ``replace``, ``delete``, ``drop_partitions``, ``intent``, ``set_properties``)
to a ``catalog.write.writer.Writer`` the handle opens on its first write, so a handle that
only reads never opens a producer; maintenance (``prune_log``, ``vacuum``,
``upgrade_protocol``) to the modules that implement it.

Every time argument is ``as_of``: ms since the epoch, a datetime or date (naive = UTC) or an
ISO-8601 string (``catalog.read.as_of``), the same everywhere segcat takes a time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING

from segcat.catalog.errors import InvalidArgument
from segcat.catalog.iceberg.published import published_field_ids
from segcat.catalog.log.pipeline import DEFAULT_MAX_IN_FLIGHT, CommitFuture, check_max_in_flight
from segcat.catalog.log.topics import TopicInfo
from segcat.catalog.protocol.expressions import Predicate
from segcat.catalog.protocol.model import Commit, Isolation, Operation, Protocol, Segment
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.replay import Listener
from segcat.catalog.protocol.rules import Applied
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read import vacuum as vacuuming
from segcat.catalog.read.as_of import AsOf, as_of_ms
from segcat.catalog.read.change_feed import ChangeFeed, open_changes
from segcat.catalog.read.lease import DEFAULT_TTL_S as DEFAULT_LEASE_TTL_S
from segcat.catalog.read.lease import HeldLease
from segcat.catalog.read.log_pruning import PruneResult
from segcat.catalog.read.scan import Scan, open_scan
from segcat.catalog.read.snapshot import Snapshot, SnapshotDiff
from segcat.catalog.read.table import HistoryEntry, TableReader
from segcat.catalog.read.vacuum_fence import DEFAULT_WAIT_S
from segcat.catalog.read.watch import Watcher
from segcat.catalog.write import tagging
from segcat.catalog.write.intent import DEFAULT_INTENT_TTL_S, WriteIntent
from segcat.catalog.write.writer import Planner, Writer, default_writer_id

if TYPE_CHECKING:
    from segcat.catalog.client.catalog import Catalog

Progress = Callable[[int, int], None]
"""Called with (done, total): records replayed, files deleted."""


def check_writer_options(writer_id: object, max_in_flight: object) -> None:
    """``InvalidArgument`` for writer settings that can never work, before anything is read or
    created (the writer itself opens only on the first write)."""
    if writer_id is not None and (not isinstance(writer_id, str) or not writer_id):
        raise InvalidArgument(f"writer_id is a non-empty string, not {writer_id!r}")
    check_max_in_flight(max_in_flight)


class Table:
    """One table: read any version, write commits, maintain it. ``catalog.load_table(name)``.

    A handle is bound to the table's log as it was when it was loaded (its topic id). It is
    safe to share between threads; ``close()`` (or leaving ``with``) waits for the commits in
    flight and aborts the write intents still open.
    """

    def __init__(
        self,
        catalog: Catalog,
        reader: TableReader,
        *,
        writer_id: str | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        """Made by ``Catalog.load_table`` / ``create_table``, not by hand."""
        check_writer_options(writer_id, max_in_flight)
        self._catalog = catalog
        self._reader = reader
        self._writer_id = writer_id or default_writer_id()
        self._max_in_flight = max_in_flight
        self._writer: Writer | None = None
        self._lock = threading.Lock()
        self._closed = False

    @property
    def name(self) -> TableName:
        return self._reader.name

    @property
    def catalog(self) -> Catalog:
        """The catalog that loaded this handle (its configuration, and more handles)."""
        return self._catalog

    @property
    def topic(self) -> TopicInfo:
        """The table's Kafka topic as it was when the handle was loaded: its name, id, partitions,
        ``max.message.bytes`` and configuration (``segcat table describe``)."""
        return self._reader.info

    @property
    def writer_id(self) -> str:
        """How this handle's commits name their writer (``Commit.writer_id``)."""
        return self._writer_id

    def __repr__(self) -> str:
        return f"Table({self.name.qualified!r})"

    # ------------------------------------------------------------------ reading

    def snapshot(
        self,
        version: int | str | None = None,
        *,
        as_of: AsOf | None = None,
        stale_ok: bool = False,
        include_dropped: bool = False,
        progress: Progress | None = None,
    ) -> Snapshot:
        """The table at ``version`` (any offset up to the log's end, or a tag's name) or ``as_of``
        a broker time; default: the head as of the log's end, so a reader always sees the latest
        commit.

        ``as_of`` names the last version at or before that time. ``stale_ok=True`` (head only)
        answers from the materialized head at once; ``Snapshot.behind`` then says how many log
        records it trails by. A dropped table raises ``TableDropped`` unless ``include_dropped``.
        ``VersionNotFound`` for a version beyond the log's end, ``VersionExpired`` for one older
        than the history kept, ``InvalidArgument`` for a value that can never name a version.
        ``progress(done, total)`` is called for each record judged from Kafka (the slow path),
        with the log's end as the total.
        """
        at_ms = as_of_ms(as_of)
        listener: Listener | None = None
        if progress is not None:
            total = max(self._reader.head_offset() + 1, 0)

            def listener(applied: Applied, _: TableState) -> None:
                progress(applied.verdict.offset + 1, total)

        return self._reader.snapshot(
            version, at_ms, listener=listener, stale_ok=stale_ok, include_dropped=include_dropped
        )

    def resolve_version(self, version: int | str | None = None, *, as_of: AsOf | None = None) -> int:
        """The offset a ``snapshot`` with these arguments covers: ``version`` itself (or the one
        the tag ``version`` names), the last record at or before ``as_of``, or the log's end.
        Lease it first (``lease``), then read ``snapshot(that)``: vacuum cannot delete the files
        in between."""
        return self._reader.resolve_version(version, as_of_ms(as_of)).bound

    def history(self) -> list[HistoryEntry]:
        """The accepted commits, oldest first, each with its version and broker time."""
        return self._reader.history()

    def records(self, start: int = 0, end: int | None = None) -> Iterator[Applied]:
        """Every record from offset ``start`` (before ``end``) with the rules' verdict, in log
        order: rejected, invalid and duplicate commits too (``segcat log``)."""
        return self._reader.records(start, end)

    def diff(self, from_version: int, to_version: int) -> SnapshotDiff:
        """Segments to load and unload between two versions (both must exist)."""
        return self._reader.diff(from_version, to_version)

    def changes(
        self, start: int, end: int | None = None, *, columns: Sequence[str] | None = None
    ) -> ChangeFeed:
        """The change feed of versions ``start``..``end`` (inclusive; default: the head) as Arrow
        record batches: the rows each version inserted and deleted, with ``_change_type``
        (``insert`` / ``delete``), ``_commit_version`` and ``_commit_timestamp``, as Delta's Change
        Data Feed. Compactions and metadata versions yield no rows. Applying the feed of
        (a, b] to the rows of a gives the rows of b.

        Planned now (a version lease on ``start - 1`` taken first, every version's files known,
        tombstones checked), read while iterating; ``with table.changes(...) as feed`` or
        ``feed.close()`` releases the lease. ``columns`` picks table columns (the three change
        columns always follow). Errors: ``InvalidArgument`` (a bad ``start`` / ``end`` /
        ``columns``, ``start`` after ``end``), ``VersionNotFound`` (``end`` past the head),
        ``VersionExpired`` (versions pruned away), ``UnsupportedPredicate`` (a tombstone only Spark
        can apply), ``DataFileMissing`` (a file vacuumed before the lease), ``IncompatibleSchema``.
        """
        return open_changes(self._reader, start, end, columns)

    def scan(
        self,
        where: Predicate | str | None = None,
        columns: Sequence[str] | None = None,
        *,
        version: int | str | None = None,
        as_of: AsOf | None = None,
    ) -> Scan:
        """The rows of a version (default: the head; ``version`` may name a tag) as Arrow, without
        Spark: ``table.scan("day = '2024-01-01'").to_arrow()``; also ``to_batches()``, ``to_pandas()``,
        ``to_duckdb(con, name)``. Pruned and filtered by ``where`` as ``si.read`` does, tombstones
        applied; a version lease is held until the scan is closed (``with``) or collected."""
        return open_scan(self._reader, where, columns, version=version, as_of=as_of)

    def watch(self, from_version: int | None = None, *, poll_s: float = 0.5) -> Watcher:
        """Every accepted version after ``from_version`` (default: the current head), gap-free:
        ``with table.watch() as changes: for change in changes: ...``."""
        return self._reader.watch(from_version, poll_s=poll_s)

    def lease(
        self, version: int, *, ttl_s: float = DEFAULT_LEASE_TTL_S, holder: str | None = None
    ) -> HeldLease:
        """A lease on ``version`` (``with table.lease(v): ...``): vacuum keeps every file it needs
        while held; renewed every third of ``ttl_s``. Needs Redis (``ServiceUnavailable`` on enter)."""
        return self._reader.lease(version, ttl_s=ttl_s, holder=holder)

    def iceberg_field_ids(self) -> dict[tuple[str, ...], int]:
        """The Iceberg field id of every column path the table's published Iceberg metadata names
        (empty: none published): the ids a new data file may carry (``catalog.iceberg.published``)."""
        return published_field_ids(self._reader.redis, self._reader.files, self._reader.name)

    def tags(self) -> dict[str, int]:
        """Every tag of the table (at its head): name → version, by name."""
        return self._reader.tags()

    def protocol(self) -> Protocol:
        """The protocol (rules version and features) the log is at now."""
        return self._reader.protocol()

    def location(self) -> str:
        """Where the table's data lives (absolute): the recorded location, else the warehouse's."""
        return self._reader.location()

    def log_start(self) -> int:
        """The first version still in Kafka (0 until the log is pruned)."""
        return self._reader.log_start()

    def head_offset(self) -> int:
        """The offset of the newest record in the log (-1 for an empty table): one request."""
        return self._reader.head_offset()

    # ------------------------------------------------------------------ writing

    def refresh(self) -> TableState:
        """Catch this handle's writer up with the log's end; its image (what commits are based on)."""
        return self._write().refresh()

    def new_commit(
        self,
        operation: Operation,
        *,
        adds: Iterable[Segment] = (),
        drops: Iterable[str] = (),
        tombstones: Iterable[str | Predicate] = (),
        replace_scope: Iterable[str] = (),
        isolation: Isolation = Isolation.SNAPSHOT,
        properties: Mapping[str, str] | None = None,
        table_properties: Mapping[str, str | None] | None = None,
        schema: str | None = None,
        base_version: int | None = None,
        protocol: Protocol | None = None,
    ) -> Commit:
        """A commit based on the writer's image (``base_version``: what it has read), for
        ``commit`` / ``submit``. ``MalformedCommit`` for arguments of the wrong shape."""
        return self._write().new_commit(
            operation,
            adds=adds,
            drops=drops,
            tombstones=tombstones,
            replace_scope=replace_scope,
            isolation=isolation,
            properties=properties,
            table_properties=table_properties,
            schema=schema,
            base_version=base_version,
            protocol=protocol,
        )

    def commit(self, commit: Commit, *, attempts: int = 3) -> int:
        """Publish ``commit``; its version, or ``CommitConflict`` (re-plan and retry),
        ``ColumnTypeConflict``, ``InvalidCommit``, ``TableDropped``. Sending the same commit again
        (same ``commit_id``) returns the original version."""
        return self._write().commit(commit, attempts=attempts)

    def submit(self, commit: Commit, *, attempts: int = 3) -> CommitFuture:
        """Send ``commit`` now; a future of its version (pipelined: many may be in flight, produced
        in submit order and judged together). The future holds what ``commit`` would raise;
        ``MalformedCommit`` and ``CommitTooLarge`` are raised here and nothing is sent."""
        return self._write().submit(commit, attempts=attempts)

    def commit_with_retry(self, plan: Planner, *, max_attempts: int = 10) -> int | None:
        """Plan a commit on the newest image and publish it, re-planning after each conflict;
        None when ``plan`` finds nothing to do."""
        return self._write().commit_with_retry(plan, max_attempts=max_attempts)

    def append(self, segments: Iterable[Segment], *, properties: Mapping[str, str] | None = None) -> int:
        """Add ``segments`` (files already written); the commit's version."""
        return self._write().append(segments, properties=properties)

    def append_async(
        self, segments: Iterable[Segment], *, properties: Mapping[str, str] | None = None
    ) -> CommitFuture:
        """``append`` without waiting: the future of its version (see ``submit``)."""
        return self._write().append_async(segments, properties=properties)

    def compact(
        self, drops: Iterable[str], adds: Iterable[Segment], *, properties: Mapping[str, str] | None = None
    ) -> int:
        """Replace segments ``drops`` by ``adds`` holding the same rows (``CommitConflict`` if any
        of them changed meanwhile)."""
        return self._write().compact(drops, adds, properties=properties)

    def replace(
        self,
        adds: Iterable[Segment],
        *,
        scope: Iterable[str] = (),
        isolation: Isolation = Isolation.SNAPSHOT,
        drops: Iterable[str] | None = None,
        properties: Mapping[str, str] | None = None,
    ) -> int:
        """Replace the segments of the partitions ``scope`` (all when empty) by ``adds``;
        ``drops`` defaults to every live segment in scope."""
        return self._write().replace(
            adds, scope=scope, isolation=isolation, drops=drops, properties=properties
        )

    def delete(
        self,
        *,
        drops: Iterable[str] = (),
        predicates: Iterable[str | Predicate] = (),
        properties: Mapping[str, str] | None = None,
    ) -> int:
        """Drop segments and/or delete rows matching ``predicates`` (tombstones)."""
        return self._write().delete(drops=drops, predicates=predicates, properties=properties)

    def drop_partitions(
        self, partitions: Iterable[str | None], *, properties: Mapping[str, str] | None = None
    ) -> int | None:
        """Drop whole partitions (None = the null partition); None when they hold nothing."""
        return self._write().drop_partitions(partitions, properties=properties)

    def intent(
        self, prefix: str, *, ttl_s: float = DEFAULT_INTENT_TTL_S, intent_id: str | None = None
    ) -> WriteIntent:
        """A write intent for files about to be written under ``prefix``: vacuum leaves them alone
        until the commit that adds them closes it (``with table.intent(p) as i: i.commit(c)``)."""
        return self._write().intent(prefix, ttl_s=ttl_s, intent_id=intent_id)

    def set_properties(self, changes: Mapping[str, str | None]) -> int:
        """Set table properties (None removes one); the commit's version."""
        return self._write().set_properties(changes)

    def set_schema(self, schema_json: str) -> int:
        """Record the table's schema (Spark's JSON); the commit's version."""
        return self._write().set_schema(schema_json)

    def tag(
        self,
        name: str,
        version: int | str | None = None,
        *,
        replace: bool = False,
        wait_s: float = DEFAULT_WAIT_S,
    ) -> int:
        """Name ``version`` (default: the head) ``name``: readable as ``snapshot(version=name)``, kept
        by vacuum and history retention until ``drop_tag(name)``; the tag commit's version.

        The version is leased and checked whole (its files still on storage) before the tag is
        committed. ``replace=True`` moves an existing tag (otherwise ``InvalidArgument``, as
        Iceberg's ``createTag`` / ``replaceTag``). Needs Redis (``ServiceUnavailable``); waits up to
        ``wait_s`` for a vacuum that was already running. Errors: ``VersionNotFound``,
        ``VersionExpired``, ``DataFileMissing``, ``TableDropped``.
        """
        return tagging.create_tag(self._reader, self._write(), name, version, replace=replace, wait_s=wait_s)

    def drop_tag(self, name: str) -> int:
        """Remove tag ``name`` (vacuum may then remove what only its version listed); the commit's
        version. ``VersionNotFound`` when there is no such tag."""
        return tagging.drop_tag(self._reader, self._write(), name)

    # ------------------------------------------------------------------ maintenance

    def upgrade_protocol(self) -> int:
        """Move the table to this segcat's protocol; the upgrade's version (or the head's when
        it is there already)."""
        return self._reader.upgrade_protocol()

    def prune_log(
        self,
        *,
        retain_versions: int | None = None,
        retain_age_ms: int | None = None,
        dry_run: bool = False,
    ) -> PruneResult:
        """Cut the Kafka log up to the newest key frame the archives cover (history stays on
        object storage), keeping ``retain_versions`` / ``retain_age_ms`` in Kafka."""
        return self._reader.prune_log(
            retain_versions=retain_versions, retain_age_ms=retain_age_ms, dry_run=dry_run
        )

    def vacuum(
        self,
        *,
        retain_versions: int | None = None,
        grace_ms: int | None = None,
        dry_run: bool = False,
        ignore_leases: bool = False,
        orphans: bool = True,
        progress: Progress | None = None,
    ) -> vacuuming.VacuumReport:
        """Delete the files no kept version, leased version or live write intent needs, once
        the grace period has passed (docs/LIFECYCLE.md); ``dry_run`` only reports them."""
        return vacuuming.vacuum(
            self._reader,
            retain_versions=retain_versions,
            grace_ms=grace_ms,
            dry_run=dry_run,
            ignore_leases=ignore_leases,
            orphans=orphans,
            progress=progress,
        )

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Abort the write intents still open, wait for (or fail) the commits in flight and close
        the writer's clients. Reading still works; writing needs the table loaded again."""
        with self._lock:
            self._closed = True
            writer = self._writer
        if writer is not None:
            writer.close()

    def __enter__(self) -> Table:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _write(self) -> Writer:
        """The writer, opened on first use (its producer, and its image from the newest key frame)."""
        writer = self._writer
        if writer is not None:
            return writer
        with self._lock:
            if self._closed:
                raise InvalidArgument(f"the handle of {self.name} is closed: load the table again")
            if self._writer is None:
                files = self._reader.files
                self._writer = Writer(
                    self._reader.config,
                    self.name,
                    writer_id=self._writer_id,
                    max_in_flight=self._max_in_flight,
                    info=self._reader.info,
                    store=None if files is None else files.store,
                )
            return self._writer
