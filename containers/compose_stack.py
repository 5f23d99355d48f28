"""docker-compose.yml on this machine: host networking, free ports, images built here.

``up`` starts the very compose file users run, with ``compose.host.yml`` on top, and then
checks that each address it hands out reaches this stack and no other: the Kafka cluster id
is the one it chose, the Redis server behind the TCP port is the one inside the container,
and the warehouse bucket lists with this stack's keys. Another stack on this machine (the
local stack on 19092, a developer's compose project) is never touched: the project name is
per checkout and every port was free when chosen.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import json
import os
import secrets
import socket
import subprocess
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from containers import compose_cli, engine, images
from containers.engine import EngineError
from containers.paths import REPO_ROOT, STATE_DIR
from segcat.local_stack.secret_files import write_private

COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
HOST_OVERRIDE = Path(__file__).resolve().parent / "compose.host.yml"
STATE_FILE = STATE_DIR / "compose.json"
ENV_FILE = STATE_DIR / "compose.env"
WAIT_TIMEOUT_S = 300
BUCKET = "segcat"


def project_name(root: Path = REPO_ROOT) -> str:
    """One compose project per checkout: a CI clone and a developer's tree never share one."""
    return "segcat-" + hashlib.sha1(str(root).encode()).hexdigest()[:10]


@dataclass(frozen=True)
class ComposeStack:
    """What ``up`` started: its ports, identity and secrets (``repr`` hides the secrets)."""

    project: str
    cluster_id: str
    kafka_port: int
    kafka_internal_port: int
    kafka_controller_port: int
    redis_port: int
    s3_port: int
    dashboard_port: int
    metrics_port: int
    images: dict[str, str]
    token: str = dataclasses.field(repr=False)
    s3_access_key: str = dataclasses.field(repr=False)
    s3_secret_key: str = dataclasses.field(repr=False)

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.kafka_port}"

    @property
    def redis_url(self) -> str:
        return f"redis://127.0.0.1:{self.redis_port}/0"

    @property
    def s3_endpoint(self) -> str:
        return f"http://127.0.0.1:{self.s3_port}"

    @property
    def dashboard_url(self) -> str:
        return f"http://127.0.0.1:{self.dashboard_port}"

    def compose_env(self) -> dict[str, str]:
        """The variables docker-compose.yml reads, for this stack."""
        return {
            **self.images,
            "SEGCAT_COMPOSE_BIND_HOST": "127.0.0.1",
            "SEGCAT_COMPOSE_ADVERTISED_HOST": "127.0.0.1",
            "SEGCAT_COMPOSE_CLUSTER_ID": self.cluster_id,
            "SEGCAT_COMPOSE_KAFKA_PORT": str(self.kafka_port),
            "SEGCAT_COMPOSE_KAFKA_INTERNAL_PORT": str(self.kafka_internal_port),
            "SEGCAT_COMPOSE_KAFKA_CONTROLLER_PORT": str(self.kafka_controller_port),
            "SEGCAT_COMPOSE_REDIS_PORT": str(self.redis_port),
            "SEGCAT_COMPOSE_S3_PORT": str(self.s3_port),
            "SEGCAT_COMPOSE_DASHBOARD_PORT": str(self.dashboard_port),
            "SEGCAT_COMPOSE_METRICS_PORT": str(self.metrics_port),
            "SEGCAT_SERVE_TOKEN": self.token,
            "SEGCAT_S3_ACCESS_KEY": self.s3_access_key,
            "SEGCAT_S3_SECRET_KEY": self.s3_secret_key,
        }

    def client_env(self) -> dict[str, str]:
        """What a segcat client on the host sets to use this stack (CLI, library, Spark job)."""
        return {
            "SEGCAT_BOOTSTRAP_SERVERS": self.bootstrap_servers,
            "SEGCAT_REDIS_URL": self.redis_url,
            "SEGCAT_WAREHOUSE": f"s3://{BUCKET}/warehouse",
            "SEGCAT_S3_ENDPOINT": self.s3_endpoint,
            "SEGCAT_S3_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": self.s3_access_key,
            "AWS_SECRET_ACCESS_KEY": self.s3_secret_key,
            "AWS_REGION": "us-east-1",
            "AWS_EC2_METADATA_DISABLED": "true",
        }


