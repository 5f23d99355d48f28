"""``wait_until_ready`` and ``segcat warehouse ready``: the compose stack's bucket job, on a
real S3 API (S3Proxy) and on a local directory."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pyarrow.fs as pafs
import pytest

from segcat.catalog.config import Config
from segcat.catalog.errors import ServiceUnavailable
from segcat.catalog.storage.warehouse_ready import wait_until_ready
from tests.s3_server import S3Server, s3_server  # noqa: F401  (fixture)

SEGCAT = Path(sys.executable).with_name("segcat")


def _config(server: S3Server, bucket: str) -> Config:
    base = Config.load(env={})
    return replace(
        base, warehouse=f"s3://{bucket}/warehouse", s3_endpoint=server.endpoint, s3_region=server.region
    )


def test_a_missing_bucket_is_created_only_when_asked(s3_server: S3Server) -> None:  # noqa: F811
    bucket = f"wr-{uuid.uuid4().hex[:10]}"
    config = _config(s3_server, bucket)
    with pytest.raises(ServiceUnavailable, match=bucket):
        wait_until_ready(config, create_bucket=False, wait_s=0)
    assert s3_server.filesystem().get_file_info(bucket).type == pafs.FileType.NotFound

    made = wait_until_ready(config, create_bucket=True, wait_s=10)
    assert made.created_bucket
    assert s3_server.filesystem().get_file_info(bucket).type == pafs.FileType.Directory
    again = wait_until_ready(config, create_bucket=True, wait_s=10)
    assert not again.created_bucket and again.attempts == 1


def test_wrong_keys_are_not_ready_and_the_wait_is_bounded(
    s3_server: S3Server,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    config = _config(s3_server, s3_server.bucket)
    started = time.monotonic()
    with pytest.raises(ServiceUnavailable, match=r"did not answer within 2s \(\d+ attempts\)") as caught:
        wait_until_ready(config, create_bucket=True, wait_s=2)
    assert time.monotonic() - started < 15
    assert "not-the-secret" not in str(caught.value)


def test_an_endpoint_that_is_not_there_yet_is_retried_until_the_deadline() -> None:
    config = replace(
        Config.load(env={}),
        warehouse="s3://nowhere/warehouse",
        s3_endpoint="http://127.0.0.1:9",
        s3_region="us-east-1",
    )
    slept: list[float] = []
    # deadline at 1.5; each failed attempt reads the clock to check it, then to size the sleep
    ticks = iter([0.0, 0.0, 0.5, 1.0, 1.2, 1.6])
    with pytest.raises(ServiceUnavailable, match="3 attempts"):
        wait_until_ready(
            config, create_bucket=True, wait_s=1.5, sleep=slept.append, clock=lambda: next(ticks)
        )
    assert slept == [1.0, pytest.approx(0.3)]


def test_a_local_warehouse_is_made_and_listed(tmp_path: Path) -> None:
    config = replace(Config.load(env={}), warehouse=str(tmp_path / "lake" / "warehouse"))
    found = wait_until_ready(config, create_bucket=False, wait_s=0)
    assert (tmp_path / "lake" / "warehouse").is_dir() and not found.created_bucket


def test_the_command_names_a_bad_wait_and_writes_nothing(tmp_path: Path) -> None:
    warehouse = tmp_path / "never"
    env = {**os.environ, "SEGCAT_WAREHOUSE": str(warehouse)}
    done = subprocess.run(
        [str(SEGCAT), "warehouse", "ready", "--wait", "soon"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "--wait" in done.stderr and "Traceback" not in done.stderr
    assert not warehouse.exists()
    ok = subprocess.run(
        [str(SEGCAT), "warehouse", "ready"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    assert "is ready" in ok.stdout and warehouse.is_dir()
