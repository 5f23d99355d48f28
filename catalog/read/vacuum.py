"""Vacuum: delete what no kept version needs (docs/LIFECYCLE.md).

- **Horizon** H = the oldest version kept (``retain_versions``: the versions after
  ``end − N`` keep their files), lowered to the oldest leased version. Every version ≥ H
  stays readable with all its files.
- **Dropped files**: a file whose every life (a path may be registered, dropped and
  registered again) ended with a drop at a version ≤ H, the *last* drop older than the grace
  period. Found from the log (key frame + archives + Kafka), never by listing.
- **Orphans**: files under the table's ``data/`` that no version in the replayed history
  references and no live write intent covers, last modified before the grace period
  (a listing: in-process here, on Spark executors for millions of files).
- **History**: key frames and commit archives older than ``segcat.history.retain.*`` (the
  newest key frame at or before the history horizon and everything after it stay).

Whose clock: drop times and intent expiries are broker times (``LogAppendTime``), judged
against the broker's time (``broker_clock``); file ages are the storage's modification times,
judged against the storage's time (an object vacuum writes before it lists). No client clock
decides a deletion.

Races: ``data/`` is listed before the head is read, and right before each batch of deletes the
log is read again up to its end: a file that any commit registered by then (or that a write
intent opened by then covers) is kept. A vacuum that refuses (dropped table, leases
unknowable, a path outside the table's root) deletes nothing; one killed midway leaves only
files nobody needs, and the next run finishes the job.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from segcat.catalog.errors import (
    InvalidArgument,
    NotAuthorized,
    ServiceUnavailable,
    TableDropped,
    UnsafeLocation,
)
from segcat.catalog.iceberg import retention as iceberg_retention
from segcat.catalog.log.follower import Follower
from segcat.catalog.protocol import lifecycle, locations
from segcat.catalog.protocol.replay import Applied
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.protocol.state import ALLOWED_LOCATIONS_PROPERTY, OpenIntent, TableState
from segcat.catalog.protocol.tags import tags_of
from segcat.catalog.read import broker_clock
from segcat.catalog.read.lease import HeldLease
from segcat.catalog.read.retention import check_duration, check_retain_versions
from segcat.catalog.read.table import TableReader
from segcat.catalog.read.vacuum_fence import hold_fence
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.objectstore import TEMP_MARKER, ObjectStore
from segcat.catalog.storage.redis.leases import LeaseStore

log = logging.getLogger("segcat.vacuum")

DEFAULT_GRACE_MS = 7 * 24 * 3600 * 1000
"""Delta's VACUUM default: a week between a file becoming unneeded and its deletion."""
DEFAULT_RETAIN_VERSIONS = 1
"""By default only the head is kept whatever its age, and the grace period protects time
travel (files dropped less than 7 days ago stay), as Delta's VACUUM does."""
BATCH = 1_000
DELETE_THREADS = 4
"""Deletes per batch (S3's DeleteObjects takes 1,000 keys); batches run on a few threads."""
RETAIN_VERSIONS_PROPERTY = "segcat.vacuum.retain.versions"
GRACE_PROPERTY = "segcat.vacuum.grace.ms"
HISTORY_VERSIONS_PROPERTY = "segcat.history.retain.versions"
HISTORY_AGE_PROPERTY = "segcat.history.retain.ms"
STORAGE_CLOCK_OBJECT = "_catalog/_clock/now"
"""Written under the table's root before each listing: its modification time is the storage's now
(alone in its folder, which ``ObjectStore.clock_ms`` lists)."""

Progress = Callable[[int, int], None]
"""Called with (done, total) while deleting."""


@dataclass(frozen=True)
class Doomed:
    """A file vacuum deletes: its full path or URI, size, and why it may go."""

    path: str
    size: int
    reason: str
    """dropped, orphan or history."""
    key: str = field(default="", compare=False)
    """Dropped and orphan files: the file's path as segments spell it (relative to the root when
    under it), what the re-check before deleting compares with newly registered paths."""
    spans: tuple[tuple[int, int], ...] = field(default=(), compare=False)
    """Dropped files: each life's (added, dropped) versions; the file is listed by every version
    ``v`` with ``added <= v < dropped`` (what the re-check keeps for a newly leased or tagged one).
    History objects: ``((-1, f),)``, where f is the oldest key frame the plan keeps."""


