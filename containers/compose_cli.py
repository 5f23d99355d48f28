"""The ``docker compose`` command: the CLI plugin when it is installed, else Compose v2 built
from the Go module proxy once (Debian packages only Compose v1, which reads neither ``!reset``
nor ``--wait``) and kept in the user's cache for every later run and checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from containers.engine import EngineError

COMPOSE_MODULE = "github.com/docker/compose/v2"
COMPOSE_VERSION = "v2.40.3"
BUILD_TIMEOUT_S = 900


def cached_binary() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "segcat" / f"docker-compose-{COMPOSE_VERSION}"


def command() -> list[str]:
    """argv that runs Compose v2: ``docker compose`` or the cached build."""
    docker = shutil.which("docker")
    if docker is not None:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, text=True, check=False)
        if probe.returncode == 0 and "v2." in probe.stdout:
            return [docker, "compose"]
    binary = cached_binary()
    if not binary.is_file():
        build(binary)
    return [str(binary)]


def build(target: Path) -> None:
    """``go build ./cmd`` of the pinned Compose release, from the Go module proxy."""
    go = shutil.which("go")
    if go is None:
        raise EngineError(
            "Docker Compose v2 is missing and Go is not installed to build it; "
            "install the compose plugin (docker compose version) and retry"
        )
    download = subprocess.run(
        [go, "mod", "download", "-json", f"{COMPOSE_MODULE}@{COMPOSE_VERSION}"],
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    if download.returncode != 0:
        raise EngineError(
            f"go mod download {COMPOSE_MODULE}@{COMPOSE_VERSION} failed: {download.stderr.strip()}"
        )
    source = Path(json.loads(download.stdout)["Dir"])
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    version_flag = f"-X {COMPOSE_MODULE}/internal.Version={COMPOSE_VERSION}"
    built = subprocess.run(
        [go, "build", "-trimpath", "-ldflags", f"-s -w {version_flag}", "-o", str(partial), "./cmd"],
        cwd=source,
        env={**os.environ, "CGO_ENABLED": "0"},
        capture_output=True,
        text=True,
        timeout=BUILD_TIMEOUT_S,
        check=False,
    )
    if built.returncode != 0:
        raise EngineError(f"building Docker Compose {COMPOSE_VERSION} failed: {built.stderr.strip()[-2000:]}")
    partial.replace(target)
