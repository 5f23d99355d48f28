"""The exporter alone (no Kafka): for any sequence of adds and drops, the manifests hold exactly the
live files (as pyiceberg plans them, at every snapshot kept), their count stays bounded, and a
publisher restarted from any version's metadata writes the very same bytes afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segcat.catalog.iceberg import exporter, layout
from segcat.catalog.iceberg.avro_files import DATA, FileEntry
from segcat.catalog.iceberg.exporter import IcebergExport, VersionChange
from segcat.catalog.iceberg.metadata import table_uuid
from segcat.catalog.protocol.names import TableName
from segcat.catalog.storage.objectstore import ObjectStore
from segcat.catalog.storage.table_files import TableFiles

LOG_ID = "A" * 22
SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "id", "required": False, "type": "long"}]}

Step = tuple[int, frozenset[int]]
"""(files added, indexes into the live files to drop)."""

steps = st.lists(
    st.tuples(st.integers(0, 5), st.frozensets(st.integers(0, 30), max_size=4)), min_size=1, max_size=14
)


@pytest.fixture(autouse=True)
def _small_manifests(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny limits, so few files exercise chunking and merging."""
    monkeypatch.setattr(exporter, "MANIFEST_ENTRIES", 3)
    monkeypatch.setattr(exporter, "SMALL_ENTRIES", 2)
    monkeypatch.setattr(exporter, "MAX_SMALL_MANIFESTS", 2)


def _export(root: Path) -> IcebergExport:
    store = ObjectStore.from_uri(str(root))
    files = TableFiles(store, TableName.parse("ns.t"), LOG_ID)
    export = IcebergExport(store, files, table_uuid(LOG_ID, "ns.t"), str(root / "data"))
    export.schema_id_for(SCHEMA)
    export.ids.learn(SCHEMA)
    return export


def _run(export: IcebergExport, plan: list[Step], live: list[str], start: int = 0) -> dict[int, set[str]]:
    """Apply ``plan`` from step ``start``; the live files after each version."""
    after: dict[int, set[str]] = {}
    counter = sum(n for n, _ in plan[:start])
    for version, (adds, drop_at) in list(enumerate(plan, 1))[start:]:
        dropped = sorted({live[i % len(live)] for i in drop_at} if live else set())
        new = []
        for _ in range(adds):
            counter += 1
            new.append(
                FileEntry(f"{export.location}/f{counter}.parquet", DATA, counter, 100, version, version + 1)
            )
        change = VersionChange(
            version,
            1_000 + version,
            "APPEND",
            f"c{version}",
            adds=new,
            drops=dropped,
            snapshot=bool(new or dropped),
        )
        export.commit(change, schema_id=0, properties={}, tags={}, keep_snapshots=100, oldest_readable=0)
        live[:] = [u for u in live if u not in dropped] + [e.uri for e in new]
        after[version] = set(live)
    return after


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=steps)
def test_manifests_hold_exactly_the_live_files_and_restarts_write_the_same_bytes(
    tmp_path_factory: pytest.TempPathFactory, plan: list[Step]
) -> None:
    from pyiceberg.table import StaticTable

    root = tmp_path_factory.mktemp("w")
    export = _export(root)
    live: list[str] = []
    after = _run(export, plan, live)
    last = len(plan)  # versions start at 1, as segcat's version 0 creates the table
    assert export.live_uris == after[last]
    # the index kept version by version is the one a rebuild from the manifests gives
    assert export._where == {e.uri: m.path for m in export.data for e in m.live}
    summary = export.snapshots[-1].summary if export.snapshots else {}
    if export.snapshots and export.snapshots[-1].snapshot_id == last:
        records = sum(int(u.rsplit("/f", 1)[1].split(".")[0]) for u in after[last])
        assert summary["total-data-files"] == str(len(after[last]))
        assert summary["total-records"] == str(records)
        assert summary["total-files-size"] == str(100 * len(after[last]))
    # small manifests merge: at most MAX_SMALL of them, plus full ones and one version's new ones
    assert len(export.data) <= len(after[last]) // 2 + 2 + 3
    location = export.store.uri(layout.metadata_path(export.files, last))
    static = StaticTable.from_metadata(location)
    for snapshot in static.metadata.snapshots:
        planned = {t.file.file_path for t in static.scan(snapshot_id=snapshot.snapshot_id).plan_files()}
        assert planned == after[snapshot.snapshot_id]
    # a restart from the metadata of any version writes the same files after it
    cut = max(1, len(plan) // 2)
    written = {p: export.store.get(p) for p in export.store.list(layout.metadata_dir(export.files))}
    again = IcebergExport.load(export.store, export.files, layout.metadata_path(export.files, cut))
    _run(again, plan, _order(after, cut, plan, export), cut)
    for path, data in written.items():
        assert export.store.get(path) == data, path


def _order(after: dict[int, set[str]], cut: int, plan: list[Step], export: IcebergExport) -> list[str]:
    """The live list at ``cut`` in the order ``_run`` keeps it (rebuilt by a fresh run)."""
    scratch: list[str] = []
    counter = 0
    for adds, drop_at in plan[:cut]:
        dropped = {scratch[i % len(scratch)] for i in drop_at} if scratch else set()
        scratch = [u for u in scratch if u not in dropped]
        for _ in range(adds):
            counter += 1
            scratch.append(f"{export.location}/f{counter}.parquet")
    assert set(scratch) == after[cut]
    return scratch
