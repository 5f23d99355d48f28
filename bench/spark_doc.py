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
        ("Peers", f"deltalake {pk['deltalake']}, pyarrow {pk['pyarrow']}"),
    ]
    out = run_table(results, rows)
    if a := results.get("append"):
        out += ["", *_append(a)]
    if s := results.get("stream"):
        out += ["", *_stream(s)]
    return "\n".join(out)


def details(results: dict[str, Any]) -> str:
    """Where segcat's append time goes, the micro-batches' phases, and any same-session baseline."""
    out: list[str] = []
    if a := results.get("append"):
        out += _append_parts(a)
    if s := results.get("stream"):
        out += _stream_details(s)
    return "\n".join(out)


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


def _stream(s: dict[str, Any]) -> list[str]:
    if "variants" not in s:  # a results file from before the variants existed
        t = s["latency"]
        rows = [("segcat source", str(t["count"]), "–", "–", "–", "–", ms(t["median_ms"]))]
    else:
        rows = [(v["label"], *_lat_cells(v)) for v in s["variants"].values()]
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
