"""Fixtures: real Kafka and Redis, found in the order the guide asks for.

1. addresses in the environment (a user's own cluster), 2. testcontainers where a Docker
engine answers, 3. the project's own local stack. In CI a service that cannot start is a
failure, never a skip (``tests.services.service_failure``).
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from segcat import Catalog, Table
from segcat.catalog.config import Config
from tests.materializer_support import PrivateRedis, materializer_config
from tests.services import LOCAL_STACK_HOME, ResolvedServices, resolve_services


@pytest.fixture(scope="session")
def services() -> Iterator[ResolvedServices]:
    base = Config.load(env={**os.environ, "SEGCAT_HOME": str(LOCAL_STACK_HOME)})
    resolved = resolve_services(base)
    yield resolved
    resolved.stop()


@pytest.fixture(scope="session")
def warehouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("warehouse")


@pytest.fixture(scope="session")
def config(services: ResolvedServices, warehouse: Path) -> Config:
    env = {
        **{k: v for k, v in os.environ.items() if k.startswith("SEGCAT_STACK_")},
        "SEGCAT_HOME": str(LOCAL_STACK_HOME),
        "SEGCAT_BOOTSTRAP_SERVERS": services.bootstrap_servers,
        "SEGCAT_REDIS_URL": services.redis_url,
        "SEGCAT_WAREHOUSE": str(warehouse),
        "SEGCAT_REQUEST_TIMEOUT_S": "30",
    }
    return Config.load(env=env)


@pytest.fixture(scope="session")
def catalog(config: Config) -> Catalog:
    return Catalog(config)


@pytest.fixture
def table_name(request: pytest.FixtureRequest) -> str:
    """A fresh, unique qualified table name per test (tests never share a topic)."""
    stem = "".join(ch if ch.isalnum() else "_" for ch in request.node.name)[:60]
    return f"test.{stem}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
def table(catalog: Catalog, table_name: str) -> Iterator[Table]:
    with catalog.create_table(table_name) as created:
        yield created


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A redis-server of the test's own (FLUSHALL, kill and restart touch nothing shared)."""
    server = PrivateRedis(tmp_path / "redis")
    server.start()
    yield server
    server.stop()


@pytest.fixture
def mconfig(config: Config, private_redis: PrivateRedis, tmp_path: Path) -> Config:
    """A materializer's config: the private Redis, a warehouse of the test's own, a key frame every
    7 accepted commits (never by time)."""
    return materializer_config(config, private_redis.url, tmp_path / "warehouse")
