"""Markdown for docs/BENCHMARKS.md, rendered from a results JSON.

Each benchmark owns one section between ``<!-- <name>:start -->`` and ``<!-- <name>:end -->``;
``update_section`` replaces only that section (or appends it), so several benchmarks can
share the file. The section is a pure function of the results JSON, so it can be rendered
again from a saved run (``python -m bench.commit_latency --render bench/results/<file>.json``).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

DOC_HEADER = """# Benchmarks

Measured figures for segcat, one section per benchmark. Each section is written by the
benchmark script named in it (between its `<!-- …:start -->` / `<!-- …:end -->` markers);
edit the script, not the section. Raw results are kept under `bench/results/` (git-ignored).
"""

TARGET_MEDIAN_MS = 4.0
TARGET_DELTA_RATIO = 3.0
TARGET_CONCURRENT_CPS = 2000.0


# --------------------------------------------------------------------------- file handling


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:start -->", f"<!-- {name}:end -->"


def update_section(doc: Path, name: str, body: str) -> None:
    """Replace (or append) the ``name`` section of ``doc``; the rest of the file is kept."""
    start, end = markers(name)
    block = f"{start}\n{body.strip()}\n{end}\n"
    text = doc.read_text() if doc.exists() else DOC_HEADER
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end) + r"\n?", re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + block
    doc.parent.mkdir(parents=True, exist_ok=True)
    tmp = doc.with_name(doc.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(doc)


# --------------------------------------------------------------------------- evaluation


def _median(results: dict[str, Any], key: str) -> float | None:
    run = results["runs"].get(key)
    return None if run is None else float(run["latency"]["median_ms"])


def ratios(results: dict[str, Any]) -> dict[str, float | None]:
    seg = _median(results, "segcat_sequential")
    out: dict[str, float | None] = {}
    for peer in ("delta", "iceberg"):
        other = _median(results, f"{peer}_sequential")
        out[f"{peer}_over_segcat_median"] = (
            None if seg is None or other is None or seg == 0 else round(other / seg, 2)
        )
    return out


def targets(results: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's three targets, each with the measured value and whether it was met."""
    out: list[dict[str, Any]] = []
    seg = _median(results, "segcat_sequential")
    if seg is not None:
        out.append(
            {
                "target": f"segcat median commit latency ≤ {TARGET_MEDIAN_MS:g} ms (1 writer)",
                "measured": f"{seg:.2f} ms",
                "met": seg <= TARGET_MEDIAN_MS,
            }
        )
    ratio = results.get("ratios", {}).get("delta_over_segcat_median")
    if ratio is not None:
        out.append(
            {
                "target": f"segcat ≥ {TARGET_DELTA_RATIO:g}× faster than delta-rs (median)",
                "measured": f"{ratio:.1f}×",
                "met": ratio >= TARGET_DELTA_RATIO,
            }
        )
    conc = results["runs"].get("segcat_concurrent")
    if conc is not None:
        cps = float(conc["commits_per_s"])
        out.append(
            {
                "target": f"≥ {TARGET_CONCURRENT_CPS:,.0f} commits/s with {conc['writers']} writer processes",
                "measured": f"{cps:,.0f} commits/s",
                "met": cps >= TARGET_CONCURRENT_CPS,
            }
        )
    return out


# --------------------------------------------------------------------------- rendering


