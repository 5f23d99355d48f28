"""Shared bits of the examples: the Spark session, opening or creating a table, and ``run``,
which turns any failure into one line on stderr with the ``segcat`` CLI's exit codes."""

from __future__ import annotations

import sys
from collections.abc import Callable

from pyspark.sql import SparkSession

from segcat import SegcatError, Table, TableNotFound, exit_code, load_catalog
from segcat.spark_integration import local_session

EXIT_ERROR, EXIT_INTERRUPTED = 1, 130
"""README, "Exit codes": anything else, and Ctrl-C."""


def open_table(name: str, *, create: bool = False) -> Table:
    """The table ``name`` (configured by the environment, as the CLI); created first when
    ``create`` and it does not exist yet."""
    catalog = load_catalog()
    try:
        return catalog.load_table(name)
    except TableNotFound as exc:
        if not create:
            raise TableNotFound(f"{exc} (examples/daily_append.py creates it)") from exc
        return catalog.create_table(name)


def session(app_name: str) -> SparkSession:
    spark = local_session(app_name)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def run(main: Callable[[], None]) -> None:
    """Run an example's ``main``: a failure is one line on stderr and an exit code (README, "Exit codes")."""
    try:
        main()
    except SegcatError as exc:
        _fail(f"{type(exc).__name__}: {exc}")
        sys.exit(exit_code(exc))
    except KeyboardInterrupt:
        sys.exit(EXIT_INTERRUPTED)
    except Exception as exc:  # Spark's own errors carry pages of JVM trace: keep their first line
        from pyspark.errors import PySparkException

        if not isinstance(exc, PySparkException):
            raise
        first = next((line for line in str(exc).splitlines() if line.strip()), type(exc).__name__)
        _fail(f"Spark: {first.strip()}")
        sys.exit(EXIT_ERROR)


def _fail(message: str) -> None:
    print(f"error: {' '.join(message.splitlines())}", file=sys.stderr)
