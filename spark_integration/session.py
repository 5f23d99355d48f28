"""A Spark session set up the way segcat's jobs and tests need it.

Python workers must run the interpreter segcat is installed in (they unpickle segcat's
classes), Spark must bind to loopback on machines whose hostname resolves elsewhere, and
the session's time zone is UTC so timestamps in stats, predicates and files agree.

An ``s3://`` warehouse is read by Spark's Hadoop layer as ``s3a://`` (``reader.spark_path``),
which lives in hadoop-aws, a jar pyspark does not ship. A session for such a warehouse gets
it through ``spark.jars.packages`` (Ivy, cached in the user's default Ivy directory, so only
the first session downloads anything) at the Hadoop version pyspark bundles. hadoop-aws
depends on the AWS SDK's *bundle*, one jar of every AWS service, far larger than what s3a
needs; for the versions in ``AWS_SDK_FOR_HADOOP`` the session asks for the few SDK modules s3a
uses instead. Sessions for other warehouses get no package.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from segcat import Config

HADOOP_AWS = "org.apache.hadoop:hadoop-aws"
AWS_SDK_FOR_HADOOP = {"3.5.0": "2.35.4"}
"""The AWS SDK v2 release each hadoop-aws was built against (its pom's ``aws-java-sdk-v2.version``)."""
AWS_SDK_MODULES = ("s3", "s3-transfer-manager")
"""What s3a loads from the SDK (their own dependencies come along); STS only for assumed roles."""
PROVIDED_BY_SPARK = ("io.netty:*", "org.apache.httpcomponents:*", "org.slf4j:*")
"""Already in pyspark's jars: a second copy from Ivy would only risk two versions of a class."""
ENV_CREDENTIALS = "software.amazon.awssdk.auth.credentials.EnvironmentVariableCredentialsProvider"
CHECKPOINT_MANAGER = "spark.sql.streaming.checkpointFileManagerClass"
FILE_SYSTEM_CHECKPOINTS = (
    "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager"
)
"""A streaming query's offset and commit logs written through Hadoop's ``FileSystem`` (write a
temp file, rename it). Spark's default goes through ``FileContext``, which on a local disk makes
Hadoop fork ``chmod`` and ``readlink`` for every log file (pyspark ships no native Hadoop library),
two processes on every micro-batch's path; ``FileSystem`` renames in-process (atomic on a local
disk and on HDFS). A ``conf`` passed to ``local_session`` overrides it."""


def local_session(
    app_name: str = "segcat",
    master: str = "local[2]",
    *,
    shuffle_partitions: int = 2,
    conf: Mapping[str, str] | None = None,
    config: Config | None = None,
    s3: bool | None = None,
) -> SparkSession:
    """Get (or create) a session with the ``segcat`` data source registered.

    Streaming checkpoints are written through Hadoop's ``FileSystem`` (``FILE_SYSTEM_CHECKPOINTS``).
    ``s3`` (default: whether ``config``'s warehouse is ``s3://``) adds hadoop-aws and the s3a
    settings of ``s3_conf`` for ``config``'s endpoint and region; ``conf`` overrides any of it.
    """
    use_s3 = wants_s3(config) if s3 is None else s3
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
    settings: dict[str, str] = {CHECKPOINT_MANAGER: FILE_SYSTEM_CHECKPOINTS}
    if use_s3:
        settings.update(s3_conf(config.s3_endpoint if config else None, config.s3_region if config else None))
    settings.update(conf or {})
    for key, value in settings.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if use_s3 and not has_hadoop_aws(spark):
        # getOrCreate hands back a running session as it is: its JVM cannot load s3a any more.
        raise RuntimeError(
            "a Spark session without hadoop-aws is already running in this process, so it cannot "
            "read an s3:// warehouse; stop it (spark.stop()) before asking for an S3 session"
        )
    register(spark)
    return spark


def has_hadoop_aws(spark: SparkSession) -> bool:
    """Whether the session's JVM really loaded hadoop-aws. ``spark.conf`` is no proof: getOrCreate
    copies a builder's settings onto a running session's conf although its classpath stays as it was."""
    jars: Any = spark.sparkContext._jsc.sc().listJars()
    return "hadoop-aws" in str(jars.mkString(","))


def wants_s3(config: Config | None) -> bool:
    """Whether ``config``'s warehouse is on S3 (and a session for it needs hadoop-aws)."""
    return config is not None and config.warehouse.startswith(("s3://", "s3a://"))


def bundled_hadoop_version() -> str:
    """The Hadoop version of the client jars pyspark runs with (hadoop-aws must match it exactly)."""
    import pyspark

    homes = [Path(os.environ["SPARK_HOME"])] if os.environ.get("SPARK_HOME") else []
    homes.append(Path(pyspark.__file__).parent)
    for home in homes:
        for jar in sorted((home / "jars").glob("hadoop-client-api-*.jar")):
            found = re.fullmatch(r"hadoop-client-api-(\d+(?:\.\d+)+)\.jar", jar.name)
            if found:
                return found.group(1)
    raise RuntimeError(f"no hadoop-client-api jar in {', '.join(str(h / 'jars') for h in homes)}")


def s3_packages(hadoop_version: str | None = None) -> tuple[list[str], list[str]]:
    """``(spark.jars.packages, spark.jars.excludes)`` entries that give Spark a working s3a.

    For a Hadoop version in ``AWS_SDK_FOR_HADOOP``: hadoop-aws without the SDK bundle, plus the
    SDK modules s3a uses at the release hadoop-aws was built with. Otherwise plain hadoop-aws,
    which brings the whole bundle: correct, only a much larger first download.
    """
    version = hadoop_version or bundled_hadoop_version()
    packages = [f"{HADOOP_AWS}:{version}"]
    sdk = AWS_SDK_FOR_HADOOP.get(version)
    if sdk is None:
        return packages, []
    packages += [f"software.amazon.awssdk:{module}:{sdk}" for module in AWS_SDK_MODULES]
    return packages, ["software.amazon.awssdk:bundle", *PROVIDED_BY_SPARK]


def s3_conf(
    endpoint: str | None = None, region: str | None = None, *, hadoop_version: str | None = None
) -> dict[str, str]:
    """Spark settings for reading and writing ``s3a://`` (hadoop-aws plus the s3a client settings).

    With an ``endpoint`` (S3Proxy, MinIO: ``http://host:port``): path-style buckets, TLS unless
    it says ``http://`` (as pyarrow decides), and keys from the standard ``AWS_*`` variables
    only, as pyarrow reads them (``objectstore.s3_filesystem``), so no instance-metadata lookup
    stalls a laptop. Without one, s3a's own AWS defaults (its credential chain reads those
    variables first too). The region falls back like pyarrow's: ``AWS_REGION``,
    ``AWS_DEFAULT_REGION``, then ``us-east-1`` for an endpoint. The JVM reads the variables when
    it starts, so they must be set before the session is.
    """
    packages, excludes = s3_packages(hadoop_version)
    conf = {"spark.jars.packages": ",".join(packages)}
    if excludes:
        conf["spark.jars.excludes"] = ",".join(excludes)
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if endpoint:
        conf["spark.hadoop.fs.s3a.endpoint"] = endpoint
        conf["spark.hadoop.fs.s3a.path.style.access"] = "true"
        conf["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(not endpoint.startswith("http://")).lower()
        conf["spark.hadoop.fs.s3a.aws.credentials.provider"] = ENV_CREDENTIALS
        region = region or "us-east-1"
    if region:
        conf["spark.hadoop.fs.s3a.endpoint.region"] = region
    return conf


def register(spark: SparkSession) -> None:
    """Register the ``segcat`` Python data source (``spark.read/readStream.format("segcat")``)."""
    from segcat.spark_integration.datasource import SegcatDataSource

    spark.dataSource.register(SegcatDataSource)
