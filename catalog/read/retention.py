"""The checks every retention argument goes through (prune, vacuum, history), in one place."""

from __future__ import annotations

from segcat.catalog.errors import InvalidArgument

MAX_DURATION_MS = 100 * 365 * 24 * 3600 * 1000
"""A century: anything longer is a mistake, not a retention."""
MAX_RETAIN_VERSIONS = 2**53


def check_duration(value: object, what: str) -> int:
    """``value`` if it is a duration in ms from 0 to 100 years; ``InvalidArgument`` naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_DURATION_MS:
        raise InvalidArgument(f"{what} must be a duration from 0 to 100 years, not {value!r} ms")
    return value


def check_retain_versions(value: object) -> int:
    """``value`` if it is a count of versions ≥ 1 (the head is always kept); ``InvalidArgument``."""
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_RETAIN_VERSIONS:
        raise InvalidArgument(
            f"retain-versions must be an integer ≥ 1 (the head is always kept), not {value!r}"
        )
    return value
