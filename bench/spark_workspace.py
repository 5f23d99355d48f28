"""A Spark benchmark's workspace: one local session, a private warehouse, and clean-up after.

Every Spark scenario needs the same three things and the same ending: a ``si.local_session()``
quiet enough to read the benchmark's own progress, a warehouse of its own under a temporary
directory (its files never mix with the stack's), and, unless ``--keep``, the tables it created
and that warehouse removed when it ends, also when it fails.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from bench.runner import Context, progress
from segcat.catalog.config import Config
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol.names import table_name

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class SparkWorkspace:
    """The session, the private warehouse and its config, and the tables to drop at the end."""

    spark: SparkSession
    work: Path
    config: Config
    created: list[str] = field(default_factory=list)


@contextmanager
def spark_workspace(ctx: Context, name: str) -> Iterator[SparkWorkspace]:
    """A ``SparkWorkspace`` named ``segcat-bench-<name>``; the session stops and, unless
    ``ctx.args.keep``, the created tables and the warehouse go when the block ends."""
    import segcat.spark_integration as si

    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    work = Path(tempfile.mkdtemp(prefix=f"segcat-bench-{name}-"))
    config = replace(ctx.config, warehouse=str(work / "warehouse"))
    spark = si.local_session(f"segcat-bench-{name}")
    spark.sparkContext.setLogLevel("ERROR")
    workspace = SparkWorkspace(spark, work, config)
    try:
        yield workspace
    finally:
        spark.stop()
        if ctx.args.keep:
            progress(f"kept tables {workspace.created} and the warehouse {work}")
        else:
            admin = TopicAdmin(config)
            for created in workspace.created:
                admin.delete(table_name(created))
            shutil.rmtree(work, ignore_errors=True)