def _ms(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.2f} ms" if value < 100 else f"{value:,.0f} ms"


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def render(results: dict[str, Any]) -> str:
    env = results["environment"]
    params = results["parameters"]
    runs: dict[str, Any] = results["runs"]
    quick = results.get("mode") == "quick"
    lines: list[str] = []
    add = lines.append

    add("## Commit latency: segcat vs delta-rs vs pyiceberg")
    add("")
    if quick:
        add("> **Quick (smoke-test) mode: reduced counts; these are not the reference figures.**")
        add("")
    add(
        f"Measured {env['date_utc']} on one machine, all scenarios in one run "
        f"(`{results['results_file']}` holds every per-commit sample). Reproduce from the repository "
        "root, with the local stack running or startable (`segcat stack up`):"
    )
    add("")
    add("```sh")
    add(results["command"])
    add("```")
    add("")

    # ---- machine
    add("### Machine and software")
    add("")
    add(_row("", ""))
    add(_row("---", "---"))
    add(_row("CPU", f"{env['cpu']}, `nproc` = {env['nproc']}"))
    add(_row("Memory (`free -h`)", env["memory"]))
    add(_row("Kernel", env["kernel"]))
    add(_row("Python", env["python"]))
    add(_row("Java", env["java"].replace('"', "")))
    add(_row("Kafka", env["kafka"]))
    pk = env["packages"]
    add(
        _row(
            "Clients",
            f"confluent-kafka {pk['confluent-kafka']} (librdkafka {env['librdkafka']}), "
            f"fastavro {pk['fastavro']}",
        )
    )
    add(
        _row(
            "Peers",
            f"deltalake {pk['deltalake']}, pyiceberg {pk['pyiceberg']} "
            f"(SQLAlchemy {pk['SQLAlchemy']}, sqlite), pyarrow {pk['pyarrow']}",
        )
    )
    add(_row("Tree", env["git"]))
    add(_row("Load average at start", ", ".join(f"{v:.2f}" for v in env["loadavg_at_start"])))
    add("")

    # ---- main table
    add("### Results")
    add("")
    add(_row("Scenario", "System", "Timed commits", "Median", "p99", "Commits/s"))
    add(_row("---", "---", "---:", "---:", "---:", "---:"))
    seq_label = f"{_n(params['sequential_commits'])} sequential one-file appends, 1 writer, fresh table"
    for key, system in (
        ("segcat_sequential", "**segcat**"),
        ("delta_sequential", "delta-rs"),
        ("iceberg_sequential", "pyiceberg"),
    ):
        run = runs.get(key)
        if run is None:
            continue
        lat = run["latency"]
        add(
            _row(
                seq_label,
                system,
                _n(run["commits"]),
                _ms(lat["median_ms"]),
                _ms(lat["p99_ms"]),
                _n(run["commits_per_s"]),
            )
        )
    conc = runs.get("segcat_concurrent")
    if conc is not None:
        lat = conc["latency"]
        add(
            _row(
                f"{conc['writers']} writer processes × {_n(params['commits_per_writer'])} appends, one table",
                "**segcat**",
                _n(conc["commits"]),
                _ms(lat["median_ms"]),
                _ms(lat["p99_ms"]),
                f"**{_n(conc['commits_per_s'])}** (aggregate)",
            )
        )
    add("")
    rat = results.get("ratios", {})
    parts = []
    if rat.get("delta_over_segcat_median") is not None:
        parts.append(f"delta-rs median / segcat median = **{rat['delta_over_segcat_median']:.1f}×**")
    if rat.get("iceberg_over_segcat_median") is not None:
        parts.append(f"pyiceberg median / segcat median = **{rat['iceberg_over_segcat_median']:.1f}×**")
    if parts:
        add("Ratios: " + "; ".join(parts) + ".")
        add("")

    # ---- growth within the 1,000-commit runs
    growth = [
        (name, runs[key])
        for key, name in (
            ("segcat_sequential", "segcat"),
            ("delta_sequential", "delta-rs"),
            ("iceberg_sequential", "pyiceberg"),
        )
        if key in runs and "growth" in runs[key]["details"]
    ]
    if growth:
        g0 = growth[0][1]["details"]["growth"]
        add(
            f"Within those runs, median of the first vs the last {g0['window']} commits "
            "(does a commit get dearer as the table grows?):"
        )
        add("")
        add(_row("System", f"First {g0['window']}", f"Last {g0['window']}"))
        add(_row("---", "---:", "---:"))
        for name, run in growth:
            g = run["details"]["growth"]
            add(_row(name, _ms(g["first_median_ms"]), _ms(g["last_median_ms"])))
        add("")

    # ---- log length
    long_run = runs.get("segcat_long_log")
    if long_run is not None:
        d = long_run["details"]
        w = d["window"]
        n = long_run["commits"]
        add(f"### Log-length independence (segcat, one writer, {_n(n)} sequential appends on one table)")
        add("")
        add(_row("Commits", "Median", "p99", "Mean"))
        add(_row("---", "---:", "---:", "---:"))
        add(
            _row(
                f"1–{_n(w)}",
                _ms(d["first_window"]["median_ms"]),
                _ms(d["first_window"]["p99_ms"]),
                _ms(d["first_window"]["mean_ms"]),
            )
        )
        add(
            _row(
                f"{_n(n - w + 1)}–{_n(n)}",
                _ms(d["last_window"]["median_ms"]),
                _ms(d["last_window"]["p99_ms"]),
                _ms(d["last_window"]["mean_ms"]),
            )
        )
        add(
            _row(
                f"all {_n(n)}",
                _ms(long_run["latency"]["median_ms"]),
                _ms(long_run["latency"]["p99_ms"]),
                _ms(long_run["latency"]["mean_ms"]),
            )
        )
        add("")
        change = d["last_window"]["median_ms"] / d["first_window"]["median_ms"] - 1
        add(
            f"Last-window median vs first-window median: {change:+.0%}. "
            f"Throughput over the whole run: {_n(long_run['commits_per_s'])} commits/s."
        )
        cold = d.get("cold_writer")
        if cold:
            add(
                f"For contrast, a *new* writer opened on that {_n(cold['log_records'])}-record log took "
                f"{_ms(cold['open_ms'])} to open and {_ms(cold['first_commit_ms'])} for its first commit, "
                "which replays the whole log: a long-lived writer pays that once, not per commit."
            )
        add("")

    # ---- targets
    add("### Targets")
    add("")
    add(_row("Target", "Measured", "Met?"))
    add(_row("---", "---:", "---"))
    for t in results.get("targets", []):
        add(_row(t["target"], t["measured"], "yes" if t["met"] else "**no**"))
    add("")

    # ---- breakdown
    rows = [
        (label, runs[key]["details"].get("breakdown"), runs[key])
        for key, label in (
            ("segcat_sequential", "1 writer"),
            ("segcat_concurrent", f"{conc['writers'] if conc else '?'} writers"),
            ("segcat_long_log", f"1 writer, {_n(long_run['commits']) if long_run else '?'}-commit log"),
        )
        if key in runs
    ]
    rows = [r for r in rows if r[1]]
    if rows:
        add("### Where a segcat commit's time goes")
        add("")
        add(
            "Medians per commit. *Produce*: send → delivery report (acks=all). *Catch-up*: the "
            "writer's tailer fetching and replaying the log up to its own record to judge it "
            "(DESIGN §4). *Other*: validation, Avro encoding, bookkeeping."
        )
        add("")
        add(
            _row(
                "Writers",
                "Commit",
                "Produce",
                "Catch-up",
                "Other",
                "Catch-up p99",
                "Records applied per catch-up (mean / max)",
            )
        )
        add(_row("---", "---:", "---:", "---:", "---:", "---:", "---:"))
        for label, b, run in rows:
            assert b is not None
            add(
                _row(
                    label,
                    _ms(run["latency"]["median_ms"]),
                    _ms(b["produce_median_ms"]),
                    _ms(b["catchup_median_ms"]),
                    _ms(b["other_median_ms"]),
                    _ms(b["catchup_p99_ms"]),
                    f"{b['records_per_catchup_mean']:.1f} / {b['records_per_catchup_max']}",
                )
            )
        add("")
        if conc is not None and conc["details"].get("per_writer_commits_per_s"):
            per = conc["details"]["per_writer_commits_per_s"]
            add(
                f"With {conc['writers']} writers: per-writer rates {min(per):,.0f}–{max(per):,.0f} "
                f"commits/s; start skew after the barrier {conc['details']['start_skew_ms']:.1f} ms; "
                f"load average {_load(conc)}."
            )
            add("")

    notes = results.get("notes")
    if notes:
        add("### Observations")
        add("")
        for note in notes:
            add(f"- {note}")
        add("")

    add("### Method")
    add("")
    for item in METHOD:
        add(f"- {item}")
    return "\n".join(lines)


