"""The one mapping of a failed write to a typed error, whatever record it was.

Every record a client produces (a data commit, a table's creation, drop, undrop or upgrade,
prune's null records and marker, purge's fence, the broker-clock record) fails the same way
for the same cause: a principal without the ACL gets ``NotAuthorized`` (exit code 6), wrong
credentials ``ConfigError``, a topic that is gone ``TableNotFound``, a record over the topic's
``max.message.bytes`` ``CommitTooLarge``, and everything else (timeouts, unreachable brokers,
too few in-sync replicas, a producer that stopped) ``ServiceUnavailable``, naming what to check.
Only ``ServiceUnavailable`` is worth sending the same record again (``retriable``): the others
are the broker's answer about this record and the next attempt would get it too.
"""

from __future__ import annotations

from confluent_kafka import KafkaError

from segcat.catalog.config import Config
from segcat.catalog.errors import CommitTooLarge, SegcatError, ServiceUnavailable, TableNotFound
from segcat.catalog.log import refusals
from segcat.catalog.log.topics import unreachable_hint

UNKNOWN_TOPIC_CODES = frozenset(
    {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC, KafkaError._UNKNOWN_PARTITION}
)
TOO_LARGE_CODES = frozenset({KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE})
TIMEOUT_CODES = frozenset({KafkaError._MSG_TIMED_OUT, KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT})
"""No answer in time: the broker may have appended the record all the same."""


def write_error(exc: BaseException | KafkaError | None, config: Config, doing: str) -> SegcatError:
    """The typed error of a write that failed with ``exc`` (None: no delivery report in time).

    ``doing`` says what was written where (``"writing commit <id> to <topic>"``); the message
    starts with it and says whether anything was written.
    """
    if isinstance(exc, SegcatError):
        return exc
    refused = refusals.refusal(exc, config, doing)
    if refused is not None:
        return refused
    err = refusals.kafka_error(exc)
    code = None if err is None else err.code()
    if err is not None and code in UNKNOWN_TOPIC_CODES:
        return TableNotFound(
            f"{doing}: Kafka has no such topic ({err.str()}); nothing was written. The table was "
            "deleted or never created (`segcat table list` shows the tables)"
        )
    if err is not None and code in TOO_LARGE_CODES:
        return CommitTooLarge(
            f"{doing}: the record is larger than the topic accepts (max.message.bytes; {err.str()}); "
            "nothing was written: split it into several commits"
        )
    if exc is None:
        what = f"no delivery report within {config.request_timeout_s:g} s (timed out)"
    else:
        what = err.str() if err is not None else str(exc)
    if exc is None or code in TIMEOUT_CODES:
        what += " (the record may or may not be in the log)"
    return ServiceUnavailable(f"{doing} failed: {what}; {unreachable_hint(config)}")


def retriable(error: SegcatError) -> bool:
    """Whether sending the very same record again may succeed (an outage, not an answer)."""
    return isinstance(error, ServiceUnavailable)
