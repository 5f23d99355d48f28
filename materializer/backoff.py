"""Back-off and log throttling, so one persistent fault costs a few log lines, not thousands.

A wrong Redis password or Kafka SASL secret fails every attempt the same way; logging each
attempt buries everything else (librdkafka alone logs many lines a second). Each fault has a
*cause*; a cause is logged at once, then at most once per back-off period, the period
doubling up to a cap, with the number of lines held back in ``suppressed``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

from redis.exceptions import AuthenticationError, NoPermissionError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from segcat.catalog.errors import ServiceUnavailable
from segcat.materializer import metrics

log = logging.getLogger("segcat.materializer")

Clock = Callable[[], float]

INITIAL_S = 1.0
MAX_S = 300.0


def backoff_delay(failures: int, initial_s: float = INITIAL_S, maximum_s: float = MAX_S) -> float:
    """The wait after ``failures`` consecutive failures (≥ 1): initial, doubling, capped."""
    return float(min(initial_s * 2 ** min(max(failures, 1) - 1, 40), maximum_s))


@dataclass
class _Cause:
    next_at: float
    period: float
    last_seen: float
    suppressed: int = 0


class Throttle:
    """Admit one event per cause per period; the period doubles while the cause keeps coming.

    A cause quiet for two periods starts over, so a fault that comes back is logged at once.
    """

    _MAX_CAUSES = 1_000

    def __init__(self, initial_s: float = INITIAL_S, maximum_s: float = MAX_S, clock: Clock = time.monotonic):
        self.initial_s = initial_s
        self.maximum_s = maximum_s
        self._clock = clock
        self._causes: dict[Hashable, _Cause] = {}
        self._lock = threading.Lock()

    def admit(self, cause: Hashable) -> int | None:
        """None: hold this one back. Otherwise log it, noting the returned number held back before."""
        now = self._clock()
        with self._lock:
            entry = self._causes.get(cause)
            if entry is None or now - entry.last_seen > 2 * entry.period:
                if len(self._causes) >= self._MAX_CAUSES:
                    self._causes.clear()
                self._causes[cause] = _Cause(now + self.initial_s, self.initial_s, now)
                return 0
            entry.last_seen = now
            if now < entry.next_at:
                entry.suppressed += 1
                return None
            entry.period = min(entry.period * 2, self.maximum_s)
            entry.next_at = now + entry.period
            held, entry.suppressed = entry.suppressed, 0
            return held

    def forget(self, cause: Hashable) -> None:
        with self._lock:
            self._causes.pop(cause, None)


_DIGITS = re.compile(r"\d+")


class ThrottleFilter(logging.Filter):
    """A logging filter for librdkafka's log lines: the same line (numbers aside) is throttled.

    confluent-kafka logs ``("%s [%s] %s", facility, client name, text)``; durations and
    counters inside the text vary from one attempt to the next, so digits are not part of
    the cause.
    """

    def __init__(self, throttle: Throttle | None = None) -> None:
        super().__init__()
        self.throttle = throttle or Throttle()

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        three = isinstance(args, tuple) and len(args) == 3
        text = f"{args[0]} {args[2]}" if three and isinstance(args, tuple) else str(record.msg)
        held = self.throttle.admit((record.levelno, _DIGITS.sub("#", text)[:300]))
        if held is None:
            return False
        if held:
            record.suppressed = held
        return True


# ---------------------------------------------------------------------------- Redis


def redis_cause(exc: BaseException) -> str:
    """``authentication`` (wrong password, missing permission), ``unavailable`` or ``error``."""
    seen: BaseException | None = exc
    chain: list[BaseException] = []
    while seen is not None and len(chain) < 8:
        chain.append(seen)
        seen = seen.__cause__ or seen.__context__
    for item in chain:
        text = str(item)
        if isinstance(item, AuthenticationError | NoPermissionError) or any(
            marker in text for marker in ("WRONGPASS", "NOAUTH", "NOPERM")
        ):
            return "authentication"
    if any(isinstance(item, ServiceUnavailable | RedisConnectionError | RedisTimeoutError) for item in chain):
        return "unavailable"
    return "error"


_REDIS_MAX_S = {"authentication": MAX_S, "unavailable": 10.0, "error": 60.0}
"""How long to wait at most before trying Redis again. An outage is retried often (readers
want the fast path back); credentials are fixed by a person, so those retries slow down."""

_REDIS_HINTS = {
    "authentication": "check SEGCAT_REDIS_USERNAME / SEGCAT_REDIS_PASSWORD and the user's ACL "
    "(it needs the catalog's keys, EVALSHA and PUBLISH)",
    "unavailable": "readers fall back to object storage and Kafka meanwhile; "
    "Redis is rebuilt when it is back",
    "error": "readers fall back to object storage and Kafka meanwhile",
}


class RedisGate:
    """One Redis for every table of a service, so one back-off for all of them.

    While the gate is closed no table talks to Redis (each one only marks itself for a
    rebuild); the first table to try after the wait finds out for everyone.
    """

    def __init__(self, initial_s: float = INITIAL_S, clock: Clock = time.monotonic) -> None:
        self.initial_s = initial_s
        self._clock = clock
        self._lock = threading.Lock()
        self._failures = 0
        self._retry_at = 0.0
        self._error: tuple[str, str] | None = None
        self._throttle = Throttle(initial_s)
        self.generation = 0
        """Counts failures: a service that sees it move knows Redis may have lost writes."""
        metrics.REDIS_AVAILABLE.set(1)

    def open(self) -> bool:
        return self._clock() >= self._retry_at

    @property
    def retry_at(self) -> float:
        """When the gate opens (the clock's time; in the past: open)."""
        return self._retry_at

    def failed(self, exc: BaseException, table: str) -> None:
        cause = redis_cause(exc)
        now = self._clock()
        with self._lock:
            self.generation += 1
            if now >= self._retry_at:  # the first failure of this round: wait longer
                self._failures += 1
                delay = backoff_delay(self._failures, self.initial_s, _REDIS_MAX_S[cause])
                self._retry_at = now + delay
            self._error = (cause, f"{type(exc).__name__}: {exc}")
            retry_in = max(self._retry_at - now, 0.0)
        metrics.REDIS_AVAILABLE.set(0)
        held = self._throttle.admit(cause)
        if held is not None:
            log.warning(
                "redis credentials refused; backing off"
                if cause == "authentication"
                else "redis unavailable; backing off",
                extra={
                    "table": table,
                    "cause": cause,
                    "error": f"{type(exc).__name__}: {exc}",
                    "retry_in_s": round(retry_in, 1),
                    "suppressed": held,
                    "hint": _REDIS_HINTS[cause],
                },
            )

    def succeeded(self) -> None:
        if self._error is None:
            return
        with self._lock:
            if self._error is None:
                return
            cause, _ = self._error
            failures, self._failures, self._retry_at, self._error = self._failures, 0, 0.0, None
        metrics.REDIS_AVAILABLE.set(1)
        self._throttle.forget(cause)
        log.info("redis available again", extra={"after_failures": failures})

    def status(self) -> dict[str, Any]:
        """For the health answer."""
        error = self._error
        if error is None:
            return {"ok": True}
        return {
            "ok": False,
            "cause": error[0],
            "error": error[1],
            "retry_in_s": round(max(self._retry_at - self._clock(), 0.0), 1),
        }