def _load(run: dict[str, Any]) -> str:
    before, after = run.get("loadavg_before"), run.get("loadavg_after")
    if not before or not after:
        return "n/a"
    return f"{before[0]:.2f} before → {after[0]:.2f} after (1-minute)"


METHOD = [
    "**segcat**: `TableWriter.append([Segment(...)])`, one fresh segment with two typed column "
    "stats (`id` INT, `name` STRING) and a partition per commit; latency = wall time of the call, "
    "which returns only after the commit's verdict is known (produce with `acks=all` + "
    "idempotence, delivery report, catch-up fetch and deterministic validation). Topic created "
    "by `Catalog.create_table` with the DESIGN §2 settings.",
    "**Concurrent**: writer processes started with `multiprocessing` (spawn); each opens its "
    "writer and makes one warm-up commit, then all wait on a barrier; the aggregate rate is all "
    "timed commits / (last writer's end − first writer's start). Latencies of all writers are "
    "pooled for the median and p99.",
    '**delta-rs**: `DeltaTable.create_write_transaction([AddAction(...)], mode="append")` on a '
    "local directory table, one long-lived `DeltaTable` object, stats JSON in each add action, "
    "default post-commit hook (checkpoint every 100 versions). The Parquet files are written "
    "before the timed loop.",
    "**pyiceberg**: `SqlCatalog` on a sqlite file with a local warehouse directory; "
    "`table.add_files([path])` per commit with its defaults (reads the file's footer for stats, "
    "checks for duplicate files, writes manifest + manifest list + metadata JSON, updates the "
    "catalog row). Files written before the timed loop.",
    "Every system gets one untimed warm-up commit. All data and logs live on the same local "
    "ext4 disk; none of the three fsyncs per commit (Kafka relies on replication for "
    "durability, here replication factor 1), so the comparison is of commit protocols, not of "
    "disks. Production Kafka with replication factor 3 adds a replication round trip per commit.",
    "p99 is nearest-rank over all timed commits. The machine is shared (other processes may "
    "run); load averages are recorded in the results JSON.",
]
