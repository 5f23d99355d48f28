"""Spark reads a tag by name: ``si.read(version="name")`` and the source's ``versionAsOf``."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

import segcat.spark_integration as si
from segcat import Table
from segcat.catalog.config import Config
from segcat.catalog.errors import VersionNotFound
from tests.spark_integration.test_spark_rows import ids, source, write
from tests.spark_support import spark

pytestmark = [pytest.mark.kafka, pytest.mark.redis]

__all__ = ["spark"]


def test_a_tag_reads_as_its_version_in_spark(spark: SparkSession, config: Config, table: Table) -> None:
    first = write(spark, config, table, range(0, 3))
    write(spark, config, table, range(3, 6))
    table.tag("first", first)
    name = table.name.qualified
    assert ids(si.read(spark, name, version="first", config=config)) == [0, 1, 2]
    assert ids(source(spark, config, table, versionAsOf="first")) == [0, 1, 2]
    segments = source(spark, config, table, view="segments", versionAsOf="first").collect()
    assert len(segments) == len(table.snapshot(first).segment_ids())
    assert ids(source(spark, config, table)) == list(range(6))
    with pytest.raises(VersionNotFound, match="no tag 'second'"):
        si.read(spark, name, version="second", config=config)
