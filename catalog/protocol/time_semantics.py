"""What a time comparison means in one Spark session: its time zone and each timestamp column's kind.

Spark compares a few combinations through a wall clock (docs/PROTOCOL.md §4a, "Time zones"):
a DATE with a TIMESTAMP (the date's midnight *in the session's zone*), a TIMESTAMP with a
string without an offset (read in the session's zone), a TIMESTAMP_NTZ with a TIMESTAMP (the
wall clock read in the session's zone), a TIMESTAMP_NTZ with a string (its offset ignored).
Segment stats hold a TIMESTAMP column as microseconds: an instant for TIMESTAMP, the wall
clock as if it were UTC for TIMESTAMP_NTZ; they do not say which. ``Semantics`` says what a
reader knows: the session's zone and, when the caller has the table's schema, which columns
are TIMESTAMP_NTZ. What it does not know, pruning covers both ways (see ``expressions``).

A wall clock w in a zone is the instant ``w - offset`` for one of the UTC offsets the zone
uses near w (a gap or an overlap at a transition makes that choice; which one is Java's
business): ``offsets`` gives the smallest and the largest offset a zone uses within four days
of a moment, which bounds every such choice. Offsets come from the IANA database Python
reads (``zoneinfo``); a zone name Python does not know is bounded by ±18 hours, the widest
offset Java allows.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

UTC_ZONE = "UTC"
HOUR_US = 3_600_000_000
DAY_US = 24 * HOUR_US
WIDEST_OFFSET_US = 18 * HOUR_US
"""Java's ``ZoneOffset`` range: no zone is further from UTC."""

_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_NEAR_US = 4 * DAY_US
"""How far around a moment the offsets in force are gathered (more than any offset and a gap)."""
_UTC_NAMES = frozenset({"UTC", "Z", "GMT", "UT", "ETC/UTC", "ETC/GMT", "ZULU", "UCT", "UNIVERSAL"})
_OFFSET = re.compile(r"(?:UTC|GMT|UT)?([+-])(\d{1,2})(?::?(\d{2}))?(?::?(\d{2}))?")
_SAMPLES = range(-_NEAR_US, _NEAR_US + 1, HOUR_US // 2)
_FIRST_US = -62_135_596_800_000_000 + 2 * _NEAR_US  # 0001-01-01 plus room for the samples
_LAST_US = 253_402_300_799_999_999 - 2 * _NEAR_US  # 9999-12-31 minus room for the samples


class TimestampKind(Enum):
    """A TIMESTAMP stats column as Spark types it."""

    INSTANT = "timestamp"
    """Spark's TIMESTAMP (with local time zone): stats are instants."""
    WALL = "timestamp_ntz"
    """Spark's TIMESTAMP_NTZ: stats are the wall clock, written as if it were UTC."""


@dataclass(frozen=True)
class Semantics:
    """The session a predicate is evaluated in (default: the protocol's, UTC, kinds unknown)."""

    time_zone: str = UTC_ZONE
    """Spark's ``spark.sql.session.timeZone``."""
    timestamp_kinds: Mapping[str, TimestampKind] = field(default_factory=dict)
    """Known kinds of TIMESTAMP columns, by lower-cased name (Spark resolves names so)."""

    def kind(self, column: str) -> TimestampKind | None:
        """The column's kind, None when unknown (pruning then allows for both)."""
        return self.timestamp_kinds.get(column.lower())

    @property
    def utc(self) -> bool:
        return zone_offsets(self.time_zone) is None

    def offsets(self, around_us: int) -> tuple[int, int]:
        """(smallest, largest) UTC offset in µs the zone uses within four days of ``around_us``."""
        fixed = zone_offsets(self.time_zone)
        if fixed is None:
            return (0, 0)
        if isinstance(fixed, tuple):
            return fixed
        return _offsets_near(fixed, min(max(around_us, _FIRST_US), _LAST_US) // HOUR_US)


PROTOCOL = Semantics()
"""The meaning the protocol gives predicates (tombstones): UTC, the timestamp kinds unknown."""


@lru_cache(maxsize=256)
def zone_offsets(name: str) -> ZoneInfo | tuple[int, int] | None:
    """None for UTC; a fixed offset as (offset, offset); else the zone (unknown: ±18 hours)."""
    text = name.strip()
    if text.upper() in _UTC_NAMES:
        return None
    fixed = _OFFSET.fullmatch(text.upper())
    if fixed is not None:
        sign, hours, minutes, seconds = fixed.groups()
        value = (int(hours) * 3600 + int(minutes or 0) * 60 + int(seconds or 0)) * 1_000_000
        value = -value if sign == "-" else value
        if abs(value) > WIDEST_OFFSET_US:
            return (-WIDEST_OFFSET_US, WIDEST_OFFSET_US)
        return None if value == 0 else (value, value)
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return (-WIDEST_OFFSET_US, WIDEST_OFFSET_US)


@lru_cache(maxsize=4096)
def _offsets_near(zone: ZoneInfo, hour: int) -> tuple[int, int]:
    center = hour * HOUR_US
    seen = set()
    for step in _SAMPLES:
        moment = _EPOCH + dt.timedelta(microseconds=center + step)
        offset = zone.utcoffset(moment.astimezone(zone))
        seen.add(0 if offset is None else offset // dt.timedelta(microseconds=1))
    return min(seen), max(seen)


def micros(value: dt.datetime) -> int:
    """Microseconds since the epoch of an aware datetime (a naive one is read as UTC), exact."""
    delta = (value if value.tzinfo else value.replace(tzinfo=dt.UTC)) - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def wall_micros(value: dt.datetime) -> int:
    """A datetime's wall clock, offset ignored, as microseconds since the epoch read as UTC."""
    return micros(value.replace(tzinfo=None))