@dataclass
class VacuumReport:
    table: str
    horizon: int
    head: int
    grace_ms: int
    dry_run: bool
    files: list[Doomed] = field(default_factory=list)
    deleted: int = 0
    deleted_bytes: int = 0
    already_gone: int = 0
    kept_by_grace: int = 0
    kept_by_intent: int = 0
    kept_by_recheck: int = 0
    """Planned deletions the last look at the log saved: registered again, or under a new intent."""
    leased_versions: tuple[int, ...] = ()
    tagged_versions: tuple[int, ...] = ()
    """The versions the table's tags name: each keeps every file it lists, whatever H is."""
    kept_by_tag: int = 0
    """Dropped files past the horizon and the grace period that a tagged version still lists."""
    open_intents: int = 0
    dropped_done_upto: int = -1
    """Every file dropped at or before this version is deleted (the next run starts after it)."""
    root: str = ""
    """The table's root (where ``data/`` lives)."""
    referenced: set[str] = field(default_factory=set)
    """Canonical keys of every file the replayed versions reference (never an orphan)."""
    protected_prefixes: list[str] = field(default_factory=list)
    """Prefixes of the live write intents, relative to the root where they lie under it."""
    cutoff_ms: int = 0
    """Files last modified at or after this time (the storage's clock) are too young to be
    orphans: the storage's now − grace (-1: the storage tells no time, no file is old enough)."""
    broker_now_ms: int = -1
    """The broker time drops, intents and history were judged at (never after the broker's now)."""
    recheck: Recheck | None = field(default=None, repr=False, compare=False)
    """What ``execute`` re-reads the log with right before each batch of deletes."""
    leases: LeaseStore | None = field(default=None, repr=False, compare=False)
    """Where ``execute`` holds its fence and reads the leases again (None: leases ignored)."""

    def by_reason(self) -> dict[str, dict[str, int]]:
        summary: dict[str, dict[str, int]] = {}
        for item in self.files:
            entry = summary.setdefault(item.reason, {"files": 0, "bytes": 0})
            entry["files"] += 1
            entry["bytes"] += item.size
        return summary

    def to_json(self, *, with_files: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "table": self.table,
            "head": self.head,
            "horizon": self.horizon,
            "grace_ms": self.grace_ms,
            "dry_run": self.dry_run,
            "by_reason": self.by_reason(),
            "deleted": self.deleted,
            "deleted_bytes": self.deleted_bytes,
            "already_gone": self.already_gone,
            "kept_by_grace": self.kept_by_grace,
            "kept_by_intent": self.kept_by_intent,
            "kept_by_recheck": self.kept_by_recheck,
            "leased_versions": list(self.leased_versions),
            "tagged_versions": list(self.tagged_versions),
            "kept_by_tag": self.kept_by_tag,
            "open_intents": self.open_intents,
            "dropped_done_upto": self.dropped_done_upto,
            "broker_now_ms": self.broker_now_ms,
            "storage_cutoff_ms": self.cutoff_ms,
        }
        if with_files:
            out["files"] = [{"path": f.path, "bytes": f.size, "reason": f.reason} for f in self.files]
        return out


def _property_int(properties: dict[str, str], key: str, default: int | None) -> int | None:
    raw = properties.get(key)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise InvalidArgument(f"table property {key} = {raw[:40]!r} is not an integer") from exc


