"""The options of one ``segcat`` read, parsed and checked once on the driver.

Spark hands options over lower-cased and as strings; ``SourceOptions`` keeps plain values so
it pickles to every process, and refuses a misspelt or misplaced option with a typed error
naming it (an option silently ignored reads something else than the user asked).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from segcat import (
    Config,
    InvalidArgument,
    TableName,
    VersionNotFound,
)
from segcat.spark_integration.options import (
    SERVICE_OPTIONS,
    config_from_options,
    is_service_option,
    lower_keys,
)

ROW_STREAM_OPTIONS = (
    "startingTimestamp",
    "maxFilesPerTrigger",
    "maxBytesPerTrigger",
    "maxRowsPerTrigger",
    "skipChangeCommits",
    "ignoreDeletes",
    "failOnDataLoss",
)
"""The options only the rows stream takes (``row_stream``)."""
VIEWS = ("rows", "versions", "segments")

if TYPE_CHECKING:
    from segcat.spark_integration.version_follower import VersionFollower

DEFAULT_KAFKA_CHECK_MS = 1000

_COMMON_OPTIONS = ("table", "path", "startingVersion", "view")
_STREAM_OPTIONS = (
    "maxVersionsPerTrigger",
    "latestFrom",
    "kafkaCheckIntervalMs",
    *ROW_STREAM_OPTIONS,
)
_BATCH_OPTIONS = ("endingVersion", "versionAsOf", "timestampAsOf")
_CHANGE_FEED_COMMON = ("readChangeFeed", "startingTimestamp", "failOnDataLoss")
_CHANGE_FEED_STREAM = ("maxFilesPerTrigger", "maxBytesPerTrigger")
_CHANGE_FEED_BATCH = ("endingTimestamp",)


@dataclass(frozen=True)
class SourceOptions:
    """The parsed options of one ``segcat`` read (plain values: pickles everywhere)."""

    table: str
    raw: Mapping[str, str]

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        opts = lower_keys(options)
        table = opts.get("table") or opts.get("path")
        if not table:
            # toTable() lands here: Spark hands a Python data source neither the catalog table's
            # name nor its OPTIONS, so only load(name) / start(name) / option("table") can say it
            raise InvalidArgument(
                'the segcat source needs its table: .load("<namespace>.<table>"), '
                '.start("<namespace>.<table>") or .option("table", "<namespace>.<table>") '
                "(writeStream.toTable() cannot pass it to a Python data source: use .start(name))"
            )
        TableName.parse(table)
        return cls(table, opts)

    def get(self, key: str) -> str | None:
        return self.raw.get(key.lower())

    def check(self, *, streaming: bool) -> None:
        """``InvalidArgument`` for an option this read does not take: a misspelt option was
        silently ignored (``startingVersoin`` read the whole history), and an option of the other
        kind of read (``endingVersion`` on a stream) would be too. Spark hands the keys over
        lower-cased, so they are compared so."""
        own: tuple[str, ...]
        other: tuple[str, ...]
        own, other = (_STREAM_OPTIONS, _BATCH_OPTIONS) if streaming else (_BATCH_OPTIONS, _STREAM_OPTIONS)
        if (self.get("readChangeFeed") or "").strip().lower() == "true":
            feed_own, feed_other = (
                (_CHANGE_FEED_STREAM, _CHANGE_FEED_BATCH)
                if streaming
                else (_CHANGE_FEED_BATCH, _CHANGE_FEED_STREAM)
            )
            own, other = (*own, *_CHANGE_FEED_COMMON, *feed_own), (*other, *feed_other)
        else:
            own = (*own, "readChangeFeed")
        known = {key.lower(): key for key in (*_COMMON_OPTIONS, *own)}
        misplaced = {key.lower(): key for key in other}
        for key in self.raw:
            if key in known or is_service_option(key):
                continue
            if key in misplaced:
                applies = (
                    "a batch read (spark.read), not to a stream"
                    if streaming
                    else ("a stream (spark.readStream), not to a batch read")
                )
                raise InvalidArgument(f"option {misplaced[key]} of the segcat source applies to {applies}")
            names = {**known, **SERVICE_OPTIONS}
            close = difflib.get_close_matches(key, list(names), n=1)
            hint = f"; did you mean {names[close[0]]}?" if close else ""
            raise InvalidArgument(
                f"unknown option {key[:80]!r} of the segcat source{hint} "
                f"(it takes {', '.join(known.values())} and the segcat.* service options)"
            )

    def config(self) -> Config:
        return config_from_options(self.raw)

    @property
    def name(self) -> TableName:
        return TableName.parse(self.table)

    @property
    def view(self) -> str:
        """``rows`` (the default: the table's rows), ``versions`` or ``segments``."""
        view = (self.get("view") or "rows").strip().lower()
        if view not in VIEWS:
            raise InvalidArgument(f"view must be one of {', '.join(VIEWS)}, not {view[:40]!r}")
        return view

    def bool_option(self, key: str, default: bool) -> bool:
        raw = self.get(key)
        if raw is None or raw.strip() == "":
            return default
        text = raw.strip().lower()
        if text not in ("true", "false"):
            raise InvalidArgument(f"option {key} must be true or false, got {raw[:40]!r}")
        return text == "true"

    def int_option(self, key: str) -> int | None:
        raw = self.get(key)
        if raw is None or raw == "":
            return None
        try:
            return int(raw)
        except ValueError:
            raise InvalidArgument(f"option {key} must be an integer, got {raw[:40]!r}") from None

    def version_option(self, key: str) -> int | str | None:
        """An integer version, or a tag's name (resolved by the snapshot that reads it)."""
        raw = self.get(key)
        if raw is None or raw == "":
            return None
        text = raw.strip()
        if text.lstrip("+-").isdigit():
            return int(text)
        return text

    def starting_after(self, follower: VersionFollower) -> int:
        """The offset before the first version to emit (``startingVersion`` - 1)."""
        raw = (self.get("startingVersion") or "earliest").strip().lower()
        if raw == "earliest":
            return -1
        if raw == "latest":
            return follower.last_accepted()
        start = self.int_option("startingVersion")
        assert start is not None
        if start < 0:
            raise InvalidArgument(f"startingVersion must be ≥ 0, 'earliest' or 'latest', not {start}")
        end = follower.log_end()
        if start > end + 1:
            # Delta's answer too: a start past the latest version is refused, never waited for
            raise VersionNotFound(
                f"startingVersion {start} is past the head of {self.table} (its log ends at version "
                f"{end}; the next commit becomes version {end + 1} at the earliest): use "
                "startingVersion=latest to follow the commits after the head"
            )
        return start - 1

    @property
    def latest_from(self) -> str:
        """Where each trigger learns how far the log goes: ``redis`` (the materialized head) or ``kafka``."""
        raw = (self.get("latestFrom") or "redis").strip().lower()
        if raw not in ("redis", "kafka"):
            raise InvalidArgument(f"latestFrom must be 'redis' or 'kafka', not {raw[:40]!r}")
        return raw

    @property
    def kafka_check_s(self) -> float:
        """With ``latestFrom=redis``: ask Kafka's end too when Redis' head has not moved this long."""
        raw = self.int_option("kafkaCheckIntervalMs")
        value = DEFAULT_KAFKA_CHECK_MS if raw is None else raw
        if value < 0:
            raise InvalidArgument(f"kafkaCheckIntervalMs must be ≥ 0, not {value}")
        return value / 1000
