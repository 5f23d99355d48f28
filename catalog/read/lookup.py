"""The reader's lookup chain (docs/PROTOCOL.md §3): Redis → object storage → Kafka, each a fallback.

Every step returns a ``FrameView`` covering the log up to some offset, or None when it
cannot answer; the next step picks up from there. Kafka is the arbiter: records the
materializer has not judged yet are judged here by the same rules, on a light image
rebuilt from the key frame plus the accepted deltas after it, so a reader that names a
version gets exactly that version even while the materializer lags.

Views here are lean (``FrameView.lean``): the accepted commits after a key frame go from
their record bytes straight into Arrow rows, and a reader naming an older version than the
Redis key frame learns so from one ``HGET`` before any frame is moved.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from segcat.catalog.config import Config
from segcat.catalog.errors import (
    ArchiveGap,
    CorruptArchive,
    CorruptKeyFrame,
    DecodeError,
    ServiceUnavailable,
)
from segcat.catalog.log.follower import Follower, collect_accepted
from segcat.catalog.protocol import codec, versions
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.state import TableState
from segcat.catalog.storage import delta_arrow, keyframe
from segcat.catalog.storage.delta_arrow import EncodedCommit
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
    """The key frame ``frame`` started from (None: the empty table; lean when Redis answered) ..."""
    commits: tuple[EncodedCommit, ...] = ()
    """... and the accepted commits applied after it, up to ``frame.offset``."""
    exact_image: bool = True
    """False: the view was cut back from ``keyframe``, a later one; the rules' image cannot be rebuilt."""

    def deltas(self) -> list[CommitDelta]:
        """``commits`` decoded whole (``Segment`` objects): what the rules' image needs."""
        return [CommitDelta(c.version, c.timestamp_ms, codec.decode_commit(c.value)) for c in self.commits]


def from_redis(
    redis: RedisStore, table: str, bound: int | None, *, probe: bool = True, log_id: str | None = None
) -> Found | None:
    """Key frame + deltas from Redis, when they reach ``bound`` (None = the materialized head).

    With a ``bound`` and ``probe``, the key frame's version is read first (one ``HMGET``, which
    also names the frame's log): a version older than it is object storage's to answer, and the
    frame is never fetched for nothing. (A read of the log's end skips the probe: the head is not
    older than the key frame.) With ``log_id``, values of another log (a table that had this name
    before) or from before the binding are never taken: the next source answers.
    """
    try:
        if bound is not None and probe:
            cached = redis.keyframe_version(table, log_id)
            if cached is None or bound < cached:
                return None
        loaded = redis.load(table)
    except (ServiceUnavailable, CorruptKeyFrame) as exc:
        log.info("redis cannot answer", extra={"table": table, "reason": str(exc)})
        return None
    if loaded.head is None or loaded.keyframe is None or not loaded.complete:
        return None
    if not loaded.belongs_to(log_id):
        log.info("redis holds another log's values", extra={"table": table, "log_id": log_id})
        return None
    try:
        start = keyframe.from_ipc(loaded.keyframe, verified_bytes=True)
        frame = FrameView.from_keyframe(start, lean=True)
    except CorruptKeyFrame as exc:
        log.warning("corrupt key frame in redis", extra={"table": table, "reason": str(exc)})
        return None
    if log_id is not None and start.log_id != log_id:
        return None
    if bound is not None and bound < frame.offset:
        return None  # older than the cached key frame (it moved since the HGET): object storage answers
    commits = tuple(
        EncodedCommit(e.version, e.timestamp_ms, e.value)
        for e in loaded.deltas
        if bound is None or e.version <= bound
    )
    head_offset = loaded.head.offset
    reach = head_offset if bound is None else min(bound, head_offset)
    versions.check_supported(frame.protocol, table)
    try:
        view = frame.apply_encoded(commits, offset=max(reach, frame.offset))
    except DecodeError:
        return None
    return Found(view, "redis", start, commits)


