"""Table identifiers and the topic names derived from them (docs/PROTOCOL.md §1).

Validation happens before any I/O, so a bad name can never become a topic, a path
under the warehouse, or a Redis key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from segcat.catalog.errors import InvalidTableName

TOPIC_PREFIX = "segcat."
_IDENTIFIER = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]{0,99}")
"""1-100 characters from ``A-Z a-z 0-9 _ -``, not starting with ``-`` (a name like ``-h`` or
``--help`` would read as an option on every command line that takes it)."""


def check_identifier(value: str, what: str = "identifier") -> str:
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        shown = value if isinstance(value, str) and len(value) <= 40 else f"{str(value)[:40]}…"
        raise InvalidTableName(
            f"invalid {what} {shown!r}: use 1-100 characters from A-Z a-z 0-9 _ -, not starting with -"
        )
    return value


@dataclass(frozen=True, slots=True, order=True)
class TableName:
    namespace: str
    table: str

    def __post_init__(self) -> None:
        check_identifier(self.namespace, "namespace")
        check_identifier(self.table, "table name")

    @classmethod
    def parse(cls, qualified: str) -> TableName:
        """Parse ``"<namespace>.<table>"``."""
        if not isinstance(qualified, str) or qualified.count(".") != 1:
            raise InvalidTableName(
                f"invalid table name {str(qualified)[:60]!r}: expected '<namespace>.<table>'"
            )
        namespace, table = qualified.split(".")
        return cls(namespace, table)

    @classmethod
    def from_topic(cls, topic: str) -> TableName:
        if not topic.startswith(TOPIC_PREFIX):
            raise InvalidTableName(f"topic {topic!r} is not a segcat table topic")
        return cls.parse(topic[len(TOPIC_PREFIX) :])

    @property
    def qualified(self) -> str:
        return f"{self.namespace}.{self.table}"

    @property
    def topic(self) -> str:
        return f"{TOPIC_PREFIX}{self.namespace}.{self.table}"

    def __str__(self) -> str:
        return self.qualified


def table_name(value: str | TableName) -> TableName:
    return value if isinstance(value, TableName) else TableName.parse(value)
