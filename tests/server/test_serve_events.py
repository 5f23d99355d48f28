"""SSE resume: a client that reconnects with ``Last-Event-ID`` gets every version it missed, in
order, exactly once, whatever happened meanwhile (same server, a new server, the materializer
killed with -9, Redis flushed), and a connected client keeps hearing while the materializer is down."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import pytest
import redis

from segcat import Catalog, load_catalog
from segcat.catalog.config import Config
from tests.factories import segment
from tests.materializer_support import PrivateRedis, namespace, spawn_materializer, wait_for_head
from tests.server_support import iter_events, read_events, serving

pytestmark = [pytest.mark.kafka, pytest.mark.redis]


def _commit(config: Config, table: str, count: int, tag: str) -> list[int]:
    with load_catalog(config).load_table(table) as writer:
        return [writer.append([segment(f"{tag}-{k}", rows=k + 1)]) for k in range(count)]


def _stream(url: str, headers: dict[str, str] | None = None) -> Any:
    return httpx.Client(timeout=httpx.Timeout(60.0, connect=10.0)).stream("GET", url, headers=headers or {})


def _read(url: str, count: int, last_event_id: str | None) -> list[tuple[str, dict[str, Any]]]:
    headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
    with _stream(url, headers) as response:
        assert response.status_code == 200, response.read()
        assert response.headers["content-type"].startswith("text/event-stream")
        return read_events(response, count)


def _assert_exactly(events: list[tuple[str, dict[str, Any]]], versions: list[int], after: int) -> None:
    assert [e["version"] for _, e in events] == versions
    assert [event_id for event_id, _ in events] == [str(v) for v in versions]
    prev = [after, *versions[:-1]]
    assert [e["prev_version"] for _, e in events] == prev, "each event names the version before it"
    assert all(len(e["added"]) == 1 and e["dropped"] == [] for _, e in events)


@contextmanager
def _materializer(config: Config, pattern: str, ns: str) -> Iterator[Any]:
    proc = spawn_materializer(config, pattern, f"sse-{ns}", f"sse-{ns}")
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(30)


@pytest.fixture
def ns_table(mconfig: Config) -> tuple[str, str, str]:
    ns, pattern = namespace()
    name = f"{ns}.events"
    Catalog(mconfig).create_table(name)
    return ns, pattern, name


def test_reconnect_gets_exactly_the_50_versions_missed(
    mconfig: Config, ns_table: tuple[str, str, str]
) -> None:
    ns, pattern, table = ns_table
    first = _commit(mconfig, table, 3, "before")
    with _materializer(mconfig, pattern, ns), serving(mconfig) as url:
        events_url = f"{url}/api/tables/{table}/events"
        seen = _read(f"{events_url}?from={first[0]}", 2, None)  # the client reads two, then drops
        _assert_exactly(seen, first[1:], first[0])
        missed = _commit(mconfig, table, 50, "while-away")
        resumed = _read(events_url, 50, seen[-1][0])
        _assert_exactly(resumed, missed, first[-1])


def test_a_new_server_resumes_from_the_log(mconfig: Config, ns_table: tuple[str, str, str]) -> None:
    """The ring of the server the client left is gone: the versions come from Redis' deltas or the log."""
    ns, pattern, table = ns_table
    first = _commit(mconfig, table, 2, "before")
    with _materializer(mconfig, pattern, ns):
        missed = _commit(mconfig, table, 50, "while-away")
        with serving(mconfig) as url:
            resumed = _read(f"{url}/api/tables/{table}/events", 50, str(first[-1]))
    _assert_exactly(resumed, missed, first[-1])


def test_resume_across_materializer_kill_and_redis_flushall(
    mconfig: Config, ns_table: tuple[str, str, str], private_redis: PrivateRedis
) -> None:
    ns, pattern, table = ns_table
    first = _commit(mconfig, table, 2, "before")
    with serving(mconfig) as url:
        events_url = f"{url}/api/tables/{table}/events"
        proc = spawn_materializer(mconfig, pattern, f"sse-{ns}", f"sse-{ns}")
        try:
            wait_for_head(_store(mconfig), table, first[-1])
            last_seen = str(first[-1])
            proc.send_signal(signal.SIGKILL)  # kill -9 while the client is away
            proc.wait(30)
            missed = _commit(mconfig, table, 25, "materializer-dead")
            redis.Redis.from_url(private_redis.url).flushall()
            missed += _commit(mconfig, table, 25, "redis-flushed")
            proc = spawn_materializer(mconfig, pattern, f"sse-{ns}", f"sse-{ns}")
            resumed = _read(events_url, 50, last_seen)
        finally:
            proc.terminate()
            proc.wait(30)
    _assert_exactly(resumed, missed, first[-1])


def test_a_connected_client_hears_versions_while_the_materializer_is_dead(
    mconfig: Config, ns_table: tuple[str, str, str]
) -> None:
    """No notification comes while the materializer is down: the server judges the log itself."""
    ns, pattern, table = ns_table
    first = _commit(mconfig, table, 1, "before")
    with serving(mconfig) as url:
        proc = spawn_materializer(mconfig, pattern, f"sse-{ns}", f"sse-{ns}")
        wait_for_head(_store(mconfig), table, first[-1])
        received: list[tuple[str, dict[str, Any]]] = []
        reader = threading.Thread(
            target=lambda: received.extend(
                _read(f"{url}/api/tables/{table}/events?from={first[-1]}", 10, None)
            )
        )
        reader.start()
        time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
        started = time.monotonic()
        versions = _commit(mconfig, table, 10, "dead")
        reader.join(60)
        elapsed = time.monotonic() - started
    assert not reader.is_alive()
    _assert_exactly(received, versions, first[-1])
    assert elapsed < 30, f"took {elapsed:.1f} s"


def test_all_tables_stream_resumes_every_table_with_its_cursor(mconfig: Config) -> None:
    ns, pattern = namespace()
    tables = [f"{ns}.a", f"{ns}.b"]
    catalog = Catalog(mconfig)
    for name in tables:
        catalog.create_table(name)
    with _materializer(mconfig, pattern, ns), serving(mconfig) as url:
        with _stream(f"{url}/api/events") as response:
            time.sleep(1.0)
            a_first = _commit(mconfig, tables[0], 1, "a0")
            events = []
            for event_id, data in iter_events(response):
                if data["table"] in tables:
                    events.append((event_id, data))
                    break
        assert events[0][1]["version"] == a_first[0]
        cursor = events[0][0]
        assert cursor.startswith("@") and f"{tables[0]}={a_first[0]}" in cursor
        a_missed = _commit(mconfig, tables[0], 5, "a1")
        b_missed = _commit(mconfig, tables[1], 5, "b1")  # b: never delivered, resumes from the start time
        got: dict[str, list[int]] = {name: [] for name in tables}
        with _stream(f"{url}/api/events", {"Last-Event-ID": cursor}) as response:
            for _, data in iter_events(response):
                if data["table"] in got:
                    got[data["table"]].append(data["version"])
                if sum(map(len, got.values())) >= 10:
                    break
    assert got == {tables[0]: a_missed, tables[1]: b_missed}


def _store(config: Config) -> Any:
    from segcat.catalog.storage.redis import RedisStore

    return RedisStore.from_config(config)
