"""The reader's lookup chain (docs/PROTOCOL.md §6): Redis → object storage → Kafka, each a fallback.

Every step returns a ``FrameView`` covering the log up to some offset, or None when it
cannot answer; the next step picks up from there. Kafka is the arbiter: records the
materializer has not judged yet are judged here by the same rules, on a light image
rebuilt from the key frame (plus the accepted deltas Redis already holds), so a reader
that names a version gets exactly that version even while the materializer lags.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from segcat.catalog.errors import ArchiveGap, CorruptArchive, CorruptKeyFrame, DecodeError, ServiceUnavailable
from segcat.catalog.log.reader import LogReader
from segcat.catalog.protocol import codec, rules, versions
from segcat.catalog.protocol.model import Commit
from segcat.catalog.protocol.replay import Applied, replay
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read.frame_view import AcceptedCommit, FrameView
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.redis_store import RedisStore
from segcat.catalog.storage.table_files import TableFiles

log = logging.getLogger("segcat.reader")


@dataclass(frozen=True)
class Found:
    frame: FrameView
    origin: str
    keyframe: keyframe.KeyFrame | None = None
    """Where ``frame`` started: a Kafka tail rebuilds its judging image from this ..."""
    accepted: tuple[AcceptedCommit, ...] = ()
    """... plus these accepted commits after it (Redis deltas), up to ``frame.offset``."""


def _decode(value: bytes) -> Commit | None:
    try:
        return codec.decode_commit(value)
    except DecodeError:
        return None


def from_redis(redis: RedisStore, table: str, bound: int | None) -> Found | None:
    """Key frame + deltas from Redis, when they reach ``bound`` (None = the materialized head)."""
    try:
        loaded = redis.load(table)
    except (ServiceUnavailable, CorruptKeyFrame) as exc:
        log.info("redis cannot answer", extra={"table": table, "reason": str(exc)})
        return None
    if loaded.head is None or loaded.keyframe is None or not loaded.complete:
        return None
    try:
        start = keyframe.from_ipc(loaded.keyframe, verified_bytes=True)
        frame = FrameView.from_keyframe(start)
    except CorruptKeyFrame as exc:
        log.warning("corrupt key frame in redis", extra={"table": table, "reason": str(exc)})
        return None
    if bound is not None and bound < frame.offset:
        return None  # older than the cached key frame: object storage answers
    commits: list[AcceptedCommit] = []
    for delta in loaded.deltas:
        if bound is not None and delta.version > bound:
            break
        commit = _decode(delta.value)
        if commit is None:
            return None
        commits.append((delta.version, delta.timestamp_ms, commit))
    head_offset = loaded.head.offset
    reach = head_offset if bound is None else min(bound, head_offset)
    versions.check_supported(frame.protocol, table)
    view = frame.apply(commits, offset=max(reach, frame.offset))
    return Found(view, "redis", start, tuple(commits))


def from_object_store(files: TableFiles, bound: int | None) -> tuple[Found | None, keyframe.KeyFrame | None]:
    """The newest valid key frame ≤ ``bound`` plus the archived commits up to ``bound``.

    Also returns the key frame itself, so a Kafka tail can start from it.
    """
    try:
        frame = files.newest_valid_keyframe(at_most=bound)
    except OSError as exc:
        log.info("object storage cannot answer", extra={"table": files.name.qualified, "reason": str(exc)})
        return None, None
    if frame is None:
        return None, None
    view = FrameView.from_keyframe(frame)
    versions.check_supported(view.protocol, files.name.qualified)
    if bound is None or bound <= view.offset:
        return Found(view, "object-store", frame), frame
    commits: list[AcceptedCommit] = []
    try:
        for archived in files.archives_between(view.version, bound):
            commit = _decode(archived.value)
            if commit is None:
                raise CorruptArchive(f"undecodable commit at version {archived.version}")
            commits.append((archived.version, archived.timestamp_ms, commit))
    except (ArchiveGap, CorruptArchive, OSError):
        commits = []  # the rest comes from Kafka
    reach = commits[-1][0] if commits else view.offset
    return Found(view.apply(commits, offset=reach), "object-store", frame, tuple(commits)), frame


def judging_image(found: Found, table: str) -> TableState:
    """The image the rules need at ``found.frame.offset``: key frame (light) + accepted commits."""
    state = keyframe.light_state(found.keyframe) if found.keyframe is not None else TableState(table)
    for version, timestamp_ms, commit in found.accepted:
        if version > state.version:
            rules.fold_accepted(state, version, timestamp_ms, commit)
    state.version = max(state.version, found.frame.offset)
    return state


def kafka_tail(
    reader: LogReader, start: keyframe.KeyFrame | TableState | None, table: str, after: int, bound: int | None
) -> tuple[list[AcceptedCommit], int]:
    """Judge the log records after ``start`` up to ``bound``; the accepted ones after ``after``.

    Returns them with the last offset read. The image is ``start`` itself (a judging image),
    a key frame's light image (no stats needed to judge) or the empty table.
    """
    if isinstance(start, TableState):
        state = start
    else:
        state = keyframe.light_state(start) if start is not None else TableState(table)
    accepted: list[AcceptedCommit] = []

    def collect(applied: Applied, _: TableState) -> None:
        v = applied.verdict
        if v.outcome is Outcome.ACCEPTED and applied.commit is not None and v.offset > after:
            accepted.append((v.offset, applied.timestamp_ms, applied.commit))

    end = None if bound is None else bound + 1
    replay(reader.read(state.version + 1, end), state, upto=bound, listener=collect)
    return accepted, state.version
