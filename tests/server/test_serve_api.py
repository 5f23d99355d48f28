"""``segcat serve`` on a real broker: every endpoint's answers checked against the catalog's own
reads, bad input answered as documented (docs/HTTP_API.md), health, metrics, access control, CORS,
and one Server-Sent Events smoke test per stream (the thorough SSE tests are in test_serve_events).

One server (a token, a materializer on a private Redis) serves the module; the tests that need
another setting (no token, CORS, a Redis that goes away) start a server of their own.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import math
import os
import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pyarrow as pa
import pytest
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import CommitConflict, ConfigError, exit_code
from segcat.catalog.protocol.jsonio import segment_to_json
from segcat.catalog.protocol.model import Operation
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.rules import Rule
from segcat.catalog.storage.redis import RedisStore
from segcat.server.app import create_app
from segcat.server.settings import ServeSettings
from tests.factories import segment
from tests.materializer_support import (
    PrivateRedis,
    head_offset,
    materializer_config,
    namespace,
    running_materializer,
    wait_for_head,
)
from tests.server_support import read_events, serving

pytestmark = [pytest.mark.kafka, pytest.mark.redis]

ARROW = "application/vnd.apache.arrow.stream"
TOKEN = "serve-test-token-" + uuid.uuid4().hex
BEARER = {"Authorization": f"Bearer {TOKEN}"}
EVENT_FIELDS = {
    "table",
    "version",
    "prev_version",
    "timestamp_ms",
    "commit_id",
    "operation",
    "added",
    "dropped",
    "rows_delta",
    "bytes_delta",
}
SSE_TIMEOUT = httpx.Timeout(30.0)


# ---------------------------------------------------------------------------- fixtures


@dataclass(frozen=True)
class Live:
    """The module's server (with a token: the list of every table is computed once, so the token
    tests share it): its URL, its config (private Redis, the session's warehouse), a namespace its
    materializer follows."""

    url: str
    config: Config
    catalog: Catalog
    ns: str
    warehouse: str

    def get(self, path: str, *, allow_location: bool = False, **kwargs: Any) -> httpx.Response:
        """An authorised GET whose body never shows a traceback or the warehouse's path
        (``allow_location``: the table's ``segcat.location`` property may)."""
        kwargs.setdefault("timeout", 120)
        kwargs["headers"] = {**BEARER, **kwargs.get("headers", {})}
        response = httpx.get(self.url + path, **kwargs)
        assert_clean(response, self.warehouse, allow_location=allow_location)
        return response


def assert_clean(response: httpx.Response, warehouse: str, *, allow_location: bool = False) -> None:
    text = response.text if not response.headers.get("content-type", "").startswith(ARROW) else ""
    assert "Traceback" not in text
    if not allow_location:
        assert warehouse not in text, f"{response.request.url} shows the warehouse's path: {text[:500]}"


def assert_error(response: httpx.Response, status: int, kind: str) -> dict[str, Any]:
    assert response.status_code == status, (response.request.url, response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json")
    body: dict[str, Any] = response.json()
    assert set(body) == {"error", "message"}
    assert body["error"] == kind, body
    assert isinstance(body["message"], str) and body["message"]
    assert "Traceback" not in body["message"]
    return body


@pytest.fixture(scope="module")
def live(config: Config, warehouse: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    redis = PrivateRedis(tmp_path_factory.mktemp("serve-redis"))
    redis.start()
    try:
        ns, pattern = namespace()
        served = materializer_config(config, redis.url, warehouse)
        with running_materializer(served, pattern), serving(served, token=TOKEN) as url:
            yield Live(url, served, Catalog(served), ns, str(warehouse))
    finally:
        redis.stop()


@dataclass(frozen=True)
class Story:
    """A table with a known history (offset: what):
    0 creation, 1 append a b (p1), 2 append c d (p2, 50 rows), 3 set a property, 4 compact a b → ab,
    5 a stale compaction of a b (REJECTED), 6 a delete with a tombstone, 7 append e00..e24."""

    name: str
    table: Table
    appended: int
    big: int
    props: int
    compacted: int
    rejected: int
    rejected_commit_id: str
    deleted: int
    many: int

    @property
    def head(self) -> int:
        return self.many


@pytest.fixture(scope="module")
def story(live: Live) -> Story:
    name = f"{live.ns}.story"
    table = live.catalog.create_table(name)

    def pause() -> None:
        time.sleep(0.02)  # distinct broker times for as_of

    with (
        load_catalog(live.config).load_table(name) as first,
        load_catalog(live.config).load_table(name) as stale,
    ):
        appended = first.append([segment("a", "p1"), segment("b", "p1")], properties={"job": "serve-test"})
        pause()
        big = first.append([segment("c", "p2", rows=50), segment("d", "p2", rows=50)])
        pause()
        props = first.set_properties({"owner": "team-x"})
        pause()
        stale.refresh()
        compacted = first.compact(["a", "b"], [segment("ab", "p1", rows=20)])
        pause()
        losing = stale.new_commit(Operation.COMPACT, drops=["a", "b"], adds=[segment("ab2", "p1", rows=20)])
        with pytest.raises(CommitConflict) as lost:
            stale.commit(losing)
        pause()
        deleted = first.delete(predicates=["id = 7"])
        pause()
        many = first.append([segment(f"e{i:02d}", "p3") for i in range(25)])
    assert lost.value.version is not None
    assert (appended, big, props, compacted, lost.value.version, deleted, many) == (1, 2, 3, 4, 5, 6, 7)
    wait_for_head(RedisStore.from_config(live.config), name, many)
    return Story(
        name, table, appended, big, props, compacted, lost.value.version, losing.commit_id, deleted, many
    )


def fresh(live: Live, stem: str) -> tuple[str, Table]:
    name = f"{live.ns}.{stem}_{uuid.uuid4().hex[:6]}"
    return name, live.catalog.create_table(name)


def ids(segments: list[dict[str, Any]]) -> list[str]:
    return [s["segment_id"] for s in segments]


# ---------------------------------------------------------------------------- tables


def test_the_list_has_each_table_and_a_misconfigured_topic_breaks_nothing(live: Live, story: Story) -> None:
    bad = TableName.parse(f"{live.ns}x.bad")  # outside the materializer's pattern
    admin = AdminClient(live.config.kafka_client_config())
    settings = {"cleanup.policy": "compact", "message.timestamp.type": "LogAppendTime"}
    admin.create_topics([NewTopic(bad.topic, num_partitions=2, replication_factor=1, config=settings)])[
        bad.topic
    ].result(30)
    deadline = time.monotonic() + 30
    while bad not in live.catalog.list_tables():
        assert time.monotonic() < deadline, "the misconfigured topic never showed"
        time.sleep(0.05)

    tables = {}
    for ns in (live.ns, bad.namespace):  # a page of each namespace: the broker holds many tables
        response = live.get("/api/tables", params={"namespace": ns})
        assert response.status_code == 200
        tables.update({entry["table"]: entry for entry in response.json()["tables"]})
    snap = story.table.snapshot()
    mine = tables[story.name]
    assert mine["version"] == snap.version == story.head
    assert mine["log_end"] == story.table.head_offset() == story.head
    assert (mine["live_segments"], mine["live_rows"], mine["live_bytes"]) == (
        snap.live_count,
        snap.live_rows,
        snap.live_bytes,
    )
    assert mine["materialized_offset"] == story.head
    assert mine["materializer_lag"] == 0
    assert mine["timestamp_ms"] == snap.timestamp_ms
    assert "error" not in mine
    if bad.qualified in tables:  # listed with its trouble, or left out: never the list's failure
        broken = tables[bad.qualified]
        assert "2 partitions" in broken["error"]
        assert broken["version"] is None
    assert_error(live.get(f"/api/tables/{bad.qualified}"), 409, "misconfigured_table")


def test_a_table_head_is_the_exact_head_with_its_metadata(live: Live, story: Story) -> None:
    response = live.get(f"/api/tables/{story.name}", allow_location=True)
    assert response.status_code == 200
    head = response.json()
    snap = story.table.snapshot()
    assert head["table"] == story.name
    assert head["version"] == snap.version == story.head
    assert head["timestamp_ms"] == snap.timestamp_ms
    assert (head["live_segments"], head["live_rows"], head["live_bytes"]) == (
        snap.live_count,
        snap.live_rows,
        snap.live_bytes,
    )
    assert snap.live_count == 2 + 1 + 25  # c d, ab, e00..e24
    assert head["log_end"] == story.table.head_offset() == story.head
    assert head["log_start"] == 0
    assert head["dropped"] is False
    assert head["materialized_offset"] == head["materialized_version"] == story.head
    assert head["materializer_lag"] == 0
    assert head["properties"] == snap.properties
    assert head["properties"]["owner"] == "team-x"
    assert head["tombstones"] == [{"predicate": "id = 7", "version": story.deleted}]
    assert head["protocol"] == {
        "rules_version": snap.protocol.version,
        "features": list(snap.protocol.features),
    }
    assert head["schema"] == snap.schema
    assert set(head["activity"]) == {"window_s", "commits", "conflicts", "by_outcome", "by_operation"}


def test_activity_counts_commits_and_conflicts(live: Live) -> None:
    name, _ = fresh(live, "busy")
    with (
        load_catalog(live.config).load_table(name) as first,
        load_catalog(live.config).load_table(name) as stale,
    ):
        for i in range(3):
            first.append([segment(f"s{i}")])
        stale.refresh()
        first.compact(["s0", "s1"], [segment("s01")])
        with pytest.raises(CommitConflict):
            stale.compact(["s0", "s2"], [segment("s02")])  # s0 is gone already
    activity = live.get(f"/api/tables/{name}", allow_location=True).json()["activity"]
    assert activity == {
        "window_s": 60,
        "commits": 5,  # the creation, 3 appends, the compaction
        "conflicts": 1,
        "by_outcome": {"ACCEPTED": 5, "REJECTED": 1},
        "by_operation": {"APPEND": 3, "COMPACT": 1, "UPGRADE_PROTOCOL": 1},
    }
    with load_catalog(live.config).load_table(name) as writer:
        writer.append([segment("s3")])
    again = live.get(f"/api/tables/{name}", allow_location=True).json()["activity"]
    assert (again["commits"], again["conflicts"]) == (6, 1)  # read on from where it was


TABLE_HEAD = {
    "table",
    "version",
    "timestamp_ms",
    "live_segments",
    "live_rows",
    "live_bytes",
    "keyframe_version",
    "log_start",
    "log_end",
    "materialized_offset",
    "materializer_lag",
    "dropped",
    "activity",
}
"""The fields of docs/HTTP_API.md's TableHead."""


def test_a_table_head_has_every_documented_field(live: Live, story: Story) -> None:
    head = live.get(f"/api/tables/{story.name}", allow_location=True).json()
    assert TABLE_HEAD | {"schema", "properties", "tombstones", "protocol", "materialized_version"} <= set(
        head
    )


def test_list_entries_have_every_documented_field(live: Live, story: Story) -> None:
    """The list leaves out what only the log can say (log_start, dropped): it reads Redis' heads."""
    listed = live.get("/api/tables", params={"namespace": live.ns}).json()["tables"]
    tables = {t["table"]: t for t in listed}
    assert set(tables[story.name]) >= TABLE_HEAD - {"log_start", "dropped"}


def test_a_table_head_shows_its_recorded_location_to_readers(live: Live, story: Story) -> None:
    """The location is table metadata (as in `segcat table describe`), for those holding the token;
    error messages never name a path."""
    head = live.get(f"/api/tables/{story.name}", allow_location=True).json()
    assert head["properties"]["segcat.location"] == live.catalog.load_table(story.name).location()


def test_a_dropped_table_has_a_head_and_no_snapshot(live: Live) -> None:
    name, table = fresh(live, "dropped")
    with load_catalog(live.config).load_table(name) as writer:
        writer.append([segment("a")])
    version = table.catalog.drop_table(table.name)
    head = live.get(f"/api/tables/{name}", allow_location=True).json()
    assert (head["dropped"], head["version"]) == (True, version)
    assert_error(live.get(f"/api/tables/{name}/snapshot"), 410, "table_dropped")


# ---------------------------------------------------------------------------- snapshot


def test_snapshot_pages_walk_the_snapshot_once_in_order(live: Live, story: Story) -> None:
    snap = story.table.snapshot()
    expected = sorted(snap.segment_ids())
    limit = 4
    path: str | None = f"/api/tables/{story.name}/snapshot?limit={limit}"
    seen: list[str] = []
    pages = 0
    while path is not None:
        body = live.get(path).json()
        pages += 1
        assert body["version"] == snap.version
        assert (body["live_segments"], body["live_rows"], body["live_bytes"]) == (
            snap.live_count,
            snap.live_rows,
            snap.live_bytes,
        )
        assert body["matched_segments"] == snap.live_count
        assert 0 < len(body["segments"]) <= limit
        seen += ids(body["segments"])
        path = body["next"]
        if path is not None:
            query = parse_qs(urlsplit(path).query)
            assert query["version"] == [str(snap.version)]  # the next page reads the same version
            assert query["after"] == [seen[-1]]
            assert query["limit"] == [str(limit)]
    assert seen == expected  # ordered, complete, no duplicates
    assert pages == math.ceil(len(expected) / limit)

    first = live.get(f"/api/tables/{story.name}/snapshot").json()
    assert ids(first["segments"]) == expected and first["next"] is None  # the default page holds it all
    assert first["segments"][0] == {
        **segment_to_json(snap.segment_list()[0]),
        "added_version": story.compacted,
    }
    assert first["origin"] and first["where"] is None
    tail = live.get(f"/api/tables/{story.name}/snapshot", params={"after": "d"}).json()
    assert ids(tail["segments"]) == [i for i in expected if i > "d"]
    last = live.get(f"/api/tables/{story.name}/snapshot", params={"after": expected[-1]}).json()
    assert (last["segments"], last["next"]) == ([], None)


def test_snapshot_of_an_old_version_and_as_of_a_time(live: Live, story: Story) -> None:
    old = live.get(f"/api/tables/{story.name}/snapshot", params={"version": story.appended}).json()
    assert old["version"] == story.appended
    assert ids(old["segments"]) == ["a", "b"]
    assert (old["live_segments"], old["live_rows"], old["live_bytes"]) == (2, 20, 2000)
    at_compaction = live.get(f"/api/tables/{story.name}/snapshot?version={story.compacted}").json()
    assert ids(at_compaction["segments"]) == ["ab", "c", "d"]
    rejected = live.get(f"/api/tables/{story.name}/snapshot?version={story.rejected}").json()
    assert ids(rejected["segments"]) == ["ab", "c", "d"]  # a rejected record changes nothing
    assert rejected["version"] == story.table.snapshot(story.rejected).version == story.compacted
    empty = live.get(f"/api/tables/{story.name}/snapshot?version=0").json()
    assert (empty["version"], empty["segments"], empty["live_rows"]) == (0, [], 0)
    limited = live.get(f"/api/tables/{story.name}/snapshot?version={story.appended}&limit=1").json()
    assert ids(limited["segments"]) == ["a"]
    following = live.get(limited["next"]).json()
    assert ids(following["segments"]) == ["b"] and following["next"] is None

    when = story.table.snapshot(story.big).timestamp_ms
    moment = dt.datetime.fromtimestamp(when // 1000, tz=dt.UTC) + dt.timedelta(milliseconds=when % 1000)
    iso = moment.isoformat(timespec="milliseconds")
    for as_of in (str(when), iso, iso.replace("+00:00", ""), iso.replace("+00:00", "Z")):
        body = live.get(f"/api/tables/{story.name}/snapshot", params={"as_of": as_of}).json()
        assert body["version"] == story.big, as_of
        assert ids(body["segments"]) == ["a", "b", "c", "d"]
        assert body["timestamp_ms"] == when
    before = live.get(f"/api/tables/{story.name}/snapshot", params={"as_of": "2001-01-01T00:00:00"}).json()
    assert (before["version"], before["segments"]) == (-1, [])
    future = live.get(
        f"/api/tables/{story.name}/snapshot", params={"as_of": str(int(time.time() * 1000) + 60_000)}
    )
    assert future.json()["version"] == story.head
    assert future.json()["note"]  # a time after the last record says so


def test_where_prunes_segments(live: Live, story: Story) -> None:
    snap = story.table.snapshot()
    body = live.get(f"/api/tables/{story.name}/snapshot", params={"where": "id > 30"}).json()
    assert ids(body["segments"]) == ["c", "d"]  # only c and d (50 rows) hold ids above 30
    assert body["matched_segments"] == 2
    assert body["live_segments"] == snap.live_count
    assert body["where"] == "id > 30"
    assert (body["live_rows"], body["live_bytes"]) == (None, None)
    paged = live.get(f"/api/tables/{story.name}/snapshot", params={"where": "id > 30", "limit": 1}).json()
    assert ids(paged["segments"]) == ["c"]
    assert parse_qs(urlsplit(paged["next"]).query)["where"] == ["id > 30"]
    rest = live.get(paged["next"]).json()
    assert ids(rest["segments"]) == ["d"] and rest["next"] is None
    at_start = live.get(
        f"/api/tables/{story.name}/snapshot",
        params={"where": "id >= 15 AND id < 20", "version": story.compacted},
    ).json()
    assert ids(at_start["segments"]) == ["ab", "c", "d"]
    nothing = live.get(f"/api/tables/{story.name}/snapshot", params={"where": "id > 1000"}).json()
    assert (nothing["segments"], nothing["matched_segments"], nothing["next"]) == ([], 0, None)


def test_snapshot_as_arrow(live: Live, story: Story) -> None:
    snap = story.table.snapshot()
    response = live.get(f"/api/tables/{story.name}/snapshot", headers={"Accept": ARROW})
    assert response.status_code == 200
    assert response.headers["content-type"].startswith(ARROW)
    assert response.headers["x-segcat-version"] == str(snap.version)
    assert response.headers["x-segcat-timestamp-ms"] == str(snap.timestamp_ms)
    assert response.headers["x-segcat-live-segments"] == str(snap.live_count)
    got = pa.ipc.open_stream(response.content).read_all()
    assert got.num_rows == snap.live_count
    assert sorted(got.column("segment_id").to_pylist()) == sorted(snap.segment_ids())
    assert sum(got.column("row_count").to_pylist()) == snap.live_rows
    assert sum(got.column("size_bytes").to_pylist()) == snap.live_bytes
    assert {"segment_id", "path", "size_bytes", "row_count", "min:id", "max:id"} <= set(got.column_names)
    assert "segment_avro" not in got.column_names

    pruned = live.get(
        f"/api/tables/{story.name}/snapshot",
        params={"where": "id > 30", "version": story.compacted},
        headers={"Accept": ARROW},
    )
    table = pa.ipc.open_stream(pruned.content).read_all()
    assert sorted(table.column("segment_id").to_pylist()) == ["c", "d"]
    assert table.column("max:id").to_pylist() == [49, 49]
    assert pruned.headers["x-segcat-version"] == str(story.compacted)
    assert pruned.headers["x-segcat-live-segments"] == "3"  # before pruning: ab, c, d


# ---------------------------------------------------------------------------- history and diff


def test_history_records_with_verdicts_and_totals(live: Live, story: Story) -> None:
    body = live.get(f"/api/tables/{story.name}/history").json()
    assert (body["table"], body["from"], body["to"], body["next_from"]) == (
        story.name,
        0,
        story.head + 1,
        None,
    )
    records = body["records"]
    assert [r["offset"] for r in records] == list(range(story.head + 1))
    assert body["verdict_counts"] == {"ACCEPTED": story.head, "REJECTED": 1}
    accepted = {h.version: h.commit for h in story.table.history()}
    for record in records:
        snap = story.table.snapshot(record["offset"])
        assert (record["live_segments"], record["live_rows"], record["live_bytes"]) == (
            snap.live_count,
            snap.live_rows,
            snap.live_bytes,
        ), record["offset"]
        if record["offset"] in accepted:
            commit = accepted[record["offset"]]
            assert record["outcome"] == "ACCEPTED"
            assert (record["commit_id"], record["operation"], record["writer_id"]) == (
                commit.commit_id,
                commit.operation.value,
                commit.writer_id,
            )
            assert (record["adds"], record["drops"]) == (len(commit.adds), len(commit.drops))
            assert record["rule"] is None and record["conflicting_version"] is None
    lost = records[story.rejected]
    assert lost["outcome"] == "REJECTED"
    assert lost["rule"] == str(Rule.CONCURRENT_DROP)
    assert lost["conflicting_version"] == story.compacted
    assert lost["commit_id"] == story.rejected_commit_id
    assert (lost["operation"], lost["adds"], lost["drops"]) == ("COMPACT", 1, 2)
    assert lost["detail"]
    assert records[story.appended]["commit_properties"] == {"job": "serve-test"}
    assert records[story.many]["live_segments"] == 28
    assert [r["timestamp_ms"] for r in records] == sorted(r["timestamp_ms"] for r in records)


def test_history_from_to_limit_and_accepted_only(live: Live, story: Story) -> None:
    def offsets(**params: Any) -> tuple[list[int], dict[str, Any]]:
        body = live.get(f"/api/tables/{story.name}/history", params=params).json()
        return [r["offset"] for r in body["records"]], body

    got, body = offsets(**{"from": 1, "to": 4})
    assert got == [1, 2, 3] and (body["from"], body["to"], body["next_from"]) == (1, 4, 4)
    got, body = offsets(limit=2)
    assert got == [story.head - 1, story.head] and body["next_from"] is None
    got, body = offsets(**{"from": 0, "limit": 3})
    assert got == [0, 1, 2] and body["next_from"] == 3
    got, body = offsets(to=3)
    assert got == [0, 1, 2]
    got, body = offsets(to=10_000)
    assert got == list(range(story.head + 1))  # `to` past the end stops at the end
    got, body = offsets(**{"from": story.head + 1})
    assert got == [] and body["next_from"] is None
    got, body = offsets(**{"from": 4, "to": 7})
    assert body["verdict_counts"] == {"ACCEPTED": 2, "REJECTED": 1}
    got, body = offsets(accepted_only="true")
    assert got == [o for o in range(story.head + 1) if o != story.rejected]
    assert all(r["outcome"] == "ACCEPTED" for r in body["records"])


def test_diff_between_versions(live: Live, story: Story) -> None:
    pairs = [
        (story.appended, story.compacted),
        (story.compacted, story.appended),
        (story.big, story.many),
        (0, story.many),
        (story.compacted, story.rejected),
    ]
    for a, b in pairs:
        body = live.get(f"/api/tables/{story.name}/diff", params={"from": a, "to": b}).json()
        expected = story.table.diff(a, b)
        assert (body["table"], body["from_version"], body["to_version"]) == (
            story.name,
            expected.from_version,
            expected.to_version,
        )
        assert sorted(ids(body["load"])) == sorted(s.segment_id for s in expected.added), (a, b)
        assert sorted(ids(body["unload"])) == sorted(s.segment_id for s in expected.removed), (a, b)
        assert (body["load_count"], body["unload_count"]) == (len(expected.added), len(expected.removed))
    body = live.get(f"/api/tables/{story.name}/diff?from={story.compacted}&to={story.rejected}").json()
    assert (body["to_version"], body["load"], body["unload"]) == (story.compacted, [], [])  # the accepted one
    body = live.get(f"/api/tables/{story.name}/diff?from={story.appended}&to={story.compacted}").json()
    assert ids(body["load"]) == ["ab", "c", "d"] and sorted(ids(body["unload"])) == ["a", "b"]
    capped = live.get(f"/api/tables/{story.name}/diff?from=0&to={story.many}&limit=2").json()
    assert len(capped["load"]) == 2 and capped["load_count"] == 28


# ---------------------------------------------------------------------------- bad input

BAD = "a.b.c"
LONG = "x" * 513

BAD_INPUT: list[tuple[str, dict[str, Any], dict[str, str], int, str]] = [
    # (path: {t} the story, {ns} its namespace, {beyond} past its head; query; headers; status; kind)
    (f"/api/tables/{BAD}", {}, {}, 400, "invalid_table_name"),
    ("/api/tables/ns.has space", {}, {}, 400, "invalid_table_name"),
    (f"/api/tables/{BAD}/snapshot", {}, {}, 400, "invalid_table_name"),
    (f"/api/tables/{BAD}/history", {}, {}, 400, "invalid_table_name"),
    (f"/api/tables/{BAD}/diff", {"from": 0, "to": 0}, {}, 400, "invalid_table_name"),
    (f"/api/tables/{BAD}/events", {}, {}, 400, "invalid_table_name"),
    (f"/tables/{BAD}", {}, {}, 400, "invalid_table_name"),
    ("/api/tables/{ns}.nosuch", {}, {}, 404, "table_not_found"),
    ("/api/tables/{ns}.nosuch/snapshot", {}, {}, 404, "table_not_found"),
    ("/api/tables/{ns}.nosuch/history", {}, {}, 404, "table_not_found"),
    ("/api/tables/{ns}.nosuch/diff", {"from": 0, "to": 0}, {}, 404, "table_not_found"),
    ("/api/tables/{ns}.nosuch/events", {}, {}, 404, "table_not_found"),
    ("/api/tables/{t}/snapshot", {"version": "{beyond}"}, {}, 404, "version_not_found"),
    ("/api/tables/{t}/snapshot", {"version": "{beyond}"}, {"Accept": ARROW}, 404, "version_not_found"),
    ("/api/tables/{t}/diff", {"from": 0, "to": "{beyond}"}, {}, 404, "version_not_found"),
    ("/api/tables/{t}/diff", {"from": "{beyond}", "to": 0}, {}, 404, "version_not_found"),
    ("/api/tables/{t}/snapshot", {"version": "abc"}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"version": "1.5"}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"version": -1}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"version": 2**63}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"version": 1, "as_of": 0}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"as_of": "yesterday"}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"as_of": "2026-13-01"}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"as_of": "-5"}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"as_of": "9" * 30}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"where": "id >"}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"where": "id = = 3"}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"where": "drop table x"}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"where": ""}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"where": "id = NULL"}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"where": "id >"}, {"Accept": ARROW}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"limit": 0}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"limit": 100_001}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"limit": "many"}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/snapshot", {"after": LONG}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/history", {"from": 5, "to": 2}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/history", {"limit": 0}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/history", {"limit": 5_001}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/history", {"from": -1}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/history", {"accepted_only": "maybe"}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/diff", {}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/diff", {"from": "x", "to": 1}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/diff", {"from": -1, "to": 1}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/events", {"from": "abc"}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/events", {"from": "-2"}, {}, 400, "invalid_argument"),
    ("/api/tables/{t}/events", {}, {"Last-Event-ID": "abc"}, 400, "invalid_argument"),
    ("/api/tables/{t}/events", {}, {"Last-Event-ID": "1.5"}, 400, "invalid_argument"),
    ("/api/tables/{t}/events", {}, {"Last-Event-ID": "@1;{t}=3"}, 400, "invalid_argument"),
    ("/api/events", {}, {"Last-Event-ID": "garbage"}, 400, "invalid_argument"),
    ("/api/events", {}, {"Last-Event-ID": "41"}, 400, "invalid_argument"),
    ("/api/events", {}, {"Last-Event-ID": "@x;{t}=1"}, 400, "invalid_argument"),
    ("/api/events", {}, {"Last-Event-ID": "@1;{t}"}, 400, "invalid_argument"),
    ("/api/events", {}, {"Last-Event-ID": "@1;{t}=x"}, 400, "invalid_argument"),
    ("/api/events", {"from": "@1;{t}=-7"}, {}, 400, "invalid_argument"),
    ("/api/events", {}, {"Last-Event-ID": "@1;bad name=3"}, 400, "invalid_table_name"),
    ("/api/nope", {}, {}, 404, "not_found"),
    ("/api/tables/{t}/nope", {}, {}, 404, "not_found"),
    ("/docs", {}, {}, 404, "not_found"),
    ("/redoc", {}, {}, 404, "not_found"),
]


