"""Refused credentials (Redis WRONGPASS / NOPERM, a Kafka SASL failure) on real servers.

The materializer used to log on every attempt (librdkafka alone ~20 lines a second) or to
crash (a Redis ACL without write permissions). Now it backs off, logs at most once per
back-off period per cause, keeps writing key frames to object storage, and says
"degraded" on /healthz.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import replace
from pathlib import Path

import pytest
import redis

from segcat import Catalog
from segcat.catalog.config import Config
from tests.materializer_support import (
    PrivateRedis,
    bound_files,
    head_offset,
    materializer_config,
    namespace,
    running_materializer,
    write_load,
)

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name.startswith("segcat") and r.levelno >= logging.WARNING]


@pytest.mark.parametrize("fault", ["wrong-password", "no-write-permission"])
def test_refused_redis_credentials_cost_a_few_log_lines_and_no_table(
    fault: str, config: Config, private_redis: PrivateRedis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    admin = redis.Redis.from_url(private_redis.url)
    mconfig = materializer_config(config, private_redis.url, tmp_path / "warehouse")
    ns, pattern = namespace()
    table = f"{ns}.events"
    Catalog(mconfig).create_table(table)
    if fault == "wrong-password":
        admin.config_set("requirepass", "right")
        admin = redis.Redis.from_url(private_redis.url, password="right")
        mconfig = replace(mconfig, redis_password="wrong")
    else:  # reads allowed, writes refused with NOPERM
        admin.execute_command("ACL", "SETUSER", "reader", "on", ">secret", "~*", "&*", "+@read", "+ping")
        mconfig = replace(mconfig, redis_username="reader", redis_password="secret")
    caplog.set_level(logging.INFO)
    with running_materializer(mconfig, pattern) as service:
        started = time.monotonic()
        write_load(mconfig, table, 25, 1, 0.02)
        files = bound_files(mconfig, table)
        deadline = time.monotonic() + 30
        while (
            not files.keyframe_versions() or files.keyframe_versions()[-1] < head_offset(mconfig, table) - 7
        ):
            assert time.monotonic() < deadline, "key frames stopped while Redis refused us"
            time.sleep(0.1)
        time.sleep(max(0.0, 8 - (time.monotonic() - started)))
        lines = [r for r in _warnings(caplog) if r.name == "segcat.materializer"]
        # tries after 0, 1, 3, 7, 15 ... s, each logged at most once (not once per record per table)
        tries = 1 + math.ceil(math.log2(time.monotonic() - started + 1))
        assert 1 <= len(lines) <= tries, [r.getMessage() for r in lines]
        assert {r.getMessage() for r in lines} == {"redis credentials refused; backing off"}
        assert "SEGCAT_REDIS_PASSWORD" in lines[0].__dict__["hint"]
        healthy, doc = service.health()
        assert not service.parked  # Redis is a cache: its trouble parks no table
    assert not healthy and doc["redis"]["cause"] == "authentication" and doc["status"] == "degraded"
    assert admin.exists(f"segcat:{{{table}}}:head") == 0  # nothing was written


def test_refused_kafka_credentials_cost_a_few_log_lines(
    config: Config, private_redis: PrivateRedis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    base = materializer_config(config, private_redis.url, tmp_path / "warehouse")
    sasl = {
        "security.protocol": "SASL_PLAINTEXT",  # the broker's listener speaks no SASL: every login fails
        "sasl.mechanism": "PLAIN",
        "sasl.username": "segcat",
        "sasl.password": "wrong",
    }
    mconfig = replace(base, kafka={**base.kafka, **sasl})
    _, pattern = namespace()
    caplog.set_level(logging.INFO)
    with running_materializer(mconfig, pattern) as service:
        time.sleep(10)
        lines = _warnings(caplog)
        assert lines, "the failure must be logged"
        # per cause (librdkafka's line, the client error) once after 0, 1, 3, 7 s: not ~200
        assert len(lines) <= 12, f"{len(lines)} lines in 10 s: {[r.getMessage()[:80] for r in lines[:5]]}"
        healthy, doc = service.health()
    assert not healthy and doc["kafka"]["last_error"]["error"] == "_AUTHENTICATION"
    assert any("SEGCAT_KAFKA_SASL" in str(r.__dict__.get("hint", "")) for r in lines)


def test_all_brokers_down_after_a_refusal_keeps_the_refusal_as_the_health_cause(
    config: Config, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    """librdkafka reports "all brokers down" after each refused login: /healthz kept only the
    last error, so the cause flipped to the symptom between polls (a CI run saw it)."""
    from confluent_kafka import KafkaError

    from segcat.materializer.service import Materializer

    mconfig = materializer_config(config, private_redis.url, tmp_path / "wh")
    service = Materializer(mconfig, pattern="^nothing$")
    service._on_kafka_error(KafkaError(KafkaError._AUTHENTICATION, "SASL handshake failed"))
    service._on_kafka_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    _, doc = service.health()
    assert doc["kafka"]["last_error"]["error"] == "_AUTHENTICATION"
    assert doc["kafka"]["brokers_down"] is True
    # with no refusal before it, "all brokers down" is the error to show
    other = Materializer(mconfig, pattern="^nothing$")
    other._on_kafka_error(KafkaError(KafkaError._ALL_BROKERS_DOWN, "1/1 brokers are down"))
    assert other.health()[1]["kafka"]["last_error"]["error"] == "_ALL_BROKERS_DOWN"
