"""Where the container tooling keeps its state: under the checkout's ``.segcat/``, per clone."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
STATE_DIR = REPO_ROOT / ".segcat" / "containers"
BUILD_DIR = REPO_ROOT / "build" / "containers"
