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
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from segcat.catalog.errors import EXIT_ERROR, MissingExtra, exit_code
from segcat.catalog.extras import PROVIDES, missing_extra
from tests.packaging_support import EXTRA_MODULES, REPO, package_dirs, run_without

PYPROJECT: dict[str, Any] = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS: dict[str, Any] = PYPROJECT["tool"]["setuptools"]
CLI = "from segcat.cli import main; main()"


def _folder_packages() -> dict[str, Path]:
    """Every package of code the folders hold (a folder with ``__init__.py``), by its import name."""
    found = {"segcat": REPO / "segcat"}
    for package, folder in package_dirs().items():
        for init in sorted((REPO / folder).rglob("__init__.py")):
            parts = init.parent.relative_to(REPO / folder).parts
            found[".".join((package, *parts))] = init.parent
    return found


def _package_folder(package: str) -> Path:
    """The folder a listed package installs from, by pyproject's package-dir."""
    for prefix, folder in package_dirs().items():
        if package == prefix or package.startswith(prefix + "."):
            return REPO / folder / Path(*package[len(prefix) :].split(".")[1:])
    return REPO / Path(*package.split("."))


def test_the_repository_holds_no_links() -> None:
    listed = subprocess.run(["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    links = [line.split("\t")[-1] for line in listed.stdout.splitlines() if line.startswith("120000 ")]
    assert not links, f"symbolic links in the repository: {links}"


def test_pyproject_lists_every_package_of_the_folders() -> None:
    listed = set(SETUPTOOLS["packages"])
    code = _folder_packages()
    assert sorted(set(code) - listed) == [], "add these to [tool.setuptools] packages"
    data_only = listed - set(code)
    # the rest are folders of package data (setuptools warns about data in unlisted folders)
    assert sorted(data_only - set(SETUPTOOLS["package-data"])) == [], "listed, but neither code nor data"
    for package in data_only:
        assert _package_folder(package).is_dir(), package


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
    for package, patterns in SETUPTOOLS["package-data"].items():
        folder = _package_folder(package)
        for pattern in patterns:
            if pattern.startswith("vendor/") and not (folder / "vendor").exists():
                continue  # npm-vendored by ./dev install (server/web/vendor.sh), not in git
            assert list(folder.glob(pattern)), f"{package}: {pattern} matches no file in {folder}"


def test_each_extra_brings_the_modules_the_code_expects() -> None:
    extras: dict[str, list[str]] = PYPROJECT["project"]["optional-dependencies"]
    assert set(PROVIDES) <= set(extras)
    assert extras["all"] == [f"segcat[{','.join(PROVIDES)}]"]
    assert "segcat[all]" in extras["dev"]
    modules_of: dict[str, set[str]] = {}
    for module, dists in metadata.packages_distributions().items():
        for dist in dists:
            modules_of.setdefault(canonicalize_name(dist), set()).add(module)
    for extra, requirements in extras.items():
        if extra not in PROVIDES:
            continue
        for requirement in requirements:
            name = canonicalize_name(Requirement(requirement).name)
            provided = modules_of.get(name, set())
            assert provided & PROVIDES[extra], f"{extra}: {name} brings {provided}, none in PROVIDES"


def test_a_missing_module_of_segcat_is_not_a_missing_extra() -> None:
    def missing(name: str) -> ModuleNotFoundError:
        return ModuleNotFoundError(f"No module named {name!r}", name=name)

    found = missing_extra(missing("fastapi.responses"), "segcat serve", ("server",))
    assert isinstance(found, MissingExtra) and found.extras == ("server",)
    assert "pip install 'segcat[server]'" in str(found)
    assert exit_code(found) == EXIT_ERROR
    assert missing_extra(missing("segcat.server.nothing"), "segcat serve", ("server",)) is None
    assert missing_extra(missing("fastapi"), "segcat stack", ("stack",)) is None


def test_the_base_install_loads_the_command_and_the_table_code() -> None:
    code = (
        "import segcat.catalog.read.table, segcat.catalog.read.watch, segcat.catalog.write, "
        "segcat.producers.segment_files; " + CLI
    )
    done = run_without(EXTRA_MODULES, code, "--help")
    assert done.returncode == 0, done.stderr
    listed = {line.split()[0] for line in done.stdout.splitlines() if line.startswith("  ")}
    assert {"table", "commit", "show", "log", "serve", "stack", "materializer", "demo"} <= listed
    assert "Not installed: pip install 'segcat[stack]'" in " ".join(done.stdout.split())
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("args", "hidden", "extra"),
    [
        # the command's module itself needs the extra (a stand-in is mounted)
        (("stack", "status"), ("cryptography",), "stack"),
        (("demo", "--days", "1"), ("cryptography",), "stack,materializer"),
        # the command loads, its run needs the extra
        (("serve", "--port", "0"), ("fastapi",), "server"),
        (("materializer", "--metrics-port", "0"), ("prometheus_client",), "materializer"),
    ],
)
def test_a_command_whose_extra_is_missing_names_the_install(
    args: tuple[str, ...], hidden: tuple[str, ...], extra: str
) -> None:
    done = run_without(hidden, CLI, *args)
    assert done.returncode == EXIT_ERROR, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: MissingExtra: "), done.stderr
    assert f"pip install 'segcat[{extra}]'" in lines[0]


def test_the_materializer_module_names_its_extra() -> None:
    done = run_without(
        ("prometheus_client",), "import runpy; runpy.run_module('segcat.materializer', run_name='__main__')"
    )
    assert done.returncode == EXIT_ERROR, done.stdout + done.stderr
    assert done.stderr.strip().splitlines() == [
        "error: MissingExtra: segcat materializer needs the optional dependencies of segcat[materializer] "
        "(no module named 'prometheus_client'): pip install 'segcat[materializer]'"
    ]


def test_the_import_view_mirrors_the_mapping() -> None:
    from tests.packaging_support import build_import_view

    top = build_import_view() / "segcat"
    for package, folder in package_dirs().items():
        link = top / package.rpartition(".")[2]
        assert link.is_symlink() and link.resolve() == (REPO / folder).resolve(), link
    assert (top / "__init__.py").resolve() == (REPO / "segcat" / "__init__.py").resolve()
    assert not fnmatch.filter([p.name for p in top.iterdir() if p.is_symlink()], "*.[0-9]*")
