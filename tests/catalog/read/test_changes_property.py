"""The change feed's promise on the real stack: rows(a) + feed(a, b] == rows(b) for every a < b.

Random sequences of appends, compactions (the visible rows rewritten, as ``si.compact``
does), replaces, file deletes, drops of partitions and tombstones, on a fresh table each,
with small Parquet files from ``producers.segment_files``. rows(v) is read with
``snapshot_reads`` + ``read_rows`` and also checked against a model kept in Python with each
tombstone's meaning written out by hand (NaN above every number, NULL never matching).
"""

from __future__ import annotations

import math
import uuid
from collections import Counter
from collections.abc import Callable

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segcat import Catalog, Config, Table
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read.changes import (
    INSERT,
    ChangeTracker,
    VersionFiles,
    change_batches,
    read_rows,
    snapshot_reads,
)

from .changes_support import SCHEMA, write_segments

Row = tuple[int | None, str | None, float | None]
Key = tuple[object, ...]

_VALUES_X = [None, 0.5, 1.5, -0.0, math.nan, 3.0]
_PARTS = ["a", "b", None]


def _key(row: Row) -> Key:
    k, p, x = row
    return (k, p, "nan" if x is not None and math.isnan(x) else x)


def _tombstones() -> st.SearchStrategy[tuple[str, Callable[[Row], bool]]]:
    """Tombstone text and what it deletes, written out independently of ``row_filter``."""
    n = st.integers(-1, 8)
    return st.one_of(
        n.map(lambda v: (f"k < {v}", lambda r: r[0] is not None and r[0] < v)),
        n.map(lambda v: (f"NOT (k >= {v})", lambda r: r[0] is not None and r[0] < v)),
        st.just(("x IS NULL", lambda r: r[2] is None)),
        st.sampled_from(["a", "b"]).map(lambda c: (f"p = '{c}'", lambda r: r[1] == c)),
        st.lists(n, min_size=1, max_size=3).map(
            lambda vs: (f"k IN ({', '.join(map(str, vs))})", lambda r: r[0] in vs)
        ),
        st.just(("x > 1.0", lambda r: r[2] is not None and (math.isnan(r[2]) or r[2] > 1.0))),
        st.just(("x = 0", lambda r: r[2] == 0.0)),
        st.just(("k <= 9223372036854775808", lambda r: True)),
    )


_rows = st.lists(
    st.tuples(st.one_of(st.none(), st.integers(0, 7)), st.sampled_from(_PARTS), st.sampled_from(_VALUES_X)),
    min_size=1,
    max_size=6,
)
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("append"), _rows, st.booleans()),
        st.tuples(st.just("compact"), st.integers(0, 2**16)),
        st.tuples(st.just("replace"), _rows),
        st.tuples(st.just("delete_files"), st.integers(0, 2**16)),
        st.tuples(st.just("drop_partition"), st.sampled_from(_PARTS)),
        st.tuples(st.just("tombstone"), _tombstones()),
    ),
    min_size=2,
    max_size=7,
)


class _Model:
    """Live segments as Python rows, each with its added version; tombstones with theirs."""

    def __init__(self) -> None:
        self.segments: dict[str, tuple[int, list[Row], str | None]] = {}
        self.tombstones: list[tuple[int, Callable[[Row], bool]]] = []

    def visible(self, sid: str) -> list[Row]:
        added, rows, _ = self.segments[sid]
        return [r for r in rows if not any(v > added and hit(r) for v, hit in self.tombstones)]

    def rows(self) -> Counter[Key]:
        return Counter(_key(r) for sid in self.segments for r in self.visible(sid))


def _pick(ids: list[str], seed: int) -> list[str]:
    chosen = [sid for i, sid in enumerate(sorted(ids)) if seed >> (i % 16) & 1]
    return chosen or sorted(ids)[: 1 + seed % max(len(ids), 1)]


def _append(table: Table, model: _Model, rows: list[Row], partitioned: bool) -> int:
    segments = write_segments(table, rows, partitioned=partitioned)
    version = table.append(segments)
    for s in segments:
        mine = [r for r in rows if not partitioned or _partition(r) == s.partition]
        model.segments[s.segment_id] = (version, mine, s.partition)
    return version


def _partition(row: Row) -> str | None:
    return "__HIVE_DEFAULT_PARTITION__" if row[1] is None else row[1]


