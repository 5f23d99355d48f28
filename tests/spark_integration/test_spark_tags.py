"""Spark reads a tag by name: ``si.read(version="name")`` and the source's ``versionAsOf``."""

from __future__ import annotations

from pathlib import Path

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


def test_si_vacuum_keeps_what_a_tagged_version_lists(
    spark: SparkSession, config: Config, table: Table
) -> None:
    """The Spark vacuum plans as the in-process one: a tagged version older than the horizon
    keeps its files with zero grace; dropping the tag lets them go."""
    for k in range(2):
        write(spark, config, table, range(k, k + 1))
    tagged = table.head_offset()
    si.compact(spark, table, config=config)
    kept = {Path(p) for p in table.snapshot(tagged).files()}
    table.tag("before-compaction", tagged)
    report = si.vacuum(spark, table, retain_versions=1, grace_ms=0, config=config)
    assert report.kept_by_tag == len(kept) and all(p.exists() for p in kept)
    assert ids(si.read(spark, table.name.qualified, version="before-compaction", config=config)) == [0, 1]
    table.drop_tag("before-compaction")
    released = si.vacuum(spark, table, retain_versions=1, grace_ms=0, config=config)
    assert released.deleted == len(kept) and not any(p.exists() for p in kept)
