"""How ``segcat serve`` listens and who may ask: address, port, token, allowed host names, CORS."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from segcat import ConfigError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
MIN_TOKEN = 16
MAX_TOKEN = 4096


@dataclass(frozen=True)
class ServeSettings:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token: str | None = None
    """Bearer token every request but the health probes must carry (None: no token asked)."""
    insecure: bool = False
    """Listen beyond loopback without a token (explicitly asked for)."""
    cors_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    """Host names a request may name in ``Host:`` when no token is set, besides the bound address,
    ``localhost`` and IP literals (docs/HTTP_API.md, DNS rebinding)."""
    activity_window_s: int = 60
    replay_limit: int = 10_000
    """Versions each table's feed keeps in memory for reconnecting clients."""
    keepalive_s: float = 15.0
    iceberg_credentials: bool = False
    """Hand the server's own S3 credentials to Iceberg readers in each loaded table's ``config``
    (``--iceberg-credentials``; needs a token: docs/HTTP_API.md, Iceberg REST catalog)."""

    def check(self) -> None:
        """Refuse to listen beyond loopback without a token, unless ``insecure`` says so."""
        if self.token is not None:
            if len(self.token) < MIN_TOKEN:
                raise ConfigError(
                    f"the serve token is too short: use at least {MIN_TOKEN} characters (SEGCAT_SERVE_TOKEN)"
                )
            if len(self.token) > MAX_TOKEN or not self.token.isascii() or not self.token.isprintable():
                raise ConfigError(
                    f"the serve token must be at most {MAX_TOKEN} printable ASCII characters "
                    "(it travels in an HTTP header and a cookie)"
                )
        if self.token is None and not self.insecure and not is_loopback(self.host):
            raise ConfigError(
                f"listening on {self.host} needs a token: pass --token-file or set SEGCAT_SERVE_TOKEN "
                "(or --insecure to serve without one, for a trusted network only)"
            )
        if self.iceberg_credentials and self.token is None:
            raise ConfigError(
                "--iceberg-credentials hands the server's storage credentials to every caller: "
                "it needs a token (--token-file or SEGCAT_SERVE_TOKEN)"
            )
        for name in self.allowed_hosts:
            if not name or not all(c.isalnum() or c in ".-_:[]" for c in name):
                raise ConfigError(f"--allowed-host {name[:100]!r} is not a host name")


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token_file(path: str) -> str:
    """The token in ``path`` (its first line, surrounding white space dropped); ``ConfigError`` naming
    the trouble. A file keeps the token out of ``ps`` and shell history, where ``--token`` shows."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"the token file {os.path.basename(path)!r} does not exist") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ConfigError(f"cannot read the token file {os.path.basename(path)!r}: {reason}") from None
    lines = text.strip().splitlines()
    if not lines or not lines[0].strip():
        raise ConfigError(f"the token file {os.path.basename(path)!r} is empty")
    return lines[0].strip()
