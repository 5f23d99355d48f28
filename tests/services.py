"""Where the test suite finds Kafka and Redis, in order of preference.

1. Addresses in the environment (``SEGCAT_TEST_BOOTSTRAP_SERVERS`` + ``SEGCAT_TEST_REDIS_URL``):
   used as-is, nothing is started or stopped.
2. ``SEGCAT_TEST_SERVICES=testcontainers`` and a Docker engine answering: Kafka and Redis as
   testcontainers of the images built on this machine (``tests.testcontainers_services``),
   removed again by ``stop``. Asked for, not automatic: ``tests/containers`` runs that path in
   CI for its own module, and the whole suite keeps the faster local stack.
3. Otherwise the project's own Docker-free stack (``segcat.local_stack``) with its home in
   ``<repo>/.segcat`` so the Kafka jars are fetched once and reused. ``stop`` shuts down only
   what this call started (a stack already running is left running); set
   ``SEGCAT_TEST_STACK_KEEP=1`` to keep even that running for the next test run.

When no option works, ``resolve_services`` calls ``service_failure``: a skip on a developer
machine, a failure in CI (``CI=true``), so a broken CI environment can never pass green.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import NoReturn

import pytest

from segcat import local_stack as stack
from segcat.catalog.config import Config
from segcat.catalog.errors import SegcatError
from segcat.local_stack.settings import StackSettings

REPO_ROOT = Path(__file__).resolve().parents[1]
LOCAL_STACK_HOME = REPO_ROOT / ".segcat"

ENV_BOOTSTRAP = "SEGCAT_TEST_BOOTSTRAP_SERVERS"
ENV_REDIS = "SEGCAT_TEST_REDIS_URL"
ENV_KEEP = "SEGCAT_TEST_STACK_KEEP"
ENV_SOURCE = "SEGCAT_TEST_SERVICES"


@dataclass(frozen=True)
class ResolvedServices:
    bootstrap_servers: str
    redis_url: str
    source: str
    """"env", "testcontainers" or "local-stack"."""
    stop: Callable[[], None]


def service_failure(reason: str) -> NoReturn:
    """Fail in CI (a missing service there is a broken pipeline), skip elsewhere."""
    if os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}:
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason)


def _nothing() -> None:
    """``stop`` for services this module did not start."""


def resolve_services(config: Config) -> ResolvedServices:
    """Find or start Kafka + Redis for the tests (see the module docstring for the order)."""
    bootstrap = os.environ.get(ENV_BOOTSTRAP, "").strip()
    redis_url = os.environ.get(ENV_REDIS, "").strip()
    if bootstrap and redis_url:
        return ResolvedServices(bootstrap, redis_url, "env", _nothing)
    if bootstrap or redis_url:
        service_failure(f"set both {ENV_BOOTSTRAP} and {ENV_REDIS}, or neither")

    if os.environ.get(ENV_SOURCE, "").strip() == "testcontainers":
        if not (_testcontainers_available() and _docker_answers()):
            service_failure(f"{ENV_SOURCE}=testcontainers, but testcontainers or a Docker engine is missing")
        try:
            return _start_containers()
        except Exception as exc:
            service_failure(f"could not start Kafka/Redis containers: {exc}")

    try:
        return _start_local_stack(config)
    except SegcatError as exc:
        service_failure(f"could not start the local Kafka/Redis stack: {exc}")


def _testcontainers_available() -> bool:
    try:
        return all(
            importlib.util.find_spec(name) is not None
            for name in ("testcontainers.kafka", "testcontainers.redis")
        )
    except ModuleNotFoundError:
        return False


def _docker_answers() -> bool:
    """A Docker engine that answers, not just a CLI on PATH (the SDK talks to the same socket)."""
    from containers import engine

    return engine.server_version() is not None


def _start_containers() -> ResolvedServices:
    from containers import images
    from tests.testcontainers_services import start

    found, stop = start(images.build_all(say=lambda _m: None))
    return ResolvedServices(found.bootstrap_servers, found.redis_url, "testcontainers", stop)


def _start_local_stack(config: Config) -> ResolvedServices:
    cfg = replace(StackSettings.load(), home=LOCAL_STACK_HOME)
    info = stack.up(cfg)
    started = list(info.started)

    def stop() -> None:
        if started and os.environ.get(ENV_KEEP, "") not in {"1", "true", "yes"}:
            stack.down(cfg, services=started)

    return ResolvedServices(info.bootstrap_servers, info.redis_url, "local-stack", stop)