def from_object_store(files: TableFiles, bound: int | None, *, lean: bool = True) -> Found | None:
    """The newest valid key frame ≤ ``bound`` plus the archived commits up to ``bound``
    (``lean``: the reader's view; otherwise a full one, with every segment's Avro)."""
    try:
        frame = files.newest_valid_keyframe(at_most=bound, lean=lean)
    except OSError as exc:
        log.info("object storage cannot answer", extra={"table": files.name.qualified, "reason": str(exc)})
        return None
    if frame is None:
        return None
    view = FrameView.from_keyframe(frame, lean=lean)
    versions.check_supported(view.protocol, files.name.qualified)
    if bound is None or bound <= view.offset:
        return Found(view, "object-store", frame)
    decoded: list[delta_arrow.ArrowCommit] = []
    commits: list[EncodedCommit] = []
    reach = view.offset
    upto = bound
    for _ in range(2):
        try:
            for archived in files.archives_between(view.version, upto):
                commit = EncodedCommit(archived.version, archived.timestamp_ms, archived.value)
                try:
                    decoded.append(delta_arrow.decode(commit))
                except DecodeError as exc:
                    raise CorruptArchive(f"undecodable commit at version {archived.version}") from exc
                commits.append(commit)
            reach = upto  # the archives cover every offset up to it (ArchiveGap otherwise)
            break
        except ArchiveGap as exc:
            if exc.covered_upto <= view.offset:
                break
            upto = exc.covered_upto  # as far as the archives go; Kafka only after them
        except (CorruptArchive, OSError):
            decoded, commits = [], []  # the rest comes from Kafka
            break
    reach = max(reach, commits[-1].version if commits else view.offset)
    # a lean view takes the commits as decoded above; a full one re-decodes them to Segments
    caught_up = (
        view.apply_decoded(decoded, offset=reach) if lean else view.apply_encoded(commits, offset=reach)
    )
    return Found(caught_up, "object-store", frame, tuple(commits))


APPEND = "APPEND"


def from_next_keyframe(files: TableFiles, bound: int) -> Found | None:
    """Version ``bound`` from the oldest key frame after it, when only appends lie between.

    A protocol-2 APPEND only adds segments, so the table at ``bound`` is that frame less the rows
    added after ``bound``: time travel then reads one frame and the archive's operation column,
    and decodes no commit. None when that does not hold (then ``from_object_store`` answers).
    """
    try:
        listed = files.keyframe_versions()
        later = [v for v in listed if v > bound]
        if not later:
            return None
        upto = later[0]
        after = max((v for v in listed if v <= bound), default=-1)
        archived = list(files.commit_heads_between(after, upto))
        upto_bound = [c for c in archived if c.version <= bound]
        if not upto_bound or any(c.operation != APPEND for c in archived if c.version > bound):
            return None
        frame = files.read_keyframe(upto, lean=True)
    except (ArchiveGap, CorruptArchive, CorruptKeyFrame, OSError) as exc:
        log.info("no later key frame answers", extra={"table": files.name.qualified, "reason": str(exc)})
        return None
    header = keyframe.header(frame)
    if header.protocol.version < 2:
        return None  # protocol 1 accepted APPENDs carrying table properties or a schema
    versions.check_supported(header.protocol, files.name.qualified)
    last = upto_bound[-1]
    view = FrameView.from_keyframe(frame, lean=True).before_appends(
        bound, last.version, last.timestamp_ms, header.column_types
    )
    return Found(view, "object-store", frame, (), exact_image=False)


def full_view(
    found: Found, tail: Sequence[CommitDelta], files: TableFiles | None, offset: int
) -> FrameView | None:
    """The full view (with ``segment_avro``) at ``offset`` of what ``found`` + ``tail`` answered,
    rebuilt from the same key frame and commits, read whole from object storage when ``found``
    holds a lean one (Redis' copy, or a lean Parquet read). None when that frame cannot be had."""
    start = found.keyframe
    if start is not None and start.lean:
        start = _whole(start, files)
    if start is None:
        return None
    base = FrameView.from_keyframe(start)
    if not found.exact_image:
        header = keyframe.header(start)
        frame = found.frame
        return base.before_appends(frame.offset, frame.version, frame.timestamp_ms, header.column_types)
    caught_up = base.apply_encoded(found.commits, offset=max(base.offset, found.frame.offset))
    return caught_up.apply(tail, offset=offset)


def _whole(lean: keyframe.KeyFrame, files: TableFiles | None) -> keyframe.KeyFrame | None:
    """The whole key frame behind a lean one: the same frame when it holds no segments (the empty
    table, version -1, which object storage never gets), else object storage's copy; None when
    that cannot be had (e.g. a Redis frame rebuilt at a version object storage never got)."""
    empty = keyframe.widened(lean)
    if empty is not None or files is None:
        return empty
    try:
        return files.read_keyframe(lean.version)
    except (FileNotFoundError, CorruptKeyFrame, OSError):
        return None


def judging_image(found: Found, table: str) -> TableState:
    """The image the rules need at ``found.frame.offset``: the key frame's (light) + the deltas.

    Only accepted commits change what the rules look at, so this judges the next record
    exactly as a replay from offset 0 would.
    """
    if not found.exact_image:
        raise ValueError("a view cut back from a later key frame has no image for the rules")
    state = keyframe.light_state(found.keyframe) if found.keyframe is not None else TableState(table)
    for delta in found.deltas():
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
