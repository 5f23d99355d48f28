"""``segcat commit NAME FILE``: publish one commit described by a JSON document."""

from __future__ import annotations

import json
import time
from typing import TextIO

import click

from catalog.cli.render import console
from catalog.config import Config
from catalog.errors import MalformedCommit
from catalog.jsonio import commit_from_json
from producers import TableWriter


@click.command("commit")
@click.argument("name")
@click.argument("file", type=click.File("r"))
def commit_cmd(name: str, file: TextIO) -> None:
    """Publish the commit in FILE (JSON; '-' for stdin) to table NAME and print its version.

    The document needs "operation" and whatever that operation carries ("adds", "drops",
    "tombstones", ...); see docs/PROTOCOL.md. base_version defaults to the head the
    writer reads first.
    """
    try:
        raw = json.load(file)
    except json.JSONDecodeError as exc:
        raise MalformedCommit(f"{file.name} is not valid JSON: {exc}") from exc
    with TableWriter(Config.load(), name) as writer:
        head = writer.refresh().version
        commit = commit_from_json(
            raw,
            table=writer.name.qualified,
            writer_id=writer.writer_id,
            base_version=head,
            now_ms=int(time.time() * 1000),
        )
        version = writer.commit(commit)
    console.print(
        f"[green]ACCEPTED[/] {commit.operation.value} {commit.commit_id} → version [bold]{version}[/]"
    )
