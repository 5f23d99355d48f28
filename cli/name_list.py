"""Table names from a file or stdin (``segcat table create --from-file``): one name a line.

Blank lines and lines starting with ``#`` are skipped; surrounding whitespace is ignored.
Reading is bounded: a line longer than any table name could be, or more names than one
command creates, is refused with the line's number before anything is created.
"""

from __future__ import annotations

from typing import IO

import click

MAX_LINE = 512
"""Longer than any valid name (two identifiers of at most 100 characters and a dot)."""
MAX_NAMES = 100_000
"""The most names one command takes (a catalog of this size is created in a few batches)."""


def read_names(stream: IO[str], source: str) -> list[str]:
    """The names ``stream`` lists; ``click.BadParameter`` naming ``source`` and the line when it
    cannot be read as one name a line."""
    names: list[str] = []
    number = 0
    while True:
        number += 1
        try:
            line = stream.readline(MAX_LINE + 1)
        except UnicodeDecodeError as exc:
            raise click.BadParameter(
                f"{source}: not UTF-8 text ({exc.reason}), at line {number} or after"
            ) from exc
        if not line:
            return names
        if len(line) > MAX_LINE and not line.endswith("\n"):
            raise click.BadParameter(
                f"{source}: line {number} is longer than {MAX_LINE} characters: no table name is; "
                "give one '<namespace>.<table>' a line"
            )
        name = line.strip()
        if not name or name.startswith("#"):
            continue
        if len(names) == MAX_NAMES:
            raise click.BadParameter(f"{source}: more than {MAX_NAMES:,} names; split the list")
        names.append(name)
