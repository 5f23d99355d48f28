"""Spark integration: write and compact segments, read a version, follow versions as a stream.

- ``write(df, table, mode=..., partition_by=...)`` / ``stage_write``: executors write Parquet
  segments and describe them from the footers; the driver publishes one commit.
- ``compact(spark, table, where=..., target_file_rows=...)`` / ``stage_compaction``: one
  COMPACT that drops exactly what it read.
- ``read(spark, table, version=..., as_of=..., where=...)``: the live, pruned files of a
  version with soft deletes applied.
- ``format("segcat")``: the Python data source (``segcat.spark_integration.datasource``), registered
  by ``register(spark)`` or ``local_session()``: the table's rows (batch or stream) by default,
  its versions (``view=versions``) or one snapshot's segments (``view=segments``).
- ``find_orphans_spark(spark, root, referenced, protected_prefixes, older_than_ms)`` /
  ``delete_files_spark(spark, root, paths)``: vacuum's orphan listing and deletion on the
  executors, for tables of millions of files; ``vacuum(spark, table, …)`` is the whole
  vacuum (docs/LIFECYCLE.md) with those two doing the listing and the deleting.
"""

from segcat.spark_integration.options import config_from_options, source_options
from segcat.spark_integration.reader import read, read_snapshot
from segcat.spark_integration.session import local_session, register
from segcat.spark_integration.vacuum import delete_files_spark, find_orphans_spark, vacuum
from segcat.spark_integration.writer import StagedWrite, compact, stage_compaction, stage_write, write

__all__ = [
    "StagedWrite",
    "compact",
    "config_from_options",
    "delete_files_spark",
    "find_orphans_spark",
    "local_session",
    "read",
    "read_snapshot",
    "register",
    "source_options",
    "stage_compaction",
    "stage_write",
    "vacuum",
    "write",
]
