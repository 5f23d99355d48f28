"""The materializer's endpoints, back-off and log throttling, without Kafka.

``/metrics`` and ``/healthz`` are separate answers (prometheus_client's own server answers
every path with metrics), a busy port is one line that says what to do, and a fault that
repeats is logged once per back-off period instead of on every attempt.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis.exceptions import AuthenticationError, NoPermissionError, ResponseError
from redis.exceptions import ConnectionError as RedisConnectionError

from segcat.catalog.config import Config
from segcat.catalog.errors import ConfigError, ServiceUnavailable
from segcat.catalog.storage.redis import RedisStore
from segcat.materializer import endpoints, metrics
from segcat.materializer.backoff import RedisGate, Throttle, ThrottleFilter, backoff_delay, redis_cause
from segcat.materializer.service import check_instance_id, check_pattern, default_instance_id


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def _get(url: str, method: str = "GET") -> tuple[int, str, bytes]:
    request = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read()


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


# ---------------------------------------------------------------------- endpoints


def test_metrics_and_healthz_are_separate_answers_and_other_paths_are_404() -> None:
    state: dict[str, Any] = {"healthy": True}

    def health() -> tuple[bool, dict[str, Any]]:
        return state["healthy"], {"status": "ok" if state["healthy"] else "degraded", "parked": []}

    metrics.TABLE_PARKED.labels("ns.health_probe").set(1)
    served = endpoints.serve(0, "127.0.0.1", metrics.REGISTRY, health)
    assert served is None  # port 0 = off
    served = endpoints.Endpoints(0, "127.0.0.1", metrics.REGISTRY, health)  # 0 here: any free port
    base = f"http://127.0.0.1:{served.port}"
    try:
        status, kind, body = _get(f"{base}/metrics")
        assert status == 200 and kind.startswith("text/plain")
        assert b'segcat_materializer_table_parked{table="ns.health_probe"} 1.0' in body
        status, kind, body = _get(f"{base}/healthz")
        assert (status, kind) == (200, "application/json")
        assert json.loads(body) == {"status": "ok", "parked": []}
        state["healthy"] = False
        status, _, body = _get(f"{base}/healthz")
        assert status == 503 and json.loads(body)["status"] == "degraded"
        assert _get(f"{base}/healthz", "HEAD")[:2] == (503, "application/json")
        for path in ("/", "/metricsx", "/healthz/more", "/favicon.ico"):
            status, _, body = _get(f"{base}{path}")
            assert status == 404, path
            assert b"segcat_materializer" not in body
    finally:
        served.close()
        metrics.TABLE_PARKED.labels("ns.health_probe").set(0)


def test_a_broken_health_probe_answers_503_instead_of_hanging_up() -> None:
    def health() -> tuple[bool, dict[str, Any]]:
        raise RuntimeError("boom")

    served = endpoints.Endpoints(0, "127.0.0.1", metrics.REGISTRY, health)
    try:
        status, _, body = _get(f"http://127.0.0.1:{served.port}/healthz")
        assert status == 503 and "RuntimeError: boom" in json.loads(body)["error"]
    finally:
        served.close()


def test_a_busy_metrics_port_is_a_config_error_that_says_what_to_do(busy_port: int) -> None:
    with pytest.raises(ConfigError, match=rf"metrics port {busy_port} is in use; set SEGCAT_METRICS_PORT"):
        endpoints.Endpoints(busy_port, "127.0.0.1", metrics.REGISTRY, lambda: (True, {}))


def test_a_busy_metrics_port_stops_the_command_with_one_line_no_traceback(
    busy_port: int, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "SEGCAT_HOME": str(tmp_path),
        "SEGCAT_WAREHOUSE": str(tmp_path / "warehouse"),
        "SEGCAT_BOOTSTRAP_SERVERS": "127.0.0.1:9",  # never reached: the port check comes first
    }
    done = subprocess.run(
        [sys.executable, "-m", "segcat.materializer", "--metrics-port", str(busy_port)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2  # a configuration problem (README, "Exit codes")
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines == [
        f"error: ConfigError: metrics port {busy_port} is in use; set SEGCAT_METRICS_PORT or "
        "--metrics-port (0 turns the endpoint off)"
    ]


# ---------------------------------------------------------------------- instance ids


def test_instance_ids_are_stable_per_host_and_checked() -> None:
    assert default_instance_id({}) == default_instance_id({})
    assert default_instance_id({}).startswith("segcat-materializer-")
    check_instance_id(default_instance_id({}))
    assert default_instance_id({"SEGCAT_MATERIALIZER_INSTANCE_ID": "mat-2"}) == "mat-2"
    assert check_instance_id("") == ""  # dynamic membership
    for bad in ("a b", "x" * 250, "..", "ü"):
        with pytest.raises(ConfigError, match="SEGCAT_MATERIALIZER_INSTANCE_ID"):
            check_instance_id(bad)


# ---------------------------------------------------------------------- back-off and throttling


def test_backoff_doubles_from_one_second_to_five_minutes() -> None:
    assert [backoff_delay(n) for n in (1, 2, 3, 4, 9, 10, 1_000)] == [1, 2, 4, 8, 256, 300, 300]


def test_throttle_admits_a_cause_once_per_doubling_period_and_counts_the_rest() -> None:
    clock = FakeClock()
    throttle = Throttle(1.0, 8.0, clock)
    admitted: list[tuple[float, int]] = []
    for step in range(600):  # an event every 50 ms for 30 s, as librdkafka retries a refused login
        clock.now = 1_000.0 + step / 20
        held = throttle.admit("auth")
        if held is not None:
            admitted.append((round(clock.now - 1_000.0, 2), held))
        assert throttle.admit("other") is not None or clock.now > 1_000.0  # causes are separate
    assert [t for t, _ in admitted] == [0.0, 1.0, 3.0, 7.0, 15.0, 23.0]  # then every 8 s (the cap)
    clock.now = 1_031.0
    held = throttle.admit("auth")  # the next line reports what was held back since 23 s
    assert held is not None
    assert sum(h for _, h in admitted) + held + len(admitted) == 600  # nothing lost silently
    clock.now += 100  # quiet for long: the cause starts over and is logged at once
    assert throttle.admit("auth") == 0


def test_librdkafka_lines_that_differ_only_in_numbers_are_one_cause() -> None:
    logger = logging.getLogger("segcat.test.rdkafka")
    logger.propagate = False
    clock = FakeClock()
    logger.addFilter(ThrottleFilter(Throttle(1.0, 300.0, clock)))
    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    logger.addHandler(Keep())
    for attempt in range(200):
        clock.now = 1_000.0 + attempt / 20
        text = f"sasl_plaintext://127.0.0.1:19092/bootstrap: SASL authentication error (after {attempt} ms)"
        logger.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", text)
    logger.log(logging.ERROR, "%s [%s] %s", "FAIL", "rdkafka#consumer-1", "another cause")
    assert len(seen) == 5  # t = 0, 1, 3, 7 s and the other cause
    assert [getattr(r, "suppressed", 0) for r in seen[:4]] == [0, 19, 39, 79]


def test_redis_failures_are_classified_by_cause() -> None:
    def wrapped(inner: Exception) -> ServiceUnavailable:
        try:
            raise ServiceUnavailable("Redis at x unavailable") from inner
        except ServiceUnavailable as exc:
            return exc

    assert redis_cause(wrapped(AuthenticationError("WRONGPASS invalid username-password pair"))) == (
        "authentication"
    )
    assert redis_cause(NoPermissionError("NOPERM this user has no permissions")) == "authentication"
    assert redis_cause(wrapped(RedisConnectionError("Connection refused"))) == "unavailable"
    assert redis_cause(ResponseError("ERR something else")) == "error"


def test_the_redis_gate_backs_off_for_every_table_and_logs_once_per_period(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = FakeClock()
    gate = RedisGate(1.0, clock)
    refused = ServiceUnavailable("Redis at x unavailable during EVALSHA: WRONGPASS invalid password")
    caplog.set_level(logging.INFO, logger="segcat.materializer")
    attempts = 0
    for step in range(12_000):  # 10 minutes of 50 ms loop turns, 3 tables trying each turn
        clock.now = 1_000.0 + step / 20
        for table in ("ns.a", "ns.b", "ns.c"):
            if gate.open():
                attempts += 1
                gate.failed(refused, table)
    assert not gate.status()["ok"] and gate.status()["cause"] == "authentication"
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    # attempts at 0, 1, 3, 7, ... 255 s, then every 300 s: a dozen in 10 minutes, not 36,000
    assert 9 <= attempts <= 12
    assert 1 <= len(warnings) <= attempts
    assert warnings[0].getMessage() == "redis credentials refused; backing off"
    assert "SEGCAT_REDIS_PASSWORD" in warnings[0].__dict__["hint"]
    assert all(r.__dict__["cause"] == "authentication" for r in warnings)
    gate.succeeded()
    assert gate.open() and gate.status() == {"ok": True}
    assert caplog.records[-1].getMessage() == "redis available again"


def test_an_outage_is_retried_every_ten_seconds_at_most() -> None:
    clock = FakeClock()
    gate = RedisGate(1.0, clock)
    down = ServiceUnavailable("Redis at x unavailable during PING: Connection refused")
    tries = []
    for step in range(6_000):  # 5 minutes
        clock.now = 1_000.0 + step / 20
        if gate.open():
            tries.append(clock.now)
            gate.failed(down, "ns.a")
    gaps = [round(b - a) for a, b in itertools.pairwise(tries)]
    assert gaps[:4] == [1, 2, 4, 8] and set(gaps[4:]) == {10}


# ---------------------------------------------------------------------- topic pattern


def test_a_pattern_without_caret_is_refused_with_the_fix(tmp_path: Path) -> None:
    """librdkafka takes a pattern without '^' for a literal topic: the materializer followed
    nothing, silently (found on the secure stack). Now it is a ConfigError naming the fix."""
    assert check_pattern(r"^segcat\.ns\..*") == r"^segcat\.ns\..*"
    with pytest.raises(ConfigError, match=r"starting with '\^'.*e\.g\. '\^segcat"):
        check_pattern(r"segcat\.ns\..*")
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        check_pattern("^segcat(")
    env = {**os.environ, "SEGCAT_HOME": str(tmp_path), "SEGCAT_WAREHOUSE": str(tmp_path / "w")}
    done = subprocess.run(
        [sys.executable, "-m", "segcat.materializer", "--pattern", "segcat.x", "--metrics-port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "must be a regular expression starting with '^'" in done.stderr


# ---------------------------------------------------------------------- lag gauges


@pytest.mark.kafka
@pytest.mark.redis
def test_lag_gauges_come_from_one_log_end_query_per_tick(mconfig: Config) -> None:
    """Each followed table's lag is set from its log end, for all tables in one ListOffsets
    request per tick (it used to be one watermark query per table, each waiting behind the
    consumer's fetch: 20 tables made a 1 s tick that delayed notifications)."""
    from segcat import Catalog
    from segcat.catalog.log.topics import TopicAdmin
    from tests.materializer_support import (
        head_offset,
        namespace,
        running_materializer,
        wait_for_head,
        write_load,
    )

    ns, pattern = namespace()
    names = [f"{ns}.t{k}" for k in range(3)]
    catalog = Catalog(mconfig)
    for name in names:
        catalog.create_table(name)
    calls: list[int] = []
    original = TopicAdmin.log_ends

    def counted(self: TopicAdmin, tables: list[Any]) -> Any:
        calls.append(len(tables))
        return original(self, tables)

    store = RedisStore.from_config(mconfig)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TopicAdmin, "log_ends", counted)
        with running_materializer(mconfig, pattern):
            for k, name in enumerate(names):
                write_load(mconfig, name, 5 + k, k)
            for name in names:
                wait_for_head(store, name, head_offset(mconfig, name))
            deadline = time.monotonic() + 30  # a tick whose request timed out (a loaded machine) sets none

            def lags() -> list[float | None]:
                return [
                    metrics.REGISTRY.get_sample_value("segcat_materializer_lag_records", {"table": name})
                    for name in names
                ]

            while not (calls and calls[-1] == 3 and lags() == [0.0] * 3) and time.monotonic() < deadline:
                time.sleep(0.1)
    assert calls and max(calls) == 3, calls  # every table in one request, not one each
    assert lags() == [0.0] * 3, lags()


def test_an_unanswered_log_end_query_is_service_unavailable_not_a_crash(config: Config) -> None:
    """A ListOffsets future that times out raised concurrent.futures.TimeoutError (no KafkaException),
    which killed the materializer's loop in CI; now it is ServiceUnavailable, like the other failures,
    and the lag gauges are measured off the main loop."""
    import concurrent.futures
    import dataclasses

    from segcat.catalog.errors import ServiceUnavailable
    from segcat.catalog.log.topics import TopicAdmin
    from segcat.catalog.protocol.names import TableName

    admin = TopicAdmin(dataclasses.replace(config, request_timeout_s=0.1))

    class Silent:
        def list_offsets(self, wanted: dict[Any, Any], **_: Any) -> dict[Any, Any]:
            return {tp: concurrent.futures.Future() for tp in wanted}  # never answered

    admin._admin = Silent()  # type: ignore[assignment]
    with pytest.raises(ServiceUnavailable, match=r"no answer within 0\.1 s"):
        admin.log_ends([TableName.parse("ns.t")])
