"""Who ``segcat serve`` answers: DNS rebinding (Host names), the login redirect, the token kept out
of ``ps``, and requests whose head or query is too big (docs/HTTP_API.md, Security)."""

from __future__ import annotations

import http.client
import json
import socket
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from segcat.catalog.config import Config
from segcat.catalog.errors import ConfigError
from segcat.server.access import host_name, local_path
from segcat.server.command import serve_cmd
from segcat.server.http_limits import MAX_HEAD, MAX_URL
from segcat.server.settings import read_token_file
from tests.server_support import serving

pytestmark = [pytest.mark.kafka]

TOKEN = "access-test-token-" + uuid.uuid4().hex


def _get(url: str, path: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    """A raw GET of ``path`` as sent (no client normalises it), with exactly ``headers``."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        conn.putrequest("GET", path, skip_host=True, skip_accept_encoding=True)
        for name, value in (headers or {"Host": parts.netloc}).items():
            conn.putheader(name, value)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        conn.close()


def _error(status: int, body: bytes) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(body)
    assert set(document) == {"error", "message"}, document
    return document


# ---------------------------------------------------------------------------- DNS rebinding


def test_without_a_token_only_the_servers_own_names_are_answered(config: Config) -> None:
    """A page whose name is rebound to 127.0.0.1 sends its own name in Host: refused (it was
    answered with the catalog before)."""
    with serving(config) as url:
        netloc = urlsplit(url).netloc
        port = urlsplit(url).port
        for host in ("evil.example", f"evil.example:{port}", "127.0.0.1.evil.example", "localhost.evil"):
            status, _, body = _get(url, "/openapi.json", {"Host": host})
            assert status == 400, (host, status, body[:200])
            assert _error(status, body)["error"] == "invalid_host"
        status, _, body = _get(url, "/api/tables?namespace=none", {"Host": "evil.example"})
        assert status == 400 and _error(status, body)["error"] == "invalid_host"
        for host in (netloc, f"localhost:{port}", "localhost", "127.0.0.1", "[::1]:1", "LOCALHOST."):
            status, _, _ = _get(url, "/openapi.json", {"Host": host})
            assert status == 200, host
    with serving(config, allowed_hosts=("dash.example.org",)) as url:
        assert _get(url, "/openapi.json", {"Host": "dash.example.org:443"})[0] == 200
        assert _get(url, "/openapi.json", {"Host": "evil.example"})[0] == 400


def test_with_a_token_the_host_is_not_checked_but_the_token_is(config: Config) -> None:
    """Behind a proxy any name may reach the server; the token (a cookie is per name) guards it."""
    with serving(config, token=TOKEN) as url:
        status, _, body = _get(url, "/openapi.json", {"Host": "evil.example"})
        assert status == 401 and _error(status, body)["error"] == "unauthorized"
        status, _, _ = _get(
            url, "/openapi.json", {"Host": "proxy.example", "Authorization": f"Bearer {TOKEN}"}
        )
        assert status == 200


@given(st.text(max_size=40))
def test_host_names_parse_without_surprises(header: str) -> None:
    name = host_name(header)
    assert name is None or (name == name.lower() and not name.endswith("."))


# ---------------------------------------------------------------------------- the login redirect


def test_the_login_redirect_stays_on_this_server(config: Config) -> None:
    """``//evil.example/?token=T`` redirected to ``//evil.example/`` and ``/%5Cevil.example`` to
    ``/\\evil.example`` (a browser goes to evil.example for both)."""
    with serving(config, token=TOKEN) as url:
        cases = {
            f"//evil.example/?token={TOKEN}": "/evil.example/",
            f"///evil.example/?token={TOKEN}": "/evil.example/",
            f"/%5Cevil.example?token={TOKEN}": "/evil.example",
            f"/%5C%5Cevil.example/x?token={TOKEN}": "/evil.example/x",
            f"/tables/a%0D%0ASet-Cookie:x=1?token={TOKEN}&view=log": "/tables/a%0D%0ASet-Cookie:x=1?view=log",
            f"/?token={TOKEN}": "/",
        }
        for path, expected in cases.items():
            status, headers, _ = _get(url, path)
            assert status == 303, (path, status)
            assert headers["location"] == expected, path
            assert "segcat_token=" in headers["set-cookie"]


@given(st.text(max_size=60))
def test_a_redirect_target_is_always_a_local_path(path: str) -> None:
    target = local_path(path)
    assert target.startswith("/")
    assert not target.startswith(("//", "/\\"))
    assert all(33 <= ord(c) < 127 for c in target), target  # no space, control or non-ASCII: encoded


# ---------------------------------------------------------------------------- the token out of ps


def test_the_token_comes_from_a_file_and_the_command_line_warns(
    config: Config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SEGCAT_SERVE_TOKEN", raising=False)
    monkeypatch.delenv("SEGCAT_SERVE_TOKEN_FILE", raising=False)
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    assert read_token_file(str(token_file)) == TOKEN
    (tmp_path / "empty").write_text("\n")
    for bad, reason in ((tmp_path / "empty", "is empty"), (tmp_path / "missing", "does not exist")):
        with pytest.raises(ConfigError, match=reason) as refused:
            read_token_file(str(bad))
        assert str(tmp_path) not in str(refused.value)

    runner = CliRunner()
    both = runner.invoke(serve_cmd, ["--token-file", str(token_file), "--token", TOKEN])
    assert isinstance(both.exception, ConfigError) and "not both" in str(both.exception)

    # a busy port stops `serve` after the token was read: what it said about the token shows
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = str(busy.getsockname()[1])
        env = {
            "SEGCAT_BOOTSTRAP_SERVERS": config.bootstrap_servers,
            "SEGCAT_REDIS_URL": config.redis_url,
            "SEGCAT_WAREHOUSE": config.warehouse,
        }
        typed = runner.invoke(serve_cmd, ["--token", TOKEN, "--port", port], env=env)
        assert isinstance(typed.exception, ConfigError) and "in use" in str(typed.exception)
        assert "shows in `ps`" in typed.stderr
        from_file = runner.invoke(serve_cmd, ["--token-file", str(token_file), "--port", port], env=env)
        assert isinstance(from_file.exception, ConfigError) and "in use" in str(from_file.exception)
        assert "ps" not in from_file.stderr
        from_env = runner.invoke(serve_cmd, ["--port", port], env={**env, "SEGCAT_SERVE_TOKEN": TOKEN})
        assert "ps" not in from_env.stderr


# ---------------------------------------------------------------------------- request size


def test_an_oversized_request_head_or_query_is_refused_typed(config: Config) -> None:
    with serving(config) as url:
        netloc = urlsplit(url).netloc
        status, _, body = _get(url, "/api/events", {"Host": netloc, "Last-Event-ID": "x" * (MAX_HEAD + 10)})
        assert status == 431 and _error(status, body)["error"] == "request_header_fields_too_large"
        many = {"Host": netloc, **{f"X-Pad-{i}": "y" * 1000 for i in range(300)}}
        status, _, body = _get(url, "/healthz", many)
        assert status == 431
        status, _, body = _get(url, "/api/tables?where=" + "a" * MAX_URL)
        assert status == 414 and _error(status, body)["error"] == "uri_too_long"
        assert _get(url, "/healthz")[0] == 200  # the server still answers
