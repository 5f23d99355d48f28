"""segcat on a secure stack: SASL_SSL (SCRAM-SHA-512) with ACLs per principal, Redis with an ACL user.

The stack is started by the test itself (``segcat stack up --secure`` as a library call): a CA
and a broker certificate made for the run, three principals (writer, reader, materializer),
StandardAuthorizer ACLs, and a Redis ACL user limited to segcat's keys. Checked: write →
materialize → read → watch, Spark append / read / stream, the reader refused a commit with
``NotAuthorized`` and nothing written, a wrong password naming the setting to fix, and no
password in any log of the run.
"""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import segcat.spark_integration as si
from segcat import Catalog, load_catalog
from segcat import local_stack as stack
from segcat.catalog.config import Config
from segcat.catalog.errors import ConfigError, NotAuthorized
from segcat.catalog.protocol.version_change import VersionChange
from segcat.catalog.storage.redis.store import RedisStore
from segcat.local_stack.layout import Layout
from segcat.local_stack.settings import StackSettings
from tests.factories import segment
from tests.materializer_support import wait_for_head
from tests.private_stack import client_config, private_settings, running_stack
from tests.spark_support import run_to_end, spark

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]
__all__ = ["spark"]

GROUP = "segcat-materializer-secure-test"


class SecureStack:
    def __init__(self, settings: StackSettings, warehouse: Path) -> None:
        self.settings = settings
        self.warehouse = warehouse
        self.materializer_log = settings.home / "logs" / "materializer-under-test.log"

    def config(self, principal: str) -> Config:
        return client_config(self.settings, self.warehouse, principal)

    def secrets(self) -> list[str]:
        """Every password of the run (Kafka principals, Redis users, S3 keys)."""
        found = []
        for path in Layout.of(self.settings).secrets.rglob("*"):
            if path.is_file() and "tls" not in path.parts:
                text = path.read_text(errors="replace").strip()
                if len(text) >= 8 and "BEGIN" not in text:  # passwords and keys, not the certificates
                    found.append(text)
        return found


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureStack]:
    root = tmp_path_factory.mktemp("secure")
    settings = private_settings(root / "stack", secure=True)
    with running_stack(settings):
        yield SecureStack(settings, root / "warehouse")


@pytest.fixture(scope="module")
def materialized(secure: SecureStack) -> Iterator[subprocess.Popen[bytes]]:
    """``python -m segcat.materializer`` as the materializer principal, its log kept for the grep."""
    env = {
        **os.environ,
        **stack.client_environment(secure.settings, "materializer"),
        "SEGCAT_WAREHOUSE": str(secure.warehouse),
        "SEGCAT_HOME": str(secure.settings.home / "client"),
        "SEGCAT_KEYFRAME_EVERY_COMMITS": "3",
    }
    secure.materializer_log.parent.mkdir(parents=True, exist_ok=True)
    with secure.materializer_log.open("wb") as out:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "segcat.materializer",
                "--pattern",
                r"^segcat\.secure\..*",
                "--group",
                GROUP,
                "--metrics-port",
                "0",
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    yield proc
    proc.terminate()
    proc.wait(30)


def test_write_materialize_read_and_watch(secure: SecureStack, materialized: subprocess.Popen[bytes]) -> None:
    writer_cfg, reader_cfg = secure.config("writer"), secure.config("reader")
    name = f"secure.t_{uuid.uuid4().hex[:8]}"
    Catalog(writer_cfg).create_table(name)
    reader_table = Catalog(reader_cfg).load_table(name)
    got: list[VersionChange] = []

    def follow() -> None:
        with reader_table.watch(0, poll_s=0.2) as watcher:
            for change in watcher:
                got.append(change)
                if len(got) == 4:
                    return

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    with load_catalog(writer_cfg).load_table(name) as writer:
        versions = [writer.append([segment(f"s{k}", "p1", rows=k + 1)]) for k in range(4)]
    thread.join(60)
    assert [c.version for c in got] == versions

    head = wait_for_head(RedisStore.from_config(reader_cfg), name, versions[-1])
    assert head.offset >= versions[-1]
    snap = reader_table.snapshot()
    assert snap.version == versions[-1] and snap.live_count == 4 and snap.live_rows == 1 + 2 + 3 + 4
    assert reader_table.snapshot(versions[1]).live_count == 2
    assert materialized.poll() is None, "the materializer stopped"


