"""Vacuum: delete what no kept version needs (docs/LIFECYCLE.md).

- **Horizon** H = the oldest version kept (``retain_versions``: the versions after
  ``end − N`` keep their files), lowered to the oldest leased version. Every version ≥ H
  stays readable with all its files.
- **Dropped files**: a segment dropped at version d is deleted when d ≤ H, its path is not
  referenced by any version ≥ H (a path may be re-registered), and the drop is older than
  the grace period. Found from the log (key frame + archives + Kafka), never by listing.
- **Orphans**: files under the table's ``data/`` that no version in the replayed history
  references and no live write intent covers, last modified before the grace period
  (a listing: in-process here, on Spark executors for millions of files).
- **History**: key frames and commit archives older than ``segcat.history.retain.*`` (the
  newest key frame at or before the history horizon and everything after it stay).

The listing is taken *before* the head is read: a file listed was written before the head
was read, so a writer that announced it (intent) or committed it is seen. A vacuum that
refuses (dropped table, leases unknowable, a path outside the table's root) deletes nothing;
one killed midway leaves only files nobody needs, and the next run finishes the job.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from segcat.catalog.errors import (
    InvalidArgument,
    ServiceUnavailable,
    TableDropped,
    UnsafeLocation,
)
from segcat.catalog.log.follower import Follower
from segcat.catalog.protocol import locations
from segcat.catalog.protocol.replay import Applied
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.protocol.state import ALLOWED_LOCATIONS_PROPERTY, TableState
from segcat.catalog.read.retention import check_duration, check_retain_versions
from segcat.catalog.read.table import Table
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

Progress = Callable[[int, int], None]
"""Called with (done, total) while deleting."""


@dataclass(frozen=True)
class Doomed:
    """A file vacuum deletes: its full path or URI, size, and why it may go."""

    path: str
    size: int
    reason: str
    """dropped, orphan or history."""


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
    leased_versions: tuple[int, ...] = ()
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
    """Files last modified after this time are too young to be orphans (now − grace)."""

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
            "leased_versions": list(self.leased_versions),
            "open_intents": self.open_intents,
            "dropped_done_upto": self.dropped_done_upto,
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
    table: Table,
    *,
    retain_versions: int | None = None,
    grace_ms: int | None = None,
    dry_run: bool = False,
    ignore_leases: bool = False,
    orphans: bool = True,
    leases: LeaseStore | None = None,
    now_ms: int | None = None,
    progress: Progress | None = None,
    listing: Iterable[tuple[str, int, int]] | None = None,
) -> VacuumReport:
    """Delete the files no version ≥ H, no leased version and no live intent needs.

    One replay of the log (from the last run's record, key frames + archives + Kafka) tells
    every segment's life: the version that added it and the one that dropped it. ``listing``
    (``(path relative to the root, size, mtime_ms)`` under ``data/``) replaces the in-process
    listing. Refuses a dropped table (``TableDropped``) and, unless ``ignore_leases``, an
    unreachable Redis (``ServiceUnavailable``), before anything is deleted.

    Safe against writes running meanwhile: the cut-off (now − grace) is taken first, so any
    file written after the vacuum started is too young, and a writer announces its intent
    before it writes, so an older file's intent or commit is in the replay.
    """
    if retain_versions is not None:
        check_retain_versions(retain_versions)
    if grace_ms is not None:
        check_duration(grace_ms, "grace")
    now = int(time.time() * 1000) if now_ms is None else now_ms
    if table.files is None:
        raise InvalidArgument("vacuum needs object storage (key frames and archives)")
    end = table.log_end()
    done_upto = _previous_run(table).get("dropped_done_upto", -1)
    history = _History.replay(table, done_upto + 1, end)
    head = history.head_state
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
    horizon = max(end - keep_n + 1, 0)
    leased = _leased_versions(table, leases, ignore_leases)
    if leased:
        horizon = min(horizon, leased[0])
    report = VacuumReport(table.name.qualified, horizon, end, grace, dry_run, leased_versions=leased)
    cutoff = now - grace
    root = head.location or table.root
    try:
        allowed = locations.parse_allowed(properties.get(ALLOWED_LOCATIONS_PROPERTY))
    except ValueError:
        allowed = ()
    data_store = ObjectStore.from_uri(
        root, s3_endpoint=table.config.s3_endpoint, s3_region=table.config.s3_region
    )
    intents = head.live_intents(now)
    report.open_intents = len(intents)
    intent_prefixes = [_absolute(root, i.prefix) for i in intents]
    live_ids = {i.intent_id for i in intents}
    report.root = root
    report.cutoff_ms = cutoff
    report.protected_prefixes = [
        i.prefix
        if not locations.is_absolute_uri(i.prefix)
        else (locations.relative_to(i.prefix, root) or i.prefix)
        for i in intents
    ]

    def protected(full: str) -> bool:
        """Under a live intent, unless its footer names a commit no live intent announces."""
        if not any(full.startswith(prefix) for prefix in intent_prefixes):
            return False
        return not _claimed_elsewhere(data_store, root, full, live_ids)

    key = _Keys(root)
    needed = {key(e.path) for e in history.lives if e.dropped is None or e.dropped > horizon}
    report.referenced = {key(e.path) for e in history.lives}
    kept_drops: list[int] = []
    for life in history.lives:
        if life.dropped is None or life.dropped > horizon or life.dropped <= done_upto:
            continue
        if key(life.path) in needed:
            continue  # the same file is live again, under another id
        if locations.is_absolute_uri(life.path) and locations.allowed_problem(life.path, root, allowed):
            raise UnsafeLocation(
                f"{table.name}: a dropped segment's path {life.path[:200]!r} lies outside the table's "
                "root and allowed locations; vacuum deletes nothing (remove it by hand if it is yours)"
            )
        if life.dropped_ms > cutoff:
            report.kept_by_grace += 1
            kept_drops.append(life.dropped)
            continue
        report.files.append(Doomed(_absolute(root, life.path), life.size, "dropped"))
    if orphans or listing is not None:
        listed = data_store.list_files("data") if listing is None else listing
        for relative, size, mtime_ms in listed:
            if not relative.startswith("data/"):
                raise InvalidArgument(f"listing holds {relative[:200]!r}, outside the table's data/")
            if relative in report.referenced:
                continue
            if mtime_ms > cutoff:
                report.kept_by_grace += 1
                continue
            full = f"{root.rstrip('/')}/{relative}"
            if protected(full):
                report.kept_by_intent += 1
                continue
            report.files.append(Doomed(full, size, "orphan"))
    report.files.extend(_history_objects(table, properties, now))
    _dedupe(report)
    report.dropped_done_upto = min([horizon, *(d - 1 for d in kept_drops)])
    if not dry_run:
        execute(table, report, progress)
    return report


def _leased_versions(table: Table, leases: LeaseStore | None, ignore: bool) -> tuple[int, ...]:
    if ignore:
        return ()
    store = leases or (LeaseStore.from_store(table.redis) if table.redis is not None else None)
    if store is None:
        raise ServiceUnavailable("vacuum needs Redis to see version leases (or --ignore-leases)")
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


def execute(table: Table, report: VacuumReport, progress: Progress | None = None) -> None:
    """Delete what a (dry-run) report lists, in batches, and record the run."""
    config = table.config
    store = ObjectStore.from_uri(report.root, s3_endpoint=config.s3_endpoint, s3_region=config.s3_region)
    report.dry_run = False
    _delete(report, store, table, progress)
    if table.files is not None:
        _record(table, report)


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
class _Life:
    """One segment's life in the replayed log: its file, and the versions that added and dropped it."""

    path: str
    size: int
    added: int
    dropped: int | None = None
    dropped_ms: int = 0


@dataclass
class _History:
    """What the log says between the start image and the head: every segment's life."""

    head_state: TableState
    lives: list[_Life]

    @classmethod
    def replay(cls, table: Table, start: int, end: int) -> _History:
        """Replay from the newest key frame before ``start`` to ``end`` (from the start of the log,
        or the oldest key frame when history retention removed what was before it)."""
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
        lives: list[_Life] = []
        live: dict[str, _Life] = {}
        for sid, segment in state.segments.items():
            live[sid] = _Life(segment.segment.path, segment.segment.size_bytes, segment.added_version)
            lives.append(live[sid])

        def listen(applied: Applied, _: TableState) -> None:
            delta = applied.delta
            if applied.verdict.outcome is not Outcome.ACCEPTED or delta is None:
                return
            for sid in delta.dropped:
                gone = live.pop(sid, None)
                if gone is not None:
                    gone.dropped, gone.dropped_ms = delta.version, delta.timestamp_ms
            for segment in delta.added:
                life = _Life(segment.path, segment.size_bytes, delta.version)
                live[segment.segment_id] = life
                lives.append(life)

        with Follower(table.config, table.name, state, files=table.files) as follower:
            final = follower.catch_up(end, listener=listen, exact=True)
        return cls(final, lives)


def _history_objects(table: Table, properties: dict[str, str], now_ms: int) -> Iterator[Doomed]:
    """Key frames and archives beyond ``segcat.history.retain.*`` (none when neither is set)."""
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
    base = [v for v in frames if v <= bound]
    if not base:
        return
    oldest_kept = base[-1]  # the key frame every kept version starts from
    for version in frames:
        if version < oldest_kept:
            yield Doomed(files.store.uri(files.keyframe_path(version)), 0, "history")
    for ref in files.archives():
        if ref.to_version <= oldest_kept:
            yield Doomed(files.store.uri(ref.path), 0, "history")


def _frame_time(files: Any, version: int) -> int:
    try:
        return int(files.read_keyframe(version).state().last_accepted_timestamp_ms)
    except Exception:
        return 0


def _delete(report: VacuumReport, data_store: ObjectStore, table: Table, progress: Progress | None) -> None:
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

    def delete_batch(batch: list[Doomed]) -> tuple[int, int, int]:
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

    pool = ThreadPoolExecutor(max_workers=DELETE_THREADS)
    try:  # a few batches in flight at a time: a stop (or a kill) leaves the rest for the next run
        for start in range(0, total, BATCH):
            in_flight.append(pool.submit(delete_batch, items[start : start + BATCH]))
            if len(in_flight) >= 2 * DELETE_THREADS:
                settle(in_flight.popleft())
        while in_flight:
            settle(in_flight.popleft())
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
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


def _previous_run(table: Table) -> dict[str, Any]:
    """The last run's record (``{}`` when there is none or it is unreadable: start over)."""
    files = table.files
    assert files is not None
    try:
        raw = json.loads(files.store.get(f"{files.base}/_vacuum"))
    except (FileNotFoundError, OSError, ValueError):
        return {}
    return raw if isinstance(raw, dict) and isinstance(raw.get("dropped_done_upto", -1), int) else {}


def _record(table: Table, report: VacuumReport) -> None:
    """``_catalog/_vacuum``: the last run (for ``segcat table describe`` and operators)."""
    files = table.files
    assert files is not None
    body = json.dumps(report.to_json(with_files=False), sort_keys=True).encode()
    try:
        files.store.put(f"{files.base}/_vacuum", body)
    except OSError as exc:
        log.warning("could not record the vacuum run", extra={"table": report.table, "error": str(exc)})
