"""What ``segcat serve`` reads answer: enough to apply a version exactly (tombstones and each
segment's ``added_version``, in JSON, Arrow and diffs, rendered as ``segcat show --json`` renders
them), which version answered and why, the history without write intents, and heads that do not
wait on a Redis that hangs or refuses (docs/HTTP_API.md)."""

from __future__ import annotations

import json
import signal
import time
from dataclasses import replace
from typing import Any

import httpx
import pyarrow as pa
import pytest
from click.testing import CliRunner

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import CommitConflict
from segcat.catalog.read.table import Tables
from segcat.catalog.storage.redis import RedisStore
from segcat.cli import cli
from tests.factories import segment
from tests.materializer_support import (
    PrivateRedis,
    free_port,
    namespace,
    running_materializer,
    wait_for_head,
)
from tests.server_support import serving

pytestmark = [pytest.mark.kafka, pytest.mark.redis]

ARROW = "application/vnd.apache.arrow.stream"


def _env(config: Config) -> dict[str, str]:
    return {
        "SEGCAT_BOOTSTRAP_SERVERS": config.bootstrap_servers,
        "SEGCAT_REDIS_URL": config.redis_url,
        "SEGCAT_WAREHOUSE": config.warehouse,
    }


def _show(config: Config, name: str, *args: str) -> dict[str, Any]:
    done = CliRunner().invoke(cli, ["show", name, "--json", *args], env=_env(config))
    assert done.exit_code == 0, done.output
    shown: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return shown


def test_snapshots_carry_what_a_reader_needs_to_apply_soft_deletes(config: Config, table: Table) -> None:
    """A Java, Go or DuckDB client read ``/snapshot`` without tombstones or ``added_version`` and
    returned the deleted rows; ``live_rows`` counted them without saying so."""
    table_name = table.name.qualified
    with load_catalog(config).load_table(table_name) as writer:
        first = writer.append([segment("a"), segment("b")])
        deleted = writer.delete(predicates=["id = 7"])
        later = writer.append([segment("c")])
    with serving(config) as url:
        api = f"{url}/api/tables/{table_name}"
        head = httpx.get(f"{api}/snapshot", timeout=60).json()
        assert head["tombstones"] == [{"predicate": "id = 7", "version": deleted}]
        added = {s["segment_id"]: s["added_version"] for s in head["segments"]}
        assert added == {"a": first, "b": first, "c": later}
        covered = {sid for sid, v in added.items() if any(t["version"] > v for t in head["tombstones"])}
        assert covered == {"a", "b"}  # the rule a client applies (docs/HTTP_API.md)
        assert head["tombstones_apply"] is True
        before = httpx.get(f"{api}/snapshot", params={"version": first}, timeout=60).json()
        assert (before["tombstones"], before["tombstones_apply"]) == ([], False)

        # the same facts from `segcat show --json` (one renderer)
        shown = _show(config, table_name)
        assert shown["tombstones"] == head["tombstones"]
        assert shown["tombstones_apply"] is True
        assert shown["segments"] == head["segments"]

        # Arrow: the tombstones and the version in the schema's metadata, added_version a column
        arrow = httpx.get(f"{api}/snapshot", headers={"Accept": ARROW}, timeout=60)
        got = pa.ipc.open_stream(arrow.content).read_all()
        meta = {k.decode(): json.loads(v) for k, v in (got.schema.metadata or {}).items()}
        assert meta["segcat.tombstones"] == head["tombstones"]
        assert meta["segcat.version"] == later and meta["segcat.tombstones_apply"] is True
        ids, versions = got.column("segment_id").to_pylist(), got.column("added_version").to_pylist()
        assert dict(zip(ids, versions, strict=True)) == added
        assert arrow.headers["x-segcat-tombstones"] == "1"
        pruned = httpx.get(
            f"{api}/snapshot", params={"where": "id > 5"}, headers={"Accept": ARROW}, timeout=60
        )
        pruned_meta = pa.ipc.open_stream(pruned.content).read_all().schema.metadata or {}
        assert json.loads(pruned_meta[b"segcat.tombstones"]) == head["tombstones"]  # pruning keeps them
        only_c = httpx.get(f"{api}/snapshot", params={"where": "partition = 'x'"}, timeout=60).json()
        assert only_c["tombstones_apply"] is True  # of the version, whatever the pruning

        # a diff says what a client moving between the versions must apply
        diff = httpx.get(f"{api}/diff", params={"from": first, "to": later}, timeout=60).json()
        assert [(s["segment_id"], s["added_version"]) for s in diff["load"]] == [("c", later)]
        assert diff["tombstones"] == head["tombstones"]


