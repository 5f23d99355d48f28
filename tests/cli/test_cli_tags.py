"""``segcat tag create|list|drop`` and ``show --version TAG`` as a user runs them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from segcat import Catalog, load_catalog
from segcat.catalog.config import Config
from tests.cli.test_cli import segcat
from tests.factories import segment

pytestmark = pytest.mark.kafka


@pytest.fixture
def tconfig(config: Config, tmp_path: Path) -> Config:
    return replace(config, warehouse=str(tmp_path / "warehouse"))


def test_tag_create_list_show_and_drop(tconfig: Config, table_name: str) -> None:
    Catalog(tconfig).create_table(table_name)
    with load_catalog(tconfig).load_table(table_name) as writer:
        first = writer.append([segment("a")])
        writer.append([segment("b")])
    made = segcat(tconfig, "tag", "create", table_name, "v1", "--version", str(first))
    assert made.returncode == 0 and f"names version {first}" in made.stdout, made.stdout + made.stderr
    listed = segcat(tconfig, "tag", "list", table_name, "--json")
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout) == {"table": table_name, "tags": {"v1": first}}
    table_view = segcat(tconfig, "tag", "list", table_name)
    assert table_view.returncode == 0 and "v1" in table_view.stdout
    shown = segcat(tconfig, "show", table_name, "--version", "v1", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["version"] == first
    again = segcat(tconfig, "tag", "create", table_name, "v1")  # exists: --replace moves it
    assert again.returncode == 2 and "already names version" in again.stderr
    assert "Traceback" not in again.stderr and len(again.stderr.strip().splitlines()) == 1
    moved = segcat(tconfig, "tag", "create", table_name, "v1", "--replace")
    assert moved.returncode == 0, moved.stderr
    dropped = segcat(tconfig, "tag", "drop", table_name, "v1")
    assert dropped.returncode == 0 and "dropped" in dropped.stdout
    for args, code, text in (
        (("tag", "drop", table_name, "v1"), 4, "no tag 'v1'"),
        (("show", table_name, "--version", "v1"), 4, "no tag 'v1'"),
        (("tag", "create", table_name, "9lives"), 2, "not a tag name"),
        (("tag", "create", table_name, "ok", "--version", "bad name"), 2, "neither a version nor a tag"),
        (("tag", "create", table_name, "ok", "--version", "99999"), 4, "does not exist yet"),
    ):
        bad = segcat(tconfig, *args)
        assert bad.returncode == code, (args, bad.stdout, bad.stderr)
        assert text in bad.stderr and "Traceback" not in bad.stderr, (args, bad.stderr)
    empty = segcat(tconfig, "tag", "list", table_name)
    assert empty.returncode == 0 and "no tags" in empty.stdout
