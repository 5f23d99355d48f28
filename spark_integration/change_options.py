"""The change feed's options (``readChangeFeed=true``), parsed and checked once on the driver.

Delta's names and meanings (its Change Data Feed): ``startingVersion`` / ``startingTimestamp``,
``endingVersion`` / ``endingTimestamp`` (batch), ``maxFilesPerTrigger`` (default 1,000) and
``maxBytesPerTrigger`` (stream, soft: whole versions), ``failOnDataLoss`` (default true).
A value that cannot mean anything is ``InvalidArgument`` naming the option.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from segcat import InvalidArgument
from segcat.catalog.read.as_of import as_of_ms
from segcat.spark_integration.read_options import SourceOptions

DEFAULT_MAX_FILES = 1000
"""Delta's default ``maxFilesPerTrigger``."""

NOT_FOR_THE_FEED = ("view", "versionAsOf", "timestampAsOf", "maxVersionsPerTrigger")
"""Options of the other views: with ``readChangeFeed=true`` they would be silently ignored."""
_BYTE_UNITS = {
    "": 1,
    "b": 1,
    "k": 2**10,
    "kb": 2**10,
    "m": 2**20,
    "mb": 2**20,
    "g": 2**30,
    "gb": 2**30,
    "t": 2**40,
    "tb": 2**40,
}
_BYTES = re.compile(r"^\s*(\d+)\s*([a-z]*)\s*$")


def is_change_feed(options: SourceOptions) -> bool:
    """Whether ``readChangeFeed`` is set to true (``InvalidArgument`` for a value not a boolean)."""
    return flag(options, "readChangeFeed", default=False)


def flag(options: SourceOptions, key: str, *, default: bool) -> bool:
    raw = options.get(key)
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise InvalidArgument(f"option {key} must be true or false, not {raw[:40]!r}")
    return value == "true"


def byte_size(options: SourceOptions, key: str) -> int | None:
    """A size as Spark writes one: bytes, or a number with k, m, g, t (binary units)."""
    raw = options.get(key)
    if raw is None or raw.strip() == "":
        return None
    found = _BYTES.match(raw.lower())
    if found is None or found.group(2) not in _BYTE_UNITS:
        raise InvalidArgument(f"option {key} must be a size such as 1048576, 512m or 1g, not {raw[:40]!r}")
    value = int(found.group(1)) * _BYTE_UNITS[found.group(2)]
    if value < 1:
        raise InvalidArgument(f"option {key} must be at least 1 byte")
    return value


def timestamp_ms(options: SourceOptions, key: str) -> int | None:
    """A timestamp option (ms since the epoch, or ISO-8601; a naive time is UTC) as ms."""
    raw = options.get(key)
    if raw is None or raw.strip() == "":
        return None
    text = raw.strip()
    try:
        value = as_of_ms(int(text) if text.isdigit() else text)
    except InvalidArgument as exc:
        raise InvalidArgument(f"option {key}: {exc}") from None
    assert value is not None
    return value


def version_option(options: SourceOptions, key: str) -> int | None:
    value = options.int_option(key)
    if value is not None and value < 0:
        raise InvalidArgument(f"option {key} must be a version ≥ 0, not {value}")
    return value


@dataclass(frozen=True)
class FeedOptions:
    """The change feed's own options (plain values: pickles everywhere)."""

    starting_version: int | None
    starting_latest: bool
    starting_ms: int | None
    ending_version: int | None
    ending_ms: int | None
    max_files: int
    max_bytes: int | None
    fail_on_data_loss: bool

    @classmethod
    def parse(cls, options: SourceOptions, *, streaming: bool) -> FeedOptions:
        for key in NOT_FOR_THE_FEED:
            if options.get(key) is not None:
                raise InvalidArgument(f"option {key} does not apply to the change feed (readChangeFeed=true)")
        raw_start = (options.get("startingVersion") or "").strip().lower()
        latest = raw_start == "latest"
        if raw_start == "earliest":
            raise InvalidArgument(
                "the change feed's startingVersion is a version or 'latest' (Delta's); "
                "for every change since the table's creation use startingVersion=0"
            )
        start = None if latest else version_option(options, "startingVersion")
        start_ms = timestamp_ms(options, "startingTimestamp")
        if (start is not None or latest) and start_ms is not None:
            raise InvalidArgument("give startingVersion or startingTimestamp, not both")
        end = version_option(options, "endingVersion")
        end_ms = timestamp_ms(options, "endingTimestamp")
        if end is not None and end_ms is not None:
            raise InvalidArgument("give endingVersion or endingTimestamp, not both")
        if not streaming:
            if latest:
                raise InvalidArgument(
                    "startingVersion=latest applies to a stream; a batch read needs a version"
                )
            if start is None and start_ms is None:
                raise InvalidArgument(
                    "a batch read of the change feed needs startingVersion or startingTimestamp "
                    "(endingVersion / endingTimestamp are optional: default the head)"
                )
        max_files = options.int_option("maxFilesPerTrigger")
        if max_files is not None and max_files < 1:
            raise InvalidArgument(f"option maxFilesPerTrigger must be ≥ 1, not {max_files}")
        return cls(
            starting_version=start,
            starting_latest=latest,
            starting_ms=start_ms,
            ending_version=end,
            ending_ms=end_ms,
            max_files=DEFAULT_MAX_FILES if max_files is None else max_files,
            max_bytes=byte_size(options, "maxBytesPerTrigger"),
            fail_on_data_loss=flag(options, "failOnDataLoss", default=True),
        )
