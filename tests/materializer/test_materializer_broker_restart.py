"""The materializer's health after its broker restarts, on a private one-broker KRaft stack.

A restarted broker bumps every partition's leader epoch. The admin client that measures the
lag gauges (one ListOffsets per tick) sends the epoch of its metadata cache, which nothing
refreshed: every tick was refused with FENCED_LEADER_EPOCH, and ``/healthz`` answered 503
``brokers_down`` for as long as the process lived while the consumer materialized every record.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any

import pytest

from segcat import Catalog
from segcat import local_stack as stack
from segcat.catalog.config import Config
from segcat.catalog.errors import ServiceUnavailable
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol.names import TableName
from segcat.catalog.storage.redis import RedisStore
from segcat.materializer.service import Materializer
from tests.materializer_support import (
    head_offset,
    materializer_config,
    namespace,
    running_materializer,
    wait_for_head,
    write_load,
)
from tests.private_stack import client_config, private_settings, running_stack

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]


def _wait(what: str, check: Any, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def _log_ends_answer(admin: TopicAdmin, name: TableName, timeout_s: float) -> dict[TableName, int]:
    """The log ends, retried while the broker comes back (a refusal that lasts fails the test)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return admin.log_ends([name])
        except ServiceUnavailable as exc:
            assert time.monotonic() < deadline, f"log_ends still refused after the restart: {exc}"
            time.sleep(0.5)


def test_health_recovers_after_the_broker_restarts(tmp_path: Path, config: Config) -> None:
    settings = private_settings(tmp_path / "stack", brokers=1)
    with running_stack(settings):
        cfg = client_config(settings, tmp_path / "warehouse", SEGCAT_REDIS_URL=config.redis_url)
        mcfg = materializer_config(cfg, config.redis_url, tmp_path / "warehouse")
        ns, pattern = namespace()
        name = f"{ns}.t"
        Catalog(cfg).create_table(name)
        write_load(cfg, name, 3, 0)
        store = RedisStore.from_config(mcfg)
        admin = TopicAdmin(dataclasses.replace(cfg, request_timeout_s=2.0))
        # its metadata cache now holds the leader epoch; the 2 s budget is for the answer after
        # the restart, so a slow first answer of a freshly started broker is waited for
        assert _log_ends_answer(admin, TableName.parse(name), 30)
        with (
            running_materializer(mcfg, pattern) as following,
            running_materializer(mcfg, r"^segcat\.nothing-matches-this\..*") as idle,
        ):
            wait_for_head(store, name, head_offset(cfg, name))
            for service in (following, idle):
                _wait("healthy before the restart", lambda s=service: s.health()[0], 60)

            assert stack.down(settings, services=["kafka"]) == ["kafka"]
            for service in (following, idle):
                _wait("the outage shows in the health answer", lambda s=service: not s.health()[0], 60)
            stack.up(settings)
            write_load(cfg, name, 3, 1)
            wait_for_head(store, name, head_offset(cfg, name))  # materializing again
            for service in (following, idle):
                _wait_healthy(service, 30)

        ends = _log_ends_answer(admin, TableName.parse(name), 30)
        assert ends[TableName.parse(name)] == head_offset(cfg, name)


def _wait_healthy(service: Materializer, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        healthy, doc = service.health()
        if healthy:
            return
        assert time.monotonic() < deadline, f"still degraded after the broker came back: {doc}"
        time.sleep(0.2)
