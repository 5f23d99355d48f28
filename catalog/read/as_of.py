"""Broker times as people write them: the one ``as_of`` every API takes.

``AsOf`` is what ``Table.snapshot(as_of=...)``, ``si.read(as_of=...)`` and the Spark data
source accept; ``as_of_ms`` turns it into epoch milliseconds. ``parse_as_of`` reads the text
of the CLI's ``--as-of`` and the HTTP API's ``?as_of=`` (an integer there means milliseconds).
"""

from __future__ import annotations

import datetime as dt
import math
import numbers
import re

from segcat.catalog.errors import InvalidArgument
from segcat.catalog.protocol.time_semantics import micros

AsOf = int | float | dt.datetime | dt.date | str
"""A broker time: ms since the epoch, a datetime or date (naive = UTC) or an ISO-8601 string."""

_INTEGER = re.compile(r"[+-]?[0-9]+")


def as_of_ms(value: AsOf | None) -> int | None:
    """Milliseconds since the epoch from ms, a datetime or date (naive = UTC) or an ISO-8601 string.

    Fractional milliseconds are floored: a version's time is the broker's, in whole
    milliseconds, so "the last record at or before T" is the same for T and its floor (as
    pyiceberg's and Delta's time travel take any time). Anything else is ``InvalidArgument``.
    """
    if value is None:
        return None
    if isinstance(value, bool):
        raise InvalidArgument(f"as_of is a time, not {value!r}")
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        if not math.isfinite(value):
            raise InvalidArgument(f"as_of {value!r} is not a time (milliseconds since the epoch)")
        return math.floor(value)
    if isinstance(value, str):
        try:
            moment = dt.datetime.fromisoformat(value)
        except ValueError:
            raise InvalidArgument(
                f"as_of {value[:80]!r} is not an ISO-8601 time (e.g. 2024-01-01T12:00:00+00:00)"
            ) from None
    elif isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, dt.date):
        moment = dt.datetime.combine(value, dt.time(), tzinfo=dt.UTC)
    else:
        raise InvalidArgument(
            "as_of is milliseconds since the epoch, a datetime or an ISO-8601 string, "
            f"not {type(value).__name__}"
        )
    return micros(moment) // 1000


def parse_as_of(value: str) -> int:
    """Epoch milliseconds, or an ISO-8601 time (UTC when no zone is given); ``ValueError`` otherwise."""
    if _INTEGER.fullmatch(value) and len(value) <= 40:
        return int(value)
    try:
        parsed = dt.datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{value[:40]!r} is neither epoch milliseconds nor ISO-8601") from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return (parsed - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)