def vacuum(
    table: TableReader,
    *,
    retain_versions: int | None = None,
    grace_ms: int | None = None,
    dry_run: bool = False,
    ignore_leases: bool = False,
    orphans: bool = True,
    leases: LeaseStore | None = None,
    progress: Progress | None = None,
    listing: Iterable[tuple[str, int, int]] | None = None,
    fresh_clock: bool | None = None,
) -> VacuumReport:
    """Delete the files no version ≥ H, no leased version and no live intent needs.

    One replay of the log (from the last run's record, key frames + archives + Kafka) tells
    every segment's life: the version that added it and the one that dropped it. ``listing``
    (``(path relative to the root, size, mtime_ms)`` under ``data/``, in the storage's clock)
    replaces the in-process listing. Refuses a dropped table (``TableDropped``) and, unless
    ``ignore_leases``, an unreachable Redis (``ServiceUnavailable``), before anything is deleted.

    ``fresh_clock`` (default: unless ``dry_run``): when the newest record is too old to let a
    drop's grace period end but this machine's clock says it has, append one record that
    changes nothing to learn the broker's now (``broker_clock``); a dry run never writes to
    the log and judges by the newest record's time.
    """
    if retain_versions is not None:
        check_retain_versions(retain_versions)
    if grace_ms is not None:
        check_duration(grace_ms, "grace")
    if table.files is None:
        raise InvalidArgument("vacuum needs object storage (key frames and archives)")
    done_upto = _previous_run(table).get("dropped_done_upto", -1)
    with _History.open(table, done_upto + 1) as history:
        root = history.catch_up().location or table.root
        data_store = ObjectStore.from_uri(
            root, s3_endpoint=table.config.s3_endpoint, s3_region=table.config.s3_region
        )
        storage_now = _storage_now(data_store, dry_run)
        listed: Iterable[tuple[str, int, int]] = ()
        if listing is not None:
            listed = listing
        elif orphans:
            listed = data_store.list_files("data")  # before the head is read (the re-check covers the rest)
        head = history.catch_up()
    if head.dropped:
        raise TableDropped(
            f"table {table.name} is dropped: purge it (segcat table purge), or undrop it first"
        )
    properties = head.properties
    keep_n = retain_versions or _property_int(properties, RETAIN_VERSIONS_PROPERTY, DEFAULT_RETAIN_VERSIONS)
    grace = grace_ms if grace_ms is not None else _property_int(properties, GRACE_PROPERTY, DEFAULT_GRACE_MS)
    assert keep_n is not None and grace is not None
    check_retain_versions(keep_n)
    check_duration(grace, "grace")
    end = head.version
    horizon = max(end - keep_n + 1, 0)
    lease_store = None if ignore_leases else _lease_store(table, leases)
    leased = _leased_versions(table, lease_store, ignore_leases)
    if leased:
        horizon = min(horizon, leased[0])
    tagged = tuple(sorted(set(tags_of(properties).values())))
    report = VacuumReport(
        table.name.qualified, horizon, end, grace, dry_run, leased_versions=leased, tagged_versions=tagged
    )
    report.leases = lease_store
    try:
        allowed = locations.parse_allowed(properties.get(ALLOWED_LOCATIONS_PROPERTY))
    except ValueError:
        allowed = ()
    key = _Keys(root)
    now = max(history.newest_ms, head.last_accepted_timestamp_ms)
    keep = [v for v in tagged if v < horizon]
    doomed, kept = dropped_files(history.lives, key, horizon, done_upto, now - grace, keep)
    if (fresh_clock if fresh_clock is not None else not dry_run) and _clock_too_old(head, kept, now, grace):
        try:
            now = max(now, broker_clock.now_ms(table, head.protocol, end))
        except NotAuthorized as exc:  # no WRITE on the topic: judge by the newest record (deletes less)
            log.warning(
                "vacuum could not write a clock record", extra={"table": report.table, "error": str(exc)}
            )
        doomed, kept = dropped_files(history.lives, key, horizon, done_upto, now - grace, keep)
    report.broker_now_ms = now
    for life in doomed + kept:
        if locations.is_absolute_uri(life.path) and locations.allowed_problem(life.path, root, allowed):
            raise UnsafeLocation(
                f"{table.name}: a dropped segment's path {life.path[:200]!r} lies outside the table's "
                "root and allowed locations; vacuum deletes nothing (remove it by hand if it is yours)"
            )
    report.kept_by_grace += len(kept)
    report.kept_by_tag = _count_tag_kept(history.lives, key, horizon, done_upto, keep)
    report.files.extend(
        Doomed(_absolute(root, life.path), life.size, "dropped", key(life.path), life.spans)
        for life in doomed
    )
    intents = head.live_intents(now)
    report.open_intents = len(intents)
    report.root = root
    report.cutoff_ms = -1 if storage_now is None else storage_now - grace
    report.protected_prefixes = [_relative_prefix(i.prefix, root) for i in intents]
    report.referenced = {key(e.path) for e in history.lives}
    report.recheck = Recheck(
        table, head, root, {i.intent_id for i in head.intents.values()}, data_store, {*leased, *tagged}
    )
    _orphans(report, data_store, listed, intents)
    report.files.extend(_history_objects(table, properties, now, (*leased, *tagged)))
    _dedupe(report)
    report.files.extend(_iceberg_history(table, properties, report))
    report.dropped_done_upto = min(
        [horizon, *keep, *(life.dropped - 1 for life in kept if life.dropped is not None)]
    )
    if not dry_run:
        execute(table, report, progress)
    return report


