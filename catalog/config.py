"""One configuration for every component, read from the environment and/or a TOML file.

Nothing about addresses, credentials or directories lives in code: a user's own cluster
is reached by setting ``SEGCAT_BOOTSTRAP_SERVERS`` / ``SEGCAT_REDIS_URL`` (or the TOML
file named by ``SEGCAT_CONFIG``), and any librdkafka setting passes through untouched.
"""

from __future__ import annotations

import math
import os
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from segcat.catalog import urls
from segcat.catalog.errors import ConfigError, InvalidArgument

_N = TypeVar("_N", int, float)

DEFAULT_BOOTSTRAP_SERVERS = "127.0.0.1:19092"
DEFAULT_REDIS_URL = "redis://127.0.0.1:16379/0"
"""Loopback addresses, where ``segcat stack up`` starts Kafka and Redis unless told otherwise."""

_KAFKA_ENV_PREFIX = "SEGCAT_KAFKA_"


@dataclass(frozen=True)
class Config:
    """Everything a component needs to reach Kafka, Redis and the warehouse."""

    bootstrap_servers: str
    redis_url: str
    warehouse: str
    home: Path
    """segcat's own directory (``SEGCAT_HOME``, default ``.segcat``): the default warehouse lives in it."""
    kafka: Mapping[str, str] = field(default_factory=dict)
    """librdkafka settings passed through untouched (security.protocol, sasl.*, ssl.*, …)."""
    replication_factor: int = 1
    min_insync_replicas: int = 1
    request_timeout_s: float = 30.0
    redis_username: str | None = None
    redis_password: str | None = None
    redis_cluster: bool = False
    """``redis_url`` names one node of a Redis Cluster: the client finds the others and routes by slot."""
    s3_endpoint: str | None = None
    """Endpoint override for ``s3://`` warehouses (MinIO, a test server); None = AWS."""
    s3_region: str | None = None
    keyframe_every_commits: int = 1_000
    """K: write a key frame after this many accepted commits ..."""
    keyframe_every_seconds: float = 60.0
    """T: ... or when the oldest commit not in a key frame is this old ..."""
    keyframe_every_bytes: int = 8 * 1024 * 1024
    """D: ... or when the deltas since the last key frame reach this many bytes ..."""
    keyframe_every_segments: int = 10_000
    """S: ... or when the segments they add reach max(S, live segments / 10), so a reader never
    applies a long tail of deltas after a bulk load (OPERATIONS.md, "Key frames")."""
    metrics_port: int = 9464
    metrics_addr: str = "127.0.0.1"
    """Where /metrics listens (0.0.0.0 inside a container)."""
    kafka_origins: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    """Where each ``kafka`` setting came from (an env var, a TOML key), for error messages."""

    @classmethod
    def load(
        cls,
        env: Mapping[str, str] | None = None,
        path: str | Path | None = None,
        overrides: Mapping[str, object] | None = None,
    ) -> Config:
        """Build the config: defaults < TOML file (``SEGCAT_CONFIG`` or ``path``) < environment
        < ``overrides`` (``segcat.load_catalog(**settings)``: the TOML keys, as Python values).

        Every value is checked here, so a typo or a wrong type fails at once with a
        ``ConfigError`` naming the variable, key or keyword, not later inside a client library.
        """
        env = os.environ if env is None else env
        toml_path = path or env.get("SEGCAT_CONFIG")
        data = read_toml(Path(toml_path)) if toml_path else {}
        src = SettingsSource(env, data, str(toml_path), overrides or {})
        _refuse_unknown_keywords(src.overrides)
        src.refuse_unknown(data, _TOP_KEYS, "")
        src.table("stack")  # the local stack's section (segcat.local_stack reads it)
        home = Path(src.text("SEGCAT_HOME", "home", ".segcat")).absolute()
        kafka_cfg, origins = src.kafka()
        redis_url = urls.check_redis_url(
            src.text("SEGCAT_REDIS_URL", "redis_url", DEFAULT_REDIS_URL),
            src.origin("SEGCAT_REDIS_URL", "redis_url"),
        )
        s3_endpoint = src.optional_text("SEGCAT_S3_ENDPOINT", "s3_endpoint")
        if s3_endpoint is not None:
            urls.check_endpoint(s3_endpoint, src.origin("SEGCAT_S3_ENDPOINT", "s3_endpoint"))
        return cls(
            bootstrap_servers=urls.check_bootstrap_servers(
                src.text("SEGCAT_BOOTSTRAP_SERVERS", "bootstrap_servers", DEFAULT_BOOTSTRAP_SERVERS),
                src.origin("SEGCAT_BOOTSTRAP_SERVERS", "bootstrap_servers"),
            ),
            redis_url=redis_url,
            warehouse=urls.check_warehouse(
                src.text("SEGCAT_WAREHOUSE", "warehouse", str(home / "warehouse")),
                src.origin("SEGCAT_WAREHOUSE", "warehouse"),
            ),
            home=home,
            kafka=kafka_cfg,
            kafka_origins=origins,
            replication_factor=src.integer("SEGCAT_REPLICATION_FACTOR", "replication_factor", 1, 1, 32767),
            min_insync_replicas=src.integer("SEGCAT_MIN_INSYNC_REPLICAS", "min_insync_replicas", 1, 1, 32767),
            request_timeout_s=src.number("SEGCAT_REQUEST_TIMEOUT_S", "request_timeout_s", 30.0, 0.1, 300.0),
            redis_username=src.optional_text("SEGCAT_REDIS_USERNAME", "redis_username"),
            redis_password=src.optional_text("SEGCAT_REDIS_PASSWORD", "redis_password"),
            redis_cluster=src.flag("SEGCAT_REDIS_CLUSTER", "redis_cluster", False),
            s3_endpoint=s3_endpoint,
            s3_region=src.optional_text("SEGCAT_S3_REGION", "s3_region"),
            keyframe_every_commits=src.integer(
                "SEGCAT_KEYFRAME_EVERY_COMMITS", "keyframe_every_commits", 1_000, 1, 2**31 - 1
            ),
            keyframe_every_seconds=src.number(
                "SEGCAT_KEYFRAME_EVERY_SECONDS", "keyframe_every_seconds", 60.0, 0.001, 365 * 86_400.0
            ),
            keyframe_every_bytes=src.integer(
                "SEGCAT_KEYFRAME_EVERY_BYTES", "keyframe_every_bytes", 8 * 1024 * 1024, 1, 2**63 - 1
            ),
            keyframe_every_segments=src.integer(
                "SEGCAT_KEYFRAME_EVERY_SEGMENTS", "keyframe_every_segments", 10_000, 1, 2**31 - 1
            ),
            metrics_port=src.integer("SEGCAT_METRICS_PORT", "metrics_port", 9464, 0, 65535),
            metrics_addr=src.text("SEGCAT_METRICS_ADDR", "metrics_addr", "127.0.0.1"),
        )

    def with_services(self, bootstrap_servers: str, redis_url: str) -> Config:
        """The same config pointed at other service addresses (test fixtures use this)."""
        return replace(self, bootstrap_servers=bootstrap_servers, redis_url=redis_url)

    def kafka_client_config(self) -> dict[str, str]:
        """Base librdkafka config: bootstrap servers plus the user's passthrough settings."""
        return {"bootstrap.servers": self.bootstrap_servers, **self.kafka}


