"""Kafka's refusals told apart from outages: a missing ACL or wrong credentials is not "retry later".

librdkafka reports an authorization failure as an error code on the request (or as a fatal
producer error) and a failed SASL handshake only through the client's ``error_cb`` while
requests time out. ``refusal`` turns the first kind into ``NotAuthorized`` naming the
principal; ``error_callback`` records the second kind so the timeout's error can name the
setting to fix (``credentials_hint``). Neither ever includes a password.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from confluent_kafka import KafkaError, KafkaException

from segcat.catalog.config import Config
from segcat.catalog.errors import ConfigError, NotAuthorized, SegcatError

log = logging.getLogger(__name__)

AUTHORIZATION_CODES = frozenset(
    {
        KafkaError.TOPIC_AUTHORIZATION_FAILED,
        KafkaError.GROUP_AUTHORIZATION_FAILED,
        KafkaError.CLUSTER_AUTHORIZATION_FAILED,
        KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
)
AUTHENTICATION_CODES = frozenset(
    {KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL}
)

_failures: dict[tuple[str, str], str] = {}
_lock = threading.Lock()


def _key(config: Config) -> tuple[str, str]:
    return config.bootstrap_servers, config.kafka.get("sasl.username", "")


def kafka_error(exc: BaseException | KafkaError | None) -> KafkaError | None:
    if isinstance(exc, KafkaError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def principal(config: Config) -> str:
    """Who Kafka sees us as, for messages: the SASL user (and where it was set)."""
    user = config.kafka.get("sasl.username")
    if user is None:
        return "the client's principal (no sasl.username is set)"
    return f"principal {user!r} ({config.kafka_origins.get('sasl.username', 'sasl.username')})"


def _origin(config: Config, key: str, env: str) -> str:
    return config.kafka_origins.get(key, env)


def credentials_message(config: Config, detail: str) -> str:
    if "ssl" in detail.lower() and "sasl" not in detail.lower():
        ca = _origin(config, "ssl.ca.location", "SEGCAT_KAFKA_SSL_CA_LOCATION")
        return (
            f"Kafka's TLS handshake failed ({detail}); check {ca} (the CA that signed the brokers' "
            "certificates) and that SEGCAT_BOOTSTRAP_SERVERS names a TLS listener"
        )
    return (
        f"Kafka refused the credentials of {principal(config)}: check "
        f"{_origin(config, 'sasl.password', 'SEGCAT_KAFKA_SASL_PASSWORD')} (and "
        f"{_origin(config, 'sasl.username', 'SEGCAT_KAFKA_SASL_USERNAME')}, "
        f"{_origin(config, 'sasl.mechanisms', 'SEGCAT_KAFKA_SASL_MECHANISMS')}); librdkafka said: {detail}"
    )


def refusal(exc: BaseException | KafkaError | None, config: Config, doing: str) -> SegcatError | None:
    """``NotAuthorized`` / ``ConfigError`` when ``exc`` is Kafka refusing us, else None."""
    err = kafka_error(exc)
    if err is None:
        return None
    code = err.code()
    if code in AUTHORIZATION_CODES:
        return NotAuthorized(
            f"Kafka refused {doing} to {principal(config)}: {err.str()}; nothing was written. The "
            "principal needs an ACL for it (docs/OPERATIONS.md lists what writers, readers and the "
            "materializer need), or use credentials that have one"
        )
    if code in AUTHENTICATION_CODES:
        return ConfigError(credentials_message(config, err.str()))
    return None


_REFUSED_MARKERS = ("invalid credentials", "authentication failed", "certificate verify failed")
"""A handshake the broker *refused* (wrong password, untrusted CA), as opposed to one the
listener does not speak (SASL against a plaintext listener: ``unreachable_hint`` covers it)."""


def _is_refused_handshake(err: KafkaError) -> bool:
    text = err.str().lower()
    return err.code() in AUTHENTICATION_CODES and any(m in text for m in _REFUSED_MARKERS)


def error_callback(config: Config) -> Callable[[KafkaError], None]:
    """An ``error_cb`` that remembers a failed handshake (logged once per bootstrap + user)."""
    key = _key(config)

    def on_error(err: KafkaError) -> None:
        if not _is_refused_handshake(err):
            log.debug("librdkafka: %s", err.str())
            return
        message = credentials_message(config, err.str())
        with _lock:
            first = key not in _failures
            _failures[key] = message
        if first:
            log.warning("%s", message)

    return on_error


def credentials_hint(config: Config) -> str | None:
    """The recorded handshake failure for this config's cluster and user, if any."""
    with _lock:
        return _failures.get(_key(config))


def raise_refusal(exc: BaseException | KafkaError | None, config: Config, doing: str) -> None:
    """Raise ``refusal(...)`` when there is one (call before turning ``exc`` into an outage)."""
    problem = refusal(exc, config, doing)
    if problem is not None:
        raise problem from (exc if isinstance(exc, BaseException) else None)


def raise_if_credentials_refused(config: Config, cause: BaseException | None = None) -> None:
    """Raise ``ConfigError`` (naming the setting) when a handshake with this cluster was refused.

    Call after serving the client's callbacks (``poll(0)``) so ``error_cb`` has run.
    """
    refused = credentials_hint(config)
    if refused is not None:
        raise ConfigError(refused) from cause