def dropped_files(
    lives: Iterable[SegmentLife],
    key: Callable[[str], str],
    horizon: int,
    done_upto: int,
    cutoff_ms: int,
    keep: Sequence[int] = (),
) -> tuple[list[SegmentLife], list[SegmentLife]]:
    """The dropped files that may go, and those the grace period keeps: each file's *last* life.

    A file (one ``key``) may have been registered, dropped and registered again; it is
    deletable only when every life after ``done_upto`` (the earlier ones were dealt with by
    an earlier run) ended with a drop at a version ≤ ``horizon``, and no life spans a version
    of ``keep`` (tagged versions older than the horizon); it goes only when the newest of those
    drops is older than ``cutoff_ms`` (broker time). Each file appears once, as its last life,
    with every life's (added, dropped) in ``spans``.
    """
    doomed: list[SegmentLife] = []
    kept: list[SegmentLife] = []
    for group in _groups(lives, key, done_upto):
        if _needed(group, horizon, keep):
            continue  # some version ≥ H, or a tagged one, references the file
        last = max(group, key=lambda life: (life.dropped or 0, life.dropped_ms))
        newest_ms = max(life.dropped_ms for life in group)
        spans = tuple((life.added, life.dropped or 0) for life in group)
        (kept if newest_ms > cutoff_ms else doomed).append(
            SegmentLife(last.path, last.size, last.added, last.dropped, newest_ms, spans)
        )
    return doomed, kept


def _groups(
    lives: Iterable[SegmentLife], key: Callable[[str], str], done_upto: int
) -> Iterable[list[SegmentLife]]:
    by_key: dict[str, list[SegmentLife]] = {}
    for life in lives:
        if life.dropped is None or life.dropped > done_upto:
            by_key.setdefault(key(life.path), []).append(life)
    return by_key.values()


def _needed(group: list[SegmentLife], horizon: int, keep: Sequence[int]) -> bool:
    return any(
        life.dropped is None
        or life.dropped > horizon
        or any(life.added <= version < life.dropped for version in keep)
        for life in group
    )


def _count_tag_kept(
    lives: Iterable[SegmentLife], key: Callable[[str], str], horizon: int, done_upto: int, keep: Sequence[int]
) -> int:
    """Files only a tagged version older than the horizon still needs (the report's ``kept_by_tag``)."""
    if not keep:
        return 0
    return sum(
        1
        for group in _groups(lives, key, done_upto)
        if not _needed(group, horizon, ()) and _needed(group, horizon, keep)
    )


def _clock_too_old(head: TableState, kept: list[SegmentLife], now_ms: int, grace_ms: int) -> bool:
    """Whether the newest record's time keeps what this machine's clock would let go (a drop's
    grace, an intent's TTL): then the broker is asked for its now. Never on a table that
    cannot take the clock record (no ``lifecycle`` feature)."""
    if not lifecycle.has_feature(head.protocol):
        return False
    local = int(time.time() * 1000)
    return any(life.dropped_ms <= local - grace_ms for life in kept) or any(
        now_ms < i.expires_ms <= local for i in head.intents.values()
    )


def _storage_now(store: ObjectStore, dry_run: bool) -> int | None:
    """The storage's time now (``ObjectStore.clock_ms``); a dry run that may not write there
    falls back to this machine's clock (it deletes nothing)."""
    try:
        return store.clock_ms(STORAGE_CLOCK_OBJECT)
    except OSError as exc:
        if dry_run:
            return int(time.time() * 1000)
        raise ServiceUnavailable(
            f"vacuum could not write {store.uri(STORAGE_CLOCK_OBJECT)} to learn the storage's time "
            f"({exc}); nothing was deleted"
        ) from exc


