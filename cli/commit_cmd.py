"""``segcat commit NAME FILE``: publish one commit described by a JSON document."""

from __future__ import annotations

import dataclasses
import time
from typing import BinaryIO

import click

from segcat import load_catalog
from segcat.catalog.protocol.jsonio import commit_from_json, parse_json
from segcat.catalog.protocol.names import table_name
from segcat.cli.render import console


@click.command("commit")
@click.argument("name")
@click.argument("file", type=click.File("rb"))
def commit_cmd(name: str, file: BinaryIO) -> None:
    """Publish the commit in FILE (JSON; '-' for stdin) to table NAME and print its version.

    The document needs "operation" and whatever that operation carries ("adds", "drops",
    "tombstones", ...); docs/commit.schema.json is its JSON Schema, docs/PROTOCOL.md its
    meaning. Left out, base_version is the head the writer reads first, timestamp_ms now.
    The document is checked before anything is read or written.
    """
    qualified = table_name(name).qualified
    source = "stdin" if file.name in ("<stdin>", "-") else str(file.name)
    raw = parse_json(file.read(), source=source)
    commit = commit_from_json(  # checked before anything is read; the handle names the writer
        raw, table=qualified, writer_id="segcat-commit", base_version=-1, now_ms=int(time.time() * 1000)
    )
    with load_catalog().load_table(qualified) as table:
        if "writer_id" not in raw:
            commit = dataclasses.replace(commit, writer_id=table.writer_id)
        if "base_version" not in raw:
            commit = dataclasses.replace(commit, base_version=table.refresh().version)
        version = table.commit(commit)
    console.print(
        f"[green]ACCEPTED[/] {commit.operation.value} {commit.commit_id} → version [bold]{version}[/]"
    )
