"""The layers of docs/ARCHITECTURE.md hold: import-linter's contracts (pyproject.toml) and one namespace.

``lint-imports`` also runs in ``./dev test`` before the tests; this makes a broken layer a
failing test too, and checks what import-linter cannot: that nothing imports the project's
folders by their bare names (``import catalog``), which would load a second copy of a module
beside ``segcat.catalog``. import-linter reads files, so it runs on the generated import view
(``./dev view``), where each folder sits under ``segcat/`` as it does in the wheel.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.packaging_support import REPO, build_import_view, package_dirs

FOLDERS = tuple(package_dirs().values())
SOURCES = (*FOLDERS, "tests", "bench", "examples")


def test_the_import_contracts_are_kept() -> None:
    # in a process of its own: import-linter reconfigures logging, which other tests read; in the
    # view, because import-linter puts its working directory first on the path
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from importlinter.cli import lint_imports; "
            "sys.exit(lint_imports(no_cache=True, no_logo=True))",
        ],
        cwd=build_import_view(),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _imported_names(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
    return found


@pytest.mark.parametrize("folder", SOURCES)
def test_everything_is_imported_through_the_segcat_namespace(folder: str) -> None:
    bare = [
        f"{path.relative_to(REPO)}:{line}: import {name}"
        for path in sorted((REPO / folder).rglob("*.py"))
        for line, name in _imported_names(path)
        if name.split(".")[0] in FOLDERS
    ]
    assert not bare, "import these as segcat.<folder>:\n" + "\n".join(bare)
