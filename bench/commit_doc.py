"""The ``commit-latency`` tables: the doc block and the run report's details, from a results JSON."""

from __future__ import annotations

from typing import Any

from bench.report import count, get, ms, ratio, run_table, table, targets_table

SEQUENTIAL = (
    ("segcat_sequential", "segcat"),
    ("delta_sequential", "delta-rs"),
    ("iceberg_sequential", "pyiceberg"),
)


def render(results: dict[str, Any]) -> str:
    """The run, every scenario's latency and rate (peers beside segcat), and the targets."""
    env, params = results["environment"], results["params"]
    runs: dict[str, Any] = results["runs"]
    pk = env["packages"]
    peers = (
        f"deltalake {pk['deltalake']}, pyiceberg {pk['pyiceberg']} (SQLAlchemy {pk['SQLAlchemy']}, sqlite), "
        f"pyarrow {pk['pyarrow']}"
    )
    seq_median = get(runs, "segcat_sequential", "latency", "median_ms")
    rows = []
    label = f"{count(params['sequential_commits'])} sequential one-file appends, 1 writer, fresh table"
    for key, system in SEQUENTIAL:
        if run := runs.get(key):
            rows.append((label, system, *_cells(run), ratio(run["latency"]["median_ms"], seq_median)))
    per_writer = count(params["commits_per_writer"])
    if conc := runs.get("segcat_concurrent"):
        what = f"{conc['writers']} writer processes × {per_writer} appends, one table (aggregate rate)"
        rows.append((what, "segcat", *_cells(conc), ""))
    if cpipe := runs.get("segcat_concurrent_pipelined"):
        what = (
            f"{cpipe['writers']} writer processes × {per_writer} `append_async`, "
            f"{cpipe['details']['window']} in flight each (aggregate rate)"
        )
        rows.append((what, "segcat", *_cells(cpipe), ""))
    if pipe := runs.get("segcat_pipelined"):
        d = pipe["details"]
        what = (
            f"1 process, {count(pipe['commits'])} `append_async`, {count(d['window'])} in flight "
            f"(median of {d['runs']} runs: {', '.join(count(r) for r in d['rates'])} commits/s)"
        )
        rows.append((what, "segcat", *_cells(pipe), ""))
    if floor := runs.get("kafka_floor"):
        what = (
            f"{floor['writers']} bare producers × {per_writer} records, produce + delivery report "
            "(aggregate rate)"
        )
        rows.append((what, "Kafka floor", *_cells(floor), ""))
    return "\n".join(
        [
            *run_table(results, [("Peers", peers)]),
            "",
            *table(
                ("Scenario", "System", "Commits", "Median", "p99", "Commits/s", "Median ÷ segcat's"),
                rows,
                "llrrrrr",
            ),
            "",
            *targets_table(results["targets"]),
        ]
    )


def details(results: dict[str, Any]) -> str:
    """Growth with the table, the long log, a same-session before/after, where a commit's time
    goes and the CPU per commit."""
    runs: dict[str, Any] = results["runs"]
    conc, floor, long_run = (
        runs.get("segcat_concurrent"),
        runs.get("kafka_floor"),
        runs.get("segcat_long_log"),
    )
    out: list[str] = []
    growth = {
        name: runs[key]["details"]["growth"]
        for key, name in SEQUENTIAL
        if "growth" in (get(runs, key, "details") or {})
    }
    if growth:
        w = next(iter(growth.values()))["window"]
        out += [
            f"## Median of the first and the last {w} sequential commits",
            "",
            *table(
                ("System", f"First {w}", f"Last {w}"),
                [(n, ms(g["first_median_ms"]), ms(g["last_median_ms"])) for n, g in growth.items()],
            ),
            "",
        ]
    if long_run:
        out += _long_log(long_run)
    out += _before_after(results)
    out += _breakdown(runs, conc, long_run)
    out += _cpu(runs, conc, floor)
    if codec := results.get("codec"):
        out += [
            "## One record in-process",
            "",
            *table(
                ("Encode a commit", "Apply a record (decode + rules + image)", "Record bytes"),
                [
                    (
                        f"{codec['encode_us']:.0f} µs",
                        f"{codec['apply_us']:.0f} µs",
                        f"{codec['record_bytes']:.0f}",
                    )
                ],
                "rrr",
            ),
            "",
        ]
    return "\n".join(out)


def _cells(run: dict[str, Any]) -> tuple[str, str, str, str]:
    lat = run["latency"]
    return count(run["commits"]), ms(lat["median_ms"]), ms(lat["p99_ms"]), count(run["commits_per_s"])


BEFORE_AFTER = (
    ("segcat_sequential", "1 writer, sequential appends"),
    ("segcat_concurrent", "8 writer processes, one commit in flight each"),
    ("segcat_concurrent_pipelined", "8 writer processes, pipelined"),
    ("segcat_pipelined", "1 process, pipelined appends"),
    ("kafka_floor", "Kafka floor (bare producers)"),
)


