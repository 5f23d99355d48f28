"""A ``Config`` carried as Spark data-source options, and back.

The ``segcat`` data source runs in Python processes Spark starts (planner and executors),
which see only the option strings, never the driver's objects. Everything a worker needs to
reach Kafka, Redis and the warehouse therefore travels as ``segcat.*`` options; options left
out fall back to the worker's own environment (``Config.load()``), as any segcat tool would.
Option keys holding credentials contain "password", so Spark redacts them in plans and logs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from segcat.catalog.config import Config

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
        if raw is None:
            continue
        if field_name == "request_timeout_s":
            changes[field_name] = float(raw)
        elif field_name == "redis_cluster":
            changes[field_name] = raw.strip().lower() in {"1", "true", "yes", "on"}
        else:
            changes[field_name] = raw
    kafka = {k[len(KAFKA_PREFIX) :]: v for k, v in opts.items() if k.startswith(KAFKA_PREFIX)}
    if kafka:
        changes["kafka"] = {**config.kafka, **kafka}
    return replace(config, **changes) if changes else config  # type: ignore[arg-type]
