"""The reader façade: ``Catalog(config).table("ns.t").snapshot(...)``.

This issue's readers replay the topic; the materializer's fast paths (Redis, key frames
on object storage) slot in front of the same replay later, as fallbacks in order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from catalog import lookup
from catalog.config import Config
from catalog.errors import VersionNotFound
from catalog.keyframe import KeyFrame
from catalog.logreader import LogReader
from catalog.model import Commit
from catalog.names import TableName, table_name
from catalog.objectstore import ObjectStore
from catalog.redis_store import RedisStore
from catalog.replay import Applied, Listener, replay
from catalog.rules import Outcome
from catalog.snapshot import Snapshot, SnapshotDiff
from catalog.state import TableState
from catalog.table_files import TableFiles
from catalog.topics import DEFAULT_MAX_MESSAGE_BYTES, TopicAdmin, TopicInfo
from catalog.watch import Watcher


@dataclass(frozen=True)
class HistoryEntry:
    version: int
    timestamp_ms: int
    commit: Commit


class Catalog:
    """Entry point for readers and tools: tables by name, created or opened."""

    def __init__(self, config: Config | None = None, *, use_redis: bool = True) -> None:
        self.config = config or Config.load()
        self._admin: TopicAdmin | None = None
        self.redis = RedisStore.from_config(self.config) if use_redis else None
        self.store = ObjectStore.from_config(self.config)

    @property
    def admin(self) -> TopicAdmin:
        if self._admin is None:
            self._admin = TopicAdmin(self.config)
        return self._admin

    def create_table(
        self, name: str | TableName, *, max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    ) -> Table:
        parsed = table_name(name)
        info = self.admin.create(parsed, max_message_bytes=max_message_bytes)
        return self._open(info)

    def table(self, name: str | TableName) -> Table:
        """Open an existing table; refuses a misconfigured topic before anything is read."""
        parsed = table_name(name)
        return self._open(self.admin.describe(parsed))

    def _open(self, info: TopicInfo) -> Table:
        return Table(self.config, info, redis=self.redis, files=TableFiles(self.store, info.name))

    def list_tables(self) -> list[TableName]:
        return self.admin.list_tables()

    def table_root(self, name: str | TableName) -> str:
        return table_root(self.config, table_name(name))


def table_root(config: Config, name: TableName) -> str:
    return f"{config.warehouse.rstrip('/')}/{name.namespace}/{name.table}"


class Table:
    """One table: snapshots at any version or time, history and diffs.

    Snapshots come from the first source that can answer: Redis (key frame + deltas),
    object storage (key frame + commit archives), then Kafka for whatever the
    materializer has not covered yet. Without Redis or object storage, answers are the
    same, only slower.
    """

    def __init__(
        self,
        config: Config,
        info: TopicInfo,
        *,
        redis: RedisStore | None = None,
        files: TableFiles | None = None,
    ) -> None:
        self.config = config
        self.info = info
        self.name = info.name
        self.root = table_root(config, info.name)
        self.redis = redis
        self.files = files

    def _reader(self) -> LogReader:
        return LogReader(self.config, self.name)

    def resolve_version(self, version: int | None = None, as_of_ms: int | None = None) -> int | None:
        """The offset bound to replay to: ``version``, the last record ≤ ``as_of_ms``, or None=head."""
        if version is not None and as_of_ms is not None:
            raise ValueError("give version or as_of, not both")
        if as_of_ms is None:
            if version is not None and version < -1:
                raise VersionNotFound(f"version {version} does not exist (the empty table is -1)")
            return version
        with self._reader() as reader:
            first_after = reader.offset_for_time(as_of_ms + 1)
            _, high = reader.watermarks()
        bound = (high if first_after is None else first_after) - 1
        return bound

    def state(
        self, version: int | None = None, as_of_ms: int | None = None, *, listener: Listener | None = None
    ) -> TableState:
        """Replay the whole log up to ``version`` / ``as_of_ms``; ``listener`` sees every record.

        The slow, always-correct path: what every faster source must agree with.
        """
        bound = self.resolve_version(version, as_of_ms)
        state = TableState(self.name.qualified)
        if bound is not None and bound < 0:
            return state
        with self._reader() as reader:
            end = None if bound is None else bound + 1
            replay(reader.read(0, end), state, upto=bound, listener=listener)
        return state

    def snapshot(
        self,
        version: int | None = None,
        as_of_ms: int | None = None,
        *,
        listener: Listener | None = None,
        sources: tuple[str, ...] = ("redis", "object-store", "kafka"),
    ) -> Snapshot:
        """The table at ``version`` (any offset) or as of a broker timestamp; default: the head.

        The head is the materialized head when Redis answers (milliseconds behind Kafka at
        most); otherwise the log's end. ``sources`` narrows the lookup chain (tests, tools).
        """
        bound = self.resolve_version(version, as_of_ms)
        if bound is not None and bound < 0:
            return Snapshot(TableState(self.name.qualified), self.root)
        if "redis" in sources and self.redis is not None:
            found = lookup.from_redis(self.redis, self.name.qualified, bound)
            if found is not None:
                return Snapshot(found.frame, self.root, origin=found.origin)
        start: KeyFrame | None = None
        stored: lookup.Found | None = None
        if "object-store" in sources and self.files is not None:
            stored, start = lookup.from_object_store(self.files, bound)
            if stored is not None and bound is not None and stored.frame.offset >= bound:
                return Snapshot(stored.frame, self.root, origin=stored.origin)
        if "kafka" not in sources:
            raise VersionNotFound(f"no source among {sources} can answer for {self.name}")
        if stored is None:
            return Snapshot(self.state(bound, listener=listener), self.root)
        with self._reader() as reader:
            tail, last = lookup.kafka_tail(reader, start, self.name.qualified, stored.frame.offset, bound)
        frame = stored.frame.apply(tail, offset=max(last, stored.frame.offset))
        return Snapshot(frame, self.root, origin="kafka" if tail else stored.origin)

    def head_offset(self) -> int:
        """The offset of the newest record (-1 for an empty topic)."""
        with self._reader() as reader:
            return reader.watermarks()[1] - 1

    def records(self, start: int = 0, end: int | None = None) -> Iterator[Applied]:
        """Every record from ``start`` with its verdict (accepted or not), in log order."""
        state = TableState(self.name.qualified)
        collected: list[Applied] = []
        with self._reader() as reader:
            replay(reader.read(0, end), state, listener=lambda applied, _: collected.append(applied))
        for applied in collected:
            if applied.verdict.offset >= start:
                yield applied

    def history(self) -> list[HistoryEntry]:
        """The accepted commits, oldest first."""
        return [
            HistoryEntry(a.verdict.offset, a.timestamp_ms, a.commit)
            for a in self.records()
            if a.verdict.outcome is Outcome.ACCEPTED and a.commit is not None
        ]

    def watch(self, from_version: int | None = None, *, poll_s: float = 0.5) -> Watcher:
        """Every accepted version after ``from_version`` (default: the current head), gap-free."""
        start = self.snapshot().version if from_version is None else from_version
        return Watcher(self.config, self.name, self.redis, self.files, start, poll_s=poll_s)

    def diff(self, from_version: int, to_version: int) -> SnapshotDiff:
        return self.snapshot(from_version).diff(self.snapshot(to_version))
