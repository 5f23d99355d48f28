"""Files only their owner reads, under ``Layout.secrets``: passwords, keys, the S3Proxy credential.

Written with mode 0600 from their first byte through a temp file that is renamed (or, to keep
an existing file, hard-linked) into place: a concurrent reader sees no file or the whole file,
and two processes creating the same password at once agree on one.
"""

from __future__ import annotations

import contextlib
import os
import secrets
from pathlib import Path


def secure_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o700)


def write_private(path: Path, data: bytes | str, *, keep_existing: bool = False) -> None:
    """Write ``path`` (mode 0600); with ``keep_existing`` an existing file wins and is kept."""
    secure_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(6)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        if keep_existing:
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        else:
            tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)


def password_file(path: Path) -> Path:
    """``path``, holding a random password made on first use and kept afterwards."""
    if not path.is_file():
        write_private(path, secrets.token_urlsafe(24) + "\n", keep_existing=True)
    return path
