"""Pid files and process control that never touch a process segcat did not start.

A pid file records the pid, a *marker* (a string unique to our command line, such as the
absolute path of our config file) and, on Linux, the process start time. A pid counts as
ours only while all of them still match, so a recycled pid is never signalled.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

log = logging.getLogger(__name__)

_PROC = Path("/proc")

# Children spawned by this interpreter. Holding the Popen objects keeps Python from warning
# that a "subprocess is still running" when they are garbage-collected, and lets ``stop``
# reap them so they do not linger as zombies that still look alive.
_children: dict[int, subprocess.Popen[bytes]] = {}


@dataclass(frozen=True)
class PidRecord:
    """What a pid file holds."""

    pid: int
    marker: str
    """A substring of the process's command line that only our process has."""
    address: str
    """host:port the service was started on (to notice a changed config)."""
    start_ticks: int | None = None
    """Process start time from /proc (Linux); guards against pid reuse."""


def write_pid_file(path: Path, record: PidRecord) -> None:
    """Write atomically so a concurrent reader never sees half a record."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(asdict(record)) + "\n")
    tmp.replace(path)


def read_pid_file(path: Path) -> PidRecord | None:
    """The record, or None when the file is missing or unreadable (treated as not running)."""
    try:
        data = json.loads(path.read_text())
        return PidRecord(
            pid=int(data["pid"]),
            marker=str(data["marker"]),
            address=str(data.get("address", "")),
            start_ticks=None if data.get("start_ticks") is None else int(data["start_ticks"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_pid_file(path: Path) -> None:
    path.unlink(missing_ok=True)


def cmdline(pid: int) -> str | None:
    """The process's command line joined by spaces, or None if it is gone."""
    proc = _PROC / str(pid) / "cmdline"
    if _PROC.is_dir():
        try:
            raw = proc.read_bytes()
        except OSError:
            return None
        return raw.replace(b"\0", b" ").decode(errors="replace").strip() or None
    ps = shutil.which("ps")
    if ps is None:
        return None
    out = subprocess.run([ps, "-o", "command=", "-p", str(pid)], capture_output=True, text=True, check=False)
    return out.stdout.strip() or None


def start_ticks(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (Linux only)."""
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # Field 2 (comm) may contain spaces and parentheses; everything after the last ")"
    # starts at field 3, so starttime (field 22) is index 19 there.
    fields = stat.rsplit(")", 1)[-1].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def _reap(pid: int) -> None:
    child = _children.get(pid)
    if child is not None:
        if child.poll() is not None:
            _children.pop(pid, None)
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def pid_alive(pid: int) -> bool:
    """True if ``pid`` exists and is not a zombie."""
    _reap(pid)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not _PROC.is_dir():
        return True  # no /proc (macOS): cannot tell a zombie apart, assume alive
    try:
        stat = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"


def is_ours(record: PidRecord) -> bool:
    """True only if the pid is alive *and* still the process we started."""
    if not pid_alive(record.pid):
        return False
    if record.start_ticks is not None and start_ticks(record.pid) != record.start_ticks:
        return False
    line = cmdline(record.pid)
    return line is not None and record.marker in line


def spawn(
    argv: Sequence[str],
    *,
    log_path: Path,
    cwd: Path,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` in its own session (Ctrl-C in the caller's terminal does not reach
    it), output appended to ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:
        proc = subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _children[proc.pid] = proc
    log.info("spawned pid %d: %s", proc.pid, " ".join(argv))
    return proc


def record_for(proc: subprocess.Popen[bytes], *, marker: str, address: str) -> PidRecord:
    return PidRecord(pid=proc.pid, marker=marker, address=address, start_ticks=start_ticks(proc.pid))


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            return True
        time.sleep(0.1)
    return not pid_alive(pid)


def stop(record: PidRecord, *, timeout_s: float = 30.0) -> bool:
    """SIGTERM, then SIGKILL after ``timeout_s``; True if our process is gone afterwards.

    Does nothing (returns False) when the pid is not ours, so a recycled pid is safe.
    """
    if not is_ours(record):
        return False
    log.info("stopping pid %d (SIGTERM)", record.pid)
    with contextlib.suppress(ProcessLookupError):
        os.kill(record.pid, signal.SIGTERM)
    if _wait_gone(record.pid, timeout_s):
        return True
    if is_ours(record):
        log.warning("pid %d ignored SIGTERM for %.0fs; sending SIGKILL", record.pid, timeout_s)
        with contextlib.suppress(ProcessLookupError):
            os.kill(record.pid, signal.SIGKILL)
    return _wait_gone(record.pid, 10.0)


def port_answers(host: str, port: int, timeout_s: float = 0.5) -> bool:
    """True if something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return True
    except OSError:
        return False


def ephemeral_port_range() -> tuple[int, int]:
    """The range the kernel takes source ports of outgoing connections from (Linux's default).

    A server port inside it can be taken while its server is down: a client retrying the
    connection may get that very port as its source port (a TCP self-connect) and hold it.
    """
    try:
        low, high = (_PROC / "sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def tail(path: Path, lines: int = 30) -> str:
    """The last ``lines`` lines of a log file (empty if missing), for error messages."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 64 * 1024))
            data = fh.read()
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-lines:])


def rotate_log(path: Path, max_bytes: int = 20 * 1024 * 1024) -> None:
    """Keep one previous generation so logs cannot grow without bound across restarts."""
    try:
        if path.stat().st_size > max_bytes:
            path.replace(path.with_name(path.name + ".1"))
    except OSError:
        pass
