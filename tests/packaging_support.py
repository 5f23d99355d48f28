"""The package's layout as tests see it: pyproject's package-dir, the import view, hidden extras."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]

EXTRA_MODULES = (
    "pyspark",
    "py4j",
    "pandas",
    "fastapi",
    "starlette",
    "sse_starlette",
    "uvicorn",
    "httptools",
    "prometheus_client",
    "cryptography",
)
"""Every module an extra brings: hidden together, a process sees the base install."""


def _import_view() -> ModuleType:
    spec = importlib.util.spec_from_file_location("segcat_import_view", REPO / ".ci" / "import_view.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def package_dirs() -> dict[str, str]:
    """pyproject's ``[tool.setuptools.package-dir]``: ``{"segcat.catalog": "catalog", ...}``."""
    mapping: dict[str, str] = _import_view().package_dirs(REPO)
    return mapping


def build_import_view() -> Path:
    """The generated ``build/import-view`` (``./dev view``), made or refreshed now."""
    view: Path = _import_view().build(REPO)
    return view


_HIDE = """
import importlib.abc, sys
class _Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {hidden!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _Hidden())
"""


def run_without(
    hidden: tuple[str, ...], code: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``python -c code args`` in a process where ``hidden`` cannot be imported, as if the
    extras that bring them were not installed."""
    return subprocess.run(
        [sys.executable, "-c", _HIDE.format(hidden=set(hidden)) + code, *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
        check=False,
    )
