"""One table's ``_catalog/`` on object storage: key frames, commit archives, ``_latest`` (PROTOCOL.md §6).

    <ns>/<table>/_catalog/logs/<log id>/keyframes/<V:020d>.parquet
    <ns>/<table>/_catalog/logs/<log id>/commits/<from:020d>-<to:020d>.parquet
    <ns>/<table>/_catalog/logs/<log id>/_latest   {"version", "path", "sha256" (of the key frame), "checksum"}
    <ns>/<table>/_catalog/_log     {"log_id", "reason", "checksum"}: whose the flat layout is

Every object belongs to one log: the table's topic as Kafka created it, named by its topic id.
A table re-created under the same name (its topic deleted without a purge) is another log, and
its objects live in a directory of their own, so nothing of the old table is ever read as the
new one's. The flat layout (``_catalog/keyframes/...`` etc., without ``logs/<id>``) holds what
was written before that binding, and those objects are read only by the log ``_catalog/_log``
names (``ownership`` checks them against the log before a materializer writes it).

Everything here is a deterministic function of the log, so writing an object twice is
harmless and two materializers racing during a rebalance cannot disagree on content.
``_latest`` is only a shortcut: the listing of ``keyframes/`` is the truth, and a stale or
damaged pointer costs a longer replay, never a wrong answer.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa

from segcat.catalog.errors import ArchiveGap, CorruptArchive, CorruptKeyFrame
from segcat.catalog.protocol.model import LogRecord
from segcat.catalog.protocol.names import TableName
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.archive import (
    Archive,
    ArchivedCommit,
    ArchivedRecord,
    CommitHead,
    decode_archive,
    decode_heads,
    encode_archive,
)
from segcat.catalog.storage.keyframe import KeyFrame
from segcat.catalog.storage.objectstore import ObjectStore

log = logging.getLogger(__name__)
T = TypeVar("T")

_KEYFRAME_NAME = re.compile(r"(\d{20})\.parquet")
_ARCHIVE_NAME = re.compile(r"(\d{20})-(\d{20})\.parquet")
_LATEST_REWRITES = 3
"""How often ``write_keyframe`` re-asserts ``_latest`` if a racing writer moved it back."""
LOG_ID = re.compile(r"[A-Za-z0-9_-]{22}")
"""A Kafka topic id as text (URL-safe base64 of 16 bytes, no padding): safe in any path."""
CLAIM_RECHECK_S = 30.0
"""How long a handle that found no ``_catalog/_log`` trusts that before reading it again (a
materializer may write it meanwhile; once written it never changes)."""


def check_log_id(log_id: str | None) -> str | None:
    """``log_id`` if it is a topic id in Kafka's text form (or None), else ``ValueError``."""
    if log_id is not None and (not isinstance(log_id, str) or not LOG_ID.fullmatch(log_id)):
        raise ValueError(f"not a Kafka topic id: {log_id!r}")
    return log_id


@dataclass(frozen=True, slots=True)
class FlatClaim:
    """``_catalog/_log``: the log the flat layout (objects written before the binding) belongs to."""

    log_id: str | None
    """None: checked against the log of its time and found to be another table's (or none's)."""
    reason: str


@dataclass(frozen=True, slots=True, order=True)
class ArchiveRef:
    """An archive object as named in the listing (its range is re-checked when it is read)."""

    from_version: int
    to_version: int
    path: str


@dataclass(frozen=True, slots=True)
class KeyFrameSearch:
    """The outcome of looking for the newest valid key frame."""

    frame: KeyFrame | None
    """The newest frame that loaded, or None (replay from the start)."""
    failed: tuple[int, ...]
    """Versions that were read and refused (missing or corrupt), oldest first."""


@dataclass(frozen=True, slots=True)
class Latest:
    version: int
    path: str
    sha256: str


