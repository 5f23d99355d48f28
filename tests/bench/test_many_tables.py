"""``bench.many_tables``' pure parts (latencies, sizes, names, the doc block) and its head poll
against a real Redis; the benchmark itself is run by hand (``python -m bench.many_tables``)."""

from __future__ import annotations

import argparse
import re
import threading
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from bench import many_tables, many_tables_doc, report
from bench.many_tables_load import latencies_ms
from bench.many_tables_stack import Services, names, pattern
from segcat.catalog.config import Config
from segcat.catalog.protocol.names import table_name
from segcat.catalog.storage.redis import keys
from segcat.local_stack.private import PrivateRedis
from segcat.local_stack.settings import StackSettings

BLOCK = re.compile(r"<!-- ([a-z-]+):start -->\n(.*?)<!-- \1:end -->", re.DOTALL)


def test_a_latency_is_the_first_arrival_minus_the_broker_time_and_unseen_commits_are_counted() -> None:
    commits = [("a.t", 1, 0, 0), ("a.t", 2, 0, 0), ("b.t", 1, 0, 0)]
    arrivals = [
        ("a.t", 1, 1_000_000_000 + 3_500_000, 1_000),  # 3.5 ms after the broker's 1,000 ms
        ("a.t", 1, 1_000_000_000 + 9_000_000, 1_000),  # a second arrival of the same version
        ("b.t", 2, 5_000_000_000, 4_999),  # a version that was not timed
    ]
    samples, missing = latencies_ms(commits, arrivals)
    assert samples == [3.5]
    assert missing == 2


@given(
    st.lists(st.tuples(st.sampled_from(["a.t", "b.t", "c.t"]), st.integers(0, 50)), unique=True),
    st.data(),
)
def test_every_timed_commit_is_either_a_sample_or_missing(versions: list[tuple[str, int]], data: Any) -> None:
    commits = [(t, v, 0, 0) for t, v in versions]
    seen = data.draw(st.lists(st.sampled_from(versions), unique=True) if versions else st.just([]))
    arrivals = [(t, v, (v + 1) * 2_000_000, v) for t, v in seen]
    samples, missing = latencies_ms(commits, arrivals)
    assert len(samples) == len(seen) and len(samples) + missing == len(commits)
    assert sorted(samples) == pytest.approx(sorted(v + 2 for _, v in seen))


def test_sizes_parse_sorted_and_deduplicated_and_bad_ones_are_refused() -> None:
    assert many_tables._sizes("10_000,1,1000,1") == (1, 1000, 10000)
    for bad in ("", "0", "x", "1,200000"):
        with pytest.raises(argparse.ArgumentTypeError):
            many_tables._sizes(bad)


def test_a_size_s_pattern_matches_its_own_tables_and_no_other_size_s() -> None:
    ones, tens = names(1), names(10)
    assert len(tens) == 10 and tens == sorted(tens)
    assert all(re.match(pattern(10), table_name(t).topic) for t in tens)
    assert not any(re.match(pattern(1), table_name(t).topic) for t in tens)
    assert not any(re.match(pattern(10), table_name(t).topic) for t in ones)


def test_create_tables_progress_becomes_the_count_just_done() -> None:
    ticks: list[int] = []
    report_done = many_tables._progress_of(ticks.append)
    for done in (500, 1000, 1200):
        report_done(done)
    assert ticks == [500, 500, 200]


