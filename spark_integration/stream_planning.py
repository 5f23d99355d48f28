"""Planning the streams of a table's files (the rows stream, the change feed): what each accepted
version's files are, and how many a micro-batch takes.

``TrackingFollower`` is the ``VersionFollower`` (the one judgement of the log the version stream
uses: newest key frame ≤ the start, then the log) that also keeps a core ``ChangeTracker`` in
step, so the files every accepted version inserts and deletes are known in the planner process,
and the offsets Spark journals and the files its tasks read come from one judgement. It also
remembers which version dropped each file (compactions too: the rows stream leases the versions
whose files a later version of the same batch dropped) and caches the initial snapshot a stream
without a start reads.

``Budget`` admits a micro-batch's items against ``maxFilesPerTrigger`` / ``maxBytesPerTrigger`` /
``maxRowsPerTrigger``, softly, as Delta does: whole versions, in order, at least one; the initial
snapshot's files one by one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxFiles

from segcat import Config, TableName, load_catalog
from segcat.catalog.protocol.replay import Applied
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read.changes import ChangeTracker, FileRead, VersionFiles, resolver, snapshot_reads
from segcat.catalog.read.table import table_root
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.table_files import TableFiles
from segcat.spark_integration.version_follower import VersionFollower


@dataclass(frozen=True)
class InitialSnapshot:
    """A version's live files as a stream without a start reads them first."""

    version: int
    timestamp_ms: int
    """The broker's time of the version."""
    reads: tuple[FileRead, ...]
    """Its live files in the fixed order of ``snapshot_reads``, so a re-planned batch reads the same."""
    schema: str | None
    """The table's recorded schema at the version."""


class TrackingFollower(VersionFollower):
    """A ``VersionFollower`` that also answers each accepted version's ``VersionFiles`` and which
    version dropped each file (module docstring).

    Holds Kafka clients and an image: it lives in one process (the planner) and is never pickled.
    """

    def __init__(self, config: Config, name: TableName, *, schemas: bool) -> None:
        """``schemas``: the image starts from a full key frame, so the files it holds keep their
        schemas (the change feed reads dropped files and checks each version's table schema with
        them); without, the light key frame, all the rows stream needs."""
        super().__init__(config, name, full=schemas)
        self._root = table_root(config, name)
        """Where an image without a recorded location (protocol 1) finds its files, as
        ``Table.changes`` resolves them."""
        self._tracker: ChangeTracker | None = None
        self._resolve: Callable[[str], str] | None = None
        self._files: dict[int, VersionFiles] = {}
        self.dropped: dict[str, int] = {}
        """Uri of each file a version after the start dropped → that version."""
        self._snapshot: InitialSnapshot | None = None

    def _start(self, after: int) -> None:
        super()._start(after)
        assert self._follower is not None
        state = self._follower.state
        # one resolution for the files the tracker reads and for the drops the leases look up
        resolve = resolver(state.location or self._root, lambda: tracker.state.properties)
        tracker = ChangeTracker(state, resolve)
        self._tracker, self._resolve = tracker, resolve
        self._files, self.dropped = {}, {}

    def _collect(self, applied: Applied, state: TableState) -> None:
        super()._collect(applied, state)
        delta, tracker, resolve = applied.delta, self._tracker, self._resolve
        if applied.verdict.outcome is not Outcome.ACCEPTED or delta is None or tracker is None:
            return
        if delta.version <= tracker.version or resolve is None:
            return
        for sid in delta.dropped:
            live = tracker.state.segments.get(sid)
            if live is not None:
                self.dropped[resolve(live.segment.path)] = delta.version
        self._files[delta.version] = tracker.observe(delta)

    @property
    def start(self) -> int:
        """The version the image was rebuilt at (versions after it are known)."""
        return self._after

    def files_after(self, after: int, upto: int | None = None) -> list[VersionFiles]:
        """The accepted versions in (``after``, ``upto``] with their files, the log read to ``upto``
        (default: its end); ``LogPruned`` when the image at ``after`` can no longer be rebuilt."""
        self.accepted_after(after, upto)
        return self.judged_after(after, upto)

    def judged_after(self, after: int, upto: int | None = None) -> list[VersionFiles]:
        """The versions in (``after``, ``upto``] judged so far, without reading anything."""
        return [vf for v, vf in sorted(self._files.items()) if v > after and (upto is None or v <= upto)]

    def snapshot(self, version: int) -> InitialSnapshot:
        """``version``'s live files, the initial snapshot a stream without a start reads (cached:
        its batches ask again); ``VersionNotFound`` when the version is no longer readable."""
        if self._snapshot is None or self._snapshot.version != version:
            with load_catalog(self._config) as catalog:
                snapshot = catalog.load_table(self._name).snapshot(version)
            self._snapshot = InitialSnapshot(
                version, snapshot.timestamp_ms, snapshot_reads(snapshot), snapshot.schema
            )
        return self._snapshot

    def oldest_readable(self) -> int | None:
        """The oldest version whose image object storage can still rebuild (None: none);
        ``OSError`` when object storage does not answer."""
        return TableFiles(ObjectStore.from_config(self._config), self._name, self.log_id).oldest_readable()

    def forget(self, upto: int) -> None:
        """Spark is done with every version ≤ ``upto``: free their files, the snapshot of one of
        them, and the drops up to it (a file a later batch reads was added after ``upto``, so no
        drop up to it concerns it)."""
        super().forget(upto)
        if self._snapshot is not None and self._snapshot.version <= upto:
            self._snapshot = None
        if self._after == upto:
            self._files = {v: vf for v, vf in self._files.items() if v > upto}
            self.dropped = {uri: v for uri, v in self.dropped.items() if v > upto}

    def close(self) -> None:
        super().close()
        self._tracker, self._resolve = None, None
        self._files, self.dropped = {}, {}
        self._snapshot = None