def test_bad_input_is_a_json_error_with_the_documented_status(live: Live, story: Story) -> None:
    """One test for the whole table (one server, one story): each case names its request."""
    values = {"t": story.name, "ns": live.ns, "beyond": str(story.head + 5)}
    failures = []
    for path, params, headers, status, kind in BAD_INPUT:
        url = path.format(**values)
        query = {k: str(v).format(**values) for k, v in params.items()}
        sent = {k: v.format(**values) for k, v in headers.items()}
        response = live.get(url, params=query, headers=sent, timeout=30)
        try:
            body = assert_error(response, status, kind)
            assert live.warehouse not in body["message"]
        except AssertionError as exc:
            failures.append(f"GET {url} {query} {sent}: {exc}")
    assert not failures, "\n".join(failures)


def test_a_snapshot_page_is_at_most_a_hundred_thousand_segments(live: Live, story: Story) -> None:
    response = live.get(f"/api/tables/{story.name}/snapshot", params={"limit": 100_001})
    assert_error(response, 400, "invalid_argument")


def test_a_message_never_names_a_path(live: Live, story: Story) -> None:
    response = live.get(
        f"/api/tables/{story.name}/snapshot", params={"as_of": f"{live.warehouse}/secret/place"}
    )
    body = assert_error(response, 400, "invalid_argument")
    assert "/secret/place" not in body["message"]


