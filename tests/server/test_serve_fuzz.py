"""Every endpoint of ``segcat serve`` under random headers, query strings and cursors: each answer
is a success or a typed 4xx (the API's ``{"error", "message"}``), never a 5xx, within a bounded
time, and the server's memory stays bounded over the whole run (docs/HTTP_API.md, Errors).

The server runs in this process (a thread), so the resident set measured is the server's plus
the test's; the bound is generous and catches growth of the kind issue 20 found (hundreds of MB
from one request), not noise.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlsplit

import httpx
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from segcat import Catalog, load_catalog
from segcat.catalog.config import Config
from tests.factories import segment
from tests.server_support import serving

pytestmark = [pytest.mark.kafka, pytest.mark.redis]

TOKEN = "fuzz-token-" + uuid.uuid4().hex
ANSWER_S = 15.0
"""The longest any one answer (an SSE stream: its headers) may take."""
RSS_GROWTH = 300 * 1024 * 1024
EXAMPLES = 250


@dataclass(frozen=True)
class Target:
    url: str
    table: str
    head: int


@pytest.fixture(scope="module")
def target(config: Config) -> Iterator[Target]:
    name = f"fuzz.t_{uuid.uuid4().hex[:8]}"
    Catalog(config).create_table(name)
    with load_catalog(config).load_table(name) as writer:
        writer.append([segment("a"), segment("b")])
        writer.delete(predicates=["id = 3"])
        head = writer.append([segment("c", "2020-02")])
    with serving(config, token=TOKEN) as url:
        yield Target(url, name, head)


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


@pytest.fixture(scope="module")
def rss_start(target: Target) -> int:
    return _rss()


# ---------------------------------------------------------------------------- strategies

text = st.text(max_size=80)
numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70).map(str),
    st.sampled_from(["0", "-1", "1.5", "1e3", "NaN", "", " 1", "١", "0x10", "99999999999999999999"]),
)
values = st.one_of(
    st.integers(-2, 8).map(str),  # versions around the fuzzed table's
    st.sampled_from(["true", "false", "id > 2", "id = 3 AND partition = 'x'", "2020-01-01T00:00:00Z"]),
    text,
    numbers,
    st.text(alphabet="()=<>!'\"ANDORNOTINISNULL idxyz0123456789,.", max_size=200),
)
cursors = st.one_of(
    text,
    st.builds(
        lambda start, parts: f"@{start};" + ",".join(f"{n}={v}" for n, v in parts),
        numbers,
        st.lists(
            st.tuples(st.from_regex(r"[a-z]{1,5}\.[a-z]{1,5}", fullmatch=True) | text, numbers), max_size=8
        ),
    ),
)
ENDPOINTS = {
    "/api/tables": ["namespace", "limit", "cursor"],
    "/api/tables/{t}": [],
    "/api/tables/{t}/snapshot": ["version", "as_of", "tag", "where", "limit", "after"],
    "/api/tables/{t}/tags": [],
    "/api/tables/{t}/history": ["from", "to", "limit", "accepted_only", "intents"],
    "/api/tables/{t}/diff": ["from", "to", "limit"],
    "/api/tables/{t}/events": ["from"],
    "/api/events": ["from"],
    "/healthz": [],
    "/readyz": [],
    "/metrics": [],
    "/openapi.json": [],
    "/": [],
    "/tables/{t}": [],
    "/static/{t}": [],
}
tables = st.one_of(
    st.just(None),  # the fuzzed table, most of the time
    st.just(None),
    st.just(None),
    st.from_regex(r"[a-z]{1,8}\.[a-z]{1,8}", fullmatch=True),
    text,
)


@st.composite
def requests(draw: st.DrawFn) -> tuple[str, str | None, dict[str, str], dict[str, str]]:
    """(path template, table name or None for the fuzzed table, query, headers)."""
    path = draw(st.sampled_from(sorted(ENDPOINTS)))
    names = [*ENDPOINTS[path], draw(st.text(alphabet="abcxyz_", min_size=1, max_size=6))]
    if draw(st.integers(0, 9)) == 0:
        names.append("token")  # a browser's login (a wrong token: 401)
    query = draw(st.dictionaries(st.sampled_from(names), values, max_size=4))
    if "from" in query and "events" in path and draw(st.booleans()):
        query["from"] = draw(cursors)
    headers: dict[str, str] = {}
    if draw(st.integers(0, 9)):
        headers["Authorization"] = f"Bearer {TOKEN}"
    elif draw(st.booleans()):
        headers["Authorization"] = draw(st.sampled_from(["Bearer ", "Basic x", "bearer"])) + draw(text)
    if draw(st.booleans()):
        headers["Last-Event-ID"] = draw(cursors)
    if draw(st.booleans()):
        headers["Accept"] = draw(st.sampled_from(["application/vnd.apache.arrow.stream", "*/*", "text/html"]))
    if draw(st.booleans()):
        headers["Cookie"] = draw(
            st.sampled_from([f"segcat_token={TOKEN}", "segcat_token=", "a=b; c"])
        ) + draw(text)
    if draw(st.integers(0, 9)) == 0:
        headers["Host"] = draw(st.sampled_from(["evil.example", "127.0.0.1", "[::1]:80", ""]))
    return path, draw(tables), query, headers


def _latin1(value: str) -> str:
    """Header values as HTTP carries them: printable ASCII (the rest percent-encoded), no white
    space around them."""
    return "".join(c if 32 <= ord(c) < 127 else quote(c) for c in value).strip(" ")


def _check(url: str, path: str, query: dict[str, str], headers: dict[str, str]) -> int:
    sent = {k: _latin1(v) for k, v in headers.items()}
    started = time.monotonic()
    with (
        httpx.Client(timeout=httpx.Timeout(ANSWER_S), follow_redirects=False) as client,
        client.stream("GET", url + path, params=query, headers=sent) as response,
    ):
        took = time.monotonic() - started
        status = response.status_code
        kind = response.headers.get("content-type", "")
        body = b"" if kind.startswith("text/event-stream") else response.read()
    where = f"GET {path} {query} {sent}"
    assert took < ANSWER_S, f"{where}: {took:.1f} s"
    assert status < 500, f"{where}: {status} {body[:300]!r}"
    if status >= 400:
        assert kind.startswith("application/json"), f"{where}: {status} {kind} {body[:200]!r}"
        document = httpx.Response(status, content=body).json()
        assert set(document) == {"error", "message"}, f"{where}: {document}"
        assert isinstance(document["error"], str) and document["message"], where
        assert "Traceback" not in document["message"], where
    return status


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(drawn=requests())
def test_every_endpoint_answers_typed_in_bounded_time(
    target: Target, rss_start: int, drawn: tuple[str, str | None, dict[str, str], dict[str, str]]
) -> None:
    path, name, query, headers = drawn
    table = target.table if name is None else name
    status = _check(target.url, path.replace("{t}", quote(table, safe="")), query, headers)
    event(f"{path} answered {status}")  # --hypothesis-show-statistics: what the run reached


def test_the_server_memory_stayed_bounded(target: Target, rss_start: int) -> None:
    """Runs after the fuzzing above (file order): what the fuzzed requests left behind."""
    grown = _rss() - rss_start
    assert grown < RSS_GROWTH, f"the resident set grew by {grown / 2**20:.0f} MiB"
    assert urlsplit(target.url).hostname == "127.0.0.1"
