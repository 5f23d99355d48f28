"""``segcat table create NAME...``: many names, a file of names, typed errors."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import uuid
from pathlib import Path

import click
import pytest

from segcat import Catalog
from segcat.catalog.config import Config
from segcat.catalog.protocol.names import TableName
from segcat.cli.name_list import MAX_LINE, read_names
from tests.handles import tables_of


def _segcat(config: Config, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "SEGCAT_BOOTSTRAP_SERVERS": config.bootstrap_servers,
        "SEGCAT_REDIS_URL": config.redis_url,
        "SEGCAT_WAREHOUSE": config.warehouse,
        "COLUMNS": "200",
    }
    return subprocess.run(
        [sys.executable, "-c", "from segcat.cli import main; main()", *args],
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.kafka
def test_create_several_names_and_a_file(config: Config, catalog: Catalog, tmp_path: Path) -> None:
    ns = f"cli{uuid.uuid4().hex[:10]}"
    listed = tmp_path / "names.txt"
    listed.write_text(f"# tables of {ns}\n{ns}.c\n\n  {ns}.d  \n")
    done = _segcat(config, "table", "create", f"{ns}.a", f"{ns}.b", "--from-file", str(listed))
    assert done.returncode == 0, done.stderr
    assert f"4 tables created: {ns}.a, {ns}.b, {ns}.c, {ns}.d" in done.stdout
    piped = _segcat(config, "table", "create", "--from-file", "-", stdin=f"{ns}.e\n{ns}.f\n")
    assert piped.returncode == 0, piped.stderr
    assert f"2 tables created: {ns}.e, {ns}.f" in piped.stdout
    names = [TableName(ns, t) for t in "abcdef"]
    assert tables_of(catalog).admin.existing(names) == names
    assert [catalog.load_table(str(n)).head_offset() for n in names] == [0] * 6

    again = _segcat(config, "table", "create", f"{ns}.a", f"{ns}.g")
    assert again.returncode != 0
    assert "Traceback" not in again.stderr
    assert f"TableAlreadyExists: table {ns}.a already exists; nothing was created" in again.stderr
    assert "--exist-ok" in again.stderr
    assert not catalog.table_exists(f"{ns}.g")
    finished = _segcat(config, "table", "create", "--exist-ok", f"{ns}.a", f"{ns}.g")
    assert finished.returncode == 0, finished.stderr
    assert f"2 tables ready (created, or there already): {ns}.a, {ns}.g" in finished.stdout


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("args", "stdin", "complaint"),
    [
        ((), None, "name at least one table"),
        (("{ns}.a", "bad name"), None, "InvalidTableName: names[1]: invalid table name 'bad name'"),
        (("{ns}.a", "{ns}.a"), None, "InvalidArgument: names[1]: table {ns}.a is given twice"),
        (("--from-file", "-"), "{ns}.a\nno-dot\n", "InvalidTableName: names[1]"),
        (("--from-file", "/nonexistent/names.txt"), None, "No such file"),
        (("--from-file", "-"), "x" * (MAX_LINE + 5), "line 1 is longer than"),
    ],
)
def test_bad_input_creates_nothing_and_says_why(
    config: Config, catalog: Catalog, args: tuple[str, ...], stdin: str | None, complaint: str
) -> None:
    ns = f"cli{uuid.uuid4().hex[:10]}"
    done = _segcat(
        config,
        "table",
        "create",
        *(a.format(ns=ns) for a in args),
        stdin=None if stdin is None else stdin.format(ns=ns),
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert complaint.format(ns=ns) in done.stderr
    assert "Traceback" not in done.stderr
    assert not catalog.table_exists(f"{ns}.a")


def test_read_names_skips_comments_and_blank_lines() -> None:
    assert read_names(io.StringIO("# x\n a.b \n\n#c.d\nc.d"), "f") == ["a.b", "c.d"]


def test_read_names_is_bounded() -> None:
    with pytest.raises(click.BadParameter, match="line 2 is longer than 512"):
        read_names(io.StringIO("a.b\n" + "y" * 10_000), "f")
    from segcat.cli import name_list

    many = io.StringIO("a.b\n" * (name_list.MAX_NAMES + 1))
    with pytest.raises(click.BadParameter, match="more than 100,000 names"):
        read_names(many, "f")


def test_read_names_refuses_text_that_is_not_utf8() -> None:
    stream = io.TextIOWrapper(io.BytesIO(b"a.b\n\xff\xfe.c\n"), encoding="utf-8")
    with pytest.raises(click.BadParameter, match="not UTF-8 text"):
        read_names(stream, "f")
