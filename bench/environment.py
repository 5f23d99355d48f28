"""Facts about the machine and software a benchmark ran on, for the report."""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

from segcat.catalog.config import Config
from segcat.local_stack import kafka as stack_kafka
from segcat.local_stack.settings import StackSettings


def _run(*cmd: str) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return (done.stdout or done.stderr).strip()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def memory() -> str:
    """The ``Mem:`` line of ``free -h`` as "total X, available Y"."""
    for line in _run("free", "-h").splitlines():
        if line.startswith("Mem:"):
            cols = line.split()
            return f"{cols[1]} total, {cols[-1]} available"
    return "unknown"


def java_version() -> str:
    try:
        java = stack_kafka.find_java()
    except Exception:
        return "not found"
    first = _run(java, "-version").splitlines()
    return first[0] if first else "unknown"


def kafka_version(config: Config) -> str:
    """The local stack's broker version; an external cluster's version is not known here."""
    if config.bootstrap_servers == stack_kafka.address(StackSettings.load()):
        return (
            f"{StackSettings.load().kafka_version} (local stack: one KRaft broker, "
            f"replication factor {config.replication_factor})"
        )
    return f"unknown (external cluster at {config.bootstrap_servers})"


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def git_revision(repo: Path) -> str:
    rev = _run("git", "-C", str(repo), "rev-parse", "--short", "HEAD")
    if not rev:
        return "unknown"
    dirty = _run("git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no")
    return f"{rev}{' (uncommitted changes in the tree)' if dirty else ''}"


def describe(config: Config, repo: Path) -> dict[str, Any]:
    from confluent_kafka import libversion

    return {
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": _run("nproc") or str(os.cpu_count()),
        "cpu": cpu_model(),
        "memory": memory(),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "java": java_version(),
        "kafka": kafka_version(config),
        "librdkafka": libversion()[0],
        "packages": {
            name: package_version(name)
            for name in ("confluent-kafka", "fastavro", "pyarrow", "deltalake", "pyiceberg", "SQLAlchemy")
        },
        "git": git_revision(repo),
        "loadavg_at_start": [round(v, 2) for v in os.getloadavg()],
    }
