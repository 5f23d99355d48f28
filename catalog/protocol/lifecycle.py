"""The rules of the ``lifecycle`` feature (docs/PROTOCOL.md §3c): write intents, pruning, drop.

Everything here is judged only on tables whose protocol has the feature; on other tables an
``INTENT`` or an ``intent`` field is INVALID and the reserved properties are plain text, as
they were before the feature existed (a log keeps its meaning).

- ``INTENT`` commits open, renew (``ttl_ms > 0``) or close (``ttl_ms == 0``) a write intent;
  a data commit carrying its intent (``ttl_ms == 0``) closes it when accepted.
- ``segcat.log.start`` (table property): the first version still in Kafka; set by a
  ``SET_PROPERTIES`` when the log is pruned, only ever forward.
- ``segcat.dropped`` (table property): the table is dropped (value: the drop time, ms);
  every later commit but the undrop (a ``SET_PROPERTIES`` removing it) is REJECTED.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from segcat.catalog.protocol import locations, versions
from segcat.catalog.protocol.model import Commit, Operation, Protocol

LOG_START_PROPERTY = "segcat.log.start"
DROPPED_PROPERTY = "segcat.dropped"
RESERVED_PROPERTIES = frozenset({LOG_START_PROPERTY, DROPPED_PROPERTY})
MAX_INTENT_TTL_MS = 7 * 24 * 3600 * 1000
"""An intent lives at most a week without renewal (a writer renews every third of its TTL)."""

DATA_OPERATIONS = frozenset({Operation.APPEND, Operation.COMPACT, Operation.REPLACE, Operation.DELETE})
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_DECIMAL = re.compile(r"0|[1-9][0-9]{0,17}")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def has_feature(protocol: Protocol) -> bool:
    return versions.has_lifecycle(protocol)


def held_as_text(properties: Mapping[str, str]) -> tuple[str, ...]:
    """The reserved keys a table without the feature holds (set as plain text): from protocol 3 an
    upgrade that brings the feature refuses them, so a stray value never becomes a drop or a
    pruning point (docs/PROTOCOL.md §3b)."""
    return tuple(sorted(RESERVED_PROPERTIES.intersection(properties)))


def field_problem(commit: Commit) -> str | None:
    """Context-free rules for ``INTENT`` and the ``intent`` field (every protocol looks at these)."""
    intent = commit.intent
    if commit.operation is Operation.INTENT:
        if intent is None:
            return "INTENT carries no intent"
        if (
            commit.adds
            or commit.drops
            or commit.tombstones
            or commit.replace_scope
            or commit.table_properties
            or commit.schema is not None
            or commit.protocol is not None
        ):
            return "INTENT carries its intent (and commit info) only"
    elif intent is not None:
        if commit.operation not in DATA_OPERATIONS:
            return f"{commit.operation.value} may not carry an intent"
        if intent.ttl_ms != 0:
            return "a data commit closes its intent: intent.ttl_ms must be 0"
    if intent is None:
        return None
    if not _UUID.fullmatch(intent.intent_id):
        return f"intent.intent_id {intent.intent_id[:60]!r} is not a UUID in canonical lowercase form"
    if isinstance(intent.ttl_ms, bool) or not 0 <= intent.ttl_ms <= MAX_INTENT_TTL_MS:
        return f"intent.ttl_ms {intent.ttl_ms} is not in [0, {MAX_INTENT_TTL_MS}] (7 days)"
    return prefix_problem(intent.prefix)


def is_canonical_uuid(text: str) -> bool:
    return bool(_UUID.fullmatch(text))


def prefix_problem(prefix: str) -> str | None:
    """A prefix is spelled as a segment path is (relative, or an absolute URI), ending anywhere."""
    if not prefix or len(prefix) > 4096:
        return "intent.prefix is empty or longer than 4096 characters"
    if _CONTROL.search(prefix):
        return "intent.prefix contains control characters"
    trimmed = prefix.rstrip("/") or prefix
    if locations.is_absolute_uri(prefix):
        problem = locations.uri_problem(trimmed)
    else:
        problem = locations.relative_problem(trimmed)
    return None if problem is None else f"intent.prefix: {problem}"


def contextual_problem(
    protocol: Protocol, properties: dict[str, str], location: str | None, version: int, commit: Commit
) -> str | None:
    """Rule 2 checks needing S(o−1): the feature, forward-only log start, drop / undrop."""
    if not has_feature(protocol):
        if commit.operation is Operation.INTENT or commit.intent is not None:
            return "write intents need the table's protocol feature 'lifecycle' (segcat table upgrade)"
        return None
    intent = commit.intent
    if (
        intent is not None
        and locations.is_absolute_uri(intent.prefix)
        and (location is None or not locations.is_under(intent.prefix, location))
    ):
        return f"intent.prefix {intent.prefix[:200]!r} is not under the table's location"
    changes = commit.table_properties
    if LOG_START_PROPERTY in changes:
        value = changes[LOG_START_PROPERTY]
        if value is None or not _DECIMAL.fullmatch(value):
            return f"{LOG_START_PROPERTY} is a version (a decimal integer) and is never removed"
        current = log_start(protocol, properties)
        if not current < int(value) <= version + 1:
            return f"{LOG_START_PROPERTY} moves forward only, from {current} to at most {version + 1}"
    if DROPPED_PROPERTY in changes:
        value = changes[DROPPED_PROPERTY]
        if value is not None and not _DECIMAL.fullmatch(value):
            return f"{DROPPED_PROPERTY} is the drop time in ms (a decimal integer)"
        if value is not None and DROPPED_PROPERTY in properties:
            return "the table is already dropped"
        if value is not None and set(changes) != {DROPPED_PROPERTY}:
            return f"a drop ({DROPPED_PROPERTY}) changes nothing else"
    return None


def log_start(protocol: Protocol, properties: dict[str, str] | object) -> int:
    """The first version still in Kafka (0 until the log is pruned)."""
    if not has_feature(protocol) or not isinstance(properties, dict):
        return 0
    value = properties.get(LOG_START_PROPERTY)
    return int(value) if isinstance(value, str) and _DECIMAL.fullmatch(value) else 0


def is_dropped(protocol: Protocol, properties: object) -> bool:
    return has_feature(protocol) and isinstance(properties, dict) and DROPPED_PROPERTY in properties


def undrops(commit: Commit) -> bool:
    """Whether ``commit`` is an undrop: a SET_PROPERTIES removing ``segcat.dropped``."""
    return (
        commit.operation is Operation.SET_PROPERTIES
        and DROPPED_PROPERTY in commit.table_properties
        and commit.table_properties[DROPPED_PROPERTY] is None
    )
