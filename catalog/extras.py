"""Optional dependencies by use: which extra brings which module, and the error when one is missing.

The base install writes, reads and watches tables and runs the table commands. Spark, the HTTP
server, the materializer service and the local stack import packages only their extra brings
(pyproject.toml, ``[project.optional-dependencies]``). Their entry points load that code inside
``requires(...)``, so a missing extra ends in one ``MissingExtra`` line naming the ``pip
install`` to run, never in a traceback about a module the user never asked for.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

from segcat.catalog.errors import MissingExtra

PROVIDES: Mapping[str, frozenset[str]] = {
    "spark": frozenset({"pyspark", "py4j", "pandas"}),
    "server": frozenset(
        {"fastapi", "starlette", "sse_starlette", "uvicorn", "httptools", "prometheus_client"}
    ),
    "materializer": frozenset({"prometheus_client"}),
    "stack": frozenset({"cryptography"}),
}
"""The top-level modules each extra installs (tests/packaging/test_packaging.py checks them
against pyproject)."""


def install_hint(extras: tuple[str, ...]) -> str:
    """The command that installs ``extras``: ``pip install 'segcat[server]'``."""
    return f"pip install 'segcat[{','.join(extras)}]'"


def missing_extra(exc: ModuleNotFoundError, what: str, extras: tuple[str, ...]) -> MissingExtra | None:
    """The ``MissingExtra`` for ``exc`` when the module it misses comes with one of ``extras``;
    None when it does not (a missing module of segcat itself is a bug, not an install choice)."""
    unknown = sorted(set(extras) - set(PROVIDES))
    if unknown:
        raise ValueError(f"unknown extras {unknown}; known: {sorted(PROVIDES)}")
    module = (exc.name or "").partition(".")[0]
    if not any(module in PROVIDES[extra] for extra in extras):
        return None
    return MissingExtra(
        f"{what} needs the optional dependencies of segcat[{','.join(extras)}] "
        f"(no module named {module!r}): {install_hint(extras)}",
        extras=extras,
    )


@contextmanager
def requires(what: str, *extras: str) -> Iterator[None]:
    """Run the block; a module of ``extras`` it cannot import becomes ``MissingExtra`` for ``what``."""
    try:
        yield
    except ModuleNotFoundError as exc:
        error = missing_extra(exc, what, extras)
        if error is None:
            raise
        raise error from exc
