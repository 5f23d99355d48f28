"""Log pruning and history retention stop at the oldest tag (with the materializer's key frames)."""

from __future__ import annotations

from pathlib import Path

import redis

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.read.vacuum import HISTORY_VERSIONS_PROPERTY, vacuum
from tests.factories import segment
from tests.handles import reader_of, tables_of
from tests.materializer_support import (
    PrivateRedis,
    materializer_config,
    namespace,
    running_materializer,
    wait_for_head,
)


def test_prune_and_history_retention_never_pass_the_oldest_tag(
    config: Config, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    """Nine appends, key frames every two commits, history kept for two frames, the log pruned
    to the last version: without the tag both would cut past version ``tagged`` (regression:
    the prune point and the oldest readable version passed it)."""
    pconfig = materializer_config(config, private_redis.url, tmp_path / "warehouse", every=2)
    ns, pattern = namespace()
    name = f"{ns}.tagged"
    catalog = Catalog(pconfig)
    table: Table = catalog.create_table(name)
    with running_materializer(pconfig, pattern) as service:
        with load_catalog(pconfig).load_table(name) as writer:
            for k in range(3):
                tagged = writer.append([segment(f"s{k}")])
            for k in range(3, 9):
                writer.append([segment(f"s{k}")])
            writer.tag("keep", tagged)
            writer.set_properties({HISTORY_VERSIONS_PROPERTY: "2"})
        wait_for_head(tables_of(catalog).redis, name, table.head_offset())  # type: ignore[arg-type]
        assert service.writer is not None and service.writer.drain(timeout_s=60)
        pruned = table.prune_log(retain_versions=1)
        assert pruned.plan.limit == "tags" and pruned.plan.prune_point == tagged - 1
        assert pruned.marker_version is not None
        wait_for_head(tables_of(catalog).redis, name, pruned.marker_version)  # type: ignore[arg-type]
        assert service.writer.drain(timeout_s=60)
    assert table.log_start() == tagged
    vacuum(reader_of(table), grace_ms=0, ignore_leases=True)
    files = reader_of(table).files
    assert files is not None
    oldest = files.oldest_readable()
    assert oldest is not None and oldest <= tagged
    redis.Redis.from_url(private_redis.url).flushall()  # the test's own Redis: read from storage
    fresh = Catalog(pconfig).load_table(name)
    assert fresh.snapshot("keep").segment_ids() == {"s0", "s1", "s2"}
    with load_catalog(pconfig).load_table(name) as writer:
        writer.drop_tag("keep")
    assert fresh.prune_log(retain_versions=1, dry_run=True).plan.prune_point > tagged


def test_the_materializer_s_upkeep_keeps_a_tagged_version(
    config: Config, private_redis: PrivateRedis, tmp_path: Path
) -> None:
    """Upkeep by table properties (prune to the last version, vacuum with zero grace, history
    for one frame) runs the same prune and vacuum: the tagged version stays whole."""
    import os

    from segcat.catalog.protocol.model import Segment
    from segcat.materializer.maintenance import Maintenance, TableFacts

    pconfig = materializer_config(config, private_redis.url, tmp_path / "warehouse", every=2)
    ns, pattern = namespace()
    name = f"{ns}.upkeep_tag"
    catalog = Catalog(pconfig)
    table: Table = catalog.create_table(name)
    root = Path(table.location())

    def file(sid: str) -> Segment:
        path = root / "data" / f"{sid}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(os.urandom(32))
        return Segment(sid, f"data/{sid}.parquet", 32, 1, "p")

    with load_catalog(pconfig).load_table(name) as writer:
        for k in range(4):
            writer.append([file(f"early{k}")])
        tagged = writer.append([file("a"), file("b")])
        writer.compact(["a", "b"], [file("c0")])
        for k in range(1, 4):
            writer.compact([f"c{k - 1}"], [file(f"c{k}")])
        writer.tag("keep", tagged)
        writer.set_properties(
            {
                "segcat.log.retain.versions": "1",
                "segcat.vacuum.every.ms": "1",
                "segcat.vacuum.grace.ms": "0",
                HISTORY_VERSIONS_PROPERTY: "1",
            }
        )

    def facts() -> list[TableFacts]:
        head = table.snapshot(include_dropped=True)
        return [TableFacts(name, head.properties, head.dropped, head.log_start, 0)]

    with running_materializer(pconfig, pattern) as service:
        wait_for_head(tables_of(catalog).redis, name, table.head_offset())  # type: ignore[arg-type]
        assert service.writer is not None and service.writer.drain(timeout_s=60)
        Maintenance(pconfig, facts).run_once()
    assert 0 < table.log_start() <= tagged  # pruned, not past the tag
    assert (root / "data/a.parquet").exists() and (root / "data/b.parquet").exists()
    assert not (root / "data/c0.parquet").exists()  # neither the head nor the tag lists it
    files = reader_of(table).files
    assert files is not None and (files.oldest_readable() or 0) <= tagged
    assert table.snapshot("keep").segment_ids() == {"a", "b", *(f"early{k}" for k in range(4))}
