"""A streaming query into a segcat table that ``kill -9``s its own Spark application at a chosen
point of a chosen batch: ``python -m tests.spark_integration.sink_kill_job ARGS_JSON``.

The fault (``SEGCAT_SINK_FAULT`` = ``before:B`` or ``after:B``) fires in the sink's committer,
a Python worker of the driver: ``before`` once batch B's files are written and before its
commit, ``after`` once its commit is accepted and before Spark writes the batch to its
checkpoint's commit log. It SIGKILLs the driver's JVM, the driver's Python process and itself:
nothing runs a cleanup, as when a machine dies. Workers import this module (the data source's
class lives here), so it must be importable by them: the test runs it with ``PYTHONPATH`` set.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from pathlib import Path

from pyspark.sql.datasource import DataSourceStreamWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from segcat.spark_integration.datasource import SegcatDataSource
from segcat.spark_integration.stream_sink import SegcatStreamWriter

FAULT = "SEGCAT_SINK_FAULT"
PIDS = "SEGCAT_SINK_PIDS"


def _die() -> None:
    pids = json.loads(Path(os.environ[PIDS]).read_text())
    for pid in (pids["jvm"], pids["driver"]):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


class FaultyWriter(SegcatStreamWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        phase, _, batch = os.environ.get(FAULT, "").partition(":")
        hit = batch != "" and int(batch) == batchId
        if hit and phase == "before":
            _die()
        super().commit(messages, batchId)
        if hit and phase == "after":
            _die()


class FaultySink(SegcatDataSource):
    @classmethod
    def name(cls) -> str:
        return "segcat_faulty"

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        writer = super().streamWriter(schema, overwrite)
        assert isinstance(writer, SegcatStreamWriter)
        return FaultyWriter(writer.options, writer.spec, writer.overwrite)


def main(args: dict[str, object]) -> None:
    from segcat.spark_integration.session import local_session

    spark = local_session("segcat-sink-kill", "local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(FaultySink)
    jvm_pid = spark._jvm.java.lang.ProcessHandle.current().pid()  # type: ignore[union-attr]
    Path(os.environ[PIDS]).write_text(json.dumps({"jvm": int(jvm_pid), "driver": os.getpid()}))
    options = args["options"]
    assert isinstance(options, dict)
    query = (
        spark.readStream.schema("id BIGINT, name STRING")
        .option("maxFilesPerTrigger", 1)
        .json(str(args["inputs"]))
        .writeStream.format("segcat_faulty")
        .options(**options)
        .option("checkpointLocation", str(args["checkpoint"]))
        .trigger(availableNow=True)
        .start(str(args["table"]))
    )
    query.awaitTermination()
    spark.stop()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
