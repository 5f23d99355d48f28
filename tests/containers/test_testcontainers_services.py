"""The catalog and the materializer on Kafka, Redis and S3 from testcontainers.

Under ``CI=true`` (or ``SEGCAT_TEST_DOCKER=1``) the module's services are testcontainers
(``tests.testcontainers_services``) of the images built on this machine; with no Docker engine
on a developer's machine it falls back to the shared local stack and the test S3 server, so
the tests still run. Whichever it is, the tests check that the addresses reach those services.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, replace

import pyarrow.fs as pafs
import pytest
import redis

from containers import engine
from segcat import Catalog
from segcat.catalog.config import Config
from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.warehouse_ready import wait_until_ready
from tests.containers.conftest import may_start_engine
from tests.materializer_support import (
    assert_outputs_match_clean_replay,
    head_offset,
    namespace,
    running_materializer,
    wait_for_head,
    write_load,
)
from tests.s3_server import s3_server  # noqa: F401  (the fallback's S3, by fixture name)
from tests.services import ResolvedServices, service_failure
from tests.testcontainers_services import ContainerServices, start

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


@dataclass(frozen=True)
class ModuleServices:
    config: Config
    source: str
    """"testcontainers" or "local-stack"."""
    containers: ContainerServices | None


@pytest.fixture(scope="module")
def module_services(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ModuleServices]:
    home = tmp_path_factory.mktemp("tc-home")
    if engine.server_version() is None and not may_start_engine():
        yield _local_stack_fallback(request, home)
        return
    images = request.getfixturevalue("local_images")
    try:
        found, stop = start(images)
    except Exception as exc:
        service_failure(f"testcontainers could not start Kafka/Redis/S3: {exc}")
    saved = dict(os.environ)
    os.environ.update(found.aws_env())
    try:
        config = _config(
            home,
            found.bootstrap_servers,
            found.redis_url,
            f"s3://{found.bucket}/warehouse",
            found.s3_endpoint,
        )
        wait_until_ready(config, create_bucket=True, wait_s=60)
        yield ModuleServices(config, "testcontainers", found)
    finally:
        stop()
        os.environ.clear()
        os.environ.update(saved)


def _local_stack_fallback(request: pytest.FixtureRequest, home: object) -> ModuleServices:
    services: ResolvedServices = request.getfixturevalue("services")
    s3 = request.getfixturevalue("s3_server")
    warehouse = f"s3://{s3.bucket}/tc-{uuid.uuid4().hex[:8]}"
    config = _config(home, services.bootstrap_servers, services.redis_url, warehouse, s3.endpoint, s3.region)
    return ModuleServices(config, "local-stack", None)


def _config(
    home: object, bootstrap: str, redis_url: str, warehouse: str, endpoint: str, region: str = "us-east-1"
) -> Config:
    """The module's config: these services, an S3 warehouse, the suite's request timeout."""
    return Config.load(
        env={
            "SEGCAT_HOME": str(home),
            "SEGCAT_BOOTSTRAP_SERVERS": bootstrap,
            "SEGCAT_REDIS_URL": redis_url,
            "SEGCAT_WAREHOUSE": warehouse,
            "SEGCAT_S3_ENDPOINT": endpoint,
            "SEGCAT_S3_REGION": region,
            "SEGCAT_REQUEST_TIMEOUT_S": "30",
        }
    )


def test_under_ci_the_services_are_testcontainers_of_the_images_built_here(
    module_services: ModuleServices,
) -> None:
    if not may_start_engine():
        pytest.skip("outside CI the module may run on the local stack")
    assert module_services.source == "testcontainers"
    found = module_services.containers
    assert found is not None
    for name, container_id in found.container_ids.items():
        state = subprocess.run(
            ["docker", "inspect", "--format", "{{.State.Running}} {{.HostConfig.NetworkMode}}", container_id],
            capture_output=True,
            text=True,
            check=True,
        )
        assert state.stdout.split() == ["true", "host"], name
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": found.bootstrap_servers})
    assert admin.describe_cluster(request_timeout=20).result().cluster_id == found.cluster_id
    client = redis.Redis.from_url(found.redis_url)
    try:
        assert client.info("server")["tcp_port"] == int(found.redis_url.rsplit(":", 1)[1].split("/")[0])
        assert client.ping()
    finally:
        client.close()


def test_commits_are_materialized_to_redis_and_s3_and_match_a_clean_replay(
    module_services: ModuleServices,
) -> None:
    ns, pattern = namespace()
    table = f"{ns}.orders"
    config = replace(
        module_services.config, keyframe_every_commits=5, keyframe_every_seconds=3600.0, metrics_port=0
    )
    catalog = Catalog(config)
    catalog.create_table(table)
    with running_materializer(config, pattern):
        accepted = write_load(config, table, commits=24, seed=25)
        assert accepted > 0
        wait_for_head(RedisStore.from_config(config), table, head_offset(config, table))
    assert_outputs_match_clean_replay(config, table)
    # the key frames are objects in the S3 bucket, not files on this machine
    if module_services.containers is not None:
        bucket = module_services.containers.bucket
        fs = _s3(module_services)
        listed = fs.get_file_info(pafs.FileSelector(f"{bucket}/warehouse", recursive=True))
        frames = [i.path for i in listed if "/keyframes/" in i.path and i.path.endswith(".parquet")]
        assert frames, [i.path for i in listed[:20]]


def _s3(services: ModuleServices) -> pafs.S3FileSystem:
    found = services.containers
    assert found is not None
    return pafs.S3FileSystem(
        access_key=found.access_key,
        secret_key=found.secret_key,
        endpoint_override=found.s3_endpoint,
        scheme="http",
        region="us-east-1",
    )
