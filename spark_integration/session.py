"""A Spark session set up the way segcat's jobs and tests need it.

Python workers must run the interpreter segcat is installed in (they unpickle segcat's
classes), Spark must bind to loopback on machines whose hostname resolves elsewhere, and
the session's time zone is UTC so timestamps in stats, predicates and files agree.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from pyspark.sql import SparkSession


def local_session(
    app_name: str = "segcat",
    master: str = "local[2]",
    *,
    shuffle_partitions: int = 2,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Get (or create) a session with the ``segcat`` data source registered."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", os.environ["SPARK_LOCAL_IP"])
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    register(spark)
    return spark


def register(spark: SparkSession) -> None:
    """Register the ``segcat`` Python data source (``spark.read/readStream.format("segcat")``)."""
    from segcat.spark_integration.datasource import SegcatDataSource

    spark.dataSource.register(SegcatDataSource)