def _orphans(
    report: VacuumReport,
    store: ObjectStore,
    listed: Iterable[tuple[str, int, int]],
    intents: list[OpenIntent],
) -> None:
    """The listed files nothing references, old enough by the storage's clock, under no live intent."""
    root = report.root
    intent_prefixes = [_absolute(root, i.prefix) for i in intents]
    live_ids = {i.intent_id for i in intents}
    cutoff = report.cutoff_ms
    for relative, size, mtime_ms in listed:
        if not relative.startswith("data/"):
            raise InvalidArgument(f"listing holds {relative[:200]!r}, outside the table's data/")
        if relative in report.referenced:
            continue
        if cutoff < 0 or mtime_ms < 0 or mtime_ms >= cutoff:  # an unknown age is never old enough
            report.kept_by_grace += 1
            continue
        full = f"{root.rstrip('/')}/{relative}"
        if any(full.startswith(prefix) for prefix in intent_prefixes) and not _claimed_elsewhere(
            store, root, full, live_ids
        ):
            report.kept_by_intent += 1
            continue
        report.files.append(Doomed(full, size, "orphan", relative))


def _lease_store(table: TableReader, leases: LeaseStore | None) -> LeaseStore:
    store = leases or (LeaseStore.from_store(table.redis) if table.redis is not None else None)
    if store is None:
        raise ServiceUnavailable("vacuum needs Redis to see version leases (or --ignore-leases)")
    return store


def _leased_versions(table: TableReader, store: LeaseStore | None, ignore: bool) -> tuple[int, ...]:
    if ignore or store is None:
        return ()
    try:
        return tuple(sorted(store.leased_versions(table.name)))
    except ServiceUnavailable as exc:
        raise ServiceUnavailable(
            f"vacuum refuses: version leases cannot be read ({exc}); nothing was deleted. "
            "Use --ignore-leases to vacuum without them"
        ) from exc


class _Keys:
    """One spelling per file, cheap for the common case: a path relative to the root as it is,
    an absolute URI under the root made relative, any other URI canonical."""

    def __init__(self, root: str) -> None:
        self.root = root

    def __call__(self, path: str) -> str:
        if not locations.is_absolute_uri(path):
            return path
        return locations.relative_to(path, self.root) or locations.canonical(path)


def execute(table: TableReader, report: VacuumReport, progress: Progress | None = None) -> None:
    """Delete what a (dry-run) report lists, in batches, each re-checked against the log's end
    right before it goes (``Recheck``), and record the run."""
    config = table.config
    store = ObjectStore.from_uri(report.root, s3_endpoint=config.s3_endpoint, s3_region=config.s3_region)
    report.dry_run = False
    _delete(report, store, table, progress)
    if table.files is not None:
        _record(table, report)