def _before_after(results: dict[str, Any]) -> list[str]:
    """This run beside a run of the previous code in the same session (``--before``)."""
    before = results.get("before")
    if not before:
        return []
    runs = results["runs"]
    rows = []
    for key, label in BEFORE_AFTER:
        if key not in runs:
            continue
        old, new = before["runs"].get(key), runs[key]
        rows.append(
            (
                label,
                count(old["commits_per_s"]) if old else "–",
                ms(old["median_ms"]) if old else "–",
                count(new["commits_per_s"]),
                ms(new["latency"]["median_ms"]),
            )
        )
    return [
        f"## Before (tree {before.get('tree')}, `{before['results_file']}`) / after",
        "",
        *table(
            ("Scenario", "Before: commits/s", "Before: median", "After: commits/s", "After: median"), rows
        ),
        "",
    ]


def _long_log(run: dict[str, Any]) -> list[str]:
    d, n = run["details"], run["commits"]
    w = d["window"]
    windows = (
        (f"1–{count(w)}", d["first_window"]),
        (f"{count(n - w + 1)}–{count(n)}", d["last_window"]),
        (f"all {count(n)}", run["latency"]),
    )
    out = [
        f"## One writer, {count(n)} sequential appends on one table",
        "",
        *table(
            ("Commits", "Median", "p99", "Mean"),
            [(what, ms(s["median_ms"]), ms(s["p99_ms"]), ms(s["mean_ms"])) for what, s in windows],
        ),
        "",
    ]
    if cold := d.get("cold_writer"):
        out += [
            *table(
                ("A new writer on the log", "Log records", "Open", "First commit (replays the log)"),
                [("", count(cold["log_records"]), ms(cold["open_ms"]), ms(cold["first_commit_ms"]))],
            ),
            "",
        ]
    return out


def _breakdown(
    runs: dict[str, Any], conc: dict[str, Any] | None, long_run: dict[str, Any] | None
) -> list[str]:
    labels = {
        "segcat_sequential": "1 writer",
        "segcat_concurrent": f"{conc['writers'] if conc else '?'} writers",
        "segcat_long_log": f"1 writer, {count(long_run['commits']) if long_run else '?'}-commit log",
    }
    rows = [
        (
            label,
            ms(runs[key]["latency"]["median_ms"]),
            ms(b["produce_median_ms"]),
            ms(b["catchup_median_ms"]),
            ms(b["other_median_ms"]),
            ms(b["catchup_p99_ms"]),
            f"{b['records_per_catchup_mean']:.1f} / {b['records_per_catchup_max']}",
        )
        for key, label in labels.items()
        if (b := get(runs, key, "details", "breakdown"))
    ]
    if not rows:
        return []
    header = (
        "Writers",
        "Commit",
        "Produce (send → delivery report)",
        "Catch-up (tail to own record, judge)",
        "Other",
        "Catch-up p99",
        "Records per catch-up (mean / max)",
    )
    out = ["## Where a segcat commit's time goes (medians)", "", *table(header, rows), ""]
    if conc and (per := conc["details"].get("per_writer_commits_per_s")):
        out += [
            *table(
                ("Concurrent writers", "Per-writer commits/s", "Start skew after the barrier"),
                [
                    (
                        str(conc["writers"]),
                        f"{min(per):,.0f}–{max(per):,.0f}",
                        f"{conc['details']['start_skew_ms']:.1f} ms",
                    )
                ],
            ),
            "",
        ]
    return out


def _cpu(runs: dict[str, Any], conc: dict[str, Any] | None, floor: dict[str, Any] | None) -> list[str]:
    labels = {
        "segcat_sequential": "segcat, 1 writer",
        "segcat_concurrent": f"segcat, {conc['writers'] if conc else '?'} writers",
        "segcat_concurrent_pipelined": "segcat, writers pipelining",
        "segcat_pipelined": "segcat, 1 pipelining writer",
        "kafka_floor": f"Kafka floor, {floor['writers'] if floor else '?'} bare producers",
        "segcat_long_log": "segcat, long log",
        "delta_sequential": "delta-rs",
        "iceberg_sequential": "pyiceberg",
    }
    rows = [
        (
            label,
            f"{cpu['machine_busy_pct']:.0f} %" if "machine_busy_pct" in cpu else "–",
            ms(cpu.get("machine_cpu_ms_per_commit")),
            ms(cpu.get("writer_cpu_ms_per_commit")),
            ms(cpu.get("broker_cpu_ms_per_commit")) if label.startswith(("segcat", "Kafka")) else "–",
        )
        for key, label in labels.items()
        if (cpu := get(runs, key, "details", "cpu"))
    ]
    if not rows:
        return []
    header = (
        "Scenario",
        "Machine busy",
        "Machine CPU (all processes)",
        "Client CPU (committing processes)",
        "Broker CPU (Kafka JVM)",
    )
    return ["## CPU per commit", "", *table(header, rows), ""]
