"""A ``Config`` carried as Spark data-source options, and back.

The ``segcat`` data source runs in Python processes Spark starts (planner and executors),
which see only the option strings, never the driver's objects. Everything a worker needs to
reach Kafka, Redis and the warehouse therefore travels as ``segcat.*`` options; options left
out fall back to the worker's own environment (``Config.load()``), as any segcat tool would.
Option keys holding credentials contain "password", so Spark redacts them in plans and logs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace

from segcat import Config, ConfigError
from segcat.catalog import urls

PREFIX = "segcat."
KAFKA_PREFIX = "segcat.kafka."

_FIELDS: dict[str, str] = {
    "bootstrap_servers": "segcat.bootstrapServers",
    "redis_url": "segcat.redisUrl",
    "warehouse": "segcat.warehouse",
    "request_timeout_s": "segcat.requestTimeoutS",
    "s3_endpoint": "segcat.s3Endpoint",
    "s3_region": "segcat.s3Region",
    "redis_username": "segcat.redisUsername",
    "redis_password": "segcat.redisPassword",
    "redis_cluster": "segcat.redisCluster",
}


def source_options(config: Config) -> dict[str, str]:
    """The options that make the ``segcat`` source reach the services ``config`` names."""
    out: dict[str, str] = {}
    for field_name, key in _FIELDS.items():
        value = getattr(config, field_name)
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif value is not None:
            out[key] = str(value)
    for key, value in config.kafka.items():
        out[f"{KAFKA_PREFIX}{key}"] = value
    return out


SERVICE_OPTIONS = {key.lower(): key for key in _FIELDS.values()}
"""The ``segcat.*`` option keys as Spark hands them over (lower-cased) → as written (``segcat.kafka.*``
aside)."""


def is_service_option(key: str) -> bool:
    """Whether ``key`` (lower-cased) is one of the ``segcat.*`` options ``config_from_options`` reads."""
    return key.startswith(KAFKA_PREFIX) or key in SERVICE_OPTIONS


def lower_keys(options: Mapping[str, str]) -> dict[str, str]:
    """Spark hands options over case-insensitively (lower-cased); compare them that way."""
    return {str(k).lower(): str(v) for k, v in options.items()}


def config_from_options(options: Mapping[str, str], base: Config | None = None) -> Config:
    """``base`` (default: the environment's config) overridden by the ``segcat.*`` options."""
    opts = lower_keys(options)
    config = base or Config.load()
    changes: dict[str, object] = {}
    for field_name, key in _FIELDS.items():
        raw = opts.get(key.lower())
        if raw is not None:
            changes[field_name] = _value(field_name, key, raw)
    kafka = {k[len(KAFKA_PREFIX) :]: v for k, v in opts.items() if k.startswith(KAFKA_PREFIX)}
    if kafka:
        changes["kafka"] = {**config.kafka, **kafka}
    return replace(config, **changes) if changes else config  # type: ignore[arg-type]


def _value(field_name: str, key: str, raw: str) -> object:
    """One option's value, checked as ``Config.load`` checks the same setting (``ConfigError``
    naming the option; never echoing an address, which may hold credentials)."""
    origin = f"option {key}"
    if field_name == "request_timeout_s":
        try:
            seconds = float(raw)
        except ValueError:
            raise ConfigError(f"{origin} must be a number of seconds, got {raw[:40]!r}") from None
        if not (math.isfinite(seconds) and 0.1 <= seconds <= 300.0):
            raise ConfigError(f"{origin} must be between 0.1 and 300 seconds, got {raw[:40]!r}")
        return seconds
    if field_name == "redis_cluster":
        text = raw.strip().lower()
        if text not in _TRUE | _FALSE:
            raise ConfigError(f"{origin} must be true or false, got {raw[:40]!r}")
        return text in _TRUE
    if not raw.strip() and field_name not in ("redis_username", "redis_password"):
        raise ConfigError(f"{origin} must not be empty")
    check = _CHECKS.get(field_name)
    return raw if check is None else check(raw, origin)


_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_CHECKS = {
    "bootstrap_servers": urls.check_bootstrap_servers,
    "redis_url": urls.check_redis_url,
    "warehouse": urls.check_warehouse,
    "s3_endpoint": urls.check_endpoint,
}