def new_cluster_id() -> str:
    """A random KRaft cluster id: a UUID's 16 bytes, base64url without padding."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


@contextlib.contextmanager
def held_ports(count: int) -> Iterator[list[int]]:
    """``count`` distinct loopback ports, held open until the caller has them all."""
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            held.append(sock)
        yield [s.getsockname()[1] for s in held]
    finally:
        for sock in held:
            sock.close()


def compose(stack: ComposeStack, *args: str, timeout_s: float = 600) -> subprocess.CompletedProcess[str]:
    """Run ``docker compose`` on this stack's project, files and variables."""
    argv = [
        *compose_cli.command(),
        "--project-name",
        stack.project,
        "--project-directory",
        str(REPO_ROOT),
        "-f",
        str(COMPOSE_FILE),
        "-f",
        str(HOST_OVERRIDE),
        *args,
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SEGCAT_", "KAFKA_", "COMPOSE_"))}
    env.update(stack.compose_env())
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout_s, check=False)


def load() -> ComposeStack | None:
    """The stack ``up`` recorded for this checkout, if any."""
    try:
        raw = json.loads(STATE_FILE.read_text())
        return ComposeStack(**raw)
    except (OSError, ValueError, TypeError):
        return None


def _save(stack: ComposeStack) -> None:
    write_private(STATE_FILE, json.dumps(dataclasses.asdict(stack), indent=1))
    # the same variables for a user's own `docker compose -p <project> ... ps|logs`
    write_private(ENV_FILE, "".join(f"{k}={v}\n" for k, v in stack.compose_env().items()))


def up(say: Callable[[str], None] = print, built: images.LocalImages | None = None) -> ComposeStack:
    """Start the compose stack (building what is missing) and prove who answers where."""
    running = load()
    if running is not None:
        down(say)
    engine.ensure()
    if built is None:
        built = images.build_all(say)
    with held_ports(7) as ports:
        stack = ComposeStack(
            project=project_name(),
            cluster_id=new_cluster_id(),
            kafka_port=ports[0],
            kafka_internal_port=ports[1],
            kafka_controller_port=ports[2],
            redis_port=ports[3],
            s3_port=ports[4],
            dashboard_port=ports[5],
            metrics_port=ports[6],
            images=built.compose_env(),
            token=secrets.token_hex(24),
            s3_access_key="segcat-" + secrets.token_hex(4),
            s3_secret_key=secrets.token_hex(20),
        )
    _save(stack)
    say(f"docker compose up ({stack.project}): Kafka {stack.bootstrap_servers}")
    started = compose(stack, "up", "--detach", "--wait", "--wait-timeout", str(WAIT_TIMEOUT_S))
    if started.returncode != 0:
        report = _failure_report(stack, started)
        down(say)
        raise EngineError(report)
    verify(stack)
    return stack


def _failure_report(stack: ComposeStack, started: subprocess.CompletedProcess[str]) -> str:
    status = compose(stack, "ps", "--all", "--format", "table {{.Service}}\t{{.State}}\t{{.Health}}")
    logs = compose(stack, "logs", "--no-color", "--tail", "15")
    return (
        f"docker compose up failed (exit {started.returncode}): {started.stderr.strip()[-1500:]}\n"
        f"{status.stdout}\n{logs.stdout[-6000:]}"
    )


def verify(stack: ComposeStack) -> None:
    """Each address reaches this stack's own service (EngineError naming the one that does not)."""
    import redis
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": stack.bootstrap_servers, "log_level": 3})
    cluster = admin.describe_cluster(request_timeout=30).result(timeout=60)
    if cluster.cluster_id != stack.cluster_id:
        raise EngineError(
            f"Kafka at {stack.bootstrap_servers} is cluster {cluster.cluster_id}, not this stack's "
            f"{stack.cluster_id}: another broker holds the port"
        )
    client = redis.Redis.from_url(stack.redis_url, socket_timeout=10)
    try:
        tcp_run_id = str(client.info("server")["run_id"])
    finally:
        client.close()
    inside = compose(stack, "exec", "-T", "redis", "redis-cli", "-s", "/tmp/redis.sock", "info", "server")
    if f"run_id:{tcp_run_id}" not in inside.stdout:
        raise EngineError(f"Redis at {stack.redis_url} is not the server inside this stack's container")
    status = compose(stack, "ps", "--all", "--format", "json", "s3-init")
    rows = [json.loads(line) for line in status.stdout.splitlines() if line.strip()]
    if not rows or rows[0].get("ExitCode") != 0:
        raise EngineError(f"the s3-init job did not prove the warehouse bucket: {status.stdout.strip()}")


def down(say: Callable[[str], None] = print) -> None:
    """Remove this checkout's compose stack and its volumes (a stack never started: nothing)."""
    stack = load()
    if stack is None:
        return
    if engine.server_version() is not None:
        say(f"docker compose down ({stack.project})")
        done = compose(stack, "down", "--volumes", "--remove-orphans", "--timeout", "20")
        if done.returncode != 0:
            raise EngineError(f"docker compose down failed: {done.stderr.strip()[-1500:]}")
    STATE_FILE.unlink(missing_ok=True)
    ENV_FILE.unlink(missing_ok=True)
