"""Bloom-filter probes in ``Snapshot.prune``: the batch probe against a per-file loop.

    .venv/bin/python -m bench.pruning            # full run, updates docs/BENCHMARKS.md
    .venv/bin/python -m bench.pruning --quick    # smoke run: 2,000 segments, doc untouched

A snapshot of N live segments (10,000 and 100,000), every one with stats on ``id``, ``day``
(INT) and ``user`` (STRING) wide enough that min/max keep it, and a Bloom filter over ``user``
on half of them, over ``id`` on the other half. Predicates: ``user = 'u-probe'`` (probes the
``user`` filters), ``id = 5`` (the ``id`` filters), ``day = 5`` (a column no segment has a
filter over), ``user IN (10 values)``. Each is timed three ways, back to back in
one process on the same snapshot, medians of repeated runs after a warm-up:

- **per-file loop**: a Python loop over every candidate segment with a filter, each probed by
  ``bloom.might_contain``: the plain way to write the step, kept here as the reference the batch
  must agree with (checked every run) and beat;
- **batch**: the Bloom step readers run (``expressions.bloom_mask``: one ``bloom.FilterBatch``
  per filtered column);
- **whole prune**: ``Snapshot.prune`` as readers call it (stats pass, Bloom step, the kept rows).

Nothing here needs Kafka or Redis: the snapshot is built in memory from one APPEND judged by
the rules (the runner still checks that the local stack answers, as for every benchmark).
"""

from __future__ import annotations

import sys
from functools import partial
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from bench import report, runner
from bench.report import ms, table
from bench.runner import Context, Results, measure, progress
from segcat.catalog.protocol import bloom, rules
from segcat.catalog.protocol.expressions import Compare, IsIn, Predicate, bloom_mask, col, stats_kind
from segcat.catalog.protocol.literals import NOTHING, in_operands, operand
from segcat.catalog.protocol.model import BloomFilter, ColumnStats, ColumnType, Commit, Operation, Segment
from segcat.catalog.protocol.state import TableState
from segcat.catalog.protocol.time_semantics import PROTOCOL
from segcat.catalog.read.snapshot import Snapshot

SCENARIOS = ("bloom",)
SIZES = (10_000, 100_000)
QUICK_SIZES = (2_000,)
DISTINCT_FILTERS = 1_000
"""Filters are built once and shared: probing costs the same whatever bits they hold."""
PREDICATES: dict[str, Predicate] = {
    "user = 'u-probe'": col("user") == "u-probe",
    "id = 5": col("id") == 5,
    "day = 5 (no segment has a filter over day)": col("day") == 5,
    "user IN (10 values)": col("user").isin([f"u-{k}" for k in range(10)]),
}


def _snapshot(n: int) -> Snapshot:
    filters = [
        bloom.build(
            "user" if k % 2 == 0 else "id",
            ColumnType.STRING if k % 2 == 0 else ColumnType.INT,
            [f"u-{k}-{j}" for j in range(20)] if k % 2 == 0 else list(range(k, k + 20)),
        )
        for k in range(DISTINCT_FILTERS)
    ]
    segments = tuple(
        Segment(
            f"s{k:07d}",
            f"data/s{k:07d}.parquet",
            1_000,
            100,
            stats=(
                ColumnStats("id", ColumnType.INT, 0, 1_000_000, 0),
                ColumnStats("user", ColumnType.STRING, "u-", "u-~", 0),
                ColumnStats("day", ColumnType.INT, 0, 1_000, 0),
            ),
            bloom=filters[k % DISTINCT_FILTERS],
        )
        for k in range(n)
    )
    state = TableState("bench.pruning")
    verdict = rules.apply(
        state, 0, 0, Commit(Commit.new_id(), "bench.pruning", Operation.APPEND, -1, "w", 0, adds=segments)
    )
    assert verdict.outcome.value == "ACCEPTED", verdict
    return Snapshot(state, "/bench")