class TableFiles:
    """Read and write the ``_catalog/`` objects of one table."""

    def __init__(self, store: ObjectStore, name: TableName, log_id: str | None = None) -> None:
        """``log_id``: the log (topic id) whose objects these are; None (a broker without topic
        ids, a tool without Kafka) reads and writes the flat layout, unbound, as before."""
        self.store = store
        self.name = name
        self.log_id = check_log_id(log_id)
        self.catalog_dir = f"{name.namespace}/{name.table}/_catalog"
        """Every log's objects of this table (what a purge removes)."""
        self._base: str | None = self.catalog_dir if log_id is None else None
        self._settled = log_id is None
        self._resolved_at = 0.0

    # ------------------------------------------------------------------ which log

    @property
    def base(self) -> str:
        """The directory of this log's objects: ``logs/<log id>``, or the flat layout when
        ``_catalog/_log`` names this log. Resolved on first use (one read of the claim), again
        while no claim exists every ``CLAIM_RECHECK_S``; ``OSError`` if storage cannot answer."""
        if self._base is None or (
            not self._settled and time.monotonic() - self._resolved_at >= CLAIM_RECHECK_S
        ):
            self.resolve()
        assert self._base is not None
        return self._base

    def resolve(self) -> str:
        """Read ``_catalog/_log`` now and choose the directory (see ``base``)."""
        assert self.log_id is not None or self._settled
        if self.log_id is None:
            return self.catalog_dir
        claim = self.read_claim()
        self._settled = claim is not None
        self._resolved_at = time.monotonic()
        flat = claim is not None and claim.log_id == self.log_id
        self._base = self.catalog_dir if flat else f"{self.catalog_dir}/logs/{self.log_id}"
        return self._base

    @property
    def claim_path(self) -> str:
        return f"{self.catalog_dir}/_log"

    def read_claim(self) -> FlatClaim | None:
        """``_catalog/_log`` (None: absent, or unreadable, which is treated as absent)."""
        try:
            raw = self.store.get(self.claim_path)
        except FileNotFoundError:
            return None
        try:
            doc: dict[str, Any] = json.loads(raw)
            body = {"log_id": doc["log_id"], "reason": str(doc["reason"])}
            if doc.get("checksum") != _body_checksum(body):
                raise ValueError("checksum mismatch")
            return FlatClaim(check_log_id(body["log_id"]), body["reason"])
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self._warn("claim_unreadable", None, self.claim_path, str(exc))
            return None

    def write_claim(self, claim: FlatClaim) -> None:
        """Record whose the flat layout is: ``ownership.settle_flat_layout`` decides it once (an
        operator adopting objects that cannot be compared writes it by hand, docs/OPERATIONS.md)."""
        body = {"log_id": check_log_id(claim.log_id), "reason": claim.reason}
        payload = {**body, "checksum": _body_checksum(body)}
        self.store.put(self.claim_path, json.dumps(payload, sort_keys=True, indent=1).encode() + b"\n")
        if self.log_id is not None:
            self.resolve()

    def flat(self) -> TableFiles:
        """The flat layout, unbound (what segcat wrote before objects were bound to their log)."""
        return TableFiles(self.store, self.name)

    def holds_history(self) -> bool:
        """Whether this layout holds a key frame, an archive or ``_latest``."""
        return bool(self.keyframe_versions() or self.archives() or self.store.exists(self.latest_path))

    # ------------------------------------------------------------------ names

    def keyframe_path(self, version: int) -> str:
        _check_version(version)
        return f"{self.base}/keyframes/{version:020d}.parquet"

    def archive_path(self, from_version: int, to_version: int) -> str:
        _check_version(from_version)
        _check_version(to_version)
        return f"{self.base}/commits/{from_version:020d}-{to_version:020d}.parquet"

    @property
    def latest_path(self) -> str:
        return f"{self.base}/_latest"

    # ------------------------------------------------------------------ key frames

    def write_keyframe(self, table: pa.Table, version: int) -> str:
        """Store the key frame for ``version`` and move ``_latest`` forward to it (never back).

        The object is written before the pointer, so ``_latest`` never names a missing
        object. Writing the same version again is harmless: it re-points ``_latest`` (same
        version) at the bytes now stored, in case another writer produced different bytes.
        """
        frame = keyframe.verify(table)
        if frame.version != version:
            raise ValueError(f"key frame holds version {frame.version}, not {version}")
        if frame.log_id != self.log_id and self.log_id is not None:
            raise ValueError(f"key frame of log {frame.log_id}, not of {self.log_id}")
        path = self.keyframe_path(version)
        data = keyframe.to_parquet(table)
        self.store.put(path, data)
        wanted = Latest(version, path, hashlib.sha256(data).hexdigest())
        for _ in range(_LATEST_REWRITES):
            current = self._read_latest()
            if current is None and any(v > version for v in self.keyframe_versions()):
                # No readable pointer but newer frames exist: pointing at ours could move it
                # back; leave it to the next newer key frame (readers use the listing meanwhile).
                break
            if current is not None and (
                current.version > version or (current.version == version and current.sha256 == wanted.sha256)
            ):
                break
            self.store.put(self.latest_path, _latest_bytes(wanted))
        return path

    def keyframe_versions(self) -> list[int]:
        """Versions of the key frame objects present, oldest first (damaged ones included)."""
        found = []
        for path in self.store.list(f"{self.base}/keyframes"):
            match = _KEYFRAME_NAME.fullmatch(path.rsplit("/", 1)[-1])
            if match:
                found.append(int(match.group(1)))
        return sorted(found)

    def read_keyframe(self, version: int, *, lean: bool = False) -> KeyFrame:
        """Load and verify one key frame; ``FileNotFoundError`` / ``CorruptKeyFrame``. ``lean``:
        without ``segment_avro`` (``keyframe.from_parquet``), for readers that list and prune."""
        return self._decode_keyframe(version, self.store.get(self.keyframe_path(version)), lean=lean)

    def _decode_keyframe(self, version: int, data: bytes, *, lean: bool = False) -> KeyFrame:
        frame = keyframe.from_parquet(data, lean=lean)
        if frame.version != version:
            raise CorruptKeyFrame(f"object for version {version} holds version {frame.version}")
        if frame.meta.get("table") != self.name.qualified:
            raise CorruptKeyFrame(f"key frame belongs to table {frame.meta.get('table')!r}")
        if self.log_id is not None and frame.log_id not in (None, self.log_id):
            raise CorruptKeyFrame(f"key frame belongs to log {frame.log_id}, not to {self.log_id}")
        return frame

    def latest(self) -> tuple[int, str, str] | None:
        """``(version, path, sha256)`` from ``_latest``; None if absent or unreadable."""
        current = self._read_latest()
        return None if current is None else (current.version, current.path, current.sha256)

    def _read_latest(self) -> Latest | None:
        try:
            raw = self.store.get(self.latest_path)
        except FileNotFoundError:
            return None
        try:
            doc: dict[str, Any] = json.loads(raw)
            body = {k: doc[k] for k in ("version", "path", "sha256")}
            if doc.get("checksum") != _body_checksum(body):
                raise ValueError("checksum mismatch")
            latest = Latest(int(body["version"]), str(body["path"]), str(body["sha256"]))
            if latest.path != self.keyframe_path(latest.version):
                raise ValueError(f"names {latest.path!r}, not the key frame of version {latest.version}")
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            self._warn("latest_unreadable", None, self.latest_path, str(exc))
            return None
        return latest

    def newest_valid_keyframe(self, at_most: int | None = None, *, lean: bool = False) -> KeyFrame | None:
        """The newest key frame that loads and verifies (with version ≤ ``at_most`` if given).

        ``_latest`` first (its SHA-256 of the whole object checked), then the listed versions
        newest first; corrupt or missing ones are skipped with a structured warning. None
        means: replay from the start of the log (or the archives).
        """
        return self.find_newest_valid_keyframe(at_most, lean=lean).frame

    def find_newest_valid_keyframe(self, at_most: int | None = None, *, lean: bool = False) -> KeyFrameSearch:
        """``newest_valid_keyframe`` plus the versions that were tried and failed to load.

        Only frames really read and refused count as failed (a materializer rewrites exactly
        those); frames never tried, e.g. newer than a valid ``_latest``, are not in the list.
        """
        failed: list[int] = []
        pointer = self._read_latest()
        if pointer is not None and (at_most is None or pointer.version <= at_most):
            try:
                data = self.store.get(pointer.path)
                if hashlib.sha256(data).hexdigest() == pointer.sha256:
                    return KeyFrameSearch(self._decode_keyframe(pointer.version, data, lean=lean), ())
                # Damaged, or rewritten with other bytes: the listing pass judges the object itself.
                self._warn("latest_mismatch", pointer.version, pointer.path, "sha256 differs from _latest")
            except (FileNotFoundError, CorruptKeyFrame) as exc:
                failed.append(pointer.version)
                self._warn("keyframe_skipped", pointer.version, pointer.path, f"via _latest: {exc}")
        for version in reversed(self.keyframe_versions()):
            if version in failed or (at_most is not None and version > at_most):
                continue
            try:
                return KeyFrameSearch(self.read_keyframe(version, lean=lean), tuple(sorted(failed)))
            except (FileNotFoundError, CorruptKeyFrame) as exc:
                failed.append(version)
                self._warn("keyframe_skipped", version, self.keyframe_path(version), str(exc))
        return KeyFrameSearch(None, tuple(sorted(failed)))

    # ------------------------------------------------------------------ temp files

    def remove_stale_temp_files(self, older_than_s: float) -> list[str]:
        """Delete temp files a killed writer left under this table's ``_catalog/`` (and nowhere else)."""
        return self.store.remove_stale_temp_files(self.catalog_dir, older_than_s)

    # ------------------------------------------------------------------ commit archives

    def write_archive(
        self,
        from_version: int,
        to_version: int,
        commits: Iterable[ArchivedCommit],
        others: Iterable[ArchivedRecord] = (),
    ) -> str:
        """Store the archive of the records in ``from_version ..= to_version``: the accepted
        commits and the ``others`` (every record that was not accepted)."""
        path = self.archive_path(from_version, to_version)
        data = encode_archive(
            from_version, to_version, commits, table=self.name.qualified, others=others, log_id=self.log_id
        )
        self.store.put(path, data)
        return path

    def archives(self) -> list[ArchiveRef]:
        """The archive objects present, by range."""
        found = []
        for path in self.store.list(f"{self.base}/commits"):
            match = _ARCHIVE_NAME.fullmatch(path.rsplit("/", 1)[-1])
            if match and int(match.group(1)) <= int(match.group(2)):
                found.append(ArchiveRef(int(match.group(1)), int(match.group(2)), path))
        return sorted(found)

    def read_archive(self, ref: ArchiveRef) -> Archive:
        """Load one archive and check it is the one its name promises; ``CorruptArchive`` if not."""
        try:
            data = self.store.get(ref.path)
        except FileNotFoundError as exc:
            raise CorruptArchive(f"archive {ref.path} disappeared") from exc
        return self._check_archive(ref, decode_archive(data))

    def _check_archive(self, ref: ArchiveRef, archive: Archive) -> Archive:
        """``archive`` if it is the one ``ref`` names (range and table), else ``CorruptArchive``."""
        if (archive.from_version, archive.to_version) != (ref.from_version, ref.to_version):
            raise CorruptArchive(
                f"archive {ref.path} holds the range {archive.from_version}..{archive.to_version}"
            )
        if archive.table is not None and archive.table != self.name.qualified:
            raise CorruptArchive(f"archive {ref.path} belongs to table {archive.table!r}")
        if self.log_id is not None and archive.log_id not in (None, self.log_id):
            raise CorruptArchive(f"archive {ref.path} belongs to log {archive.log_id}, not to {self.log_id}")
        return archive

    def archive_plan(self, after_version: int, upto: int | None = None) -> list[ArchiveRef]:
        """The archives that together cover ``(after_version, upto]`` without a gap, in order.

        Coverage is proven by chaining ranges: starting at ``c = after_version``, the next
        archive must start at or before ``c + 1`` and end after ``c``; among those the one
        reaching furthest is taken (ranges may overlap: archives are deterministic, so any
        overlap agrees). ``ArchiveGap`` if the chain breaks before ``upto``; with ``upto=None``
        the chain may end where the archives end, but not before an archive further on.
        """
        if after_version < -1:
            raise ValueError(f"after_version {after_version} < -1")
        refs = self.archives()
        plan: list[ArchiveRef] = []
        covered = after_version
        while upto is None or covered < upto:
            candidates = [r for r in refs if r.from_version <= covered + 1 and r.to_version > covered]
            if not candidates:
                beyond = [r for r in refs if r.to_version > covered]
                if upto is None and not beyond:
                    break
                raise ArchiveGap(
                    f"{self.name}: commit archives cover versions up to {covered}, "
                    f"nothing from {covered + 1}"
                    + (f" (next archive starts at {min(r.from_version for r in beyond)})" if beyond else ""),
                    covered_upto=covered,
                    wanted_upto=upto,
                )
            best = max(candidates, key=lambda r: (r.to_version, -r.from_version))
            plan.append(best)
            covered = best.to_version
        return plan

    def archives_between(self, after_version: int, upto: int | None = None) -> Iterator[ArchivedCommit]:
        """The accepted commits with ``after_version < version ≤ upto``, in order, from the archives.

        Coverage is checked before anything is yielded (``ArchiveGap`` is raised by this call,
        so the caller can go to Kafka instead). An archive that turns out damaged while
        iterating raises ``CorruptArchive``; every commit yielded before it is correct, so the
        caller can continue from Kafka after the last one it got.
        """
        plan = self.archive_plan(after_version, upto)
        commits = (c for ref in plan for c in self.read_archive(ref).commits)
        return _in_range(commits, lambda c: c.version, after_version, upto)

    def commit_heads_between(self, after_version: int, upto: int | None = None) -> Iterator[CommitHead]:
        """``archives_between`` without the record values (the archives' value columns are never
        read): versions, times, commit ids and operations. Same coverage check and errors."""
        plan = self.archive_plan(after_version, upto)
        heads = (h for ref in plan for h in self._read_heads(ref))
        return _in_range(heads, lambda h: h.version, after_version, upto)

    def _read_heads(self, ref: ArchiveRef) -> tuple[CommitHead, ...]:
        try:
            data = self.store.get(ref.path)
        except FileNotFoundError as exc:
            raise CorruptArchive(f"archive {ref.path} disappeared") from exc
        return self._check_archive(ref, decode_heads(data)).heads

    def records_between(self, after_version: int, upto: int | None = None) -> Iterator[LogRecord]:
        """Every archived record with ``after_version < offset ≤ upto``, in order, as the log held it.

        The rules judge them exactly as they judged the log (format-1 archives hold only the
        accepted commits: the same images, fewer verdicts). Coverage is checked first
        (``ArchiveGap``); a damaged archive met while iterating raises ``CorruptArchive``.
        """
        plan = self.archive_plan(after_version, upto)
        records = (r for ref in plan for r in self.read_archive(ref).log_records())
        return _in_range(records, lambda r: r.offset, after_version, upto)

    def archived_upto(self) -> int:
        """The last offset the archives cover without a gap, from the start of the log or (once
        history retention removed the oldest) from the oldest key frame kept; -1: none."""
        try:
            plan = self.archive_plan(-1)
        except ArchiveGap:  # history retention removed the oldest: chain from the oldest key frame
            frames = self.keyframe_versions()
            if not frames:
                return -1
            try:
                plan = self.archive_plan(frames[0])
            except ArchiveGap:
                return -1
            return plan[-1].to_version if plan else frames[0]
        return plan[-1].to_version if plan else -1

    def first_after_time(self, timestamp_ms: int, before: int) -> int | None:
        """The first archived offset below ``before`` whose broker time is > ``timestamp_ms``;
        ``before`` when no archived record is later; None when the archives hold nothing below it.

        For time lookups on a pruned log: Kafka's time index no longer sees the pruned records.
        Archives are read newest first, stopping at one that starts at or before the time.
        """
        refs = [r for r in self.archives() if r.from_version < before]
        if not refs:
            return None
        found = before
        for ref in reversed(refs):
            records = [r for r in self.read_archive(ref).log_records() if r.offset < before]
            later = [r.offset for r in records if r.timestamp_ms > timestamp_ms]
            if later:
                found = min(found, min(later))
            if records and records[0].timestamp_ms <= timestamp_ms:
                break
            if not records and ref.from_version == 0:
                break
        return found

    def oldest_readable(self) -> int | None:
        """The oldest version object storage alone can rebuild (None: it holds no history)."""
        refs = self.archives()
        if refs and refs[0].from_version == 0:
            return 0
        frames = self.keyframe_versions()
        return frames[0] if frames else None

    # ------------------------------------------------------------------ helpers

    def _warn(self, event: str, version: int | None, path: str, reason: str) -> None:
        log.warning(
            "%s: %s %s (version %s): %s",
            self.name,
            event.replace("_", " "),
            self.store.uri(path),
            version,
            reason,
            extra={
                "event": event,
                "table": self.name.qualified,
                "version": version,
                "path": path,
                "reason": reason,
            },
        )


def _in_range(items: Iterable[T], offset: Callable[[T], int], after: int, upto: int | None) -> Iterator[T]:
    """``items`` (in offset order, ranges may overlap) with ``after < offset ≤ upto``, each once."""
    last = after
    for item in items:
        at = offset(item)
        if at <= last:
            continue
        if upto is not None and at > upto:
            return
        last = at
        yield item


def _check_version(version: int) -> None:
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise ValueError(f"object versions are offsets ≥ 0, got {version!r}")


def _body_checksum(body: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _latest_bytes(latest: Latest) -> bytes:
    body = {"version": latest.version, "path": latest.path, "sha256": latest.sha256}
    return json.dumps({**body, "checksum": _body_checksum(body)}, sort_keys=True, indent=1).encode() + b"\n"
