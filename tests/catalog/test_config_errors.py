"""A bad configuration is a ``ConfigError`` naming the variable or key, never a traceback from a
client library, and never silently ignored (issue 7, items 12 and 16)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import redis
from hypothesis import given, settings
from hypothesis import strategies as st

from segcat.catalog.config import Config
from segcat.catalog.errors import ConfigError, ServiceUnavailable
from segcat.catalog.log.clients import admin_config, check_kafka_settings, consumer_config, producer_config
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.redis import store as redis_store
from segcat.catalog.urls import check_redis_url
from segcat.local_stack.settings import StackSettings


def load(tmp_path: Path, toml: str | None = None, **env: str) -> Config:
    """Load the clients' config and the local stack's settings from the same sources."""
    path = None
    if toml is not None:
        path = tmp_path / "segcat.toml"
        path.write_text(toml)
    full_env = {"SEGCAT_HOME": str(tmp_path / "home"), **env}
    StackSettings.load(env=full_env, path=path)
    return Config.load(env=full_env, path=path)


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"SEGCAT_REQUEST_TIMEOUT_S": "abc"},
            "SEGCAT_REQUEST_TIMEOUT_S must be a number of seconds, got 'abc'",
        ),
        ({"SEGCAT_REQUEST_TIMEOUT_S": "nan"}, "SEGCAT_REQUEST_TIMEOUT_S must be between"),
        ({"SEGCAT_REQUEST_TIMEOUT_S": "0"}, "SEGCAT_REQUEST_TIMEOUT_S must be between"),
        ({"SEGCAT_KEYFRAME_EVERY_SECONDS": "inf"}, "SEGCAT_KEYFRAME_EVERY_SECONDS must be between"),
        ({"SEGCAT_REPLICATION_FACTOR": "three"}, "SEGCAT_REPLICATION_FACTOR must be an integer, got 'three'"),
        ({"SEGCAT_REPLICATION_FACTOR": "0"}, "SEGCAT_REPLICATION_FACTOR must be between 1 and"),
        ({"SEGCAT_STACK_KAFKA_PORT": "70000"}, "SEGCAT_STACK_KAFKA_PORT must be between 1 and 65535"),
        ({"SEGCAT_METRICS_PORT": "-1"}, "SEGCAT_METRICS_PORT must be between 0 and 65535"),
        ({"SEGCAT_REDIS_URL": "http://x:1"}, "SEGCAT_REDIS_URL must start with redis://"),
        ({"SEGCAT_REDIS_URL": "redis://[::1"}, "SEGCAT_REDIS_URL is not a valid URL"),
        ({"SEGCAT_REDIS_URL": "redis://h:99999/0"}, "SEGCAT_REDIS_URL is not a valid URL"),
        ({"SEGCAT_REDIS_URL": "redis://h:6379/zero"}, "SEGCAT_REDIS_URL's path must be a database number"),
        ({"SEGCAT_REDIS_URL": "redis://h/0?timeout_s=5"}, "the option 'timeout_s', which redis-py does not"),
        ({"SEGCAT_REDIS_URL": "redis://h/0?db=x"}, "invalid value for 'db'"),
        ({"SEGCAT_REDIS_URL": "rediss://"}, "SEGCAT_REDIS_URL names no host"),
        ({"SEGCAT_WAREHOUSE": "s3://bucket:9000/x"}, "SEGCAT_WAREHOUSE names no bucket"),
        ({"SEGCAT_WAREHOUSE": "s3:///x"}, "SEGCAT_WAREHOUSE names no bucket"),
        ({"SEGCAT_S3_ENDPOINT": "ftp://h:1"}, "SEGCAT_S3_ENDPOINT must be host:port or http(s)://host:port"),
        ({"SEGCAT_KAFKA_": "x"}, "SEGCAT_KAFKA_ names no librdkafka setting"),
    ],
)
def test_bad_environment_values_name_the_variable(tmp_path: Path, env: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, **env)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ("kafka = 5", "'kafka' in "),
        ("stack = 'x'", "'stack' in "),
        ("bootstrap_server = 'typo:9092'", "unknown key 'bootstrap_server'"),
        ("[stack]\nkafka_prot = 1", "unknown key 'kafka_prot' in [stack]"),
        ("replication_factor = true", "'replication_factor' in"),
        ("replication_factor = '3'", "must be an integer, not a string"),
        ("request_timeout_s = '5'", "must be a number of seconds, not a string"),
        ("warehouse = 3", "'warehouse' in"),
        ("warehouse = ''", "must be a non-empty string"),
        ("[kafka]\n'socket.timeout.ms' = [1]", "'[kafka] socket.timeout.ms' in"),
        ("x = [", "cannot read config file"),
    ],
)
def test_bad_toml_names_the_key(tmp_path: Path, toml: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, toml)
    assert message in str(caught.value)


def test_unknown_keys_list_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"known: home, bootstrap_servers, redis_url"):
        load(tmp_path, "bootstrap = 'x'")


def test_a_binary_config_file_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "segcat.toml"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(ConfigError, match="cannot read config file"):
        Config.load(env={"SEGCAT_HOME": str(tmp_path)}, path=path)


def test_toml_kafka_settings_may_use_dotted_keys_and_plain_values(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        '[kafka]\nsecurity.protocol = "SASL_SSL"\n"socket.timeout.ms" = 1000\n'
        '"enable.ssl.certificate.verification" = false',
    )
    assert config.kafka == {
        "security.protocol": "SASL_SSL",
        "socket.timeout.ms": "1000",
        "enable.ssl.certificate.verification": "false",
    }


def test_environment_wins_over_the_file(tmp_path: Path) -> None:
    config = load(tmp_path, "request_timeout_s = 5\nreplication_factor = 2", SEGCAT_REQUEST_TIMEOUT_S="7.5")
    assert (config.request_timeout_s, config.replication_factor) == (7.5, 2)


@pytest.mark.parametrize("build", [admin_config, lambda c: producer_config(c, 1_000_000), consumer_config])
def test_an_unknown_librdkafka_key_is_a_config_error_naming_the_variable(
    tmp_path: Path, build: object
) -> None:
    config = load(tmp_path, SEGCAT_KAFKA_SECURITY_PROTOKOL="SASL_SSL")
    with pytest.raises(ConfigError) as caught:
        build(config)  # type: ignore[operator]
    text = str(caught.value)
    assert "SEGCAT_KAFKA_SECURITY_PROTOKOL" in text and "security.protokol" in text


def test_a_bad_librdkafka_value_from_toml_names_the_key(tmp_path: Path) -> None:
    config = load(tmp_path, '[kafka]\nsecurity.protocol = "CARRIER_PIGEON"')
    with pytest.raises(ConfigError, match=r"'\[kafka\] security.protocol' in .*CARRIER_PIGEON"):
        check_kafka_settings(config)


def test_good_librdkafka_settings_pass(tmp_path: Path) -> None:
    config = load(tmp_path, SEGCAT_KAFKA_SECURITY_PROTOCOL="PLAINTEXT", SEGCAT_KAFKA_CLIENT_ID="me")
    assert admin_config(config)["client.id"] == "me"


@pytest.mark.redis
def test_wrong_redis_credentials_warn_once_without_the_password(
    config: Config, caplog: pytest.LogCaptureFixture
) -> None:
    secret = "not-the-password-5fd1"
    bad = Config.load(
        env={
            "SEGCAT_REDIS_URL": config.redis_url,
            "SEGCAT_REDIS_USERNAME": "nobody-here",
            "SEGCAT_REDIS_PASSWORD": secret,
            "SEGCAT_HOME": str(config.home),
        }
    )
    redis_store._credentials_warned.clear()
    store = RedisStore.from_config(bad)
    with caplog.at_level(logging.INFO, logger="segcat.redis"):
        for _ in range(3):
            with pytest.raises(ServiceUnavailable) as caught:
                store.head("ns.t")
            assert secret not in str(caught.value)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    text = warnings[0].getMessage()
    assert "SEGCAT_REDIS_USERNAME" in text and "SEGCAT_REDIS_PASSWORD" in text and secret not in text


SECRET = "ZQXJVK"
"""A password of letters the generated URLs below never hold elsewhere."""


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SEGCAT_WAREHOUSE", f"s3://KEY:{SECRET}@bucket/x"),
        ("SEGCAT_WAREHOUSE", f"gs://user:{SECRET}@bucket/x"),
        ("SEGCAT_WAREHOUSE", f"s3://{SECRET}@bucket/x"),
        ("SEGCAT_S3_ENDPOINT", f"http://key:{SECRET}@127.0.0.1:9000"),
        ("SEGCAT_BOOTSTRAP_SERVERS", f"user:{SECRET}@127.0.0.1:9092"),
        ("SEGCAT_REDIS_URL", f"redis://user:{SECRET}@[::1"),
        ("SEGCAT_REDIS_URL", f"redis://:{SECRET}"),
        ("SEGCAT_REDIS_URL", f"redis://user:{SECRET}@h:6379/0#frag"),
    ],
)
def test_credentials_in_an_address_are_refused_and_never_echoed(
    tmp_path: Path, variable: str, value: str
) -> None:
    """``s3://KEY:secret@bucket/x`` reached pyarrow as a bucket name, whose ArrowInvalid printed
    the secret; a malformed Redis URL was redis-py's ValueError at the first connection."""
    with pytest.raises(ConfigError) as caught:
        load(tmp_path, **{variable: value})
    assert variable in str(caught.value)
    assert SECRET not in str(caught.value)


