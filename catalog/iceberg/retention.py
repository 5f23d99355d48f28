"""Which of a log's Iceberg files history retention may delete (vacuum, reason ``history``).

Iceberg metadata is history like the key frames (docs/LIFECYCLE.md, *History retention*): the
metadata of every version history retention keeps (``v<N>.metadata.json`` with N at or after
the oldest key frame kept), of every tagged version, and the newest one stay, with every
manifest list, manifest and delete file one of them references; an unreferenced file goes
only once it is older than the grace period (storage clock), so the files of a version being
published now (written before the metadata naming them) are never taken.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Iterator, Mapping
from dataclasses import dataclass

from segcat.catalog.iceberg import layout
from segcat.catalog.iceberg.avro_files import MANIFEST_DELETES, read_manifest, read_manifest_list
from segcat.catalog.protocol.tags import tags_of
from segcat.catalog.storage.table_files import TableFiles

_PREFIX, _SUFFIX = "v", ".metadata.json"


@dataclass(frozen=True)
class Unreferenced:
    path: str
    """Relative to the object store's root."""
    size: int


def metadata_versions(names: Iterable[str]) -> list[int]:
    """The versions of the ``v<N>.metadata.json`` among ``names`` (paths), ascending."""
    found = []
    for name in names:
        base = name.rsplit("/", 1)[-1]
        digits = base[len(_PREFIX) : -len(_SUFFIX)]
        if base.startswith(_PREFIX) and base.endswith(_SUFFIX) and digits.isdigit():
            found.append(int(digits))
    return sorted(found)


def history(
    files: TableFiles, properties: Mapping[str, str], retained: bool, doomed: Collection[str], cutoff_ms: int
) -> Iterator[tuple[str, int]]:
    """(path, size) of the log's Iceberg files that vacuum's history retention deletes: none
    unless history is retained (``retained``: a ``segcat.history.retain.*`` property is set);
    else those ``unreferenced`` with the oldest key frame the plan keeps (not among the URIs
    ``doomed``) as the oldest version kept, and the version of every tag in ``properties``."""
    if not retained:
        return
    kept = [v for v in files.keyframe_versions() if files.store.uri(files.keyframe_path(v)) not in doomed]
    if not kept:
        return
    for gone in unreferenced(files, kept[0], tags_of(properties).values(), cutoff_ms):
        yield gone.path, gone.size


def unreferenced(
    files: TableFiles, oldest_kept: int, tagged: Iterable[int], cutoff_ms: int
) -> Iterator[Unreferenced]:
    """The log's Iceberg files no kept metadata needs, last written before ``cutoff_ms``."""
    store = files.store
    try:
        listed = store.list_files(layout.iceberg_dir(files))
    except FileNotFoundError:
        return
    versions = metadata_versions(path for path, _, _ in listed)
    if not versions:
        return
    keep = {v for v in versions if v >= oldest_kept} | {versions[-1]}
    for tag in tagged:
        at_or_before = [v for v in versions if v <= tag]
        if at_or_before:
            keep.add(at_or_before[-1])
    root = store.root.rstrip("/") + "/"
    needed = {layout.version_hint_path(files)}
    lists: set[str] = set()
    for version in sorted(keep):
        path = layout.metadata_path(files, version)
        needed.add(path)
        doc = json.loads(store.get(path))
        lists.update(str(s["manifest-list"]) for s in doc.get("snapshots", []))
    for uri in sorted(lists):
        list_path = uri.removeprefix(root)
        needed.add(list_path)
        try:
            records = read_manifest_list(store.get(list_path))
        except FileNotFoundError:
            continue
        for record in records:
            manifest = str(record["manifest_path"]).removeprefix(root)
            if manifest in needed:
                continue
            needed.add(manifest)
            if record["content"] == MANIFEST_DELETES:
                entries = read_manifest(store.get(manifest), record, manifest)
                needed.update(e.uri.removeprefix(root) for e in entries.live)
    for path, size, mtime_ms in listed:
        if path not in needed and 0 <= mtime_ms < cutoff_ms:
            yield Unreferenced(path, size)
