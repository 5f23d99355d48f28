"""Fixtures for the Iceberg reader tests: readers that must start, and pyiceberg's own tables."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.iceberg_readers import ReaderUnavailable, check_can_start


@pytest.fixture(scope="session")
def iceberg_readers() -> None:
    """Every reader expected here can start, or the test FAILS (CI and locally alike).

    pyiceberg, DuckDB and its extension packages come with the ``dev`` extra: one missing is a
    broken install, never a reason to skip, since the tests would otherwise pass by reading nothing.
    """
    try:
        check_can_start()
    except ReaderUnavailable as exc:
        pytest.fail(str(exc), pytrace=False)


@pytest.fixture
def sql_catalog(tmp_path: Path) -> Iterator[Any]:
    """A pyiceberg ``SqlCatalog`` (sqlite) with a warehouse in ``tmp_path`` and namespace ``ns``."""
    from pyiceberg.catalog.sql import SqlCatalog

    catalog = SqlCatalog("harness", uri=f"sqlite:///{tmp_path}/catalog.db", warehouse=f"file://{tmp_path}/wh")
    catalog.create_namespace("ns")
    yield catalog
    catalog.engine.dispose()