def test_the_object_store_refuses_credentials_in_a_uri_it_is_handed() -> None:
    """Roots reach ``ObjectStore.from_uri`` without ``Config.load`` too (table locations, Spark)."""
    with pytest.raises(ConfigError) as caught:
        ObjectStore.from_uri(f"s3://KEY:{SECRET}@bucket/x")
    assert SECRET not in str(caught.value)
    with pytest.raises(ConfigError, match="cannot be opened"):
        ObjectStore.from_uri("nosuchscheme://x/y")


_URL_TAILS = st.text(alphabet="[]:/@?=&#%.0123456789abcdhostu_-", max_size=30)
_URL_HEADS = st.sampled_from(
    ["redis://", "rediss://", "unix://", "redis://u:" + SECRET + "@", "redis://:" + SECRET + "@", "redis://h"]
)
_QUERIES = st.sampled_from(
    ["", "?db=1", "?socket_timeout=2.5", "?socket_timeout=x", "?ssl_cert_reqs=none", "?nope=1", "?db"]
)


@settings(max_examples=400, deadline=None)
@given(head=_URL_HEADS, tail=_URL_TAILS, query=_QUERIES)
def test_a_redis_url_is_accepted_only_if_redis_py_can_use_it(head: str, tail: str, query: str) -> None:
    """Accepted: redis-py parses it and builds a connection from it (without connecting), so no
    ValueError or TypeError waits for the first command. Refused: a ConfigError without the secret."""
    url = head + tail + query
    try:
        check_redis_url(url, "SEGCAT_REDIS_URL")
    except ConfigError as exc:
        assert SECRET not in str(exc)
        return
    pool = redis.ConnectionPool.from_url(url)
    pool.connection_class(**pool.connection_kwargs)