# ---------------------------------------------------------------------------- health, metrics, docs


def test_health_readiness_metrics_and_openapi(live: Live, story: Story) -> None:
    assert live.get("/healthz").json() == {"status": "ok"}
    ready = live.get("/readyz")
    assert ready.status_code == 200
    body = ready.json()
    assert body["ready"] is True
    assert body["kafka"]["ok"] is True and body["kafka"]["tables"] >= 1
    assert body["redis"] == {"ok": True, "configured": True}

    live.get(f"/api/tables/{story.name}/history?limit=1")
    metrics = live.get("/metrics")
    assert metrics.status_code == 200
    assert metrics.headers["content-type"].startswith("text/plain")
    counted = re.search(
        r'^segcat_serve_requests_total\{route="/api/tables/\{table\}/history",status="200"\} (\d+\.\d+)$',
        metrics.text,
        re.MULTILINE,
    )
    assert counted is not None and float(counted.group(1)) >= 1
    assert 'segcat_serve_requests_total{route="/healthz",status="200"}' in metrics.text
    assert "segcat_serve_request_seconds_bucket" in metrics.text

    spec = live.get("/openapi.json").json()
    api_paths = {p for p in spec["paths"] if p.startswith("/api")}
    assert api_paths == {
        "/api/tables",
        "/api/tables/{table}",
        "/api/tables/{table}/snapshot",
        "/api/tables/{table}/tags",
        "/api/tables/{table}/history",
        "/api/tables/{table}/diff",
        "/api/tables/{table}/events",
        "/api/events",
    }
    assert {"/healthz", "/readyz", "/metrics"} <= set(spec["paths"])
    parameters = spec["paths"]["/api/tables/{table}/snapshot"]["get"]["parameters"]
    assert {p["name"] for p in parameters} >= {"version", "as_of", "tag", "where", "limit", "after"}
    for docs in ("/docs", "/redoc"):
        assert_error(live.get(docs), 404, "not_found")


