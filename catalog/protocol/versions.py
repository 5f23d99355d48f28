"""Protocol versions and features: which rules a table's log is judged by (docs/PROTOCOL.md §3a).

A log starts at protocol 1 (the rules segcat had before versioning, rule 3b included) and
moves forward only through an accepted ``UPGRADE_PROTOCOL`` commit. Every party judges each
record by the protocol in force before it; one that meets a version or feature it does not
know stops there with ``UnsupportedProtocol`` instead of judging on with rules the writers did
not mean (Delta's reader/writer versions and table features work the same way).
"""

from __future__ import annotations

from segcat.catalog.errors import UnsupportedProtocol
from segcat.catalog.protocol.model import Protocol

LEGACY_VERSION = 1
"""Logs with no UPGRADE_PROTOCOL record: today's rules as they were before versioning."""

CURRENT_VERSION = 3
"""The newest protocol this code judges; new tables are created with it (docs/PROTOCOL.md §3a
lists what each version changed)."""

LIFECYCLE = "lifecycle"
"""Feature: write intents (``INTENT`` commits), log pruning (``segcat.log.start``) and dropping
tables (``segcat.dropped``), docs/PROTOCOL.md §3c."""

KNOWN_FEATURES: frozenset[str] = frozenset({LIFECYCLE})
"""Named features this code understands."""

FEATURE_MIN_VERSION: dict[str, int] = {LIFECYCLE: 2}
"""The protocol version from which each feature means something (docs/PROTOCOL.md §3b). A feature
named at a lower version is accepted by the rules (protocol 1 judged it so) but inert until the
table reaches that version; writers refuse to name it there (``inert_features``)."""

MAX_FEATURES = 64


def new_table_protocol() -> Protocol:
    return Protocol(CURRENT_VERSION, (LIFECYCLE,))


def has_lifecycle(protocol: Protocol) -> bool:
    """Whether a table at ``protocol`` has write intents, pruning and drop (feature ``lifecycle``)."""
    return protocol.version >= FEATURE_MIN_VERSION[LIFECYCLE] and LIFECYCLE in protocol.features


def inert_features(protocol: Protocol) -> tuple[str, ...]:
    """The features ``protocol`` names below the version that gives them meaning (docs/PROTOCOL.md
    §3b): ``{version 1, features [lifecycle]}`` is a valid upgrade whose feature does nothing."""
    return tuple(f for f in protocol.features if protocol.version < FEATURE_MIN_VERSION.get(f, 0))


def normalized(protocol: Protocol) -> Protocol:
    """The same protocol with its features sorted, as every image stores it."""
    return Protocol(protocol.version, tuple(sorted(protocol.features)))


def unsupported(protocol: Protocol) -> str | None:
    """Why this code cannot judge a log at ``protocol``, or None when it can."""
    if protocol.version > CURRENT_VERSION:
        return (
            f"protocol version {protocol.version} is newer than this segcat knows "
            f"(up to {CURRENT_VERSION}); upgrade segcat to read or write this table"
        )
    unknown = sorted(set(protocol.features) - KNOWN_FEATURES)
    if unknown:
        return (
            f"the table uses protocol feature(s) {', '.join(repr(f) for f in unknown[:5])} "
            "that this segcat does not know; upgrade segcat to read or write this table"
        )
    return None


def check_supported(protocol: Protocol, table: str, offset: int | None = None) -> None:
    """Raise ``UnsupportedProtocol`` when this code cannot judge a log at ``protocol``."""
    problem = unsupported(protocol)
    if problem is not None:
        at = "" if offset is None else f" from offset {offset}"
        raise UnsupportedProtocol(f"table {table}{at}: {problem}")