def _run(table: Table, model: _Model, step: tuple[object, ...]) -> int | None:
    kind = step[0]
    live = list(model.segments)
    if kind == "append":
        return _append(table, model, step[1], step[2])  # type: ignore[arg-type]
    if kind == "compact" and live:
        drops = _pick(live, step[1])  # type: ignore[arg-type]
        rows = [r for sid in drops for r in model.visible(sid)]
        adds = write_segments(table, rows) if rows else []
        version = table.compact(drops, adds)
        for sid in drops:
            del model.segments[sid]
        for s in adds:
            model.segments[s.segment_id] = (version, rows, None)
        return version
    if kind == "replace":
        rows = step[1]
        adds = write_segments(table, rows)  # type: ignore[arg-type]
        version = table.replace(adds)
        model.segments = {s.segment_id: (version, rows, None) for s in adds}  # type: ignore[misc]
        return version
    if kind == "delete_files" and live:
        drops = _pick(live, step[1])  # type: ignore[arg-type]
        version = table.delete(drops=drops)
        for sid in drops:
            del model.segments[sid]
        return version
    if kind == "drop_partition":
        name = "__HIVE_DEFAULT_PARTITION__" if step[1] is None else step[1]
        gone = [sid for sid, (_, _, p) in model.segments.items() if p == name]
        if not gone:
            return None
        version = table.drop_partitions([name])
        for sid in gone:
            del model.segments[sid]
        return version
    if kind == "tombstone":
        text, hit = step[1]  # type: ignore[misc]
        version = table.delete(predicates=[text])
        model.tombstones.append((version, hit))
        return version
    return None


def _multiset(batches: object) -> Counter[Key]:
    out: Counter[Key] = Counter()
    for batch in batches:  # type: ignore[attr-defined]
        for row in zip(*(batch.column(c).to_pylist() for c in ("k", "p", "x")), strict=True):
            out[_key(row)] += 1
    return out


def _changes(vf: VersionFiles, config: Config) -> tuple[Counter[Key], Counter[Key]]:
    inserted: Counter[Key] = Counter()
    deleted: Counter[Key] = Counter()
    for batch in change_batches(vf, SCHEMA, config):
        kinds = batch.column("_change_type").to_pylist()
        assert set(batch.column("_commit_version").to_pylist()) == {vf.version}
        for kind, row in zip(
            kinds, zip(*(batch.column(c).to_pylist() for c in ("k", "p", "x")), strict=True), strict=True
        ):
            (inserted if kind == INSERT else deleted)[_key(row)] += 1
    return inserted, deleted


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(steps=_steps)
def test_feed_applied_to_rows_of_a_gives_rows_of_b(
    catalog: Catalog, config: Config, steps: list[tuple[object, ...]]
) -> None:
    name = f"test.changes_prop_{uuid.uuid4().hex[:10]}"
    with catalog.create_table(name) as table:
        start = table.head_offset()
        model = _Model()
        expected: dict[int, Counter[Key]] = {start: Counter()}
        for step in steps:
            version = _run(table, model, step)
            if version is not None:
                expected[version] = model.rows()
        versions = sorted(expected)
        # rows(v) from the snapshot, read with the core's reader, equal the model's
        rows: dict[int, Counter[Key]] = {}
        for v in versions:
            snapshot = table.snapshot(v)
            rows[v] = _multiset(b for r in snapshot_reads(snapshot) for b in read_rows(r, SCHEMA, config))
            assert rows[v] == expected[v], (v, steps)
        # the feed of each version, from one tracker fed the whole log in order
        tracker = ChangeTracker(TableState(name), root=table.location())
        feed: dict[int, tuple[Counter[Key], Counter[Key]]] = {}
        for applied in table.records(0):
            if applied.delta is not None and applied.verdict.outcome is Outcome.ACCEPTED:
                vf = tracker.observe(applied.delta)
                if vf.version > start:
                    feed[vf.version] = _changes(vf, config)
        for i, a in enumerate(versions):
            for b in versions[i + 1 :]:
                current = Counter(rows[a])
                for v in (v for v in sorted(feed) if a < v <= b):
                    inserted, deleted = feed[v]
                    assert not (deleted - current), (a, b, v, steps)  # never deletes what is not there
                    current = current - deleted + inserted
                assert current == rows[b], (a, b, steps)
        # and Table.changes over the whole range says the same as the tracker
        if not any(sum(ins.values()) + sum(dels.values()) for ins, dels in feed.values()):
            return  # no row moved (a table without files has no columns either)
        with table.changes(start + 1) as whole:
            got = whole.read_all()
        total_in: Counter[Key] = Counter()
        total_out: Counter[Key] = Counter()
        for k, p, x, change in zip(
            *(got.column(c).to_pylist() for c in ("k", "p", "x", "_change_type")), strict=True
        ):
            (total_in if change == INSERT else total_out)[_key((k, p, x))] += 1
        assert total_in == sum((feed[v][0] for v in feed), Counter())
        assert total_out == sum((feed[v][1] for v in feed), Counter())
