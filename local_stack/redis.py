"""Run a throwaway Redis server on loopback (no persistence: it is a cache of snapshots)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from segcat.local_stack import process
from segcat.local_stack.errors import StackError
from segcat.local_stack.layout import LOOPBACK, Layout
from segcat.local_stack.report import Reporter
from segcat.local_stack.settings import StackSettings

NAME = "redis"


def address(settings: StackSettings) -> str:
    return f"{LOOPBACK}:{settings.redis_port}"


def url(settings: StackSettings) -> str:
    return f"redis://{LOOPBACK}:{settings.redis_port}/0"


def conf_path(layout: Layout) -> Path:
    return layout.conf / "redis.conf"


def marker(layout: Layout) -> str:
    """Redis rewrites its process title; our template keeps the config path in it."""
    return str(conf_path(layout))


def find_redis_server(reporter: Reporter) -> str:
    """``redis-server`` from PATH, installing the Debian package when we may (root + apt)."""
    found = shutil.which("redis-server")
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise StackError(
            "redis-server is not installed; install it (e.g. `sudo apt-get install -y "
            "redis-server` or `brew install redis`) and retry"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    with reporter.step("Installing redis-server with apt-get"):
        for argv in ([apt, "update"], [apt, "install", "-y", "--no-install-recommends", "redis-server"]):
            out = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
            if out.returncode != 0:
                raise StackError(
                    f"`{' '.join(argv)}` failed (exit {out.returncode}):\n"
                    + "\n".join((out.stdout + out.stderr).splitlines()[-30:])
                )
    found = shutil.which("redis-server") or (
        "/usr/bin/redis-server" if Path("/usr/bin/redis-server").is_file() else None
    )
    if found is None:
        raise StackError("apt-get installed redis-server but it is not on PATH")
    return found


def _supports_proc_title(redis_server: str) -> bool:
    """``proc-title-template`` exists since Redis 6.2."""
    out = subprocess.run([redis_server, "--version"], capture_output=True, text=True, check=False)
    match = re.search(r"v=(\d+)\.(\d+)", out.stdout)
    return match is not None and (int(match.group(1)), int(match.group(2))) >= (6, 2)


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def redis_conf(layout: Layout, settings: StackSettings, *, proc_title: bool) -> str:
    lines = [
        "# Written by segcat on every `up`; edits are overwritten.",
        f"bind {LOOPBACK}",
        f"port {settings.redis_port}",
        "protected-mode yes",
        "daemonize no",
        f"dir {_quote(str(layout.redis_data))}",
        'save ""',
        "appendonly no",
        'logfile ""',
    ]
    if proc_title:
        lines.append('proc-title-template "{title} {listen-addr} {config-file}"')
    return "\n".join(lines) + "\n"


def start(layout: Layout, settings: StackSettings, reporter: Reporter) -> process.PidRecord:
    """Write the config and launch ``redis-server`` in the foreground of its own session."""
    redis_server = find_redis_server(reporter)
    proc_title = _supports_proc_title(redis_server)
    conf = conf_path(layout)
    conf.write_text(redis_conf(layout, settings, proc_title=proc_title))
    log_path = layout.log_file(NAME)
    process.rotate_log(log_path)
    proc = process.spawn([redis_server, str(conf)], log_path=log_path, cwd=layout.redis_data)
    # Without a title template the title is "redis-server 127.0.0.1:<port>".
    expected = marker(layout) if proc_title else f"redis-server {address(settings)}"
    record = process.record_for(proc, marker=expected, address=address(settings))
    process.write_pid_file(layout.pid_file(NAME), record)
    reporter.info(f"Started Redis (pid {proc.pid}) on {record.address}")
    return record
