"""The all-tables stream's cursor: ``@<start ms>;<table>=<version>,...``, bounded and kept small.

A cursor says: every table it names continues after its version; every other table after the
last version it had at the start time (broker time), a table created since from its first. It
names only the tables a stream delivered a version of, so it grows with the tables that move
while the stream lives. Two bounds keep one client from costing much: a cursor arriving from a
client is at most ``MAX_CURSOR`` bytes and ``MAX_TABLES`` tables (refused, typed, before any
broker call), and the cursor a stream sends is compacted (``rebase``) once it passes
``COMPACT_AT`` bytes, by moving the start time forward past the versions it names.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass

from segcat import InvalidArgument, TableName
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol.names import table_name

MAX_CURSOR = 64 * 1024
MAX_TABLES = 4096
COMPACT_AT = 8 * 1024
CLOCK_MARGIN_MS = 30_000
"""How far behind both the server's clock and the newest broker time delivered a new start time
lies: clocks of the server and the brokers may disagree by less than this."""
_VERSION = re.compile(r"-?[0-9]{1,19}")
MAX_JUDGED = 32
MAX_GAP = 1024
"""At most ``MAX_JUDGED`` tables per rebase, each with at most ``MAX_GAP`` records after its
named version, are judged to see whether none of those records was accepted."""


def version_arg(text: str, what: str) -> int:
    """A version as a client sends it (``-1`` .. ``2**63 - 2``); ``InvalidArgument`` otherwise."""
    if _VERSION.fullmatch(text) is None:
        raise InvalidArgument(f"{what} must be a version (an integer ≥ -1), not {text[:40]!r}")
    value = int(text)
    if not -1 <= value <= 2**63 - 2:
        raise InvalidArgument(f"{what} {value} is not a version")
    return value


@dataclass
class Cursor:
    start_ms: int
    positions: dict[str, int]

    @classmethod
    def parse(cls, text: str) -> Cursor:
        """``@T;ns.a=41,ns.b=7``; ``InvalidArgument`` naming what is wrong, or ``InvalidTableName``."""
        if len(text) > MAX_CURSOR:
            raise InvalidArgument(f"the event cursor is longer than {MAX_CURSOR} bytes")
        since, sep, named = text.partition(";")
        if not sep or not since.startswith("@"):
            raise InvalidArgument(
                "an event cursor is '@<start ms>;<table>=<version>,...' (as sent in the event ids)"
            )
        start_ms = version_arg(since[1:], "the cursor's start time")
        if start_ms < 0:
            raise InvalidArgument("the cursor's start time must be ≥ 0")
        parts = [part for part in named.split(",") if part]
        if len(parts) > MAX_TABLES:
            raise InvalidArgument(f"the event cursor names more than {MAX_TABLES} tables")
        positions: dict[str, int] = {}
        for part in parts:
            name, sep, version = part.partition("=")
            if not sep:
                raise InvalidArgument(f"the event cursor's part {part[:80]!r} is not table=version")
            qualified = table_name(name).qualified
            if qualified in positions:
                raise InvalidArgument(f"the event cursor names {qualified} twice")
            positions[qualified] = version_arg(version, f"the cursor's version of {qualified}")
        return cls(start_ms, positions)

    def text(self) -> str:
        return f"@{self.start_ms};" + ",".join(
            f"{name}={version}" for name, version in sorted(self.positions.items())
        )


@dataclass(frozen=True)
class Rebase:
    """A later start time, and the named tables (with the version named) it makes redundant."""

    start_ms: int
    redundant: dict[str, int]

    def apply(self, cursor: Cursor) -> None:
        """Move ``cursor`` to the new start, dropping each redundant name still at the version checked."""
        if self.start_ms <= cursor.start_ms:
            return
        cursor.start_ms = self.start_ms
        for name, version in self.redundant.items():
            if cursor.positions.get(name) == version:
                del cursor.positions[name]


def rebase(
    admin: TopicAdmin,
    names: list[TableName],
    cursor: Cursor,
    newest_ms: int,
    no_version_between: Callable[[str, int, int], bool],
    margin_ms: int = CLOCK_MARGIN_MS,
) -> Rebase | None:
    """A start time S' after the cursor's S that resumes exactly as the cursor does, or None.

    With S' a table the cursor does not name resumes after its version at S'; that is the same
    as after its version at S only if it has no record in (S, S'], so S' is refused if one does.
    A named table at version v may leave the cursor when its last record at or before S' is v
    (or every record after v up to there was not accepted: ``no_version_between``). S' lies
    ``margin_ms`` before both this server's clock and the newest broker time the stream
    delivered. Three ListOffsets requests; ``names`` are the catalog's tables now.
    """
    start = min(int(time.time() * 1000), newest_ms) - margin_ms
    if start <= cursor.start_ms or not names:
        return None
    positions = dict(cursor.positions)
    ends = admin.log_ends(names)  # before the lookups: a record after them is after S' too
    after_new = admin.first_offsets_after(names, start)
    after_old = admin.first_offsets_after(names, cursor.start_ms)
    redundant: dict[str, int] = {}
    judged = 0
    for name in names:
        qualified = name.qualified
        first = after_new[name]
        last_before = ends[name] if first is None else first - 1
        version = positions.get(qualified)
        if version is None:
            if after_old[name] != first:
                return None  # records between the two starts would be skipped
        elif version == last_before:
            redundant[qualified] = version
        elif version < last_before <= version + MAX_GAP and judged < MAX_JUDGED:
            judged += 1
            if no_version_between(qualified, version, last_before):
                redundant[qualified] = version
    return Rebase(start, redundant)
