"""One Spark session for the whole test session (starting one costs several seconds).

Import the fixture into a test module with ``from tests.spark_support import spark``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from segcat.spark_integration.session import local_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    session = local_session(
        "segcat-tests",
        "local[2]",
        shuffle_partitions=2,
        conf={
            "spark.sql.adaptive.enabled": "true",
            "spark.default.parallelism": "2",
            "spark.sql.streaming.stopTimeout": "30s",
        },
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    if session.sparkContext._jsc is not None:  # the other module's teardown may have stopped it
        session.stop()
