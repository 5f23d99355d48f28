"""The ``spark-overhead`` tables: the doc block and the run report's details, from a results JSON."""

from __future__ import annotations

from typing import Any

from bench import report
from bench.report import count, mb, run_table, table


def ms(value: float | None, unit: str = " ms") -> str:
    """Durations as these tables print them: one decimal below 100 ms, whole ms above."""
    return report.ms(value, fine=1, mid=1, unit=unit)


def render(results: dict[str, Any]) -> str:
    """The run, the append beside plain Spark, delta-rs and the Python-worker floor, and the
    stream's commit → row latency per variant."""
    pk = results["environment"]["packages"]
    rows = [
        ("Spark", f"pyspark {results['pyspark']}, `local[2]` (`si.local_session()`)"),
        (
            "Peers",
            (f"deltalake {pk['deltalake']}, " if results.get("append") else "") + f"pyarrow {pk['pyarrow']}",
        ),
        *([("Note", results["note"])] if results.get("note") else []),
    ]
    out = run_table(results, rows)
    if a := results.get("append"):
        out += ["", *_append(a)]
    if s := results.get("stream"):
        out += ["", *_stream(s)]
    if b := results.get("backfill"):
        out += ["", *_backfill(b)]
    if results.get("targets"):
        out += ["", *report.targets_table(results["targets"], ms)]
    return "\n".join(out)


def details(results: dict[str, Any]) -> str:
    """Where segcat's append time goes, the micro-batches' phases, and any same-session baseline."""
    out: list[str] = []
    if a := results.get("append"):
        out += _append_parts(a)
    if s := results.get("stream"):
        out += _stream_details(s)
    if b := results.get("backfill"):
        out += _backfill_details(b)
    return "\n".join(out)


TARGET_ROWS_P50_MS = 150.0
"""Issue 22: commit → rows of that commit in a memory sink, 100 ms trigger, median."""
TARGET_BACKFILL_RATIO = 1.0
"""Issue 22: the segcat rows stream's backfill at least as fast as ``readStream.parquet``."""


def evaluate(results: dict[str, Any]) -> None:
    """The issue's targets for the rows stream, from whichever scenarios ran."""
    targets = []
    p50 = report.get(results, "stream", "variants", "rows", "latency_from_log", "median_ms")
    if p50 is not None:
        targets.append(
            report.target("rows stream: commit → rows in a memory sink, p50", p50, TARGET_ROWS_P50_MS, "ms")
        )
    queries = report.get(results, "backfill", "queries") or {}
    for n in report.get(results, "backfill", "params", "max_files_per_trigger") or []:
        ours = report.get(queries, f"segcat/{n}", "rows_per_s")
        theirs = report.get(queries, f"parquet/{n}", "rows_per_s")
        if ours is not None and theirs:
            what = f"backfill rows/s, segcat ÷ `readStream.parquet` (maxFilesPerTrigger {n:,})"
            targets.append(report.target(what, round(ours / theirs, 2), TARGET_BACKFILL_RATIO, "×"))
    results["targets"] = targets