@dataclass
class Budget:
    """What a micro-batch may still admit (None: no limit): soft, the first item always goes in.

    An item is a whole version's files (or one file of the initial snapshot); the caller offers
    them in order and stops at the first refused."""

    files: int | None
    bytes: int | None
    rows: int | None
    taken: int = 0

    @classmethod
    def of(
        cls, limit: ReadLimit, max_files: int | None, max_bytes: int | None, max_rows: int | None
    ) -> Budget:
        """The budget of one trigger: none under ``ReadAllAvailable`` (``Trigger.Once``), else the
        stream's limits (the files of a ``ReadMaxFiles`` Spark passes)."""
        if isinstance(limit, ReadAllAvailable):
            return cls(None, None, None)
        if isinstance(limit, ReadMaxFiles):
            max_files = limit.max_files
        return cls(max_files, max_bytes, max_rows)

    def admit(self, reads: Sequence[FileRead]) -> bool:
        """Whether the item made of ``reads`` goes in (then its files, bytes and rows are spent)."""
        files = len(reads)
        size = sum(r.size_bytes for r in reads)
        rows = sum(r.row_count for r in reads)
        fits = all(
            limit is None or used <= limit
            for limit, used in ((self.files, files), (self.bytes, size), (self.rows, rows))
        )
        if self.taken and not fits:
            return False
        self.taken += 1
        self.files = None if self.files is None else self.files - files
        self.bytes = None if self.bytes is None else self.bytes - size
        self.rows = None if self.rows is None else self.rows - rows
        return True

    def take(self, items: Iterable[Sequence[FileRead]]) -> int:
        """How many of ``items`` (in order) go in: up to the first refused."""
        count = 0
        for reads in items:
            if not self.admit(reads):
                break
            count += 1
        return count

    @property
    def spent(self) -> bool:
        """A limit is reached: nothing but an empty item would still go in."""
        return any(limit is not None and limit <= 0 for limit in (self.files, self.bytes, self.rows))