def test_the_dashboard_loads_nothing_from_elsewhere(live: Live, story: Story) -> None:
    for path in ("/", f"/tables/{story.name}"):
        page = live.get(path)
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
        assert "default-src 'self'" in page.headers["content-security-policy"]
        sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
        assert sources and all(s.startswith(("/", "data:", "#")) for s in sources), sources
    assert live.get("/static/app.css").status_code == 200


def test_readyz_is_503_when_redis_is_down(mconfig: Config, private_redis: PrivateRedis) -> None:
    with serving(mconfig) as url:
        ready = httpx.get(f"{url}/readyz", timeout=60)
        assert ready.status_code == 200 and ready.json()["redis"]["ok"] is True
        private_redis.stop()
        down = httpx.get(f"{url}/readyz", timeout=60)
        assert down.status_code == 503
        body = down.json()
        assert body["ready"] is False
        assert body["redis"]["ok"] is False and body["redis"]["error"]
        assert body["kafka"]["ok"] is True
        assert "Traceback" not in down.text
        assert httpx.get(f"{url}/healthz", timeout=10).json() == {"status": "ok"}


# ---------------------------------------------------------------------------- security


def test_listening_beyond_loopback_needs_a_token(config: Config) -> None:
    with pytest.raises(ConfigError, match="needs a token"):
        create_app(config, ServeSettings(host="0.0.0.0"))
    with pytest.raises(ConfigError, match="too short"):
        create_app(config, ServeSettings(host="0.0.0.0", token="short"))
    for settings in (
        ServeSettings(host="0.0.0.0", insecure=True),
        ServeSettings(host="0.0.0.0", token=TOKEN),
    ):
        app = create_app(config, settings)
        app.state.segcat.feeds.stop()