def _results(**overrides: Any) -> dict[str, Any]:
    def size(n: int, p99: float) -> dict[str, Any]:
        return {
            "tables": n,
            "create": {"method": "create_tables", "seconds": n / 1000, "per_table_ms": 1.0},
            "broker": {"open_files": 100 + n, "memory_maps": 800 + 2 * n, "rss_bytes": 4e8},
            "heads": {"since_start_s": 2.0 + n / 1000, "seconds": 2.0, "rss_bytes": 150e6 + n * 1_000},
            "watch": {
                "arrival_minus_broker_ts": {"median_ms": 2.0, "p90_ms": 5.0, "p99_ms": p99, "max_ms": 30.0},
                "missing": 0,
                "commits": 1000,
                "commits_per_s": 45.0,
                "warmup_rounds": 1,
                "rss_bytes_after": 160e6,
            },
            "serve": {
                "paged": True,
                "path": "/api/tables?limit=100",
                "entries": 100,
                "server_start_s": 1.0,
                "first_page": {"median_ms": 4.0},
            },
        }

    results: dict[str, Any] = {
        "benchmark": "many-tables",
        "mode": "full",
        "command": ".venv/bin/python -m bench.many_tables",
        "results_file": "bench/results/many-tables-x.json",
        "scenarios": list(many_tables.SCENARIOS),
        "environment": {
            "date_utc": "2026-11-27 06:00 UTC",
            "nproc": "2",
            "cpu": "cpu",
            "memory": "mem",
            "kernel": "Linux",
            "python": "CPython 3.11",
            "java": "openjdk 17",
            "kafka": "4.1.1",
            "librdkafka": "2.16.0",
            "packages": {"confluent-kafka": "2.16.1", "fastavro": "1.13.1"},
            "git": "abc1234",
            "loadavg_at_start": [0.5, 0.5, 0.5],
        },
        "params": {
            "session_timeout_ms": 10_000,
            "active_tables": 100,
            "watch_commits": 1000,
            "watch_pause_s": 0.02,
        },
        "broker": {"kafka_heap": "2g"},
        "sizes": {"1": size(1, 8.0), "10000": size(10_000, 12.0)},
    }
    results["sizes"]["10000"]["failover"] = {
        "kill_to_fresh_s": 14.0,
        "sample": 100,
        "moved_tables": 3334,
        "owned": {"m1": 3333, "m2": 3334, "m3": 3333},
        "assigned_s": 30.0,
        "steady": {"since_commit_s": 0.5},
        "kill_to_reassigned_s": 11.0,
        "survivors_rss_bytes": {"m1": 1e8, "m3": 1e8},
    }
    results.update(overrides)
    return results


def test_the_targets_compare_the_largest_size_with_the_goal_with_one_table_and_with_recovery() -> None:
    results = _results()
    many_tables_doc.evaluate(results)
    met = {t["target"].split(" at ")[0]: (t["measured"], t["limit"], t["met"]) for t in results["targets"]}
    assert met["commit → `watch()` p99"] == (12.0, 20.0, True)
    assert met["p99"] == (12.0, 13.0, True)  # 8 ms at one table + 5 ms of noise
    assert met["kill → moved heads fresh"] == (14_000.0, 22_000.0, True)  # 10 s + 12 s start
    assert results["rss_per_table_bytes"] == 1_000  # (RSS at 10,000 − RSS at 1) ÷ 9,999


def test_the_block_has_a_row_per_size_shows_failures_and_replaces_only_its_own_section(
    tmp_path: Path,
) -> None:
    results = _results()
    results["sizes"]["10000"]["serve"] = {"error": "TimeoutError: slow"}
    many_tables_doc.evaluate(results)
    body = many_tables_doc.render(results)
    rows = [line for line in body.splitlines() if re.match(r"^\| (1|10,000) \|", line)]
    assert len(rows) == 2
    assert "**failed**" in rows[1] and "4.00 ms" in rows[0]
    assert "| Target |" in body and "many-tables-x.json" in body
    doc = tmp_path / "BENCHMARKS.md"
    doc.write_text(
        "# Benchmarks\n\n## Many tables\n\nby hand\n\n"
        "<!-- many-tables:start -->\nold\n<!-- many-tables:end -->\n"
    )
    report.update_section(doc, many_tables.BENCHMARK.name, body)
    blocks = dict(BLOCK.findall(doc.read_text()))
    assert blocks["many-tables"].strip() == body.strip() and "by hand" in doc.read_text()
    details = many_tables_doc.details(results)
    assert details.startswith("## 1 tables") and "| 10,100, 20,800, 400.0 MB |" in details


def test_heads_are_waited_for_with_one_pipelined_read_per_poll(
    private_redis: PrivateRedis, tmp_path: Path
) -> None:
    settings = replace(StackSettings.load(), home=tmp_path, redis_port=private_redis.port)
    svc = Services(settings, tmp_path, Config.load(env={}), {})
    client: redis.Redis[bytes] = redis.Redis.from_url(private_redis.url)
    tables = names(30)
    for table in tables[:20]:
        client.hset(keys.head_key(table), mapping={"version": 3})
    assert svc.head_versions(tables[18:22]) == [3, 3, None, None]
    missing = svc.wait_heads(dict.fromkeys(tables, 3), timeout_s=0.3)
    assert missing["seconds"] is None and missing["missing"] == 10

    def publish_late() -> None:
        time.sleep(0.2)
        for table in tables[20:]:
            client.hset(keys.head_key(table), mapping={"version": 4})

    late = threading.Thread(target=publish_late)
    late.start()
    done = svc.wait_heads(dict.fromkeys(tables, 3), timeout_s=30)
    late.join()
    assert done["missing"] == 0 and done["seconds"] is not None and done["polls"] >= 2
    svc.close()
