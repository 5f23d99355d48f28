"""One table must never stop the materializer, on real Kafka and a real (private) Redis.

A table whose materialization raises is *parked*: its partition paused, one log line, a
metric, the health answer; the other tables go on. It is retried with back-off from its
newest key frame, so a transient failure heals and a poisoned table waits without cost.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import urllib.request
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pytest

from segcat import Catalog
from segcat.catalog.config import Config
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol import codec, rules
from segcat.catalog.protocol.model import ColumnStats, ColumnType, Commit, LogRecord, Operation, Protocol
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.state import TableState
from segcat.catalog.storage.redis import RedisStore
from segcat.catalog.storage.table_files import TableFiles
from segcat.materializer import metrics, table_materializer
from segcat.materializer.table_materializer import TableMaterializer
from tests.factories import produce_raw, segment
from tests.materializer_support import (
    assert_outputs_match_clean_replay,
    bound_files,
    free_port,
    get_json,
    head_offset,
    json_lines,
    namespace,
    running_materializer,
    spawn_materializer,
    wait_for_head,
    wait_until_following,
    write_load,
)

pytestmark = [pytest.mark.kafka, pytest.mark.redis, pytest.mark.slow]


def _wait(what: str, check: Callable[[], bool], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        time.sleep(0.1)


def _sample(name: str, **labels: str) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def _raw(config: Config, table: str, commit: Commit) -> int:
    """Produce ``commit`` as is (a writer would refuse a table at an unknown protocol)."""
    [offset] = produce_raw(
        config, TableName.parse(table).topic, [(commit.commit_id.encode(), codec.encode_commit(commit))]
    )
    return offset


# ---------------------------------------------------------------------- a poisoned table


def test_a_table_at_an_unknown_protocol_is_parked_and_the_other_tables_go_on(
    mconfig: Config, tmp_path: Path
) -> None:
    ns, pattern = namespace()
    good, bad = f"{ns}.good", f"{ns}.bad"
    catalog = Catalog(mconfig)
    catalog.create_table(good)
    catalog.create_table(bad)
    store = RedisStore.from_config(mconfig)
    port = free_port()
    log_path = tmp_path / "segcat.materializer.log"
    with open(log_path, "wb") as sink:
        proc = spawn_materializer(
            mconfig, pattern, f"poison-{ns}", f"poison-{ns}", stderr=sink, metrics_port=port
        )
    try:
        write_load(mconfig, bad, 10, 1)
        write_load(mconfig, good, 10, 2)
        before = head_offset(mconfig, bad)
        wait_for_head(store, bad, before)
        # a newer segcat upgraded the table; this one cannot judge anything after that record
        upgrade = Commit(
            Commit.new_id(), bad, Operation.UPGRADE_PROTOCOL, before, "newer", 0, protocol=Protocol(99, ())
        )
        poison = _raw(mconfig, bad, upgrade)
        _raw(
            mconfig, bad, Commit(Commit.new_id(), bad, Operation.APPEND, poison, "w", 0, adds=(segment("z"),))
        )
        write_load(mconfig, good, 20, 3)  # the healthy table keeps being materialized
        wait_for_head(store, good, head_offset(mconfig, good), timeout_s=60)

        def parked() -> list[dict[str, Any]]:
            status, doc = get_json(f"http://127.0.0.1:{port}/healthz")
            return list(doc["parked"]) if status == 503 else []

        _wait("the table to be parked", lambda: bool(parked()))
        [entry] = parked()
        assert (entry["table"], entry["offset"], entry["stage"]) == (bad, poison, "rules")
        assert entry["error_type"] == "UnsupportedProtocol"
        assert "upgrade segcat" in entry["error"]
        status, doc = get_json(f"http://127.0.0.1:{port}/healthz")
        assert status == 503 and doc["status"] == "degraded" and doc["kafka"]["consumer_alive"]
        assert doc["tables_assigned"] == sorted([bad, good])
        # retried with back-off (1 s, 2 s, ...): still parked, nothing after the poison applied
        _wait("a second attempt", lambda: any(p["failures"] >= 2 for p in parked()), timeout_s=30)
        head = store.head(bad)
        assert head is not None and head.offset == poison - 1
        parked_lines = [line for line in json_lines(log_path) if line.get("msg") == "table parked"]
        assert len(parked_lines) == max(p["failures"] for p in parked())  # one line per failure
        assert parked_lines[0]["table"] == bad and parked_lines[0]["offset"] == poison
        assert "upgrade segcat" in parked_lines[0]["hint"]
        assert "exc" not in parked_lines[0]  # an error raised on purpose: no traceback
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text = answer.read().decode()
        assert f'segcat_materializer_table_parked{{table="{bad}"}} 1.0' in text
        assert f'segcat_materializer_table_parked{{table="{good}"}} 1.0' not in text
        # and the process is alive and still serving the healthy table
        assert proc.poll() is None
        write_load(mconfig, good, 5, 4)
        wait_for_head(store, good, head_offset(mconfig, good), timeout_s=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0


# ---------------------------------------------------------------------- transient failures

_STAGE = {
    "rules": "rules",
    "flush": "redis",
    "archive": "archive",
    "keyframe": "keyframe",
    "recover": "recover",
}


class Injector:
    """Makes one kind of work fail once for one table, and records what the table did."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, kind: str, table: str, from_offset: int) -> None:
        self.kind = kind
        self.table = table
        self.from_offset = from_offset
        self.left = 1
        self.events: list[tuple[str, int]] = []
        """("apply", offset), ("fail", offset), ("recover", next offset) of the injected table."""
        self._lock = threading.Lock()
        self._recorded: set[int] = set()
        self._keep: list[Exception] = []
        injector = self
        original_apply = TableMaterializer.apply
        original_recover = TableMaterializer.recover
        original_flush = TableMaterializer.flush
        original_tick = TableMaterializer.tick
        original_archive = TableFiles.write_archive
        original_keyframe = TableFiles.write_keyframe

        def apply_record(state: TableState, record: LogRecord) -> rules.Applied:
            mine = state.table == injector.table and injector.kind == "rules"
            if mine and record.offset >= injector.from_offset:
                injector.fire(record.offset, RuntimeError("injected: rules blew up"))
            return rules.apply_record(state, record)

        def apply(self: TableMaterializer, record: LogRecord, *, notify: bool = True) -> Any:
            mine = self.name.qualified == injector.table
            try:
                verdict = original_apply(self, record, notify=notify)
            except Exception as exc:
                if mine:
                    injector.failed(record.offset, exc)
                raise
            if mine:
                injector.events.append(("apply", record.offset))
            return verdict

        def recover(self: TableMaterializer) -> int:
            try:
                if self.name.qualified == injector.table and injector.kind == "recover":
                    injector.fire(-1, OSError("object store unreachable (injected)"))
                offset = original_recover(self)
            except Exception as exc:
                if self.name.qualified == injector.table:
                    injector.failed(-1, exc)
                raise
            if self.name.qualified == injector.table:
                injector.events.append(("recover", offset))
            return offset

        def flush(self: TableMaterializer) -> None:
            mine = self.name.qualified == injector.table and injector.kind == "flush"
            try:
                queued = self.redis is not None and self.redis.queued
                if mine and queued and self.state.version >= injector.from_offset:
                    injector.fire(self.state.version, RuntimeError("injected: flush blew up"))
                original_flush(self)
            except Exception as exc:
                if self.name.qualified == injector.table:
                    injector.failed(self.state.version, exc)
                raise

        def tick(self: TableMaterializer) -> None:
            """A background write's failure surfaces at the table's next record or, when the
            schedule ticks it first (its write was queued), here."""
            try:
                original_tick(self)
            except Exception as exc:
                if self.name.qualified == injector.table:
                    injector.failed(self.state.version, exc)
                raise

        def write_archive(self: TableFiles, *args: Any, **kwargs: Any) -> str:
            if self.name.qualified == injector.table and injector.kind == "archive":
                injector.fire(-1, OSError(28, "No space left on device (injected)"))
            return original_archive(self, *args, **kwargs)

        def write_keyframe(self: TableFiles, table: pa.Table, version: int) -> str:
            if self.name.qualified == injector.table and injector.kind == "keyframe":
                # what two types for one stats column once did (issue 7)
                injector.fire(
                    version, pa.ArrowTypeError("Unable to merge: Field min:x has incompatible types")
                )
            return original_keyframe(self, table, version)

        monkeypatch.setattr(TableMaterializer, "apply", apply)
        monkeypatch.setattr(TableMaterializer, "recover", recover)
        monkeypatch.setattr(TableMaterializer, "flush", flush)
        monkeypatch.setattr(TableMaterializer, "tick", tick)
        monkeypatch.setattr(TableFiles, "write_archive", write_archive)
        monkeypatch.setattr(TableFiles, "write_keyframe", write_keyframe)
        # only the materializer's rules: writers in this process judge with the real ones
        monkeypatch.setattr(table_materializer, "rules", SimpleNamespace(apply_record=apply_record))

    def fire(self, offset: int, exc: Exception) -> None:
        with self._lock:
            if self.left <= 0:
                return
            self.left -= 1
        raise exc

    def failed(self, offset: int, exc: Exception) -> None:
        """Record a failure once, however many wrappers it passes through."""
        if id(exc) not in self._recorded:
            self._recorded.add(id(exc))
            self._keep.append(exc)
            self.events.append(("fail", offset))


