"""A Docker engine to talk to: the one that answers, or one started here without a bridge.

The engine this starts runs ``dockerd --bridge=none --iptables=false --ip-forward=false
--ip-masq=false``: no bridge interface, no NAT and no firewall rules, so the host's network is
left exactly as it was and every container uses host networking (``compose.host.yml``). Only an
engine this module started is ever stopped by it; a user's own engine is used and left alone.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from containers.paths import STATE_DIR

ENGINE_FLAGS = ("--bridge=none", "--iptables=false", "--ip-forward=false", "--ip-masq=false")
PID_FILE = STATE_DIR / "dockerd.pid"
LOG_FILE = STATE_DIR / "dockerd.log"
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


class EngineError(RuntimeError):
    """The engine could not be found, installed, started or stopped cleanly."""


@dataclass(frozen=True)
class Engine:
    """An engine that answers; ``started_here`` says whether ``stop`` may stop it."""

    server_version: str
    started_here: bool


def server_version(timeout_s: float = 5.0) -> str | None:
    """The engine's version if one answers on the default socket, else None."""
    cli = shutil.which("docker")
    if cli is None:
        return None
    try:
        out = subprocess.run(
            [cli, "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    version = out.stdout.strip()
    return version if out.returncode == 0 and version else None


def install_packages(packages: list[str]) -> None:
    """apt-get install, as root (the machine kind this runs on is Debian, root)."""
    if os.geteuid() != 0:
        raise EngineError(f"installing {' '.join(packages)} needs root; install them and retry")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for argv in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *packages]):
        done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise EngineError(f"`{' '.join(argv)}` failed: {' / '.join(tail)}")


def ensure() -> Engine:
    """The engine that answers, or a bridge-less one started (and installed) here."""
    version = server_version()
    if version is not None:
        return Engine(version, started_here=recorded_pid() is not None)
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        install_packages(["docker.io"])
    STATE_DIR.mkdir(parents=True, exist_ok=True)
    with LOG_FILE.open("ab") as log:
        proc = subprocess.Popen(
            ["dockerd", *ENGINE_FLAGS, f"--pidfile={STATE_DIR / 'dockerd.own.pid'}"],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    PID_FILE.write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        version = server_version()
        if version is not None:
            return Engine(version, started_here=True)
        if proc.poll() is not None:
            PID_FILE.unlink(missing_ok=True)
            raise EngineError(f"dockerd exited with {proc.returncode}; see {LOG_FILE}")
        time.sleep(0.5)
    stop()
    raise EngineError(f"dockerd did not answer within {START_TIMEOUT_S:.0f}s; see {LOG_FILE}")


def recorded_pid() -> int | None:
    try:
        pid = int(PID_FILE.read_text().strip())
    except (OSError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        PID_FILE.unlink(missing_ok=True)
        return None
    return pid


def stop() -> bool:
    """Stop the engine this module started (True), or do nothing (False)."""
    pid = recorded_pid()
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    PID_FILE.unlink(missing_ok=True)
    return True


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie child of this process is gone for every purpose that matters here
    with contextlib.suppress(ChildProcessError):
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        return stat.read_text().split(") ", 1)[1][:1] != "Z"
    return True


def leftovers() -> list[str]:
    """What an engine could leave on the host: a running dockerd or containerd it started,
    a bridge interface, NAT or filter rules. Empty when the host is as it was."""
    found: list[str] = []
    if recorded_pid() is not None:
        found.append("dockerd started by segcat is still running")
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True, check=False)
    for line in links.stdout.splitlines():
        name = line.split(":", 2)[1].strip().split("@")[0] if ":" in line else ""
        if name == "docker0" or name.startswith("br-"):
            found.append(f"network interface {name}")
    if shutil.which("iptables") is not None:
        for table in ("filter", "nat"):
            rules = subprocess.run(
                ["iptables", "-t", table, "-S"], capture_output=True, text=True, check=False
            )
            found += [f"iptables {table}: {r}" for r in rules.stdout.splitlines() if "DOCKER" in r]
    return found
