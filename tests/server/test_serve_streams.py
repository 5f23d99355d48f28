"""What one SSE client can cost ``segcat serve``: bounded by construction (shared catch-up pages,
a queue bounded in events and bytes, feeds that stop when nobody follows), cursors bounded and
validated before any broker call, nothing left running for a client that left, and a cursor
that is compacted only when the log proves the compacted one resumes the same."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import httpx
import pytest

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.version_change import VersionChange
from segcat.server import event_cursor, version_feed
from segcat.server.app import create_app
from segcat.server.context import ServerContext
from segcat.server.runner import serving as run_in_thread
from segcat.server.settings import ServeSettings
from tests.factories import segment
from tests.handles import tables_of
from tests.materializer_support import namespace
from tests.server_support import iter_events, read_events, serving

pytestmark = [pytest.mark.kafka]


# ---------------------------------------------------------------------------- by construction


class _IdleWatcher:
    """A watch that never hears of a version (the tests publish by hand)."""

    def __init__(self) -> None:
        self._stop = threading.Event()

    def __enter__(self) -> _IdleWatcher:
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()

    def __iter__(self) -> Iterator[VersionChange]:
        self._stop.wait()
        return iter(())


class StubTable:
    """A table whose every offset 0..head is an accepted version; records what was judged."""

    def __init__(self, head: int) -> None:
        self.name = TableName("stub", "t")
        self.head = head
        self.judged: list[tuple[int, int]] = []

    def snapshot(self, include_dropped: bool = False) -> Any:
        return SimpleNamespace(version=self.head)

    def watch(self, from_version: int, poll_s: float = 0.5) -> _IdleWatcher:
        return _IdleWatcher()

    def changes(self, after: int, upto: int) -> list[VersionChange]:
        self.judged.append((after, upto))
        return [change(v) for v in range(after + 1, upto + 1)]


def change(version: int) -> VersionChange:
    return VersionChange("stub.t", version, version - 1, version, f"c{version}", "APPEND", [f"s{version}"])


def test_forty_clients_from_version_0_share_bounded_catch_up_pages() -> None:
    """40 clients with ``from=0`` on a 20,000-version table each held the whole catch-up (RSS
    336 MB → 1,190 MB); now each page of the log is judged once and shared."""
    head = 5 * 1024 + 17
    table = StubTable(head)

    async def main() -> list[list[VersionChange]]:
        feed = version_feed.TableFeed(table, asyncio.get_running_loop(), 100, lambda: None)  # type: ignore[arg-type]

        async def client() -> list[VersionChange]:
            got = []
            async for item in feed.follow(-1):
                got.append(item)
                if item.version == head:
                    break
            return got

        try:
            return await asyncio.gather(*(client() for _ in range(40)))
        finally:
            feed.stop()

    for got in asyncio.run(main()):
        assert [c.version for c in got] == list(range(head + 1))
        assert [c.prev_version for c in got] == list(range(-1, head))  # chained across pages
    page = version_feed.PAGE
    assert all(upto - after <= page for after, upto in table.judged), table.judged[:3]
    assert len(table.judged) == -(-(head + 1) // page)  # each page judged once, for all 40


def test_a_client_that_stops_reading_is_cut_by_bytes() -> None:
    """60 clients that never read grew the server without bound; a client's unread events are now
    bounded in bytes (and count): past the budget its stream ends and it resumes."""
    table = StubTable(0)
    big = 64 * 1024

    async def main() -> None:
        feed = version_feed.TableFeed(  # type: ignore[arg-type]
            table, asyncio.get_running_loop(), 100, lambda: None, lambda _: big
        )
        try:
            stream = feed.follow(None)
            reading = asyncio.ensure_future(stream.__anext__())
            await asyncio.sleep(0.05)
            feed._publish(change(1))
            assert (await reading).version == 1
            for version in range(2, 2 + 2 * version_feed.CLIENT_BYTES // big):
                feed._publish(change(version))
            await asyncio.sleep(0.2)  # the fan-out runs on the loop
            with pytest.raises(version_feed.TooSlow):
                await stream.__anext__()
        finally:
            feed.stop()

    asyncio.run(main())


def test_a_client_queue_never_holds_more_than_its_budget() -> None:
    async def main() -> None:
        queue: version_feed.ClientQueue[int] = version_feed.ClientQueue(max_items=100, max_bytes=1000)
        accepted = [queue.put(i, 300) for i in range(5)]
        assert accepted == [True, True, True, False, False]
        assert queue.cut and queue.pending_bytes == 0
        with pytest.raises(version_feed.TooSlow):
            await queue.get()

    asyncio.run(main())


# ---------------------------------------------------------------------------- a real server


@contextlib.contextmanager
def serving_ctx(config: Config) -> Iterator[tuple[str, ServerContext]]:
    settings = ServeSettings(port=0)
    app = create_app(config, settings)
    with run_in_thread(app, settings) as url:
        yield url, app.state.segcat


def _eventually(condition: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_huge_cursor_is_refused_before_any_broker_call(config: Config) -> None:
    """A 780 KB ``Last-Event-ID`` naming 50,000 tables grew RSS by 400 MB and kept the server
    describing topics long after the client left."""
    huge = f"@{int(time.time() * 1000)};" + ",".join(f"ns{i}.table{i}=1" for i in range(50_000))
    assert len(huge) > 780_000
    with serving(config) as url:
        for cursor in (huge, huge[: event_cursor.MAX_CURSOR + 100]):
            started = time.monotonic()
            response = httpx.get(f"{url}/api/events", headers={"Last-Event-ID": cursor}, timeout=30)
            assert response.status_code in (400, 431), response.status_code  # bounds: cursor / head
            assert set(response.json()) == {"error", "message"}
            assert time.monotonic() - started < 5
        many = f"@{int(time.time() * 1000)};" + ",".join(
            f"n.t{i}=1" for i in range(event_cursor.MAX_TABLES + 1)
        )
        response = httpx.get(f"{url}/api/events", params={"from": many}, timeout=30)
        assert response.status_code == 400 and "more than" in response.json()["message"]


def test_a_client_that_left_leaves_no_work_behind(config: Config) -> None:
    """A cursor naming thousands of tables that do not exist: no feed is opened for them, no event
    repeats them, and once the client leaves nothing more is opened or followed for it."""
    ns, _ = namespace()
    name = f"{ns}.live"
    Catalog(config).create_table(name)
    ghosts = ",".join(f"g{i}.t=1" for i in range(3000))
    with serving_ctx(config) as (url, ctx):
        cursor = f"@{int(time.time() * 1000)};{ghosts}"
        with httpx.Client(timeout=60).stream(
            "GET", f"{url}/api/events", headers={"Last-Event-ID": cursor}
        ) as stream:
            assert stream.status_code == 200
            time.sleep(1.0)
            with load_catalog(config).load_table(name) as writer:
                version = writer.append([segment("a")])
            event_id, data = next((i, d) for i, d in iter_events(stream) if d["table"] == name)
            assert data["version"] == version
            assert "g0.t" not in event_id and len(event_id) < 1000, event_id[:200]
            assert not [f for f in ctx.feeds.feeds() if f.name.startswith("g")]
        _eventually(
            lambda: ctx.versions.clients == 0, 10, "the all-tables stream did not end with its client"
        )
        _eventually(lambda: not ctx.versions.following, 5, "the version bus still follows the catalog")

        # a table's stream: its feed stops once nobody follows it
        with httpx.Client(timeout=60).stream("GET", f"{url}/api/tables/{name}/events") as stream:
            assert stream.status_code == 200
        _eventually(
            lambda: all(f.idle_for(time.monotonic()) > 0 for f in ctx.feeds.feeds()), 10, "a client stayed"
        )
        reaped = ctx.feeds.reap(time.monotonic() + version_feed.IDLE_S + 1)
        assert name in reaped and not ctx.feeds.feeds()


def test_catch_up_across_many_pages_is_exact(
    config: Config, table: Table, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(version_feed, "PAGE", 4)
    name = table.name.qualified
    with load_catalog(config).load_table(name) as writer:
        versions = [writer.append([segment(f"s{k}")]) for k in range(30)]
    with (
        serving(config) as url,
        httpx.Client(timeout=60).stream(
            "GET", f"{url}/api/tables/{name}/events", params={"from": versions[0]}
        ) as stream,
    ):
        got = read_events(stream, 29)
    assert [d["version"] for _, d in got] == versions[1:]
    assert [d["prev_version"] for _, d in got] == versions[:-1]


# ---------------------------------------------------------------------------- compaction


def test_a_cursor_is_compacted_only_when_the_log_proves_it_resumes_the_same(config: Config) -> None:
    ns, _ = namespace()
    catalog = Catalog(config)
    names = [TableName(ns, t) for t in ("a", "b", "c")]
    for name in names:
        catalog.create_table(name)
    time.sleep(0.05)
    start = int(time.time() * 1000)
    time.sleep(0.05)
    with (
        load_catalog(config).load_table(names[0].qualified) as a,
        load_catalog(config).load_table(names[1].qualified) as b,
    ):
        va = a.append([segment("a1")])
        vb = b.append([segment("b1")])
    newest = int(time.time() * 1000) + 1

    def rebase(cursor: event_cursor.Cursor) -> event_cursor.Rebase | None:
        def none_accepted(table: str, after: int, upto: int) -> bool:
            return not tables_of(catalog).open(table).changes(after, upto)

        return event_cursor.rebase(
            tables_of(catalog).admin, names, cursor, newest, none_accepted, margin_ms=0
        )

    # a and b named at their last versions, c untouched since the start: a later start, a and b redundant
    cursor = event_cursor.Cursor(start, {names[0].qualified: va, names[1].qualified: vb})
    found = rebase(cursor)
    assert found is not None and found.start_ms > start
    assert found.redundant == {names[0].qualified: va, names[1].qualified: vb}
    found.apply(cursor)
    assert cursor.positions == {} and cursor.start_ms == found.start_ms

    # named behind its table's last record: kept (the client has not had that version)
    behind = event_cursor.Cursor(start, {names[0].qualified: va - 1, names[1].qualified: vb})
    found = rebase(behind)
    assert found is not None and found.redundant == {names[1].qualified: vb}

    # an unnamed table with a record after the start: no later start would resume it the same
    with load_catalog(config).load_table(names[2].qualified) as c:
        c.append([segment("c1")])
    newest = int(time.time() * 1000) + 1
    assert rebase(event_cursor.Cursor(start, {names[0].qualified: va, names[1].qualified: vb})) is None