_RESERVED_KAFKA_ENV = {"SEGCAT_KAFKA_VERSION"}
"""``SEGCAT_KAFKA_*`` variables that are segcat's own, not librdkafka settings (the local stack's)."""

_TOP_KEYS: tuple[str, ...] = (
    "home",
    "bootstrap_servers",
    "redis_url",
    "warehouse",
    "kafka",
    "stack",
    "replication_factor",
    "min_insync_replicas",
    "request_timeout_s",
    "redis_username",
    "redis_password",
    "redis_cluster",
    "s3_endpoint",
    "s3_region",
    "keyframe_every_commits",
    "keyframe_every_seconds",
    "keyframe_every_bytes",
    "keyframe_every_segments",
    "metrics_port",
    "metrics_addr",
)


KEYWORDS = tuple(key for key in _TOP_KEYS if key != "stack")
"""The settings a program may give as keywords (``Config.load(overrides=...)``); ``[stack]``
belongs to the local stack, which reads only the environment and the file."""


def _refuse_unknown_keywords(overrides: Mapping[str, object]) -> None:
    """A misspelt keyword is a caller's mistake in code, not in a config file: ``InvalidArgument``."""
    unknown = sorted(set(overrides) - set(KEYWORDS))
    if unknown:
        names = ", ".join(repr(k) for k in unknown)
        raise InvalidArgument(f"unknown keyword argument {names} (known: {', '.join(KEYWORDS)})")


