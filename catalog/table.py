"""The reader façade: ``Catalog(config).table("ns.t").snapshot(...)``.

This issue's readers replay the topic; the materializer's fast paths (Redis, key frames
on object storage) slot in front of the same replay later, as fallbacks in order.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from catalog.config import Config
from catalog.errors import VersionNotFound
from catalog.logreader import LogReader
from catalog.model import Commit
from catalog.names import TableName, table_name
from catalog.replay import Applied, Listener, replay
from catalog.rules import Outcome
from catalog.snapshot import Snapshot, SnapshotDiff
from catalog.state import TableState
from catalog.topics import DEFAULT_MAX_MESSAGE_BYTES, TopicAdmin, TopicInfo


@dataclass(frozen=True)
class HistoryEntry:
    version: int
    timestamp_ms: int
    commit: Commit


class Catalog:
    """Entry point for readers and tools: tables by name, created or opened."""

    def __init__(self, config: Config | None = None) -> None:
        self.config = config or Config.load()
        self._admin: TopicAdmin | None = None

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
        return Table(self.config, info)

    def table(self, name: str | TableName) -> Table:
        """Open an existing table; refuses a misconfigured topic before anything is read."""
        parsed = table_name(name)
        return Table(self.config, self.admin.describe(parsed))

    def list_tables(self) -> list[TableName]:
        return self.admin.list_tables()

    def table_root(self, name: str | TableName) -> str:
        return table_root(self.config, table_name(name))


def table_root(config: Config, name: TableName) -> str:
    return f"{config.warehouse.rstrip('/')}/{name.namespace}/{name.table}"


class Table:
    """One table: snapshots at any version or time, history and diffs."""

    def __init__(self, config: Config, info: TopicInfo) -> None:
        self.config = config
        self.info = info
        self.name = info.name
        self.root = table_root(config, info.name)

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
        """Replay the table up to ``version`` / ``as_of_ms``; ``listener`` sees every record (progress)."""
        bound = self.resolve_version(version, as_of_ms)
        state = TableState(self.name.qualified)
        if bound is not None and bound < 0:
            return state
        with self._reader() as reader:
            end = None if bound is None else bound + 1
            replay(reader.read(0, end), state, upto=bound, listener=listener)
        return state

    def snapshot(
        self, version: int | None = None, as_of_ms: int | None = None, *, listener: Listener | None = None
    ) -> Snapshot:
        """The table at ``version`` (any offset) or as of a broker timestamp; default: head."""
        return Snapshot(self.state(version, as_of_ms, listener=listener), self.root)

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

    def diff(self, from_version: int, to_version: int) -> SnapshotDiff:
        return self.snapshot(from_version).diff(self.snapshot(to_version))
