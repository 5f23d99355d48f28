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
