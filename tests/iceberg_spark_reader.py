"""Spark's Iceberg reader, in a Python process of its own: ``python -m tests.iceberg_spark_reader SPEC``.

A JVM's classpath is fixed when it starts and one Python process holds one SparkContext, so the
Iceberg runtime cannot join the tests' shared session (``tests/spark_support.py``) without
changing it for every other Spark test. This process starts a session with
``SPARK_ICEBERG_RUNTIME`` (``spark.jars.packages``: fetched once into Spark's Ivy cache, as
``spark_integration.session`` fetches hadoop-aws; later runs resolve it from the cache), reads
every snapshot the spec asks for, and writes each answer as an Arrow IPC file, or its error.

``--probe`` reads a two-snapshot table pyiceberg writes in a temporary directory and prints
``OK`` or the first line of the error: ``probe()`` is how the harness learns whether the runtime
loads on this Spark (on pyspark 4.3 it does not: ``iceberg_readers.SPARK_ICEBERG_BROKEN``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa

from tests.iceberg_readers import SPARK_ICEBERG_RUNTIME, At, IcebergTarget, ReaderUnavailable

CATALOG = "segcat_rest"
TIMEOUT_S = 900.0
"""The first run fetches the runtime (tens of MB) from Maven Central into Ivy's cache."""


def _session(target: IcebergTarget | None) -> Any:
    from segcat.spark_integration.session import local_session

    conf = {"spark.jars.packages": SPARK_ICEBERG_RUNTIME}
    if target is not None and target.rest_uri is not None:
        conf[f"spark.sql.catalog.{CATALOG}"] = "org.apache.iceberg.spark.SparkCatalog"
        conf[f"spark.sql.catalog.{CATALOG}.type"] = "rest"
        conf[f"spark.sql.catalog.{CATALOG}.uri"] = target.rest_uri
        if target.token is not None:
            conf[f"spark.sql.catalog.{CATALOG}.token"] = target.token
    spark = local_session("segcat-iceberg-reader", "local[1]", shuffle_partitions=1, conf=conf)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _read(spark: Any, target: IcebergTarget, at: At) -> pa.Table:
    if target.rest_uri is not None and target.identifier is not None:
        namespace, name = target.identifier.split(".", 1)
        sql = f"SELECT * FROM {CATALOG}.`{namespace}`.`{name}`"
        if at.snapshot_id is not None:
            sql += f" VERSION AS OF {int(at.snapshot_id)}"
        elif at.timestamp_ms is not None:
            sql += f" TIMESTAMP AS OF timestamp_millis({int(at.timestamp_ms)})"
        frame = spark.sql(sql)
    else:
        reader = spark.read.format("iceberg")
        if at.snapshot_id is not None:
            reader = reader.option("versionAsOf", str(at.snapshot_id))
        elif at.timestamp_ms is not None:
            when = datetime.fromtimestamp(at.timestamp_ms / 1000, UTC)
            reader = reader.option("timestampAsOf", when.strftime("%Y-%m-%d %H:%M:%S.%f"))
        frame = reader.load(target.metadata_location)
    table: pa.Table = frame.toArrow()
    return table


def _first_line(exc: BaseException) -> str:
    lines = [line for line in str(exc).splitlines() if line.strip() and not line.lstrip().startswith("at ")]
    return " ".join(lines[:2])[:800] or type(exc).__name__


def _serve(spec_path: Path) -> None:
    spec = json.loads(spec_path.read_text())
    target = IcebergTarget(**spec["target"])
    out = Path(spec["out"])
    spark = _session(target)
    try:
        for i, at in enumerate(spec["reads"]):
            try:
                table = _read(spark, target, At(**at))
            except Exception as exc:  # the parent raises it with the reader's name
                (out / f"{i}.error").write_text(_first_line(exc))
                continue
            with pa.OSFile(str(out / f"{i}.arrow"), "wb") as sink, pa.ipc.new_file(sink, table.schema) as w:
                w.write_table(table)
    finally:
        spark.stop()


def _probe() -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    with tempfile.TemporaryDirectory() as tmp:
        catalog = SqlCatalog("probe", uri=f"sqlite:///{tmp}/c.db", warehouse=f"file://{tmp}/wh")
        catalog.create_namespace("ns")
        table = catalog.create_table("ns.t", schema=pa.schema([("a", pa.int64())]))
        table.append(pa.table({"a": [1, 2]}))
        table.append(pa.table({"a": [3]}))
        target = IcebergTarget(table.metadata_location)
        spark = _session(None)
        try:
            rows = _read(spark, target, At()).column("a").to_pylist()
            print("OK" if sorted(rows) == [1, 2, 3] else f"wrong rows {rows}")
        except Exception as exc:
            print(_first_line(exc))
        finally:
            spark.stop()


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SPARK_LOCAL_IP": os.environ.get("SPARK_LOCAL_IP", "127.0.0.1")}
    root = Path(__file__).resolve().parent.parent
    return subprocess.run(
        [sys.executable, "-m", "tests.iceberg_spark_reader", *args],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


def probe() -> str | None:
    """None when Spark reads an Iceberg table with the runtime here, else the error it gave."""
    done = _run(["--probe"])
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    if done.returncode == 0 and lines and lines[-1] == "OK":
        return None
    if lines:
        return lines[-1]
    return f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:] or ''}"


def read_in_subprocess(target: IcebergTarget, reads: list[At]) -> list[pa.Table]:
    """Each of ``reads`` of ``target`` by Spark's Iceberg reader (one JVM for all of them)."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "spec.json"
        spec.write_text(
            json.dumps(
                {
                    "target": target.__dict__,
                    "reads": [at.__dict__ for at in reads],
                    "out": tmp,
                }
            )
        )
        done = _run([str(spec)])
        if done.returncode != 0:
            tail = " ".join(done.stderr.strip().splitlines()[-3:])
            raise ReaderUnavailable(
                "spark-iceberg", f"the Spark process failed (exit {done.returncode}): {tail}"
            )
        tables = []
        for i, at in enumerate(reads):
            error = Path(tmp) / f"{i}.error"
            if error.exists():
                raise RuntimeError(f"spark-iceberg, {at}: {error.read_text()}")
            with pa.memory_map(str(Path(tmp) / f"{i}.arrow")) as source:
                tables.append(pa.ipc.open_file(source).read_all())
        return tables


def main(argv: list[str]) -> None:
    if argv == ["--probe"]:
        _probe()
    else:
        _serve(Path(argv[0]))


if __name__ == "__main__":
    main(sys.argv[1:])
