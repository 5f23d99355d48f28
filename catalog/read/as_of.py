"""Broker times as people write them: epoch milliseconds or ISO-8601 (the CLI and the HTTP API)."""

from __future__ import annotations

import datetime as dt
import re

_INTEGER = re.compile(r"[+-]?[0-9]+")


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