@pytest.mark.parametrize("kind", sorted(_STAGE))
def test_a_transient_failure_parks_one_table_which_recovers_after_the_backoff(
    kind: str, mconfig: Config, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ns, pattern = namespace()
    good, bad = f"{ns}.good", f"{ns}.bad"
    catalog = Catalog(mconfig)
    catalog.create_table(good)
    catalog.create_table(bad)
    injector = Injector(monkeypatch, kind, bad, from_offset=4)
    store = RedisStore.from_config(mconfig)
    caplog.set_level(logging.INFO, logger="segcat.materializer")
    stage = _STAGE[kind]
    failures_before = _sample("segcat_materializer_table_failures_total", table=bad, stage=stage)
    errors: list[BaseException] = []

    def load_bad() -> None:
        try:
            write_load(mconfig, bad, 30, 5, 0.01)
        except BaseException as exc:
            errors.append(exc)

    with running_materializer(mconfig, pattern) as service:
        # the loads are applied live (a backlog found on assignment would skip the flushes and
        # the background writes the injections wait for)
        wait_until_following(service, good)
        wait_until_following(service, bad)
        load = threading.Thread(target=load_bad)
        load.start()
        write_load(mconfig, good, 30, 6, 0.01)
        load.join(120)
        assert not errors
        wait_for_head(store, good, head_offset(mconfig, good))
        wait_for_head(store, bad, head_offset(mconfig, bad), timeout_s=60)
        _wait("a healthy answer", lambda: service.health()[0], timeout_s=30)
    assert injector.left == 0, "the failure was never injected"
    assert _sample("segcat_materializer_table_failures_total", table=bad, stage=stage) == failures_before + 1
    assert _sample("segcat_materializer_table_parked", table=bad) == 0
    parked = [r for r in caplog.records if r.getMessage() == "table parked"]
    assert [(r.__dict__["table"], r.__dict__["stage"]) for r in parked] == [(bad, stage)]
    assert [r.__dict__["table"] for r in caplog.records if r.getMessage() == "table resumed"] == [bad]
    # after the failure nothing of the table was applied until it was recovered again
    failed_at = injector.events.index(next(e for e in injector.events if e[0] == "fail"))
    after = injector.events[failed_at + 1 :]
    assert after and after[0][0] == "recover", after[:3]
    if kind == "rules":
        assert after[0][1] <= injector.events[failed_at][1]  # replays from its key frame
    for table in (good, bad):
        assert_outputs_match_clean_replay(mconfig, table)


def test_a_parked_table_releases_nothing_while_parked(
    mconfig: Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records of a parked table that arrive meanwhile are neither applied nor committed."""
    ns, pattern = namespace()
    table = f"{ns}.events"
    Catalog(mconfig).create_table(table)
    store = RedisStore.from_config(mconfig)
    injector = Injector(monkeypatch, "rules", table, from_offset=3)
    injector.left = 10**6  # poisoned for good from offset 3 on
    with running_materializer(replace(mconfig, keyframe_every_commits=2), pattern) as service:
        topic = TableName.parse(table).topic
        # live records, each published as applied (a backlog found on assignment is published
        # only once caught up, which the poisoned record prevents)
        _wait("the table's assignment", lambda: topic in service.tables)
        write_load(mconfig, table, 12, 7)

        def failures() -> int:
            entry = service.parked.get(topic)
            return 0 if entry is None else entry.failures

        _wait("a few retries (after 1 s, 2 s)", lambda: failures() >= 3, timeout_s=30)
        applied = [offset for kind, offset in injector.events if kind == "apply"]
        assert max(applied) == 2
        head = store.head(table)
        assert head is not None and head.offset == 2


def test_two_types_for_one_stats_column_on_a_protocol_1_table_stop_nothing(mconfig: Config) -> None:
    """Issue 7: ``x`` INT in one accepted segment and STRING in the next (protocol 1 accepts
    both) used to crash the whole process at the next key frame, again after every restart."""
    ns, pattern = namespace()
    legacy, other = f"{ns}.legacy", f"{ns}.other"
    TopicAdmin(mconfig).create(TableName.parse(legacy))  # no UPGRADE_PROTOCOL record: protocol 1
    Catalog(mconfig).create_table(other)
    store = RedisStore.from_config(mconfig)

    def append(base: int, segment_id: str, kind: ColumnType, low: int | str, high: int | str) -> int:
        added = replace(segment(segment_id), stats=(ColumnStats("x", kind, low, high, 0),))
        return _raw(
            mconfig, legacy, Commit(Commit.new_id(), legacy, Operation.APPEND, base, "w", 0, adds=(added,))
        )

    with running_materializer(replace(mconfig, keyframe_every_commits=2), pattern) as service:
        first = append(-1, "ints", ColumnType.INT, 1, 5)
        second = append(first, "strings", ColumnType.STRING, "a", "z")
        third = append(second, "more-ints", ColumnType.INT, 7, 9)
        write_load(mconfig, other, 10, 8)
        wait_for_head(store, other, head_offset(mconfig, other))
        wait_for_head(store, legacy, third, timeout_s=30)
        assert not service.parked
    frame = bound_files(mconfig, legacy).newest_valid_keyframe()
    assert frame is not None and frame.version == second  # the frame that holds both types
    assert sorted(frame.state().segments) == ["ints", "strings"]
    for table in (legacy, other):
        assert_outputs_match_clean_replay(mconfig, table)
