"""Prune a table's Kafka log from the beginning of its timeline (docs/PROTOCOL.md §3c).

Kafka refuses ``DeleteRecords`` on a compacted topic, so pruning works with the log cleaner:
a null-value record for every key at or before the prune point P lets compaction remove
them, and a ``SET_PROPERTIES`` of ``segcat.log.start = P + 1`` tells every image where Kafka
starts. P is at most the newest key frame whose commit archives cover every offset ≤ P, so
each pruned version stays readable from object storage, and no newer than retention allows.

A null record for key K removes *every* earlier record with key K, those after P too; so a
key that also appears after P (a rejected commit retried under the same id, a resend) gets
no null: compaction already removes its earlier records, its latest one survives.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from segcat.catalog.config import Config
from segcat.catalog.log import producer
from segcat.catalog.log.reader import LogReader
from segcat.catalog.protocol import lifecycle
from segcat.catalog.protocol.names import TableName
from segcat.catalog.read.retention import check_duration, check_retain_versions
from segcat.catalog.storage.table_files import TableFiles


@dataclass(frozen=True)
class PrunePlan:
    """What a prune would do: cut the log up to ``prune_point`` (inclusive), and why there."""

    table: str
    log_start: int
    """The first version in Kafka before this prune."""
    prune_point: int
    """The last offset pruned; ``log_start - 1`` when there is nothing to prune."""
    limit: str
    """What bounded the prune point: key frames, tags, retain-versions, retain-age or nothing to do."""
    nulls: tuple[bytes, ...] = ()
    """The keys that get a null record (every key ≤ P without a record after P)."""
    kept_keys: tuple[bytes, ...] = field(default=())
    """Keys ≤ P that also appear after P: no null (their later record must survive)."""

    @property
    def prunes(self) -> bool:
        return self.prune_point >= self.log_start


@dataclass(frozen=True)
class PruneResult:
    plan: PrunePlan
    marker_version: int | None
    """The version of the ``segcat.log.start`` commit (None: dry run or nothing to do)."""


def check_retention(retain_versions: int | None, retain_age_ms: int | None) -> None:
    """``InvalidArgument`` for retention values that cannot be meant."""
    if retain_versions is not None:
        check_retain_versions(retain_versions)
    if retain_age_ms is not None:
        check_duration(retain_age_ms, "retain-age")


def prunable_upto(files: TableFiles) -> int:
    """The newest key frame version whose archives cover every offset up to it (-1: none)."""
    covered = files.archived_upto()
    if covered < 0:
        return -1
    frame = files.newest_valid_keyframe(at_most=covered)
    return -1 if frame is None else frame.version


def plan_prune(
    config: Config,
    name: TableName,
    files: TableFiles,
    log_start: int,
    *,
    retain_versions: int | None = None,
    retain_age_ms: int | None = None,
    now_ms: int | None = None,
    keep_from: int | None = None,
) -> PrunePlan:
    """Where the log can be cut now, and the keys that need a null record.

    ``keep_from``: the oldest version that must stay in Kafka (the oldest tagged version:
    the log start never passes a tag, docs/LIFECYCLE.md).
    """
    check_retention(retain_versions, retain_age_ms)
    bound, limit = prunable_upto(files), "key frames"
    if keep_from is not None and keep_from - 1 < bound:
        bound, limit = keep_from - 1, "tags"
    with LogReader(config, name) as reader:
        end = reader.watermarks()[1] - 1
        if retain_versions is not None and end - retain_versions < bound:
            bound, limit = end - retain_versions, "retain-versions"
        if retain_age_ms is not None:
            now = int(time.time() * 1000) if now_ms is None else now_ms
            first_young = reader.offset_for_time(max(now - retain_age_ms, 0))
            if first_young is not None and first_young - 1 < bound:
                bound, limit = first_young - 1, "retain-age"
        if bound < log_start:
            why = (
                "no key frame covered by commit archives yet (the materializer writes them)"
                if limit == "key frames" and bound < 0
                else f"{limit} keeps everything from offset {log_start} on"
            )
            return PrunePlan(name.qualified, log_start, log_start - 1, why)
        before: dict[bytes, None] = {}
        after: set[bytes] = set()
        for record in reader.read(log_start):
            if record.key is None:
                continue
            if record.offset <= bound:
                if record.value is not None:
                    before[record.key] = None
            else:
                after.add(record.key)
    nulls = tuple(k for k in before if k not in after)
    kept = tuple(k for k in before if k in after)
    return PrunePlan(name.qualified, log_start, bound, limit, nulls, kept)


def write_nulls(config: Config, name: TableName, keys: tuple[bytes, ...]) -> None:
    """Produce a null-value record for each key (the shared idempotent producer, acks=all) and
    wait for all; the typed error of the first that failed."""
    producer.write_nulls(config, name, keys)


def marker_properties(plan: PrunePlan) -> dict[str, str | None]:
    return {lifecycle.LOG_START_PROPERTY: str(plan.prune_point + 1)}