def test_reader_principal_cannot_commit(secure: SecureStack) -> None:
    name = f"secure.r_{uuid.uuid4().hex[:8]}"
    writer_cfg = secure.config("writer")
    table = Catalog(writer_cfg).create_table(name)
    with load_catalog(writer_cfg).load_table(name) as writer:
        writer.append([segment("kept", "p1")])
    before = table.snapshot().version
    with (
        pytest.raises(NotAuthorized, match="principal 'reader'") as refused,
        load_catalog(secure.config("reader")).load_table(name) as writer,
    ):
        writer.append([segment("refused", "p1")])
    assert "nothing was written" in str(refused.value)
    with pytest.raises(NotAuthorized):
        Catalog(secure.config("reader")).create_table(f"secure.n_{uuid.uuid4().hex[:8]}")
    after = Catalog(writer_cfg).load_table(name)
    assert after.snapshot().version == before and after.snapshot().live_count == 1


def _segcat(secure: SecureStack, principal: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The ``segcat`` command as ``principal``, in a process of its own."""
    env = {
        **os.environ,
        **stack.client_environment(secure.settings, principal),
        "SEGCAT_WAREHOUSE": str(secure.warehouse),
        "SEGCAT_HOME": str(secure.settings.home / "client"),
        "SEGCAT_REQUEST_TIMEOUT_S": "15",
    }
    return subprocess.run(
        [sys.executable, "-c", "from segcat.cli import main; main()", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_table_administration_without_write_is_not_authorized(secure: SecureStack) -> None:
    """Drop, undrop and purge by a principal that may read the topic but not write it: the
    same ``NotAuthorized`` (exit 6, one line, no traceback) as a refused data commit, nothing
    written. Each writes through the one producer path and its one mapping of Kafka's errors."""
    name = f"secure.a_{uuid.uuid4().hex[:8]}"
    writer_cfg = secure.config("writer")
    table = Catalog(writer_cfg).create_table(name)
    with load_catalog(writer_cfg).load_table(name) as writer:
        writer.append([segment("kept", "p1")])
    end = table.head_offset()

    def refused(*args: str) -> str:
        result = _segcat(secure, "reader", *args)
        assert result.returncode == 6, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: NotAuthorized"), result.stderr
        assert "principal 'reader'" in lines[0] and "nothing was written" in lines[0]
        assert table.head_offset() == end, "a refused administration wrote a record"
        return lines[0]

    refused("table", "drop", name)
    assert not table.snapshot().dropped
    table.catalog.drop_table(name)
    end = table.head_offset()
    refused("table", "undrop", name)
    refused("table", "purge", name, "--yes")
    assert table.snapshot(include_dropped=True).dropped


def test_wrong_password_names_the_setting(secure: SecureStack) -> None:
    wrong = "not-the-password-" + uuid.uuid4().hex[:6]
    cfg = client_config(
        secure.settings,
        secure.warehouse,
        "writer",
        SEGCAT_KAFKA_SASL_PASSWORD=wrong,
        SEGCAT_REQUEST_TIMEOUT_S="8",
    )
    with pytest.raises(ConfigError) as refused:
        Catalog(cfg).load_table("secure.anything").snapshot()
    message = str(refused.value)
    assert "SEGCAT_KAFKA_SASL_PASSWORD" in message and wrong not in message
    result = subprocess.run(
        [sys.executable, "-c", "from segcat.cli import main; main()", "table", "list"],
        env={**os.environ, **{k: v for k, v in cfg_env(secure, wrong).items()}},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert "SEGCAT_KAFKA_SASL_PASSWORD" in result.stderr
    assert wrong not in result.stderr + result.stdout and "Traceback" not in result.stderr


def cfg_env(secure: SecureStack, password: str) -> dict[str, str]:
    return {
        **stack.client_environment(secure.settings, "writer"),
        "SEGCAT_KAFKA_SASL_PASSWORD": password,
        "SEGCAT_REQUEST_TIMEOUT_S": "8",
        "SEGCAT_WAREHOUSE": str(secure.warehouse),
        "SEGCAT_HOME": str(secure.settings.home / "client"),
    }


@pytest.mark.spark
def test_spark_append_read_and_stream(spark: SparkSession, secure: SecureStack, tmp_path: Path) -> None:
    writer_cfg, reader_cfg = secure.config("writer"), secure.config("reader")
    name = f"secure.s_{uuid.uuid4().hex[:8]}"
    Catalog(writer_cfg).create_table(name)
    day = dt.date(2024, 1, 1)
    rows = [(i, day, f"u{i % 3}") for i in range(30)]
    df = spark.createDataFrame(rows, "id BIGINT, day DATE, user STRING")
    version = si.write(df, name, partition_by="day", config=writer_cfg)
    assert sorted(r["id"] for r in si.read(spark, name, config=reader_cfg).collect()) == list(range(30))
    query = run_to_end(
        lambda: (
            spark.readStream.format("segcat")
            .option("view", "versions")
            .option("table", name)
            .options(**si.source_options(reader_cfg))
            .load()
            .writeStream.format("memory")
            .queryName(f"secure_{uuid.uuid4().hex[:6]}")
            .option("checkpointLocation", str(tmp_path / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        ),
        180,
    )
    seen = [r["version"] for r in spark.sql(f"SELECT version FROM {query.name}").collect()]
    assert version in seen


def test_stack_env_prints_settings_but_no_secret(secure: SecureStack) -> None:
    """`segcat stack env` gives the exact lines a client needs; secrets are read by the shell."""
    s = secure.settings
    env = {
        **os.environ,
        "SEGCAT_HOME": str(s.home),
        "SEGCAT_STACK_KAFKA_PORT": str(s.kafka_port),
        "SEGCAT_STACK_KAFKA_CONTROLLER_PORT": str(s.kafka_controller_port),
        "SEGCAT_STACK_REDIS_PORT": str(s.redis_port),
    }
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from segcat.cli import main; main()",
            "stack",
            "env",
            "--principal",
            "reader",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    assert "export SEGCAT_KAFKA_SASL_USERNAME=reader" in out
    assert f'export SEGCAT_KAFKA_SASL_PASSWORD="$(cat {s.home}/secrets/kafka-reader.password)"' in out
    assert "export SEGCAT_REDIS_USERNAME=" in out and "SEGCAT_KAFKA_SSL_CA_LOCATION=" in out
    assert not [secret for secret in secure.secrets() if secret in out]
    sourced = subprocess.run(
        ["bash", "-c", out + '\necho "$SEGCAT_KAFKA_SASL_PASSWORD"'],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    ).stdout.strip()
    assert sourced == stack.client_environment(s, "reader")["SEGCAT_KAFKA_SASL_PASSWORD"]


def test_no_secret_in_any_log(secure: SecureStack, materialized: subprocess.Popen[bytes]) -> None:
    """Runs last: every log the run wrote (brokers, Redis, S3, the materializer) is free of passwords."""
    time.sleep(1)
    secrets = secure.secrets()
    assert len(secrets) >= 4, f"expected the principals' and Redis' passwords, found {len(secrets)}"
    logs = [p for p in (secure.settings.home / "logs").rglob("*") if p.is_file()]
    assert secure.materializer_log in logs and len(logs) >= 3
    for path in logs:
        text = path.read_text(errors="replace")
        for secret in secrets:
            assert secret not in text, f"a password appears in {path}"