def test_segcat_serve_refuses_a_public_address_without_a_token(config: Config) -> None:
    segcat = Path(sys.executable).with_name("segcat")
    env = {k: v for k, v in os.environ.items() if k != "SEGCAT_SERVE_TOKEN"}
    env.update(
        SEGCAT_BOOTSTRAP_SERVERS=config.bootstrap_servers,
        SEGCAT_REDIS_URL=config.redis_url,
        SEGCAT_WAREHOUSE=config.warehouse,
    )
    done = subprocess.run(
        [str(segcat), "serve", "--host", "0.0.0.0", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == exit_code(ConfigError("x")) == 2, done.stderr  # ConfigError: invalid input
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ConfigError"), done.stderr
    assert "needs a token" in lines[0]
    assert "Traceback" not in done.stderr


def test_a_token_guards_everything_but_the_probes(
    live: Live, story: Story, caplog: pytest.LogCaptureFixture
) -> None:
    guarded = live.url
    caplog.set_level(logging.INFO, logger="segcat.serve.access")
    head = f"/api/tables/{story.name}"
    for path in ("/", "/static/app.css", f"/tables/{story.name}"):  # the pages hold no data
        assert httpx.get(guarded + path, timeout=30).status_code == 200
    for path in ("/api/tables", head, f"{head}/snapshot", "/metrics", "/openapi.json", "/api/events"):
        refused = httpx.get(guarded + path, timeout=30)
        assert_error(refused, 401, "unauthorized")
        assert refused.headers["www-authenticate"].startswith("Bearer")
    for wrong in (
        {"Authorization": "Bearer not-the-token-at-all"},
        {"Authorization": f"Basic {TOKEN}"},
        {"Authorization": TOKEN},
        {"Cookie": "segcat_token=not-the-token-at-all"},
    ):
        assert_error(httpx.get(guarded + head, headers=wrong, timeout=30), 401, "unauthorized")
    assert httpx.get(guarded + "/healthz", timeout=30).json() == {"status": "ok"}
    assert httpx.get(guarded + "/readyz", timeout=30).status_code == 200

    allowed = httpx.get(guarded + head, headers=BEARER, timeout=60)
    assert allowed.status_code == 200 and allowed.json()["version"] == story.head

    wrong_login = httpx.get(guarded + "/", params={"token": "not-the-token-at-all"}, timeout=30)
    assert_error(wrong_login, 401, "unauthorized")
    assert "set-cookie" not in wrong_login.headers

    login = httpx.get(guarded + "/", params={"token": TOKEN}, timeout=30)
    assert login.status_code == 303
    assert login.headers["location"] == "/"
    cookie = login.headers["set-cookie"]
    assert cookie.startswith(f"segcat_token={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    deep = httpx.get(f"{guarded}/tables/{story.name}", params={"token": TOKEN, "view": "log"}, timeout=30)
    assert deep.status_code == 303
    assert deep.headers["location"] == f"/tables/{story.name}?view=log"
    assert TOKEN not in deep.headers["location"]

    with httpx.Client(base_url=guarded, cookies={"segcat_token": TOKEN}, timeout=300) as browser:
        listed = browser.get("/api/tables", params={"namespace": story.name.split(".")[0]})
        assert listed.status_code == 200
        assert story.name in {t["table"] for t in listed.json()["tables"]}
        assert browser.get("/").status_code == 200

    logged = [r for r in caplog.records if r.name == "segcat.serve.access"]
    assert {getattr(r, "status", None) for r in logged} >= {200, 303, 401}
    for record in logged:
        shown = record.getMessage() + " " + " ".join(str(v) for v in vars(record).values())
        assert TOKEN not in shown, vars(record)
        assert "?" not in str(getattr(record, "path", ""))


def test_cors_is_off_unless_an_origin_is_allowed(live: Live, story: Story) -> None:
    head = f"/api/tables/{story.name}"
    origin = {"Origin": "http://example.test"}  # the module's server has no CORS origin
    plain = live.get(head, headers=origin, allow_location=True)
    assert plain.status_code == 200
    assert not [h for h in plain.headers if h.lower().startswith("access-control-")]
    with serving(live.config, cors_origins=("http://example.test",)) as url:
        allowed = httpx.get(url + head, headers=origin, timeout=60)  # and no token: loopback needs none
        assert allowed.status_code == 200
        assert allowed.headers["access-control-allow-origin"] == "http://example.test"
        other = httpx.get(url + head, headers={"Origin": "http://evil.test"}, timeout=60)
        assert "access-control-allow-origin" not in other.headers
        preflight = httpx.request(
            "OPTIONS",
            url + head,
            headers={**origin, "Access-Control-Request-Method": "GET"},
            timeout=30,
        )
        assert preflight.status_code == 200
        assert preflight.headers["access-control-allow-origin"] == "http://example.test"


# ---------------------------------------------------------------------------- events (SSE)


def test_table_events_resume_after_a_version(live: Live) -> None:
    name, table = fresh(live, "feed")
    with load_catalog(live.config).load_table(name) as writer:
        versions = [writer.append([segment(f"s{i}", rows=10 + i)]) for i in range(3)]
        versions.append(writer.compact(["s0", "s1"], [segment("s01", rows=21)]))
    commits = {h.version: h.commit for h in table.history()}
    with httpx.Client(timeout=SSE_TIMEOUT, headers=BEARER) as client:
        with client.stream(
            "GET", f"{live.url}/api/tables/{name}/events", params={"from": versions[0]}
        ) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
            events = Events(stream)
            got = events.take(3)
            assert [event_id for event_id, _ in got] == [str(v) for v in versions[1:]]
            for (_, data), version, prev in zip(got, versions[1:], versions[:-1], strict=True):
                assert set(data) == EVENT_FIELDS
                assert (data["table"], data["version"], data["prev_version"]) == (name, version, prev)
                assert data["commit_id"] == commits[version].commit_id
                assert data["operation"] == commits[version].operation.value
                assert data["timestamp_ms"] == table.snapshot(version).timestamp_ms
            assert got[0][1]["added"] == ["s1"] and got[0][1]["dropped"] == []
            assert (got[0][1]["rows_delta"], got[0][1]["bytes_delta"]) == (11, 1100)
            assert got[2][1]["added"] == ["s01"] and sorted(got[2][1]["dropped"]) == ["s0", "s1"]
            assert got[2][1]["rows_delta"] == 21 - 10 - 11
            with load_catalog(live.config).load_table(name) as writer:
                newest = writer.append([segment("late")])
            [(event_id, data)] = events.take(1)
            assert (event_id, data["version"], data["prev_version"]) == (str(newest), newest, versions[-1])
            assert data["added"] == ["late"]
        with client.stream(
            "GET", f"{live.url}/api/tables/{name}/events", headers={"Last-Event-ID": str(versions[2])}
        ) as resumed:
            assert [i for i, _ in read_events(resumed, 2)] == [str(versions[3]), str(newest)]


class Events:
    """A streaming response's SSE events, read on demand (``read_events`` reads a response once)."""

    def __init__(self, response: httpx.Response) -> None:
        self._lines = response.iter_lines()

    def take(self, count: int) -> list[tuple[str, dict[str, Any]]]:
        events: list[tuple[str, dict[str, Any]]] = []
        event_id, data = "", ""
        while len(events) < count:
            line = next(self._lines)
            if line.startswith("id:"):
                event_id = line[3:].strip()
            elif line.startswith("data:"):
                data = line[5:].strip()
            elif line == "" and data:
                events.append((event_id, json.loads(data)))
                event_id, data = "", ""
        return events

    def of(self, table: str, upto: int) -> list[tuple[str, dict[str, Any]]]:
        """``table``'s events until its version ``upto`` (other tables' skipped)."""
        found: list[tuple[str, dict[str, Any]]] = []
        deadline = time.monotonic() + 60
        while not found or found[-1][1]["version"] < upto:
            assert time.monotonic() < deadline, f"no version {upto} of {table}: {found}"
            [(event_id, data)] = self.take(1)
            if data["table"] == table:
                found.append((event_id, data))
        return found


def test_all_events_carry_a_cursor_that_resumes_every_table(live: Live) -> None:
    name, _ = fresh(live, "all")
    with load_catalog(live.config).load_table(name) as writer:
        writer.append([segment("s0")])
    with httpx.Client(timeout=SSE_TIMEOUT, headers=BEARER) as client:
        started = int(time.time() * 1000)
        with client.stream("GET", f"{live.url}/api/events") as stream:
            assert stream.status_code == 200
            time.sleep(0.5)  # the stream's start time is the server's, when it opened
            with load_catalog(live.config).load_table(name) as writer:
                second = writer.append([segment("s1")])
            [(cursor, data)] = Events(stream).of(name, second)
        assert set(data) == EVENT_FIELDS
        assert (data["version"], data["added"]) == (second, ["s1"])
        shape = re.fullmatch(rf"@(\d+);(?:[^;]*,)?{re.escape(name)}=(\d+)(?:,[^;]*)?", cursor)
        assert shape is not None, cursor
        assert started - 5_000 <= int(shape.group(1)) <= int(time.time() * 1000)
        assert int(shape.group(2)) == second

        with load_catalog(live.config).load_table(name) as writer:
            later = [writer.append([segment(f"s{i}")]) for i in (2, 3)]
        wait_for_head(RedisStore.from_config(live.config), name, head_offset(live.config, name))
        with client.stream("GET", f"{live.url}/api/events", headers={"Last-Event-ID": cursor}) as resumed:
            assert resumed.status_code == 200
            got = Events(resumed).of(name, later[-1])
        assert [d["version"] for _, d in got] == later  # exactly the versions after the cursor
        assert [d["prev_version"] for _, d in got] == [second, later[0]]
        for event_id, data in got:
            assert event_id.startswith(f"@{shape.group(1)};")  # the start time stays the cursor's
            assert f"{name}={data['version']}" in event_id