class Recheck:
    """The log read again right before files go: what a commit registered, or a write intent
    announced, after the vacuum read the head is kept; so is every file of a version tagged, or
    leased (``leases``: read again too), since the plan.

    Holds the vacuum's image of the head; ``refresh`` judges the records after it (one
    watermark request when there are none). A path registered since the plan is kept, whatever
    the reason it was planned for; an orphan under a write intent opened since the plan is kept
    by the plan's own rule (unless its footer names a commit no open intent announces). The
    window that remains is the time between a batch's ``refresh`` and its deletes: a commit
    accepted then that registers a file written before the vacuum started can lose that file
    (docs/LIFECYCLE.md, "Races").
    """

    def __init__(
        self,
        table: TableReader,
        image: TableState,
        root: str,
        known_intents: set[str],
        store: ObjectStore,
        protected: set[int] | None = None,
    ) -> None:
        self.table = table
        self.image = image
        self.root = root
        self.store = store
        self.key = _Keys(root)
        self.known_intents = known_intents
        """Intents the plan already judged (their files are kept or not by the plan)."""
        self.added: set[str] = set()
        """Keys of the paths registered since the plan."""
        self.prefixes: list[str] = []
        """Prefixes (relative to the root where under it) of the intents opened since the plan."""
        self._open_ids: set[str] = set()
        self._follower: Follower | None = None
        self.protected: set[int] = set(protected or ())
        """Versions the plan already kept every file of (leased or tagged when it read them)."""
        self.newly_protected: set[int] = set()
        """Versions tagged or leased since the plan: their files are kept by ``keeps``."""
        self.leases: LeaseStore | None = None
        """Set by ``execute`` (which holds the fence): the leases are read again at each refresh."""

    def __enter__(self) -> Recheck:
        self._follower = Follower(self.table.config, self.table.name, self.image, files=self.table.files)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._follower is not None:
            self._follower.close()
            self._follower = None

    def refresh(self) -> None:
        """Judge every record up to the log's end now."""
        assert self._follower is not None, "use Recheck as a context manager"
        self._follower.catch_up(listener=self._listen)
        intents = self.image.intents.values()  # expired or not: when in doubt, keep
        self._open_ids = {i.intent_id for i in intents}
        self.prefixes = [
            _relative_prefix(i.prefix, self.root) for i in intents if i.intent_id not in self.known_intents
        ]
        versions = set(tags_of(self.image.properties).values())
        if self.leases is not None:
            versions |= self.leases.leased_versions(self.table.name)  # after the fence: sees every lease
        self.newly_protected |= versions - self.protected

    def _listen(self, applied: Applied, _: TableState) -> None:
        delta = applied.delta
        if applied.verdict.outcome is Outcome.ACCEPTED and delta is not None:
            self.added.update(self.key(segment.path) for segment in delta.added)

    def keeps(self, item: Doomed) -> bool:
        """Whether a planned deletion must not happen after all."""
        if self.newly_protected and item.spans:
            if item.reason == "history":  # what a version older than the oldest frame kept starts from
                floor = item.spans[0][1]
                if any(v < floor for v in self.newly_protected):
                    return True
            elif any(a <= v < d for a, d in item.spans for v in self.newly_protected):
                return True
        if not item.key:
            return False
        if item.key in self.added:
            return True
        if item.reason != "orphan" or not any(item.key.startswith(p) for p in self.prefixes):
            return False
        return not _claimed_elsewhere(self.store, self.root, item.path, self._open_ids)


def _relative_prefix(prefix: str, root: str) -> str:
    if not locations.is_absolute_uri(prefix):
        return prefix
    return locations.relative_to(prefix, root) or prefix


def _claimed_elsewhere(store: ObjectStore, root: str, full: str, live_ids: set[str]) -> bool:
    """Whether a complete Parquet file's footer names a commit that no live intent announces
    (a losing or dead writer's file). Temp files, unreadable footers and files without
    provenance count as the intent's: when in doubt, keep."""
    name = full.rsplit("/", 1)[-1]
    if TEMP_MARKER in name or not name.endswith(".parquet"):
        return False
    relative = full[len(root.rstrip("/")) + 1 :]
    try:
        found = store.provenance(relative)
    except (OSError, ValueError):
        return False
    commit_id = None if found is None else found.get("commit_id")
    return commit_id is not None and commit_id not in live_ids


def _absolute(root: str, path: str) -> str:
    return path if locations.is_absolute_uri(path) else f"{root.rstrip('/')}/{path}"


def _dedupe(report: VacuumReport) -> None:
    seen: set[str] = set()
    unique = []
    for item in report.files:
        if item.path not in seen:
            seen.add(item.path)
            unique.append(item)
    report.files = unique


@dataclass(slots=True)
class SegmentLife:
    """One segment's life in the replayed log: its file, and the versions that added and dropped it."""

    path: str
    size: int
    added: int
    dropped: int | None = None
    dropped_ms: int = 0
    spans: tuple[tuple[int, int], ...] = ()
    """The (added, dropped) versions of every life of the file (``dropped_files`` fills it)."""


