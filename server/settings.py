"""How ``segcat serve`` listens and who may ask: address, port, token, CORS origins."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from segcat.catalog.errors import ConfigError

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


@dataclass(frozen=True)
class ServeSettings:
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    token: str | None = None
    """Bearer token every request but the health probes must carry (None: no token asked)."""
    insecure: bool = False
    """Listen beyond loopback without a token (explicitly asked for)."""
    cors_origins: tuple[str, ...] = ()
    activity_window_s: int = 60
    replay_limit: int = 10_000
    """Versions each table's feed keeps in memory for reconnecting clients."""
    keepalive_s: float = 15.0

    def check(self) -> None:
        """Refuse to listen beyond loopback without a token, unless ``insecure`` says so."""
        if self.token is not None and len(self.token) < 16:
            raise ConfigError("the serve token is too short: use at least 16 characters (SEGCAT_SERVE_TOKEN)")
        if self.token is None and not self.insecure and not is_loopback(self.host):
            raise ConfigError(
                f"listening on {self.host} needs a token: pass --token or set SEGCAT_SERVE_TOKEN "
                "(or --insecure to serve without one, for a trusted network only)"
            )


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
