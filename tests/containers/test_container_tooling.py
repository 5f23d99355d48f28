"""The container tooling's own logic, without a Docker engine: the host's Debian mirror, the
Kafka image's environment-to-config translation, and the variables the compose file reads."""

from __future__ import annotations

import base64
import os
import re
import stat
import subprocess
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from containers import compose_stack, images
from containers.engine import EngineError

ROOT = Path(__file__).resolve().parents[2]


def _apt(tmp_path: Path, sources: dict[str, str], listing: str | None = None) -> Path:
    (tmp_path / "sources.list.d").mkdir()
    for name, text in sources.items():
        (tmp_path / "sources.list.d" / name).write_text(text)
    if listing is not None:
        (tmp_path / "sources.list").write_text(listing)
    return tmp_path


def test_the_mirror_is_the_first_enabled_deb822_stanza_serving_bookworm(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SEGCAT_DEBIAN_MIRROR", raising=False)
    apt = _apt(
        tmp_path,
        {
            "a.sources": "Types: deb\nURIs: http://off.example/debian\nSuites: bookworm\nEnabled: no\n\n"
            "Types: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n",
            "b.sources": "Types: deb\nURIs: http://mirror.example/debian\n"
            "Suites: bookworm bookworm-updates\n",
        },
    )
    assert images.debian_mirror(apt) == "http://mirror.example/debian"


def test_a_one_line_source_with_options_is_read_and_the_variable_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SEGCAT_DEBIAN_MIRROR", raising=False)
    apt = _apt(
        tmp_path, {}, "# comment\ndeb [signed-by=/k.gpg arch=amd64] http://one.example/debian bookworm main\n"
    )
    assert images.debian_mirror(apt) == "http://one.example/debian"
    monkeypatch.setenv("SEGCAT_DEBIAN_MIRROR", "http://chosen.example/debian")
    assert images.debian_mirror(apt) == "http://chosen.example/debian"


def test_no_bookworm_source_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SEGCAT_DEBIAN_MIRROR", raising=False)
    apt = _apt(tmp_path, {"x.sources": "Types: deb\nURIs: http://x.example/debian\nSuites: trixie\n"})
    with pytest.raises(EngineError, match="SEGCAT_DEBIAN_MIRROR"):
        images.debian_mirror(apt)


def _kafka_config(tmp_path: Path, env: dict[str, str]) -> str:
    """Run the Kafka image's start script with a stand-in ``java`` that prints the config."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    java = bin_dir / "java"
    java.write_text('#!/bin/bash\nfor a in "$@"; do case "$a" in *.properties) cat "$a";; esac; done\n')
    java.chmod(java.stat().st_mode | stat.S_IEXEC)
    script = (ROOT / "containers/kafka/run").read_text().replace("/opt/kafka/config", str(tmp_path))
    runner = tmp_path / "run"
    runner.write_text(script)
    base = {"PATH": f"{bin_dir}:/usr/bin:/bin", "CLUSTER_ID": "XpzKegAAQACAAF6cynoAAQ"}
    done = subprocess.run(
        ["bash", str(runner)], env={**base, **env}, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_kafka_image_turns_kafka_variables_into_broker_settings(tmp_path: Path) -> None:
    out = _kafka_config(
        tmp_path,
        {
            "KAFKA_NODE_ID": "1",
            "KAFKA_LOG_DIRS": "/var/lib/kafka/data",
            "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP": "A:PLAINTEXT,B:SSL",
            "KAFKA_SOME__UNDERSCORED": "x",
            "KAFKA_WITH___DASH": "y",
            "KAFKA_HEAP_OPTS": "-Xmx1g",
            "NOT_KAFKA": "z",
        },
    )
    lines = set(out.splitlines())
    assert {
        "node.id=1",
        "log.dirs=/var/lib/kafka/data",
        "listener.security.protocol.map=A:PLAINTEXT,B:SSL",
        "some_underscored=x",
        "with-dash=y",
    } <= lines
    assert not any(line.startswith(("heap.opts", "not")) for line in lines)


def test_the_kafka_image_refuses_to_start_without_a_cluster_id(tmp_path: Path) -> None:
    runner = tmp_path / "run"
    runner.write_text((ROOT / "containers/kafka/run").read_text().replace("/opt/kafka/config", str(tmp_path)))
    done = subprocess.run(
        ["bash", str(runner)], env={"PATH": "/usr/bin:/bin"}, capture_output=True, text=True
    )
    assert done.returncode != 0 and "CLUSTER_ID" in done.stderr


def test_every_variable_the_compose_file_reads_is_set_by_the_host_override() -> None:
    """Host networking has no port mapping: a port left at its default could be another stack's."""
    text = (ROOT / "docker-compose.yml").read_text()
    read = set(re.findall(r"\$\{(SEGCAT_COMPOSE_[A-Z0-9_]+|[A-Z0-9]+_IMAGE)", text))
    with compose_stack.held_ports(7) as ports:
        stack = compose_stack.ComposeStack(
            "p",
            compose_stack.new_cluster_id(),
            *ports,
            images=images.LocalImages("k", "r", "s", "c").compose_env(),
            token="t" * 24,
            s3_access_key="a",
            s3_secret_key="s",
        )
    assert read <= set(stack.compose_env()), read - set(stack.compose_env())
    assert len(set(ports)) == 7


@given(st.integers(min_value=0, max_value=50))
def test_cluster_ids_are_kraft_uuids(_: int) -> None:
    cluster_id = compose_stack.new_cluster_id()
    assert len(cluster_id) == 22 and "=" not in cluster_id
    assert len(base64.urlsafe_b64decode(cluster_id + "==")) == 16


def test_the_compose_project_is_per_checkout(tmp_path: Path) -> None:
    one, other = compose_stack.project_name(tmp_path / "a"), compose_stack.project_name(tmp_path / "b")
    assert one != other and one == compose_stack.project_name(tmp_path / "a")
    assert re.fullmatch(r"segcat-[0-9a-f]{10}", one)
    assert os.path.basename(str(ROOT)) not in one
