"""The all-tables stream over a few hundred tables: one subscription to the global channel for
all of them, so the server's threads stay as they were while a client follows ``/api/events``
(a feed per table started a thread per table that moved), and every commit arrives exactly once,
in order per table."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from segcat import Catalog, load_catalog
from segcat.catalog.config import Config
from tests.factories import segment
from tests.materializer_support import namespace, running_materializer
from tests.server_support import iter_events, serving

pytestmark = [pytest.mark.kafka, pytest.mark.redis]

TABLES = 200
COMMITS = 2
THREADS_ADDED = 16
"""Threads the server may start for one all-tables client (a small pool, whatever the tables)."""


def _create(config: Config, name: str) -> None:
    Catalog(config).create_table(name)


def _commit(config: Config, names: list[str]) -> dict[str, list[int]]:
    done: dict[str, list[int]] = {}
    for name in names:
        with load_catalog(config).load_table(name) as writer:
            done[name] = [writer.append([segment(f"s{k}", rows=k + 1)]) for k in range(COMMITS)]
    return done


def test_a_client_of_every_table_costs_no_thread_per_table(mconfig: Config) -> None:
    ns, pattern = namespace()
    names = [f"{ns}.t{i:03d}" for i in range(TABLES)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda name: _create(mconfig, name), names))
    with running_materializer(mconfig, pattern), serving(mconfig) as url:
        got: dict[str, list[int]] = {name: [] for name in names}
        expected_count = TABLES * COMMITS
        received = threading.Event()
        stop = threading.Event()
        peak = [0]

        def read(response: Any) -> None:
            count = 0
            for _, data in iter_events(response):
                if data["table"] in got:
                    got[data["table"]].append(data["version"])
                    count += 1
                    if count >= expected_count:
                        received.set()
                        return

        def sample() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], threading.active_count())
                time.sleep(0.02)

        with httpx.Client(timeout=httpx.Timeout(120.0, connect=10.0)).stream(
            "GET", f"{url}/api/events"
        ) as response:
            assert response.status_code == 200
            reader = threading.Thread(target=read, args=(response,), daemon=True)
            reader.start()
            time.sleep(0.5)  # the stream is attached to the bus
            before = threading.active_count()
            sampler = threading.Thread(target=sample, daemon=True)
            sampler.start()
            chunks = [names[i::8] for i in range(8)]
            with ThreadPoolExecutor(8) as pool:  # (these 8 are the test's own)
                committed: dict[str, list[int]] = {}
                for part in pool.map(lambda chunk: _commit(mconfig, chunk), chunks):
                    committed.update(part)
            assert received.wait(120), f"{sum(map(len, got.values()))} of {expected_count} events arrived"
            stop.set()
            sampler.join(5)
    assert got == committed, "an event was missed, repeated or out of order"
    assert peak[0] - before <= 8 + THREADS_ADDED, f"threads grew from {before} to {peak[0]}"


def test_without_a_materializer_the_stream_judges_the_tables_that_moved(mconfig: Config) -> None:
    """No event comes on the global channel: the bus finds the tables whose log moved and reads
    only those from the log; each version once, in order."""
    ns, _ = namespace()
    names = [f"{ns}.a", f"{ns}.b", f"{ns}.c"]
    for name in names:
        _create(mconfig, name)
    with (
        serving(mconfig) as url,
        httpx.Client(timeout=httpx.Timeout(60.0, connect=10.0)).stream(
            "GET", f"{url}/api/events"
        ) as response,
    ):
        assert response.status_code == 200
        committed = _commit(mconfig, names[:2])
        got: dict[str, list[int]] = {name: [] for name in names}
        prev: dict[str, int] = {}
        started = time.monotonic()
        for _, data in iter_events(response):
            if data["table"] in got:
                got[data["table"]].append(data["version"])
                assert data["prev_version"] == prev.get(data["table"], data["prev_version"])
                prev[data["table"]] = data["version"]
            if sum(map(len, got.values())) >= 2 * COMMITS:
                break
        took = time.monotonic() - started
    assert got == {**committed, names[2]: []}
    assert took < 30, f"took {took:.1f} s"