def read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read config file {path}: {exc}") from exc


def _toml_kind(value: object) -> str:
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a float",
        str: "a string",
        list: "an array",
        dict: "a table",
    }
    return names.get(type(value), f"a {type(value).__name__}")


class SettingsSource:
    """One value at a time from the environment (non-empty wins) or the TOML file, checked and typed.

    Keyword overrides (top-level settings only) win over both. Errors name where the bad value
    came from: the keyword, the variable, or the key and the file.
    """

    def __init__(
        self,
        env: Mapping[str, str],
        data: Mapping[str, Any],
        path: str,
        overrides: Mapping[str, object] | None = None,
    ) -> None:
        self._env = env
        self._data = data
        self._path = path
        self.overrides: dict[str, object] = {
            key: os.fspath(value) if isinstance(value, os.PathLike) else value
            for key, value in (overrides or {}).items()
        }

    def origin(self, env_key: str | None, toml_key: str, section: str | None = None) -> str:
        if section is None and toml_key in self.overrides:
            return f"keyword argument {toml_key!r}"
        if env_key and self._env.get(env_key):
            return env_key
        where = f"[{section}] {toml_key}" if section else toml_key
        return f"{where!r} in {self._path}" if self._in_toml(toml_key, section) else (env_key or where)

    def _in_toml(self, key: str, section: str | None) -> bool:
        return key in (self.table(section) if section else self._data)

    def refuse_unknown(self, data: Mapping[str, Any], known: tuple[str, ...], section: str) -> None:
        unknown = sorted(set(data) - set(known))
        if unknown:
            where = f"[{section}] of " if section else ""
            raise ConfigError(
                f"unknown key {', '.join(repr(k) for k in unknown)} in {where}config file {self._path} "
                f"(known: {', '.join(known)})"
            )

    def table(self, key: str) -> dict[str, Any]:
        value = self._data.get(key, {})
        if not isinstance(value, dict):
            raise ConfigError(
                f"{key!r} in {self._path} must be a table ([{key}] followed by key = value lines), "
                f"not {_toml_kind(value)}"
            )
        return value

    def _raw(self, env_key: str | None, toml_key: str, section: str | None) -> tuple[object, bool] | None:
        if section is None and toml_key in self.overrides:
            return self.overrides[toml_key], False  # a Python value, checked as a TOML one
        if env_key and self._env.get(env_key):
            return self._env[env_key], True
        source = self.table(section) if section else self._data
        return (source[toml_key], False) if toml_key in source else None

    def text(self, env_key: str | None, toml_key: str, default: str, section: str | None = None) -> str:
        value = self.optional_text(env_key, toml_key, section)
        return default if value is None else value

    def optional_text(self, env_key: str | None, toml_key: str, section: str | None = None) -> str | None:
        found = self._raw(env_key, toml_key, section)
        if found is None:
            return None
        value, _ = found
        if not isinstance(value, str) or not value.strip():
            shown = "empty" if isinstance(value, str) else _toml_kind(value)
            raise ConfigError(
                f"{self.origin(env_key, toml_key, section)} must be a non-empty string, not {shown}"
            )
        return value

    def flag(self, env_key: str | None, toml_key: str, default: bool, section: str | None = None) -> bool:
        """A yes/no setting: true/false (1/0, yes/no, on/off) in the environment, a TOML boolean."""
        found = self._raw(env_key, toml_key, section)
        if found is None:
            return default
        value, from_env = found
        where = self.origin(env_key, toml_key, section)
        if from_env:
            text = str(value).strip().lower()
            if text in {"1", "true", "yes", "on"}:
                return True
            if text in {"0", "false", "no", "off"}:
                return False
            raise ConfigError(f"{where} must be true or false, got {str(value)[:40]!r}")
        if isinstance(value, bool):
            return value
        raise ConfigError(f"{where} must be a boolean (true or false), not {_toml_kind(value)}")

    def integer(
        self, env_key: str | None, toml_key: str, default: int, lo: int, hi: int, section: str | None = None
    ) -> int:
        found = self._scalar(env_key, toml_key, section, "an integer", int, (int,))
        if found is None:
            return default
        number, where = found
        if not lo <= number <= hi:
            raise ConfigError(f"{where} must be between {lo} and {hi}, got {number}")
        return number

    def number(
        self,
        env_key: str | None,
        toml_key: str,
        default: float,
        lo: float,
        hi: float,
        section: str | None = None,
    ) -> float:
        found = self._scalar(env_key, toml_key, section, "a number of seconds", float, (int, float))
        if found is None:
            return default
        number, where = found
        if not (math.isfinite(number) and lo <= number <= hi):
            raise ConfigError(f"{where} must be between {lo:g} and {hi:g}, got {number}")
        return float(number)

    def _scalar(
        self,
        env_key: str | None,
        toml_key: str,
        section: str | None,
        kind: str,
        parse: Callable[[str], _N],
        toml_types: tuple[type, ...],
    ) -> tuple[_N, str] | None:
        """The setting parsed from its environment text, or taken from TOML if of the right type."""
        found = self._raw(env_key, toml_key, section)
        if found is None:
            return None
        value, from_env = found
        where = self.origin(env_key, toml_key, section)
        if from_env:
            try:
                return parse(str(value).strip()), where
            except ValueError:
                raise ConfigError(f"{where} must be {kind}, got {str(value)[:40]!r}") from None
        if isinstance(value, toml_types) and not isinstance(value, bool):
            return parse(str(value)), where
        raise ConfigError(f"{where} must be {kind}, not {_toml_kind(value)}")

    def kafka(self) -> tuple[dict[str, str], dict[str, str]]:
        """librdkafka settings from ``[kafka]`` (dotted keys may nest), ``SEGCAT_KAFKA_<KEY>`` and
        the ``kafka`` keyword (a mapping), each winning over the one before."""
        settings: dict[str, str] = {}
        origins: dict[str, str] = {}
        pending: list[tuple[str, object]] = list(self.table("kafka").items())
        while pending:
            key, value = pending.pop()
            if isinstance(value, dict):  # `security.protocol = "x"` unquoted is a nested table in TOML
                pending.extend((f"{key}.{k}", v) for k, v in value.items())
                continue
            origin = f"{'[kafka] ' + key!r} in {self._path}"
            settings[key] = _kafka_value(value, origin)
            origins[key] = origin
        for env_key, value in self._env.items():
            if env_key.startswith(_KAFKA_ENV_PREFIX) and env_key not in _RESERVED_KAFKA_ENV:
                key = env_key[len(_KAFKA_ENV_PREFIX) :].lower().replace("_", ".")
                if not key:
                    raise ConfigError(f"{env_key} names no librdkafka setting (SEGCAT_KAFKA_<KEY>)")
                settings[key] = value
                origins[key] = env_key
        given = self.overrides.get("kafka", {})
        if not isinstance(given, Mapping):
            raise ConfigError(f"keyword argument 'kafka' must be a mapping, not {_toml_kind(given)}")
        for key, value in given.items():
            origin = f"keyword argument kafka[{key!r}]"
            if not isinstance(key, str) or not key:
                raise ConfigError(f"{origin} names no librdkafka setting")
            settings[key] = _kafka_value(value, origin)
            origins[key] = origin
        return settings, origins


def _kafka_value(value: object, origin: str) -> str:
    """A librdkafka setting's text: booleans as librdkafka spells them, numbers as written."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise ConfigError(f"{origin} must be a string, number or boolean, not {_toml_kind(value)}")
