"""Progress reporting for long steps (Maven fetch, waiting for the broker).

The library is quiet by default (``LogReporter`` only emits ``logging`` records); the CLI
passes ``RichReporter`` to get spinners on the terminal.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rich.console import Console

log = logging.getLogger("segcat.local_stack")


class Reporter(Protocol):
    """Receives progress from ``up``/``down``."""

    def step(self, message: str) -> AbstractContextManager[None]: ...

    def info(self, message: str) -> None: ...


class LogReporter:
    """Progress as structured log lines only (the default for library use)."""

    def __init__(self, logger: logging.Logger | None = None) -> None:
        self._log = logger or log

    @contextmanager
    def step(self, message: str) -> Iterator[None]:
        self._log.info("%s ...", message)
        yield
        self._log.info("%s: done", message)

    def info(self, message: str) -> None:
        self._log.info("%s", message)


class RichReporter:
    """Spinners and one-line results on a rich console (for the CLI)."""

    def __init__(self, console: Console | None = None) -> None:
        from rich.console import Console

        self._console = console or Console(stderr=True)

    @contextmanager
    def step(self, message: str) -> Iterator[None]:
        log.info("%s ...", message)
        with self._console.status(message):
            yield
        self._console.print(f"[green]✓[/green] {message}")

    def info(self, message: str) -> None:
        log.info("%s", message)
        self._console.print(message)
