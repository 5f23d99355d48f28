"""README.md's "Docker Compose" section says what the compose file does, checked against it.

The section's one command for a machine with Docker Hub is resolved by Compose itself
(``docker compose config``, on docker-compose.yml alone, as that user runs it), and the
settings the section gives clients on the host must be the ones that file publishes. The
``./dev compose`` commands it names are the ones ``./dev`` accepts; the compose stack tests
(test_compose_stack.py) run that same file.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest

from containers import compose_cli
from containers.engine import Engine

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


def section() -> str:
    text = README.read_text()
    start = text.index("## Docker Compose\n")
    return text[start : text.index("\n## ", start + 1)]


def resolved_config() -> dict[str, Any]:
    """docker-compose.yml as Compose resolves it for the README's command (defaults only)."""
    (command,) = [line for line in section().splitlines() if "docker compose up" in line]
    token = "readme-token-" + "x" * 16
    assert command.startswith("SEGCAT_SERVE_TOKEN=")
    env = {"PATH": "/usr/bin:/bin:/usr/local/bin", "HOME": str(Path.home()), "SEGCAT_SERVE_TOKEN": token}
    done = subprocess.run(
        [*compose_cli.command(), "-f", str(ROOT / "docker-compose.yml"), "config", "--format", "json"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    config: dict[str, Any] = json.loads(done.stdout)
    return config


@pytest.fixture(scope="module")
def config(docker_engine: Engine) -> dict[str, Any]:
    """Compose resolves the file without an engine; the fixture keeps the CI-or-skip rule."""
    return resolved_config()


def _published(service: dict[str, Any]) -> set[str]:
    return {f"{p.get('host_ip', '') or ''}:{p['published']}:{p['target']}" for p in service.get("ports", [])}


def test_the_readme_command_starts_the_images_from_docker_hub(config: dict[str, Any]) -> None:
    services = config["services"]
    assert services["kafka"]["image"] == "apache/kafka:4.1.1"
    assert services["redis"]["image"] == "redis:7"
    assert services["s3"]["image"].startswith("andrewgaul/s3proxy")
    for name in ("s3-init", "materializer", "dashboard"):
        assert services[name]["build"]["context"] == str(ROOT), name
    assert "--build" in section() and "--wait" in section()


def test_the_settings_the_readme_gives_clients_are_what_the_file_publishes(config: dict[str, Any]) -> None:
    text = section()
    services = config["services"]
    kafka_port = re.search(r"SEGCAT_BOOTSTRAP_SERVERS=localhost:(\d+)", text)
    redis_port = re.search(r"SEGCAT_REDIS_URL=redis://localhost:(\d+)/0", text)
    s3_port = re.search(r"SEGCAT_S3_ENDPOINT=http://localhost:(\d+)", text)
    dashboard_port = re.search(r"http://localhost:(\d+)/\?token=", text)
    assert kafka_port and redis_port and s3_port and dashboard_port
    assert f":{kafka_port[1]}:{kafka_port[1]}" in _published(services["kafka"])
    assert f":{redis_port[1]}:{redis_port[1]}" in _published(services["redis"])
    assert f":{s3_port[1]}:{s3_port[1]}" in _published(services["s3"])
    assert f"127.0.0.1:{dashboard_port[1]}:{dashboard_port[1]}" in _published(services["dashboard"])
    advertised = services["kafka"]["environment"]["KAFKA_ADVERTISED_LISTENERS"]
    assert f"PLAINTEXT://localhost:{kafka_port[1]}" in advertised
    s3_env = services["s3"]["environment"]
    access = re.search(r"AWS_ACCESS_KEY_ID=(\S+?)`", text)
    secret = re.search(r"AWS_SECRET_ACCESS_KEY=(\S+?)`", text)
    assert access and secret
    assert (s3_env["S3PROXY_IDENTITY"], s3_env["S3PROXY_CREDENTIAL"]) == (access[1], secret[1])
    warehouse = re.search(r"SEGCAT_WAREHOUSE=(\S+?)`", text)
    assert warehouse and services["materializer"]["environment"]["SEGCAT_WAREHOUSE"] == warehouse[1]


def test_the_dev_compose_commands_the_readme_names_exist() -> None:
    named = set(re.findall(r"^\./dev compose (\w+)", section(), flags=re.MULTILINE))
    assert named == {"up", "test", "down"}
    dev = (ROOT / "dev").read_text()
    block = dev[dev.index("  compose)") :]
    for verb in named:
        assert f"      {verb})" in block, verb
