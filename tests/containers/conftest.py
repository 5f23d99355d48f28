"""A Docker engine for the container tests, and the images they run.

In CI (``CI=true``) the engine is installed and started when none answers (bridge-less, as
``./dev compose`` does) and stopped again after this package's tests if it was started here;
elsewhere a missing engine skips these tests unless ``SEGCAT_TEST_DOCKER=1`` asks for the same.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from containers import engine, images
from containers.engine import EngineError
from tests.services import service_failure

WANT_DOCKER = "SEGCAT_TEST_DOCKER"


def may_start_engine() -> bool:
    truthy = {"1", "true", "yes"}
    return (
        os.environ.get("CI", "").strip().lower() in truthy
        or os.environ.get(WANT_DOCKER, "").strip().lower() in truthy
    )


@pytest.fixture(scope="package")
def docker_engine() -> Iterator[engine.Engine]:
    found: engine.Engine | None = None
    if engine.server_version() is not None:
        found = engine.Engine(engine.server_version() or "", started_here=False)
    elif may_start_engine():
        try:
            found = engine.ensure()
        except EngineError as exc:
            service_failure(f"could not start a Docker engine: {exc}")
    else:
        pytest.skip(f"no Docker engine answers (CI=true or {WANT_DOCKER}=1 starts one)")
    assert found is not None
    yield found
    if found.started_here:
        engine.stop()


@pytest.fixture(scope="package")
def local_images(docker_engine: engine.Engine) -> images.LocalImages:
    """Every image the compose file names, built on this machine (layer cache: seconds)."""
    try:
        return images.build_all(say=lambda _m: None)
    except EngineError as exc:
        service_failure(f"could not build the images: {exc}")
