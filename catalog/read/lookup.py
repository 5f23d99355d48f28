"""The reader's lookup chain (docs/PROTOCOL.md §3): Redis → object storage → Kafka, each a fallback.

Every step returns a ``FrameView`` covering the log up to some offset, or None when it
cannot answer; the next step picks up from there. Kafka is the arbiter: records the
materializer has not judged yet are judged here by the same rules, on a light image
rebuilt from the key frame plus the accepted deltas after it, so a reader that names a
version gets exactly that version even while the materializer lags.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from segcat.catalog.config import Config
from segcat.catalog.errors import ArchiveGap, CorruptArchive, CorruptKeyFrame, DecodeError, ServiceUnavailable
from segcat.catalog.log.follower import Follower, collect_accepted
from segcat.catalog.protocol import codec, versions
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.state import TableState
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.frame_view import FrameView
from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.table_files import TableFiles

log = logging.getLogger("segcat.reader")


@dataclass(frozen=True)
class Found:
    """What a source answered: the view, who answered, and where the view started."""

    frame: FrameView
    origin: str
    keyframe: keyframe.KeyFrame | None = None
    """The key frame ``frame`` started from (None: the empty table) ..."""
    deltas: tuple[CommitDelta, ...] = ()
    """... and the accepted deltas applied after it, up to ``frame.offset``."""


def _delta(version: int, timestamp_ms: int, value: bytes) -> CommitDelta | None:
    try:
        return CommitDelta(version, timestamp_ms, codec.decode_commit(value))
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
    deltas: list[CommitDelta] = []
    for entry in loaded.deltas:
        if bound is not None and entry.version > bound:
            break
        delta = _delta(entry.version, entry.timestamp_ms, entry.value)
        if delta is None:
            return None
        deltas.append(delta)
    head_offset = loaded.head.offset
    reach = head_offset if bound is None else min(bound, head_offset)
    versions.check_supported(frame.protocol, table)
    view = frame.apply(deltas, offset=max(reach, frame.offset))
    return Found(view, "redis", start, tuple(deltas))


def from_object_store(files: TableFiles, bound: int | None) -> Found | None:
    """The newest valid key frame ≤ ``bound`` plus the archived commits up to ``bound``."""
    try:
        frame = files.newest_valid_keyframe(at_most=bound)
    except OSError as exc:
        log.info("object storage cannot answer", extra={"table": files.name.qualified, "reason": str(exc)})
        return None
    if frame is None:
        return None
    view = FrameView.from_keyframe(frame)
    versions.check_supported(view.protocol, files.name.qualified)
    if bound is None or bound <= view.offset:
        return Found(view, "object-store", frame)
    deltas: list[CommitDelta] = []
    reach = view.offset
    upto = bound
    for _ in range(2):
        try:
            for archived in files.archives_between(view.version, upto):
                delta = _delta(archived.version, archived.timestamp_ms, archived.value)
                if delta is None:
                    raise CorruptArchive(f"undecodable commit at version {archived.version}")
                deltas.append(delta)
            reach = upto  # the archives cover every offset up to it (ArchiveGap otherwise)
            break
        except ArchiveGap as exc:
            if exc.covered_upto <= view.offset:
                break
            upto = exc.covered_upto  # as far as the archives go; Kafka only after them
        except (CorruptArchive, OSError):
            deltas = []  # the rest comes from Kafka
            break
    reach = max(reach, deltas[-1].version if deltas else view.offset)
    return Found(view.apply(deltas, offset=reach), "object-store", frame, tuple(deltas))


def judging_image(found: Found, table: str) -> TableState:
    """The image the rules need at ``found.frame.offset``: the key frame's (light) + the deltas.

    Only accepted commits change what the rules look at, so this judges the next record
    exactly as a replay from offset 0 would.
    """
    state = keyframe.light_state(found.keyframe) if found.keyframe is not None else TableState(table)
    for delta in found.deltas:
        if delta.version > state.version:
            state.apply(delta)
    state.version = max(state.version, found.frame.offset)
    return state


def kafka_tail(
    config: Config, name: TableName, image: TableState, after: int, bound: int | None
) -> tuple[list[CommitDelta], int]:
    """Judge the log after ``image`` up to ``bound`` (None: its end): the accepted deltas after
    ``after``, and the last offset judged."""
    accepted: list[CommitDelta] = []
    with Follower(config, name, image) as follower:
        follower.catch_up(bound, listener=collect_accepted(accepted, after=after), exact=True)
        return accepted, follower.state.version