class _History:
    """Every segment's life between the start image and the head, kept current by a follower.

    Replays from the newest key frame before ``start`` (from the start of the log, or the
    oldest key frame when history retention removed what was before it); ``catch_up`` reads
    on to the log's end. ``newest_ms`` is the newest broker time among the records read: a
    time the broker has certainly reached.
    """

    def __init__(self, table: TableReader, state: TableState) -> None:
        self.lives: list[SegmentLife] = []
        self._live: dict[str, SegmentLife] = {}
        self.newest_ms = -1
        for sid, segment in state.segments.items():
            life = SegmentLife(segment.segment.path, segment.segment.size_bytes, segment.added_version)
            self._live[sid] = life
            self.lives.append(life)
        self._follower = Follower(table.config, table.name, state, files=table.files)

    @classmethod
    def open(cls, table: TableReader, start: int) -> _History:
        files = table.files
        assert files is not None
        frame = None
        try:
            frame = files.newest_valid_keyframe(at_most=start - 1) if start > 0 else None
            oldest = files.oldest_readable()
            if frame is None and oldest is not None and oldest > 0:
                frame = files.newest_valid_keyframe(at_most=oldest)  # drops before it: orphans now
        except OSError:
            frame = None
        state = keyframe.light_state(frame) if frame is not None else TableState(table.name.qualified)
        return cls(table, state)

    def __enter__(self) -> _History:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._follower.close()

    def catch_up(self) -> TableState:
        """The image at the log's end now (one watermark request, then the records after the image)."""
        end = self._follower.log_end()
        return self._follower.catch_up(end, listener=self._listen, exact=True)

    def _listen(self, applied: Applied, _: TableState) -> None:
        self.newest_ms = max(self.newest_ms, applied.timestamp_ms)
        delta = applied.delta
        if applied.verdict.outcome is not Outcome.ACCEPTED or delta is None:
            return
        for sid in delta.dropped:
            gone = self._live.pop(sid, None)
            if gone is not None:
                gone.dropped, gone.dropped_ms = delta.version, delta.timestamp_ms
        for segment in delta.added:
            life = SegmentLife(segment.path, segment.size_bytes, delta.version)
            self._live[segment.segment_id] = life
            self.lives.append(life)


def _history_objects(
    table: TableReader, properties: dict[str, str], now_ms: int, protected: Sequence[int] = ()
) -> Iterator[Doomed]:
    """Key frames and archives beyond ``segcat.history.retain.*`` (none when neither is set),
    never those a ``protected`` (leased or tagged) version is rebuilt from."""
    files = table.files
    assert files is not None
    keep_versions = _property_int(properties, HISTORY_VERSIONS_PROPERTY, None)
    keep_ms = _property_int(properties, HISTORY_AGE_PROPERTY, None)
    if keep_versions is None and keep_ms is None:
        return
    frames = files.keyframe_versions()
    if not frames:
        return
    bound = frames[-1]
    if keep_versions is not None:
        bound = min(bound, max(frames[-1] - keep_versions, -1))
    if keep_ms is not None:
        with_time = [v for v in frames if _frame_time(files, v) <= now_ms - keep_ms]
        bound = min(bound, with_time[-1] if with_time else -1)
    if protected:
        bound = min(bound, min(protected))
    base = [v for v in frames if v <= bound]
    if not base:
        return
    oldest_kept = base[-1]  # the key frame every kept version starts from
    floor = ((-1, oldest_kept),)
    for version in frames:
        if version < oldest_kept:
            yield Doomed(files.store.uri(files.keyframe_path(version)), 0, "history", spans=floor)
    for ref in files.archives():
        if ref.to_version <= oldest_kept:
            yield Doomed(files.store.uri(ref.path), 0, "history", spans=floor)


def _frame_time(files: Any, version: int) -> int:
    try:
        return int(files.read_keyframe(version).state().last_accepted_timestamp_ms)
    except Exception:
        return 0


def _iceberg_history(
    table: TableReader, properties: dict[str, str], report: VacuumReport
) -> Iterator[Doomed]:
    """The Iceberg files history retention lets go (``iceberg.retention``): judged against the key
    frames this plan keeps, older than the grace period (``report.cutoff_ms``, storage clock)."""
    files = table.files
    assert files is not None
    retained = {HISTORY_VERSIONS_PROPERTY, HISTORY_AGE_PROPERTY} & properties.keys()
    doomed = {item.path for item in report.files if item.reason == "history"}
    for path, size in iceberg_retention.history(files, properties, bool(retained), doomed, report.cutoff_ms):
        yield Doomed(files.store.uri(path), size, "history")