def test_a_snapshot_of_an_offset_that_is_not_a_version_says_why(config: Config, table: Table) -> None:
    """``snapshot?version=3`` where 3 is an intent answered version 2 with ``note: null``."""
    table_name = table.name.qualified
    with (
        load_catalog(config).load_table(table_name) as writer,
        load_catalog(config).load_table(table_name) as stale,
    ):
        appended = writer.append([segment("a")])
        intent = writer.intent("data/x/", ttl_s=60)
        intent.open()
        noted = intent.version
        intent.abort()
        stale.refresh()
        writer.compact(["a"], [segment("a2")])
        with pytest.raises(CommitConflict) as lost:
            stale.compact(["a"], [segment("a3")])
    rejected = lost.value.version
    assert noted is not None and rejected is not None
    with serving(config) as url:
        api = f"{url}/api/tables/{table_name}/snapshot"
        body = httpx.get(api, params={"version": noted}, timeout=60).json()
        assert body["version"] == appended
        assert body["note"] and f"offset {noted}" in body["note"] and "NOTED" in body["note"]
        assert f"version {appended}" in body["note"]
        body = httpx.get(api, params={"version": rejected}, timeout=60).json()
        assert body["note"] and "REJECTED" in body["note"]
        assert httpx.get(api, params={"version": appended}, timeout=60).json()["note"] is None
        arrow = httpx.get(api, params={"version": noted}, headers={"Accept": ARROW}, timeout=60)
        meta = pa.ipc.open_stream(arrow.content).read_all().schema.metadata or {}
        assert "NOTED" in json.loads(meta[b"segcat.note"])
    shown = _show(config, table_name, "--version", str(noted))
    assert shown["version"] == appended and "NOTED" in shown["note"]


def test_history_leaves_intents_out_as_history_does(config: Config, table: Table) -> None:
    """``/history`` listed the INTENT records ``Table.history()`` and the streams leave out."""
    table_name = table.name.qualified
    with load_catalog(config).load_table(table_name) as writer:
        writer.append([segment("a")])
        intent = writer.intent("data/x/", ttl_s=60)
        intent.open()
        intent.abort()
        writer.append([segment("b")])
    versions = {h.version for h in table.history()}
    with serving(config) as url:
        api = f"{url}/api/tables/{table_name}/history"
        body = httpx.get(api, timeout=60).json()
        assert {r["offset"] for r in body["records"]} == versions
        assert body["verdict_counts"]["NOTED"] == 2  # the open and the abort: counted, not listed
        every = httpx.get(api, params={"intents": "true"}, timeout=60).json()
        noted = [r for r in every["records"] if r["outcome"] == "NOTED"]
        assert len(noted) == 2 and all(r["operation"] == "INTENT" for r in noted)


# ---------------------------------------------------------------------------- Redis that does not answer


def _commit_tables(config: Config, ns: str, count: int) -> dict[str, int]:
    catalog = Catalog(config)
    heads = {}
    for i in range(count):
        name = f"{ns}.t{i}"
        catalog.create_table(name)
        with load_catalog(config).load_table(name) as writer:
            for k in range(i + 2):
                heads[name] = writer.append([segment(f"s{k}", rows=k + 1)])
    return heads


def _overview(url: str, ns: str) -> tuple[dict[str, dict[str, Any]], float]:
    started = time.monotonic()
    response = httpx.get(f"{url}/api/tables", params={"namespace": ns}, timeout=300)
    assert response.status_code == 200, response.text
    return {t["table"]: t for t in response.json()["tables"]}, time.monotonic() - started


def _assert_exact(listed: dict[str, dict[str, Any]], config: Config, heads: dict[str, int]) -> None:
    assert set(listed) == set(heads)
    tables = Tables(config, use_redis=False)
    for name, version in heads.items():
        snap = tables.open(name).snapshot(sources=("kafka",))
        entry = listed[name]
        assert "error" not in entry, entry
        assert (entry["version"], entry["live_segments"], entry["live_rows"], entry["live_bytes"]) == (
            version,
            snap.live_count,
            snap.live_rows,
            snap.live_bytes,
        ), name
        assert entry["activity"] is not None and entry["activity"]["commits"] >= 1


def test_a_frozen_redis_neither_hangs_the_overview_nor_blanks_it(
    mconfig: Config, private_redis: PrivateRedis
) -> None:
    """With Redis stopped (SIGSTOP) ``/api/tables`` took 127 s for 15 tables and listed null heads."""
    ns, pattern = namespace()
    with running_materializer(mconfig, pattern):
        heads = _commit_tables(mconfig, ns, 4)
        store = RedisStore.from_config(mconfig)
        for name, version in heads.items():
            wait_for_head(store, name, version)
    assert private_redis.proc is not None
    with serving(mconfig) as url:
        warm, _ = _overview(url, ns)
        assert {name: entry["version"] for name, entry in warm.items()} == heads
        private_redis.proc.send_signal(signal.SIGSTOP)
        try:
            listed, took = _overview(url, ns)
        finally:
            private_redis.proc.send_signal(signal.SIGCONT)
    _assert_exact(listed, mconfig, heads)
    assert took < 30, f"the overview took {took:.1f} s with Redis frozen"
    assert all(entry["materialized_offset"] is None for entry in listed.values())


def test_a_redis_refusing_connections_leaves_the_heads_to_the_log(config: Config) -> None:
    ns, _ = namespace()
    heads = _commit_tables(config, ns, 3)
    nobody = replace(config, redis_url=f"redis://127.0.0.1:{free_port()}/0")
    with serving(nobody) as url:
        listed, took = _overview(url, ns)
    _assert_exact(listed, config, heads)
    assert took < 30, f"the overview took {took:.1f} s with Redis refusing"


def test_the_overview_refuses_a_bad_namespace(config: Config) -> None:
    with serving(config) as url:
        response = httpx.get(f"{url}/api/tables", params={"namespace": "../x"}, timeout=60)
    assert response.status_code == 400 and response.json()["error"] == "invalid_table_name"
