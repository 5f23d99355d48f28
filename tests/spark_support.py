"""One Spark session for the whole test session (starting one costs several seconds).

Import the fixture into a test module with ``from tests.spark_support import spark``.

A JVM's classpath and environment are fixed when it starts, so whether the session can read
``s3a://`` is decided then: when any selected test asks for ``s3_spark``, the session starts
after the test S3 server (``tests.s3_server``, whose keys are then in ``AWS_*``) with hadoop-aws
and the s3a settings of ``segcat.spark_integration.session.s3_conf``. Otherwise it is built
exactly as before, with no package to resolve.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Iterator

import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery

from segcat.catalog.errors import SegcatError
from segcat.spark_integration.session import has_hadoop_aws, local_session, s3_conf
from tests.s3_server import S3Server, shared
from tests.services import service_failure

S3_FIXTURE = "s3_spark"


def _wants_s3(session: pytest.Session) -> bool:
    return any(S3_FIXTURE in getattr(item, "fixturenames", ()) for item in session.items)


@pytest.fixture(scope="session")
def spark(request: pytest.FixtureRequest) -> Iterator[SparkSession]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    conf = {
        "spark.sql.adaptive.enabled": "true",
        "spark.default.parallelism": "2",
        "spark.sql.streaming.stopTimeout": "30s",
    }
    server: S3Server | None = None
    if _wants_s3(request.session):
        try:
            server = shared.acquire()
        except SegcatError:
            server = None  # ``s3_spark`` reports it; the other Spark tests still run
        else:
            conf.update(s3_conf(server.endpoint, server.region))
    session = local_session("segcat-tests", "local[2]", shuffle_partitions=2, conf=conf)
    session.sparkContext.setLogLevel("ERROR")
    try:
        yield session
        if session.sparkContext._jsc is not None:  # the other module's teardown may have stopped it
            session.stop()
    finally:
        if server is not None:
            shared.release()


@pytest.fixture
def s3_spark(spark: SparkSession, s3_server: S3Server) -> SparkSession:
    """The session, able to read and write ``s3a://`` on ``s3_server`` (import both fixtures)."""
    if not has_hadoop_aws(spark):
        service_failure("the test Spark session started without hadoop-aws (the S3 server was not up)")
    return spark


WORKER_SPAWN_FAILURE = "Python worker failed to connect back"


def run_to_end(start: Callable[[], StreamingQuery], timeout_s: int = 300) -> StreamingQuery:
    """Start a query (``availableNow``) and wait for its end.

    Spark plans a Python source in a Python worker it spawns at the query's start; once in CI,
    under load, that spawn failed (EOF in Spark's SocketAuthHelper: "Python worker failed to
    connect back") before the query planned anything. Such a query, with no batch run, is started
    once more from the same checkpoint (a warning says so); any other failure is raised.
    """
    query = start()
    try:
        finished = query.awaitTermination(timeout_s)
    except StreamingQueryException as exc:
        if WORKER_SPAWN_FAILURE not in str(exc) or query.recentProgress:
            raise
        warnings.warn(
            f"Spark could not spawn the query's Python worker; starting it again: {exc}", stacklevel=2
        )
        query = start()
        finished = query.awaitTermination(timeout_s)
    assert finished, f"the query did not finish in {timeout_s} s"
    return query
