"""The change feed's planner: each accepted version's ``VersionFiles``, and which of them a batch admits.

``ChangeFollower`` is a ``VersionFollower`` (the one judgement of the log the version stream
uses: newest key frame ≤ the start, then the log) whose listener keeps a core ``ChangeTracker``
in step, so the files every accepted version inserts and deletes are known in the planner
process, and the offsets Spark journals and the files its tasks read come from one judgement.

``admit`` picks the versions of one micro-batch: whole versions, in order, at least one, as
many as ``maxFilesPerTrigger`` / ``maxBytesPerTrigger`` allow (Delta's soft limits).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from segcat import Config, TableName, VersionExpired, load_catalog
from segcat.catalog.errors import LogPruned
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read.changes import ChangeTracker, FileRead, VersionFiles, VersionKind, snapshot_reads
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.table_files import TableFiles
from segcat.spark_integration.version_follower import VersionFollower

log = logging.getLogger("segcat.spark.changes")

SNAPSHOT_OPERATION = "SNAPSHOT"
"""The operation of the initial snapshot's pseudo-version (its rows are inserts at the head)."""


@dataclass(frozen=True)
class Limits:
    """A micro-batch's soft size: whole versions, at least one, within these (None: no limit)."""

    max_files: int | None
    max_bytes: int | None

    def admits(self, files: int, size: int) -> bool:
        return (self.max_files is None or files <= self.max_files) and (
            self.max_bytes is None or size <= self.max_bytes
        )


UNLIMITED = Limits(None, None)


def reads_of(vf: VersionFiles) -> tuple[FileRead, ...]:
    """The files a version's rows are read from (none for a compaction or a metadata version)."""
    return (*vf.deleted, *vf.inserted) if vf.changes_rows else ()


def admit(versions: Sequence[VersionFiles], limits: Limits) -> int:
    """How many of ``versions`` (in order) one micro-batch takes: whole versions, at least one."""
    files = size = 0
    for i, vf in enumerate(versions):
        reads = reads_of(vf)
        files += len(reads)
        size += sum(r.size_bytes for r in reads)
        if i > 0 and not limits.admits(files, size):
            return i
    return len(versions)


def admit_files(reads: Sequence[FileRead], limits: Limits) -> int:
    """How many of ``reads`` (the initial snapshot's files, in order) one batch takes: at least one."""
    size = 0
    for i, read in enumerate(reads):
        size += read.size_bytes
        if i > 0 and not limits.admits(i + 1, size):
            return i
    return len(reads)


class ChangeFollower:
    """A ``VersionFollower`` that also answers each accepted version's ``VersionFiles``.

    Holds Kafka clients and an image: it lives in one process (the planner) and is never pickled.
    """

    def __init__(self, config: Config, name: TableName) -> None:
        self._config = config
        self._name = name
        self.versions = VersionFollower(config, name, listener=self)
        self._tracker: ChangeTracker | None = None
        self._files: dict[int, VersionFiles] = {}
        self._root: str | None = None
        self._snapshots: dict[int, tuple[int, tuple[FileRead, ...], str | None]] = {}

    @property
    def root(self) -> str:
        """The table's root (its files' paths are relative to it)."""
        if self._root is None:
            self._root = load_catalog(self._config).load_table(self._name).location()
        return self._root

    # ------------------------------------------------------------------ DeltaListener

    def restarted(self, state: TableState) -> None:
        self._tracker = ChangeTracker(state, root=self.root)
        self._files = {}

    def accepted(self, delta: CommitDelta) -> None:
        assert self._tracker is not None
        self._files[delta.version] = self._tracker.observe(delta)

    # ------------------------------------------------------------------ queries

    def changes_after(self, after: int, upto: int | None = None) -> list[VersionFiles]:
        """The accepted versions in (``after``, ``upto``] (default: to the log's end), judged here.

        ``LogPruned`` when the image at ``after`` can no longer be rebuilt (see ``readable_from``)."""
        self.versions.accepted_after(after, upto)
        return self.judged_after(after, upto)

    def judged_after(self, after: int, upto: int | None = None) -> list[VersionFiles]:
        """The versions in (``after``, ``upto``] judged so far, without reading anything."""
        return [vf for v, vf in sorted(self._files.items()) if v > after and (upto is None or v <= upto)]

    def snapshot(self, version: int) -> tuple[int, tuple[FileRead, ...], str | None]:
        """(broker time, live files in a fixed order, table schema) of ``version``: the initial
        snapshot a stream without a start emits as inserts (cached: its batches re-ask)."""
        found = self._snapshots.get(version)
        if found is None:
            snapshot = load_catalog(self._config).load_table(self._name).snapshot(version)
            found = (snapshot.timestamp_ms, snapshot_reads(snapshot), snapshot.schema)
            self._snapshots = {version: found}
        return found

    def oldest_readable(self) -> int | None:
        """The oldest version whose image object storage can still rebuild (None: none)."""
        files = TableFiles(ObjectStore.from_config(self._config), self._name, self.versions.log_id)
        try:
            return files.oldest_readable()
        except OSError:
            return None

    def expired(self, after: int, cause: LogPruned, option_hint: str) -> VersionExpired:
        """The typed error of a position the log and its archives no longer reach."""
        oldest = self.oldest_readable()
        where = (
            f"the oldest readable version is {oldest}" if oldest is not None else "no older version is kept"
        )
        return VersionExpired(
            f"the change feed of {self._name} cannot resume after version {after}: the versions after "
            f"it were pruned or vacuumed away ({where}); {option_hint} ({cause})",
            oldest=oldest,
        )

    def forget(self, upto: int) -> None:
        """Spark will never ask for versions ≤ ``upto`` again."""
        self.versions.forget(upto)
        self._files = {v: vf for v, vf in self._files.items() if v > upto}

    def close(self) -> None:
        self.versions.close()
        self._tracker = None
        self._files = {}
        self._snapshots = {}


def snapshot_version(
    version: int, timestamp_ms: int, reads: Sequence[FileRead], schema: str | None
) -> VersionFiles:
    """The initial snapshot (or a slice of it) as a version of inserts at ``version``."""
    return VersionFiles(
        version, timestamp_ms, SNAPSHOT_OPERATION, VersionKind.APPEND, tuple(reads), (), schema
    )
