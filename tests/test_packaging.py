"""The package as users install it (docs/ARCHITECTURE.md, "Packaging").

The folders map to ``segcat.<folder>`` through pyproject's package-dir, with no links in the
repository; pyproject lists every package the wheel holds, so these tests keep that list equal
to the folders. The base install runs the table commands; a command whose extra is missing
ends in one ``MissingExtra`` line naming the ``pip install`` (exit 1), never a traceback.
``.ci/wheel_smoke.sh`` installs the built wheel itself, bare and per extra.
"""

from __future__ import annotations

import fnmatch
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest

from tests.packaging_support import REPO, package_dirs

PYPROJECT: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS: dict[str, Any] = PYPROJECT["tool"]["setuptools"]


def _folder_packages() -> dict[str, Path]:
    """Every package the folders hold, by the name it imports as."""
    found = {"segcat": REPO / "segcat"}
    for package, folder in package_dirs().items():
        for init in sorted((REPO / folder).rglob("__init__.py")):
            parts = init.parent.relative_to(REPO / folder).parts
            found[".".join((package, *parts))] = init.parent
    return found


def test_the_repository_holds_no_links() -> None:
    listed = subprocess.run(["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    links = [line.split("\t")[-1] for line in listed.stdout.splitlines() if line.startswith("120000 ")]
    assert not links, f"symbolic links in the repository: {links}"


def test_pyproject_lists_every_package_of_the_folders() -> None:
    assert sorted(SETUPTOOLS["packages"]) == sorted(_folder_packages())


def test_every_folder_with_python_files_is_a_package() -> None:
    # a folder without __init__.py would be missing from the wheel, not an error at build time
    loose = sorted(
        str(path.parent.relative_to(REPO))
        for folder in package_dirs().values()
        for path in (REPO / folder).rglob("*.py")
        if "__pycache__" not in path.parts and not (path.parent / "__init__.py").exists()
    )
    assert not loose, f"add __init__.py (and the package to pyproject.toml) in: {sorted(set(loose))}"


def test_the_package_data_globs_find_their_files() -> None:
    packages = _folder_packages()
    for package, patterns in SETUPTOOLS["package-data"].items():
        for pattern in patterns:
            if "vendor" in pattern and not (packages[package] / "static" / "vendor").exists():
                continue  # npm-vendored by ./dev install (server/web/vendor.sh), not in git
            assert list(packages[package].glob(pattern)), f"{package}: {pattern} matches no file"


def test_the_import_view_mirrors_the_mapping() -> None:
    from tests.packaging_support import build_import_view

    top = build_import_view() / "segcat"
    for package, folder in package_dirs().items():
        link = top / package.rpartition(".")[2]
        assert link.is_symlink() and link.resolve() == (REPO / folder).resolve(), link
    assert (top / "__init__.py").resolve() == (REPO / "segcat" / "__init__.py").resolve()
    assert not fnmatch.filter([p.name for p in top.iterdir() if p.is_symlink()], "*.[0-9]*")
