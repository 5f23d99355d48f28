"""Create or refresh ``build/import-view/segcat/``: the package tree as the wheel installs it.

setuptools maps each ``segcat.<folder>`` to a top-level folder (pyproject.toml,
``[tool.setuptools.package-dir]``). An installed wheel holds the real tree and an editable
install resolves the mapping with an import hook, but tools that read files instead of
importing (mypy, import-linter) follow neither. This view gives them a plain directory:
``segcat/`` with a link to each file of the source ``segcat/`` and one directory link per
mapped package, so edits in the folders show at once, and a link to ``pyproject.toml``:
import-linter puts its working directory first on the path and reads its contracts from
there, so it runs inside the view (``cd build/import-view && lint-imports``). The view is
generated (``./dev view``), gitignored and never committed; the repository holds no links.

Run it again after adding a file directly in ``segcat/``; files in the mapped folders need
nothing. Safe to run while another process reads the view: links already right stay.
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "segcat"


def package_dirs(root: Path = ROOT) -> dict[str, str]:
    """pyproject's package-dir: ``{"segcat.catalog": "catalog", ...}``."""
    config = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    mapping: dict[str, str] = config["tool"]["setuptools"]["package-dir"]
    return mapping


def _wanted(root: Path, view: Path) -> dict[Path, Path]:
    """Each link of the view and the file or folder it points to."""
    top = view / PACKAGE
    links = {view / "pyproject.toml": root / "pyproject.toml"}
    links.update({top / e.name: e for e in (root / PACKAGE).iterdir() if e.name != "__pycache__"})
    for package, folder in package_dirs(root).items():
        parent, _, name = package.rpartition(".")
        if parent != PACKAGE:
            # a deeper mapping would land inside a linked folder, i.e. in the sources
            raise SystemExit(f"import_view: only segcat.<folder> mappings are supported, not {package}")
        links[top / name] = root / folder
    return links


def build(root: Path = ROOT) -> Path:
    """Make the view match pyproject.toml and ``segcat/``; return the directory to put on the path."""
    view = root / "build" / "import-view"
    top = view / PACKAGE
    top.mkdir(parents=True, exist_ok=True)
    wanted = _wanted(root, view)
    for link, target in wanted.items():
        relative = os.path.relpath(target, link.parent)
        if link.is_symlink() and os.readlink(link) == relative:
            continue
        staged = link.with_name(f".{link.name}.{os.getpid()}")
        staged.unlink(missing_ok=True)
        staged.symlink_to(relative, target_is_directory=target.is_dir())
        os.replace(staged, link)  # atomic: a reader sees the old link or the new one
    for entry in [*view.iterdir(), *top.iterdir()]:
        if entry not in wanted and entry.is_symlink():
            entry.unlink()
    return view


if __name__ == "__main__":
    print(build(Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT))
