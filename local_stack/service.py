"""What ``up``/``down``/``status`` need to know about one service process, and what a client needs.

Each service module (``kafka``, ``redis``, ``s3proxy``) turns the stack settings into a list of
``ServiceSpec`` (one per process: a three-node Kafka is three specs), an idempotent ``finish``
step run once all its processes answer (users and ACLs, a cluster join, a bucket), and the
``ClientSetting`` lines a client needs to reach it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from segcat.local_stack import process
from segcat.local_stack.layout import Layout
from segcat.local_stack.report import Reporter
from segcat.local_stack.settings import StackSettings


@dataclass(frozen=True)
class ServiceSpec:
    """One process of the stack."""

    name: str
    """Unique within the stack: names its pid file and its log (``kafka-2``, ``redis``, ``s3``)."""
    address: str
    ports: tuple[tuple[int, str], ...]
    """(port, env var that moves it) pairs that must be free before starting."""
    start: Callable[[Layout, StackSettings, Reporter], process.PidRecord]
    """Spawn the process and return at once; the caller waits with ``probe``."""
    probe: Callable[[], Callable[[float], bool]]
    """Makes a check ``answers(timeout_s)`` (made once per wait, so it may hold a client)."""


@dataclass(frozen=True)
class ClientSetting:
    """One ``SEGCAT_*`` variable a client sets; a secret's value is only ever read from its file."""

    name: str
    value: str = ""
    secret_file: Path | None = None
    """Where the secret lives (mode 0600); printed as ``$(cat <file>)``, never as its value."""

    def reveal(self) -> str:
        """The real value (for a library caller building a ``Config``; never for printing)."""
        return self.secret_file.read_text().strip() if self.secret_file is not None else self.value

    def shell(self) -> str:
        """``export NAME=value`` with secrets read from their file by the shell, not printed."""
        if self.secret_file is not None:
            return f'export {self.name}="$(cat {self.secret_file})"'
        return f"export {self.name}={self.value}"
