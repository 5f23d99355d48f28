"""Checks of the addresses a configuration holds: the Redis URL, the warehouse, the S3 endpoint.

Each is checked when the configuration is read, so a malformed one is a ``ConfigError`` naming
the setting instead of a client library's ValueError or ArrowInvalid later. These values can
hold credentials (``redis://user:password@host``), so no message here repeats any part of the
value that could be one: a message names the setting and what is wrong, never the text.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from segcat.catalog.errors import ConfigError

REDIS_SCHEMES = ("redis", "rediss", "unix")
_REDIS_STRING_OPTIONS = frozenset(
    {
        "client_name",
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_ciphers",
    }
)
"""redis-py connection options a URL may carry as plain text (the typed ones come from redis-py)."""
_DB = re.compile(r"/?([0-9]{1,9}/?)?")
_NAME = re.compile(r"[A-Za-z0-9_.]{1,64}")

CREDENTIALS_HINT = (
    "which do not belong in an address (addresses are printed in messages, and the warehouse is "
    "stored as every table's location): for S3 set AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY or use "
    "the AWS SDK's usual chain (profiles, instance roles)"
)


def check_redis_url(url: str, origin: str) -> str:
    """``url`` if redis-py can use it as written, else ``ConfigError`` naming ``origin``.

    redis-py raises a bare ValueError for a malformed host or port, silently ignores a database
    path that is not a number (connecting to database 0), and hands unknown query options to the
    connection, which fails with a TypeError at the first command.
    """
    scheme, sep, _ = url.partition("://")
    if not sep or scheme not in REDIS_SCHEMES:
        raise ConfigError(f"{origin} must start with redis://, rediss:// or unix://")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise ConfigError(
            f"{origin} is not a valid URL: its host or port is malformed (a port is a number from 1 to "
            "65535, an IPv6 address goes in brackets: redis://[::1]:6379/0)"
        ) from None
    if parts.fragment:
        raise ConfigError(f"{origin} must not have a '#' part (a '#' in a password is written %23)")
    if parts.scheme == "unix":
        if not parts.path:
            raise ConfigError(f"{origin} names no socket path (unix:///path/to/redis.sock)")
    else:
        if not parts.hostname:
            raise ConfigError(f"{origin} names no host (e.g. redis://127.0.0.1:6379/0)")
        if port == 0:
            raise ConfigError(f"{origin} has port 0; a port is a number from 1 to 65535")
        if parts.path and not _DB.fullmatch(unquote(parts.path)):
            raise ConfigError(f"{origin}'s path must be a database number (redis://host:6379/0)")
    _check_redis_options(parts.scheme, parts.query, origin)
    return url


def _check_redis_options(scheme: str, query: str, origin: str) -> None:
    if not query:
        return
    typed, known = _redis_options(scheme)
    try:
        options = parse_qs(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        raise ConfigError(f"{origin} has a malformed query string (name=value pairs joined by &)") from None
    for name, values in options.items():
        shown = repr(name) if _NAME.fullmatch(name) else "(not shown)"
        if name not in known:
            raise ConfigError(
                f"{origin} has the option {shown}, which redis-py does not take in a {scheme}:// URL "
                f"(known: {', '.join(sorted(known))})"
            )
        parse = typed.get(name)
        if parse is not None:
            try:
                parse(values[0])
            except (TypeError, ValueError):
                raise ConfigError(f"{origin} has an invalid value for {shown}") from None


def _redis_options(scheme: str) -> tuple[dict[str, Callable[[str], Any]], frozenset[str]]:
    """(redis-py's parsers of typed URL options, every option a ``scheme`` URL may carry as text).

    redis-py passes a URL's options to the connection class of the scheme, which refuses one it
    does not take (``ssl_*`` on a plain connection, ``socket_keepalive`` on a unix socket) with a
    TypeError at the first command; so the options are the textual ones that class's constructor
    takes. redis-py is imported only when a URL has options.
    """
    from redis import connection as rc

    cls = {"redis": rc.Connection, "rediss": rc.SSLConnection, "unix": rc.UnixDomainSocketConnection}[scheme]
    taken = {"max_connections"}  # the pool's own
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is not None:
            taken.update(inspect.signature(init).parameters)
    typed = dict(rc.URL_QUERY_ARGUMENT_PARSERS)
    return typed, frozenset(taken & ({*typed} | _REDIS_STRING_OPTIONS))


def check_warehouse(warehouse: str, origin: str) -> str:
    """``warehouse`` (a directory or a URI) if it names a place without credentials.

    A URI's user part is refused for every scheme: for ``s3://`` the host part is the bucket, so
    ``s3://KEY:secret@bucket/x`` named an invalid bucket and pyarrow's error printed the secret.
    """
    if "://" not in warehouse:
        return warehouse
    try:
        parts = urlsplit(warehouse)
        parts.port  # noqa: B018 (parsing the port is the check)
    except ValueError:
        raise ConfigError(f"{origin} is not a valid URI: its host or port is malformed") from None
    if "@" in parts.netloc:
        raise ConfigError(f"{origin} holds credentials, {CREDENTIALS_HINT}")
    if parts.scheme.lower() in ("s3", "s3a") and (not parts.netloc or ":" in parts.netloc):
        raise ConfigError(
            f"{origin} names no bucket (s3://bucket/prefix; the server's address goes in SEGCAT_S3_ENDPOINT)"
        )
    return warehouse


def check_endpoint(endpoint: str, origin: str) -> str:
    """An S3 endpoint override (``host:port`` or ``http(s)://host:port``), without credentials."""
    text = endpoint if "://" in endpoint else f"http://{endpoint}"
    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018
    except ValueError:
        raise ConfigError(f"{origin} is not a valid endpoint: its host or port is malformed") from None
    if "@" in parts.netloc:
        raise ConfigError(f"{origin} holds credentials, {CREDENTIALS_HINT}")
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{origin} must be host:port or http(s)://host:port")
    return endpoint


def check_bootstrap_servers(servers: str, origin: str) -> str:
    """``host:port[,host:port...]`` as librdkafka reads it; a user part would only be echoed back in
    every "Kafka did not answer" message (SASL credentials go in SEGCAT_KAFKA_SASL_*)."""
    if "@" in servers:
        raise ConfigError(
            f"{origin} holds an '@': Kafka addresses carry no credentials; set SEGCAT_KAFKA_SASL_USERNAME "
            "and SEGCAT_KAFKA_SASL_PASSWORD (with SEGCAT_KAFKA_SECURITY_PROTOCOL) instead"
        )
    return servers
