"""docker-compose.yml, run for real: the stack users start, built and started on this machine.

The module brings the compose stack up once (``containers.compose_stack.up``: the images built
here, host networking, free ports) and down again with its volumes. The tests then use it as a
user does from the host: the library commits through it, the materializer inside compose
materializes what was committed, the dashboard answers, and a Spark job on the host writes to
it. Every address is first checked to reach this stack and no other (``verify``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pyarrow as pa
import pytest

import segcat
from containers import compose_stack, images
from containers.compose_stack import ComposeStack
from containers.engine import EngineError
from segcat.catalog.config import Config
from tests.services import REPO_ROOT, service_failure

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]

MATERIALIZED_WITHIN_S = 60.0


@pytest.fixture(scope="module")
def stack(local_images: images.LocalImages) -> Iterator[ComposeStack]:
    try:
        started = compose_stack.up(say=lambda _m: None, built=local_images)
    except EngineError as exc:
        service_failure(f"the compose stack did not start: {exc}")
    try:
        yield started
    finally:
        compose_stack.down(say=lambda _m: None)


@pytest.fixture(scope="module")
def host_env(stack: ComposeStack) -> Iterator[dict[str, str]]:
    """The host's environment pointed at the stack, as a user's shell would be."""
    saved = dict(os.environ)
    os.environ.update(stack.client_env())
    try:
        yield {**saved, **stack.client_env()}
    finally:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture(scope="module")
def catalog(host_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[segcat.Catalog]:
    config = Config.load(env={**host_env, "SEGCAT_HOME": str(tmp_path_factory.mktemp("segcat-home"))})
    with segcat.load_catalog(replace(config, request_timeout_s=30)) as opened:
        yield opened


def _dashboard(stack: ComposeStack, path: str, **kwargs: Any) -> httpx.Response:
    headers = {"Authorization": f"Bearer {stack.token}"}
    return httpx.get(f"{stack.dashboard_url}{path}", headers=headers, timeout=15, **kwargs)


def _materialized(stack: ComposeStack, table: str, version: int) -> dict[str, Any]:
    """The dashboard's view of ``table`` once the compose materializer holds ``version``."""
    deadline = time.monotonic() + MATERIALIZED_WITHIN_S
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        answer = _dashboard(stack, f"/api/tables/{table}")
        if answer.status_code == 200:
            body = answer.json()
            if body.get("materialized_version") == version:
                return body
        time.sleep(0.5)
    raise AssertionError(f"{table}: the materializer in compose did not reach version {version}: {body}")


def test_every_service_is_healthy_and_answers_as_this_stack(stack: ComposeStack) -> None:
    rows = compose_stack.compose(stack, "ps", "--all", "--format", "{{.Service}} {{.State}} {{.Health}}")
    states = {line.split()[0]: line.split()[1:] for line in rows.stdout.splitlines() if line.strip()}
    for service in ("kafka", "redis", "materializer", "dashboard"):
        assert states.get(service) == ["running", "healthy"], (service, states)
    assert states.get("s3", [None])[0] == "running", states
    assert states.get("s3-init", [None])[0] == "exited", states
    # up() proved it already; ask again so a regression in verify() cannot hide here
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers})
    assert admin.describe_cluster(request_timeout=20).result().cluster_id == stack.cluster_id


def test_the_segcat_image_answers_without_the_stack_extra(local_images: images.LocalImages) -> None:
    """The image holds [materializer,server,spark], not [stack]: its CLI must still start and
    name the missing extra instead of failing on an import (cryptography)."""
    shown = subprocess.run(
        ["docker", "run", "--rm", "--network", "host", local_images.segcat, "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    assert "materializer" in shown.stdout and "Traceback" not in shown.stderr
    stack = subprocess.run(
        ["docker", "run", "--rm", "--network", "host", local_images.segcat, "stack", "up"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert stack.returncode != 0
    assert "segcat[stack]" in stack.stderr + stack.stdout and "Traceback" not in stack.stderr


def test_a_broker_with_another_cluster_id_fails_the_kafka_health_check(stack: ComposeStack) -> None:
    """The health check compares ids: run it against a wrong one and it must fail."""
    check = compose_stack.compose(
        stack,
        "exec",
        "-T",
        "-e",
        "CLUSTER_ID=AAAAAAAAAAAAAAAAAAAAAA",
        "kafka",
        "sh",
        "-c",
        f"/opt/kafka/bin/kafka-cluster.sh cluster-id --bootstrap-server kafka:{stack.kafka_internal_port}"
        ' 2>/dev/null | grep -qx "Cluster ID: $CLUSTER_ID"',
    )
    assert check.returncode != 0


def test_a_commit_through_the_stack_is_materialized_by_the_materializer_in_compose(
    stack: ComposeStack, catalog: segcat.Catalog
) -> None:
    name = f"compose.orders_{uuid.uuid4().hex[:8]}"
    table = catalog.create_table(name)
    rows = pa.table(
        {"id": pa.array(range(100), pa.int64()), "amount": pa.array([i * 1.5 for i in range(100)])}
    )
    version = segcat.write(table, rows)
    second = segcat.write(table, rows.slice(0, 10))
    assert second > version

    head = _materialized(stack, name, second)
    assert head["live_segments"] == 2
    assert head["materializer_lag"] == 0
    assert table.scan(version=version).to_arrow().num_rows == 100
    assert table.scan().to_arrow().num_rows == 110


def test_the_dashboard_answers_with_the_token_and_refuses_without(
    stack: ComposeStack, catalog: segcat.Catalog
) -> None:
    name = f"compose.dash_{uuid.uuid4().hex[:8]}"
    catalog.create_table(name)
    listed: list[str] = []
    deadline = time.monotonic() + 15  # the server's table directory refreshes every few seconds
    while name not in listed and time.monotonic() < deadline:
        page = _dashboard(stack, "/api/tables", params={"limit": 1000})
        assert page.status_code == 200
        listed = [t["table"] for t in page.json()["tables"]]
        time.sleep(0.5)
    assert name in listed
    assert _dashboard(stack, "/").status_code == 200
    refused = httpx.get(f"{stack.dashboard_url}/api/tables", timeout=15)
    assert refused.status_code == 401
    assert httpx.get(f"{stack.dashboard_url}/readyz", timeout=15).status_code == 200


@pytest.mark.spark
def test_a_spark_job_on_the_host_writes_to_the_stack(stack: ComposeStack, host_env: dict[str, str]) -> None:
    name = f"compose.events_{uuid.uuid4().hex[:8]}"
    job = subprocess.run(
        [
            sys.executable,
            str(REPO_ROOT / "examples" / "daily_append.py"),
            "--table",
            name,
            "--days",
            "2",
            "--rows-per-day",
            "50",
            "--start",
            "2026-11-01",
        ],
        env={**host_env, "SPARK_LOCAL_IP": "127.0.0.1"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert job.returncode == 0, job.stderr[-3000:]
    table = segcat.load_catalog().load_table(name)
    head_version = table.head_offset()
    body = _materialized(stack, name, head_version)
    assert body["live_rows"] == 100
    assert table.scan().to_arrow().num_rows == 100
