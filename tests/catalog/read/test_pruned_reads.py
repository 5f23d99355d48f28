"""Every read path on a pruned and compacted topic: snapshot, as_of, history, diff, watch, the
CLI, ``si.read(version=…)`` and the Spark source's ``startingVersion``; history retention."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import redis
from click.testing import CliRunner
from pyspark.sql import DataFrame, SparkSession

import segcat.spark_integration as si
from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import VersionExpired
from segcat.catalog.protocol.names import TableName
from segcat.catalog.read.vacuum import HISTORY_VERSIONS_PROPERTY, vacuum
from segcat.cli import cli
from tests.catalog.read.test_log_pruning import AGGRESSIVE_CLEANER, _alter, wait_compacted_away
from tests.factories import segment
from tests.handles import reader_of, tables_of
from tests.materializer_support import (
    PrivateRedis,
    materializer_config,
    namespace,
    running_materializer,
    wait_for_head,
)
from tests.spark_support import spark

__all__ = ["spark"]


def _ids(frame: DataFrame) -> list[int]:
    return sorted(row.id for row in frame.collect())


def _env(config: Config) -> dict[str, str]:
    return {
        "SEGCAT_BOOTSTRAP_SERVERS": config.bootstrap_servers,
        "SEGCAT_REDIS_URL": config.redis_url or "",
        "SEGCAT_WAREHOUSE": config.warehouse,
    }


def test_every_read_path_answers_pruned_versions(
    spark: SparkSession, config: Config, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    pconfig = materializer_config(config, private_redis.url, tmp_path / "warehouse", every=2)
    ns, pattern = namespace()
    name = f"{ns}.reads"
    catalog = Catalog(pconfig)
    table = catalog.create_table(name)
    tname = TableName.parse(name)
    with running_materializer(pconfig, pattern):
        for k in range(5):
            frame = spark.createDataFrame([(k, f"v{k}")], "id long, v string")
            si.write(frame, table, config=pconfig)
        si.compact(spark, table, config=pconfig)
        wait_for_head(tables_of(catalog).redis, name, table.head_offset())  # type: ignore[arg-type]
        end = table.head_offset()
        accepted = [h.version for h in table.history()]
        before = {v: table.snapshot(version=v).segment_ids() for v in accepted}
        rows_before = {
            v: sorted(r.id for r in si.read(spark, table, version=v, config=pconfig).collect())
            for v in accepted
        }
        times = {h.version: h.timestamp_ms for h in table.history()}
        _alter(pconfig, tname.topic, AGGRESSIVE_CLEANER)
        result = table.prune_log(retain_versions=1)
        prune_point = result.plan.prune_point
        assert result.plan.prunes and result.marker_version is not None
        wait_for_head(tables_of(catalog).redis, name, result.marker_version)  # type: ignore[arg-type]
        time.sleep(0.5)
        si.write(spark.createDataFrame([(99, "late")], "id long, v string"), table, config=pconfig)
        wait_compacted_away(pconfig, tname, prune_point)
        wait_for_head(tables_of(catalog).redis, name, table.head_offset())  # type: ignore[arg-type]

    redis.Redis.from_url(private_redis.url).flushall()  # readers answer from object storage alone
    fresh = Catalog(pconfig).load_table(name)
    pruned = [v for v in accepted if v <= prune_point]
    assert len(pruned) >= 3
    for v in accepted:
        assert fresh.snapshot(version=v).segment_ids() == before[v]
        assert fresh.snapshot(as_of=times[v]).version == v  # broker times from the archives
    history = {h.version: h.timestamp_ms for h in fresh.history()}
    assert {v: history[v] for v in accepted} == times
    first, last = pruned[1], accepted[-1]
    diff = fresh.diff(first, last)
    assert {s.segment_id for s in diff.added} == before[last] - before[first]
    with fresh.watch(from_version=pruned[0], poll_s=0.2) as watcher:
        seen = []
        for change in watcher:
            seen.append(change.version)
            if change.version >= end:
                break
    assert seen[: len(accepted) - 1] == accepted[1:]
    for v in pruned:
        got = _ids(si.read(spark, name, version=v, config=pconfig))
        assert got == rows_before[v]
    sink: list[int] = []
    query = (
        spark.readStream.format("segcat")
        .option("view", "versions")
        .option("table", name)
        .options(**si.source_options(pconfig))
        .option("startingVersion", "0")
        .load()
        .writeStream.foreachBatch(lambda df, _: sink.extend(r.version for r in df.collect()))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(180)
    assert sorted(sink)[: len(accepted)] == accepted
    runner = CliRunner()
    shown = runner.invoke(cli, ["show", name, "--version", str(pruned[2]), "--json"], env=_env(pconfig))
    assert shown.exit_code == 0, shown.output
    logged = runner.invoke(cli, ["log", name, "--json"], env=_env(pconfig))
    assert logged.exit_code == 0, logged.output
    offsets = [json.loads(line)["offset"] for line in logged.output.splitlines() if line.startswith("{")]
    assert set(accepted) <= set(offsets)


def test_history_retention_expires_old_versions(
    config: Config, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    pconfig = materializer_config(config, private_redis.url, tmp_path / "warehouse", every=2)
    ns, pattern = namespace()
    name = f"{ns}.history"
    catalog = Catalog(pconfig)
    table: Table = catalog.create_table(name)
    with running_materializer(pconfig, pattern) as service:
        with load_catalog(pconfig).load_table(name) as writer:
            for k in range(9):
                writer.append([segment(f"s{k}")])
            writer.set_properties({HISTORY_VERSIONS_PROPERTY: "4"})
        wait_for_head(tables_of(catalog).redis, name, table.head_offset())  # type: ignore[arg-type]
        # key frames are written in the background: the head in Redis can be ahead of them
        assert service.writer is not None and service.writer.drain(timeout_s=60)
        pruned = table.prune_log(retain_versions=2)
        assert pruned.marker_version is not None
        wait_for_head(tables_of(catalog).redis, name, pruned.marker_version)  # type: ignore[arg-type]
        assert service.writer.drain(timeout_s=60)
    _alter(pconfig, TableName.parse(name).topic, AGGRESSIVE_CLEANER)
    time.sleep(0.5)
    with load_catalog(pconfig).load_table(name) as writer:
        writer.append([segment("late")])
    wait_compacted_away(pconfig, TableName.parse(name), pruned.plan.prune_point)
    report = vacuum(reader_of(table), grace_ms=0, ignore_leases=True)
    assert report.by_reason().get("history", {}).get("files", 0) > 0
    files = reader_of(table).files
    assert files is not None
    oldest = files.oldest_readable()
    assert oldest is not None and oldest > 0
    redis.Redis.from_url(private_redis.url).flushall()
    fresh = Catalog(pconfig).load_table(name)
    with pytest.raises(VersionExpired) as caught:
        fresh.snapshot(version=oldest - 1)
    assert caught.value.oldest == oldest and str(oldest) in str(caught.value)
    with pytest.raises(VersionExpired, match=f"start {oldest}") as feed:  # the feed needs oldest - 1
        fresh.changes(oldest)
    assert feed.value.oldest == oldest
    assert fresh.snapshot(version=oldest).version <= oldest
    assert "late" in fresh.snapshot().segment_ids()