def _loop_might_match(predicate: Predicate, flt: BloomFilter, kind: ColumnType) -> bool:
    """One segment's filter, probed as the per-file loop did (equality and IN, the cases here)."""
    if isinstance(predicate, Compare):
        if predicate.op != "==" or flt.column != predicate.column:
            return True
        arg = operand(kind, predicate.value)
        return arg is None or arg.stored is NOTHING or bloom.might_contain(flt, kind, arg.stored)
    assert isinstance(predicate, IsIn)
    if flt.column != predicate.column:
        return True
    for arg in in_operands(kind, predicate.values, PROTOCOL, predicate.column):
        if arg is None or arg.stored is NOTHING or bloom.might_contain(flt, kind, arg.stored):
            return True
    return False


def per_file_loop(predicate: Predicate, segments: pa.Table, mask: pa.Array) -> pa.Array:
    """The Bloom step written plainly: every candidate with a filter, one Python call each."""
    rows = pc.indices_nonzero(pc.and_(mask, pc.is_valid(segments.column("bloom_bits")))).to_pylist()
    keep = mask.to_pylist()
    if rows:
        picked = segments.take(rows)
        columns, hashes, bits = (
            picked.column(c).to_pylist() for c in ("bloom_column", "bloom_hashes", "bloom_bits")
        )
        for row, column, num_hashes, data in zip(rows, columns, hashes, bits, strict=True):
            flt = BloomFilter(column, num_hashes, data)
            if not bloom.usable(flt):
                continue
            kind = stats_kind(segments, column)
            nulls = f"nulls:{column}"
            if kind is None or nulls not in segments.column_names or not segments.column(nulls)[row].is_valid:
                continue
            if not _loop_might_match(predicate, flt, kind):
                keep[row] = False
    return pa.array(keep, type=pa.bool_())


def run(ctx: Context) -> Results:
    sizes = QUICK_SIZES if ctx.quick else SIZES
    out: dict[str, Any] = {
        "params": {"sizes": list(sizes), "distinct_filters": DISTINCT_FILTERS},
        "bloom": [],
    }
    for n in sizes:
        progress(f"building a snapshot of {n:,} segments")
        snapshot = _snapshot(n)
        segments = snapshot.segments
        for label, predicate in PREDICATES.items():
            mask = pc.fill_null(predicate.might_match(segments), True)
            candidates = np.asarray(mask.to_numpy(zero_copy_only=False), dtype=bool)
            old = per_file_loop(predicate, segments, mask).to_pylist()
            new = bloom_mask(predicate, segments, candidates).tolist()
            assert old == new, f"{label}: the batch and the loop disagree"
            loop = measure(partial(per_file_loop, predicate, segments, mask), reps=5, fast_reps=30)
            batch = measure(partial(bloom_mask, predicate, segments, candidates), reps=5, fast_reps=30)
            whole = measure(partial(snapshot.prune, predicate), reps=5, fast_reps=30)
            out["bloom"].append(
                {
                    "segments": n,
                    "predicate": label,
                    "kept": int(sum(new)),
                    "loop": loop.to_json(),
                    "batch": batch.to_json(),
                    "prune": whole.to_json(),
                }
            )
            progress(f"{n:,} {label}: loop {loop.median_ms:.2f} ms, batch {batch.median_ms:.2f} ms")
    return out


def render(results: Results) -> str:
    """The run and, per size and predicate, the loop, the batch and the whole ``prune``."""
    rows = [
        (
            f"{r['segments']:,}",
            f"`{r['predicate']}`",
            f"{r['kept']:,}",
            ms(r["loop"]["median_ms"]),
            ms(r["batch"]["median_ms"]),
            report.ratio(r["loop"]["median_ms"], r["batch"]["median_ms"]),
            ms(r["prune"]["median_ms"]),
        )
        for r in results.get("bloom", [])
    ]
    header = (
        "Segments",
        "Predicate",
        "Kept",
        "Per-file loop",
        "Batch (`bloom_mask`)",
        "Loop ÷ batch",
        "Whole `prune`",
    )
    return "\n".join([*report.run_table(results), "", *table(header, rows, "llrrrrr")])


BENCHMARK = runner.Benchmark(
    name="pruning",
    module="bench.pruning",
    description="Snapshot.prune's Bloom step: the batch probe against a per-file loop.",
    scenarios=SCENARIOS,
    run=run,
    render=render,
)

if __name__ == "__main__":
    sys.exit(runner.main(BENCHMARK))