def _append(a: dict[str, Any]) -> list[str]:
    r, files = a["results"], a["files_written"]

    def write(label: str, key: str) -> tuple[str, ...]:
        f = files.get(key) or {"files": 0, "bytes": 0}
        return (label, str(f["files"]), mb(f["bytes"]), ms(r[key]["median_ms"]), ms(r[key]["p99_ms"]))

    per = count(a["rows"] // a["partitions"])
    return table(
        (
            f"Append of {count(a['rows'])} rows ({a['partitions']} partitions × {per})",
            "Files",
            "Bytes",
            "Median",
            "p99",
        ),
        [
            write('segcat `si.write(df, t, mode="append")`', "segcat"),
            write("plain Spark `df.write.parquet(path)` (zstd)", "plain"),
            write("delta-rs `write_deltalake(path, arrow)` (zstd)", "delta"),
            write("floor: `df.mapInArrow(...)` writing pyarrow zstd files, no stats, no catalog", "arrow"),
        ],
    )


def _append_parts(a: dict[str, Any]) -> list[str]:
    r = a["results"]

    def part(label: str, key: str) -> tuple[str, str, str]:
        return label, f"{r[key]['median_ms']:.2f} ms", f"{r[key]['p99_ms']:.2f} ms"

    return [
        "## Where segcat's append time goes (`si.stage_write` + `commit()`, separate repetitions)",
        "",
        *table(
            ("Part", "Median", "p99"),
            [
                part(
                    "stage: open the writer, the Spark job (pyarrow writes, footer stats), plan",
                    "segcat_stage",
                ),
                part("open a table handle on the empty table + `refresh()`", "writer_open"),
                part("the write's one commit, on the writer `si.write` opens", "segcat_commit"),
                part("a second one-segment commit on that connected writer", "segcat_commit_warm"),
                part("footer stats alone, sequential on the driver", "stats_driver"),
            ],
        ),
        "",
        *table(
            ("`df.toArrow()` for delta-rs (not timed in its row)",), [(ms(a["to_arrow_ms_untimed"]),)], "r"
        ),
        "",
    ]


def _lat_cells(v: dict[str, Any]) -> tuple[str, ...]:
    """Count, then p50 / p90 / p99 / max from the log's append time, then p50 from ``append``'s return."""
    log = v.get("latency_from_log")
    ret = v["latency"]
    first = (ms(log[k]) for k in ("median_ms", "p90_ms", "p99_ms", "max_ms")) if log else ("–",) * 4
    return (str(ret["count"]), *first, ms(ret["median_ms"]))


DOC_VARIANTS = ("rows", "segcat", "segcat_async")
"""The variants the doc block shows (the report has every one)."""


def _variant_rows(variants: dict[str, Any], keys: tuple[str, ...] | None = None) -> list[tuple[str, ...]]:
    """One row per variant: its latencies, or the error that stopped it."""
    rows: list[tuple[str, ...]] = []
    for key, v in variants.items():
        if keys is not None and key not in keys:
            continue
        if v.get("latency") is None:
            rows.append((v["label"], "0", f"failed: {v.get('error') or 'not measured'}", "–", "–", "–", "–"))
        else:
            rows.append((v["label"], *_lat_cells(v)))
    return rows


def _stream(s: dict[str, Any]) -> list[str]:
    if "variants" not in s:  # a results file from before the variants existed
        t = s["latency"]
        rows: list[tuple[str, ...]] = [
            ("segcat source", str(t["count"]), "–", "–", "–", "–", ms(t["median_ms"]))
        ]
    else:
        rows = _variant_rows(s["variants"], DOC_VARIANTS)
    return table(
        (
            f"Commit → row in a memory sink, {s['trigger_ms']} ms trigger",
            "Commits",
            "p50",
            "p90",
            "p99",
            "Max",
            "p50 from `append`'s return",
        ),
        rows,
    )


PHASE_ORDER = ("latestOffset", "walCommit", "queryPlanning", "getBatch", "addBatch", "commitOffsets")


def _phase_cells(phases: dict[str, Any]) -> list[str]:
    keys = (*PHASE_ORDER, "triggerExecution")
    return [ms(phases[k]["median_ms"], "") if k in phases else "–" for k in keys]


def _stream_details(s: dict[str, Any]) -> list[str]:
    rows: list[tuple[str, ...]] = []
    for v in (s.get("variants") or {}).values():
        if v.get("latency") is not None:
            rows.append((v["label"], *_phase_cells(v["batch_phases_ms"])))
    for key, ref in s.get("spark_reference", {}).items():
        manager = (
            "Spark's own checkpoint manager"
            if key == "spark_defaults"
            else "`FileSystemBasedCheckpointFileManager`"
        )
        rows.append(
            (f"Spark alone: `rate-micro-batch` → memory sink, {manager}", *_phase_cells(ref["phases_ms"]))
        )
    poll = s["sink_poll_cost"]
    out = [
        f"## Commit → row in a memory sink, every variant ({s.get('rows_per_commit', '–')} rows per commit)",
        "",
        *table(
            ("Variant", "Commits", "p50", "p90", "p99", "Max", "p50 from `append`'s return"),
            _variant_rows(s.get("variants") or {}),
        ),
        "",
        "## Micro-batches that carried rows: Spark's `durationMs` per phase (medians, ms)",
        "",
        *table(("Query", *(f"`{k}`" for k in PHASE_ORDER), "`triggerExecution`"), rows),
        "",
        *table(
            ("One `spark.sql(...).collect()` of a one-row view", "Median", "p99"),
            [("", ms(poll["median_ms"]), ms(poll["p99_ms"]))],
        ),
        "",
    ]
    for b in s.get("baselines", []):
        old = b.get("variants") or {"segcat": {"label": "segcat source", **b}}
        out += [
            f"## Baseline: `{b['results_file']}` (tree {b['tree']}, {b['started']})",
            "",
            *table(
                ("Variant", "Commits", "p50", "p90", "p99", "Max", "p50 from `append`'s return"),
                [(v.get("label", key), *_lat_cells(v)) for key, v in old.items()],
            ),
            "",
        ]
    return out


def _backfill(b: dict[str, Any]) -> list[str]:
    d = b["dataset"]
    names = {
        "segcat": '`readStream.format("segcat")` (initial snapshot)',
        "parquet": "`readStream.parquet(<data dir>)`",
    }
    segcat_rate = {
        q["max_files_per_trigger"]: q["rows_per_s"] for q in b["queries"].values() if q["system"] == "segcat"
    }
    rows = []
    for q in b["queries"].values():
        n = q["max_files_per_trigger"]
        if q["wall"] is None:
            rows.append(
                (names[q["system"]], f"{n:,}", "–", f"failed: {q['error'] or 'not measured'}", "–", "–")
            )
            continue
        rows.append(
            (
                names[q["system"]],
                f"{n:,}",
                str(q["batches"]),
                report.ms(q["wall"]["median_ms"], seconds_from=1_000),
                count(q["rows_per_s"]),
                report.ratio(q["rows_per_s"], segcat_rate.get(n)),
            )
        )
    return table(
        (
            f"Backfill of {count(d['rows'])} rows in {count(d['files'])} files ({mb(d['bytes'])}), "
            "`Trigger.AvailableNow` → `noop`",
            "maxFilesPerTrigger",
            "Batches",
            "Median",
            "Rows/s",
            "Rows/s ÷ segcat's",
        ),
        rows,
    )


BACKFILL_PHASES = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets")


def _backfill_details(b: dict[str, Any]) -> list[str]:
    """Each query's runs (time to the first trigger, the sum of its batches' phases), the floors."""
    d, floors = b["dataset"], b.get("floors") or {}
    rows = []
    for key, q in b["queries"].items():
        for i, r in enumerate(q["runs"]):
            first = r.get("to_first_trigger_ms")
            rows.append(
                (
                    f"{key} run {i + 1}",
                    f"{r['wall_ms'] / 1000:,.1f} s",
                    str(r["batches"]),
                    "–" if first is None else f"{first / 1000:,.2f}",
                    *(f"{r['phases_ms'].get(p, 0) / 1000:,.2f}" for p in BACKFILL_PHASES),
                )
            )
        if q.get("error"):
            rows.append((f"{key}", "failed", q["error"], "–", *("–" for _ in BACKFILL_PHASES)))
    written = "cached" if d["written_s"] is None else f"written by this run in {d['written_s']:,.1f} s"
    out = [
        "## Backfill: every run; time to its first trigger and its micro-batches' `durationMs` per phase (s)",
        "",
        *table(
            ("Query", "Wall", "Batches", "to first trigger", *(f"`{p}`" for p in BACKFILL_PHASES)),
            rows,
        ),
        "",
        f"Data set: `{d['root']}` ({written}), schema `{d['schema']}`.",
        "",
    ]
    labels = {
        "batch_segcat": '`spark.read.format("segcat")` → `noop` (batch: no streaming machinery)',
        "batch_parquet": "`spark.read.parquet(<data dir>)` → `noop`",
        "map_in_arrow": "`mapInArrow`: plain pyarrow per file in Python workers, no segcat code → `noop`",
        "map_in_arrow_coalesced": "the same, consecutive files' batches merged to 131,072 rows",
        "map_in_arrow_jvm_tasks": (
            f"the same `mapInArrow` in the JVM reader's number of tasks ({floors.get('jvm_partitions', '–')})"
        ),
    }
    frows = [
        (label, report.ms(floors[k]["wall"]["median_ms"], seconds_from=1_000), count(floors[k]["rows_per_s"]))
        for k, label in labels.items()
        if k in floors
    ]
    for k, label in (
        ("pyarrow", "one process, no Spark: `pyarrow.parquet.read_table` of every file"),
        ("read_rows", "one process, no Spark: segcat's `snapshot_reads` + `read_rows` (a task's code)"),
    ):
        if f := (floors.get("in_process") or {}).get(k):
            frows.append(
                (label, report.ms(f["wall"]["median_ms"], seconds_from=1_000), count(f["rows_per_s"]))
            )
    if frows:
        out += [
            *table(
                (f"Where the time goes ({floors.get('partitions', '–')} partitions)", "Median", "Rows/s"),
                frows,
            ),
            "",
        ]
    return out
