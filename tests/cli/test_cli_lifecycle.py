"""``segcat prune``, ``vacuum``, ``leases`` and ``table drop|undrop|purge`` as a user runs them."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from segcat import Catalog, load_catalog
from segcat.catalog.config import Config
from segcat.cli.params import DURATION, MAX_DURATION_MS
from tests.cli.test_cli import segcat
from tests.factories import segment
from tests.handles import reader_of

pytestmark = pytest.mark.kafka


@pytest.fixture
def lconfig(config: Config, tmp_path: Path) -> Config:
    return replace(config, warehouse=str(tmp_path / "warehouse"))


def test_vacuum_and_prune_dry_runs_and_bad_input(lconfig: Config, table_name: str) -> None:
    table = Catalog(lconfig).create_table(table_name)
    root = Path(table.location())
    for sid in ("a", "b"):
        path = root / "data" / "2020-01" / f"{sid}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * 10)
    with load_catalog(lconfig).load_table(table_name) as writer:
        writer.append([segment("a")])
        writer.compact(["a"], [segment("b")])
    dry = segcat(
        lconfig, "vacuum", table_name, "--retain-versions", "1", "--grace", "0", "--dry-run", "--json"
    )
    assert dry.returncode == 0, dry.stderr
    doc = json.loads(dry.stdout)
    assert doc["dry_run"] and [f["reason"] for f in doc["files"]] == ["dropped"]
    assert (root / "data/2020-01/a.parquet").exists()
    shown = segcat(lconfig, "vacuum", table_name, "--retain-versions", "1", "--grace", "0")
    assert shown.returncode == 0 and "deleted 1 files" in shown.stdout, shown.stdout + shown.stderr
    assert not (root / "data/2020-01/a.parquet").exists() and (root / "data/2020-01/b.parquet").exists()
    for args in (
        ("vacuum", table_name, "--grace", "-1d"),
        ("vacuum", table_name, "--grace", "5 fortnights"),
        ("vacuum", table_name, "--grace", "999999999999d"),
        ("vacuum", table_name, "--retain-versions", "0"),
        ("prune", table_name, "--retain-versions", "0"),
        ("prune", table_name, "--retain-age", "-3h"),
    ):
        bad = segcat(lconfig, *args)
        assert bad.returncode == 2, (args, bad.stdout, bad.stderr)
        assert "Traceback" not in bad.stderr
    plan = segcat(lconfig, "prune", table_name, "--dry-run", "--json")
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["marker_version"] is None  # no key frame yet: nothing to prune
    leases = segcat(lconfig, "leases", table_name, "--json")
    assert leases.returncode == 0, leases.stderr


def test_drop_undrop_purge(lconfig: Config, table_name: str) -> None:
    table = Catalog(lconfig).create_table(table_name)
    with load_catalog(lconfig).load_table(table_name) as writer:
        writer.append([segment("a")])
    assert segcat(lconfig, "table", "purge", table_name, "--yes").returncode == 2  # not dropped
    dropped = segcat(lconfig, "table", "drop", table_name)
    assert dropped.returncode == 0 and "dropped" in dropped.stdout
    show = segcat(lconfig, "show", table_name)
    assert show.returncode == 4 and "dropped" in show.stderr and "Traceback" not in show.stderr
    vac = segcat(lconfig, "vacuum", table_name)
    assert vac.returncode == 4 and "dropped" in vac.stderr
    assert segcat(lconfig, "table", "undrop", table_name).returncode == 0
    assert segcat(lconfig, "show", table_name).returncode == 0
    assert segcat(lconfig, "table", "drop", table_name).returncode == 0
    purged = segcat(lconfig, "table", "purge", table_name, "--yes")
    assert purged.returncode == 0, purged.stderr
    assert table_name not in {str(n) for n in Catalog(lconfig).list_tables()}
    data = Path(reader_of(table).root) / "data"
    assert not data.exists() or not [p for p in data.rglob("*") if p.is_file()]
    gone = segcat(lconfig, "show", table_name)
    assert gone.returncode == 4


@given(st.integers(min_value=0, max_value=10**6), st.sampled_from(["ms", "s", "m", "h", "d", "w"]))
def test_durations_parse_exactly(amount: int, unit: str) -> None:
    factor = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000, "w": 604_800_000}[unit]
    if amount * factor > MAX_DURATION_MS:
        with pytest.raises(click.BadParameter):
            DURATION.convert(f"{amount}{unit}", None, None)
    else:
        assert DURATION.convert(f"{amount}{unit}", None, None) == amount * factor


@given(st.text(max_size=12))
def test_durations_never_coerce_garbage(text: str) -> None:
    try:
        value = DURATION.convert(text, None, None)
    except click.BadParameter:
        return
    assert isinstance(value, int) and value >= 0
    assert text.strip().lower() == "0" or text.strip().lower()[-1] in "smhdw"


def test_a_purge_begun_refuses_the_undrop(lconfig: Config, table_name: str) -> None:
    """A purge killed right after its fence: the table can no longer be undropped (exit 4, said
    plainly), and running the purge again finishes it."""
    Catalog(lconfig).create_table(table_name)
    with load_catalog(lconfig).load_table(table_name) as writer:
        writer.append([segment("a")])
    assert segcat(lconfig, "table", "drop", table_name).returncode == 0
    with load_catalog(lconfig).load_table(table_name) as writer:
        fence = writer.set_properties({"segcat.purge": "killed-purge"})
    undrop = segcat(lconfig, "table", "undrop", table_name)
    assert undrop.returncode == 4, undrop.stdout + undrop.stderr
    assert "being purged" in undrop.stderr and "Traceback" not in undrop.stderr
    purged = segcat(lconfig, "table", "purge", table_name, "--yes")
    assert purged.returncode == 0, purged.stderr
    assert f"fence at version {fence}" in purged.stdout