def _delete(
    report: VacuumReport, data_store: ObjectStore, table: TableReader, progress: Progress | None
) -> None:
    """Delete in batches of ``BATCH`` on a few threads; an absent file counts as already gone."""
    import pyarrow.fs as pafs

    items = report.files
    total = len(items)
    done = 0
    fs_cache: dict[str, tuple[pafs.FileSystem, str]] = {}

    def filesystem_for(path: str) -> tuple[pafs.FileSystem, str]:
        if "://" not in path or path.startswith("file://"):
            return pafs.LocalFileSystem(), path.removeprefix("file://")
        scheme = path.split("://", 1)[0]
        if scheme not in fs_cache:
            if scheme in ("s3", "s3a", "s3n"):
                from segcat.catalog.storage.objectstore import s3_filesystem

                bucket = path.split("://", 1)[1].split("/", 1)[0]
                fs_cache[scheme] = (
                    s3_filesystem(bucket, table.config.s3_endpoint, table.config.s3_region),
                    "",
                )
            else:
                fs_cache[scheme] = (pafs.FileSystem.from_uri(path)[0], "")
        fs = fs_cache[scheme][0]
        return fs, path.split("://", 1)[1]

    lock = threading.Lock()
    kept: list[Doomed] = []

    def delete_batch(batch: list[Doomed], recheck: Recheck | None) -> tuple[int, int, int]:
        if recheck is not None:
            with lock:  # one reader of the log; the deletes themselves run in parallel
                if fence is not None and not fence.held:
                    raise ServiceUnavailable(
                        f"vacuum of {report.table} lost its fence in Redis; it stopped deleting "
                        "(run it again)"
                    )
                recheck.refresh()
                saved = [item for item in batch if recheck.keeps(item)]
                kept.extend(saved)
            if saved:
                batch = [item for item in batch if item not in saved]
        deleted = gone = size = 0
        for item in batch:
            fs, native = filesystem_for(item.path)
            try:
                fs.delete_file(native)
                deleted += 1
                size += item.size
            except FileNotFoundError:
                gone += 1
        return deleted, gone, size

    in_flight: deque[Future[tuple[int, int, int]]] = deque()

    def settle(future: Future[tuple[int, int, int]]) -> None:
        nonlocal done
        deleted, gone, size = future.result()
        report.deleted += deleted
        report.already_gone += gone
        report.deleted_bytes += size
        done += deleted + gone
        if progress is not None:
            progress(done, total)

    checking = report.recheck if report.recheck is not None and items else None
    fence: HeldLease | None = None
    if checking is not None and report.leases is not None:
        fence = hold_fence(report.leases, table.name, report.head)  # before the leases are read again
        checking.leases = report.leases
    pool = ThreadPoolExecutor(max_workers=DELETE_THREADS)
    try:  # a few batches in flight at a time: a stop (or a kill) leaves the rest for the next run
        with contextlib.ExitStack() as stack:
            if checking is not None:
                stack.enter_context(checking)
            for start in range(0, total, BATCH):
                in_flight.append(pool.submit(delete_batch, items[start : start + BATCH], checking))
                if len(in_flight) >= 2 * DELETE_THREADS:
                    settle(in_flight.popleft())
            while in_flight:
                settle(in_flight.popleft())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if fence is not None:  # only once no batch can delete any more
            fence.release()
        if kept:
            saved_paths = {item.path for item in kept}
            report.files = [item for item in report.files if item.path not in saved_paths]
            report.kept_by_recheck += len(kept)
    log.info(
        "vacuum done",
        extra={
            "table": report.table,
            "horizon": report.horizon,
            "deleted": report.deleted,
            "bytes": report.deleted_bytes,
            "already_gone": report.already_gone,
        },
    )


def _previous_run(table: TableReader) -> dict[str, Any]:
    """The last run's record (``{}`` when there is none or it is unreadable: start over)."""
    files = table.files
    assert files is not None
    try:
        raw = json.loads(files.store.get(f"{files.base}/_vacuum"))
    except (FileNotFoundError, OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) and isinstance(raw.get("dropped_done_upto", -1), int) else {}


def _record(table: TableReader, report: VacuumReport) -> None:
    """``_catalog/_vacuum``: the last run (for ``segcat table describe`` and operators)."""
    files = table.files
    assert files is not None
    body = json.dumps(report.to_json(with_files=False), sort_keys=True).encode()
    try:
        files.store.put(f"{files.base}/_vacuum", body)
    except OSError as exc:
        log.warning("could not record the vacuum run", extra={"table": report.table, "error": str(exc)})
