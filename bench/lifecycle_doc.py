"""The ``lifecycle`` tables: the doc block and the run report's details, from a results JSON."""

from __future__ import annotations

from typing import Any

from bench import report
from bench.report import run_table, table

SPLIT_LABELS = {
    "snapshots": "the two head snapshots (`Table.snapshot`, no key frame or Redis: each replays the log)",
    "replay": "the history replay (`_History.catch_up`, before and after the listing: Kafka, Avro, rules)",
    "recheck": "the log read again before each batch of deletes (`Recheck.refresh`)",
    "delete": "deleting (`_delete`: batches of 1,000 on 4 threads, `pyarrow.fs` `delete_file`)",
    "listing": "listing `data/` (`ObjectStore.list_files`)",
    "dedupe": "`_dedupe`",
    "record": "`_record` (writes `_catalog/_vacuum`)",
}
REST = "the rest (per-file classification: the needed set, a key per path, one `Doomed` per file)"


def s(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f} s"


def mb(n: float | None) -> str:
    if n is None:
        return "–"
    return f"{n / 1e3:,.1f} kB" if n < 1e6 else f"{n / 1e6:,.1f} MB"


def rss(value: float | None) -> str:
    return "–" if value is None else f"{value:,.0f} MB"


def rate(n: float | None) -> str:
    return "–" if n is None else f"{n:,.0f}"


def render(results: dict[str, Any]) -> str:
    """The run, then the vacuum, the orphan scan beside Spark and its floors, and recovery and
    topic size before and after pruning."""
    rows = [("Spark", f"pyspark {results.get('pyspark', '?')}, `local[2]` (`si.local_session()`)")]
    lines = run_table(results, rows)
    if v := results.get("vacuum"):
        lines += ["", *_vacuum(v)]
    if o := results.get("orphans"):
        lines += ["", *_orphans(o)]
    if r := results.get("recovery"):
        lines += [
            "",
            *report.table(
                ("Recovery and topic size", "Before pruning", "After pruning"), _state_rows(r), "lrr"
            ),
        ]
    if (digest := results.get("source_digest")) and digest.get("changed"):
        lines += ["", f"> **segcat's source changed during this run** ({digest['start']} → {digest['end']})."]
    return "\n".join(lines)


def details(results: dict[str, Any]) -> str:
    """Set-ups, where each scan's time goes, and the profiles."""
    out: list[str] = []
    if v := results.get("vacuum"):
        out += _vacuum_details(v)
    if o := results.get("orphans"):
        out += _orphans_details(o)
    if r := results.get("recovery"):
        out += _recovery_details(r)
    return "\n".join(out)


# --------------------------------------------------------------------------- 1. vacuum


def _vacuum(v: dict[str, Any]) -> list[str]:
    runs = v["runs"]
    rows = [
        ("wall time", s(v["median_s"]), ", ".join(s(r["seconds"]) for r in runs)),
        (
            "files deleted per second",
            rate(v["files_per_s"]),
            ", ".join(rate(v["files"] / r["seconds"]) for r in runs),
        ),
        ("process CPU (all threads)", s(v["median_cpu_s"]), ", ".join(s(r["cpu_s"]) for r in runs)),
        (
            "peak RSS during the call (`VmHWM`)",
            rss(v["peak_rss_mb"]),
            ", ".join(rss(r["peak_rss_mb"]) for r in runs),
        ),
        (
            "floor: a bare `os.unlink` loop, files/s",
            rate(v["unlink_floor_files_per_s"]),
            s(v["unlink_floor_s"]),
        ),
    ]
    return table((f"First vacuum of {v['files']:,} dropped files", "Median", "Runs"), rows, "lrl")


def _split_rows(split: dict[str, float], total: float) -> list[tuple[str, str, str]]:
    parts = {SPLIT_LABELS.get(k, k): v for k, v in split.items() if v >= 0.005}
    parts[REST] = total - sum(split.values())
    ordered = sorted(parts.items(), key=lambda kv: -kv[1])
    return [(label, s(value, 2), f"{100 * value / total:.0f} %") for label, value in ordered]


def _vacuum_details(v: dict[str, Any]) -> list[str]:
    setup = v["setup"]
    rows = [
        ("empty files in directories", f"{v['files']:,} in {v['dirs']:,}", s(setup["create_files_median_s"])),
        (
            "APPEND commits registering them (bytes each)",
            f"{setup['append_commits']:,} ({setup['append_commit_bytes'] / 1e3:,.0f} kB)",
            s(setup["append_s"]),
        ),
        (
            "DELETE commits dropping them (bytes each)",
            f"{setup['delete_commits']:,} ({setup['delete_commit_bytes'] / 1e3:,.0f} kB)",
            s(setup["delete_s"]),
        ),
        ("RSS when the call starts", rss(v["rss_start_mb"]), ""),
        ("`ru_maxrss` of the vacuum process", rss(v.get("ru_maxrss_mb")), ""),
    ]
    out = [
        "## Vacuum: set-up",
        "",
        *table(("", "count", "time"), rows, "lrr"),
        "",
        "## Vacuum: the median run by step (bench-only timers)",
        "",
        *table(("step", "time", "share"), _split_rows(v["median_split_s"], v["median_s"])),
        "",
    ]
    if v.get("profile"):
        out += [
            f"## cProfile: one vacuum ({s(v['profiled_s'])} under the profiler), by own time",
            "",
            *report.profile_table(v["profile"], "by_own_time", 12),
            "",
            "## cProfile: the same, by cumulative time",
            "",
            *report.profile_table(v["profile"], "by_cumulative_time", 12),
            "",
        ]
    return out


# --------------------------------------------------------------------------- 2. orphans


def _orphans(o: dict[str, Any]) -> list[str]:
    ip, sp, floors, files = o["in_process"], o["spark"], o["floors"], o["files"]

    def floor(label: str, key: str) -> tuple[str, str, str, str]:
        seconds = floors[key]["median_ms"] / 1000
        return label, s(seconds, 2), rate(files / seconds), ""

    rows = [
        (
            "in-process: `vacuum(table, grace_ms=0, ignore_leases=True, dry_run=True)`",
            s(ip["median_s"], 2),
            rate(ip["files_per_s"]),
            ", ".join(s(r["seconds"], 2) for r in ip["runs"][ip["warmup"] :]),
        ),
        (
            f"Spark `local[{sp['tasks']}]`: `find_orphans_spark(spark, root, [], [], now).count()`",
            s(sp["median_s"], 2),
            rate(sp["files_per_s"]),
            ", ".join(s(r["total_s"], 2) for r in sp["runs"][sp["warmup"] :]),
        ),
        floor("floor: a recursive `pyarrow.fs` listing of `data/`", "pyarrow_listing"),
        floor('floor: `ObjectStore.list_files("data")`', "objectstore_list_files"),
        floor(
            "the executors' code over every directory, in-process, 1 thread", "executor_listing_in_process"
        ),
    ]
    return table((f"Orphan scan of {files:,} files", "Median", "Files/s", "Runs"), rows, "lrrl")


def _orphans_details(o: dict[str, Any]) -> list[str]:
    ip, sp = o["in_process"], o["spark"]
    split = ip["median_split_s"]
    rows = [
        ("Spark session start (not in the figures)", s(sp["session_start_s"])),
        ("Spark: the first job (warm-up, not in the figures)", s(sp["runs"][0]["total_s"])),
        ("Spark: `find_orphans_spark` itself (median)", s(sp["median_plan_s"], 2)),
        ("Spark: the `count()` job (median)", s(sp["median_count_s"], 2)),
        ("in-process: listing", s(split.get("listing"), 2)),
        ("in-process: reading the log", s(split.get("replay", 0) + split.get("snapshots", 0), 2)),
        ("in-process: the rest (per-file checks, `_dedupe`)", s(ip["median_s"] - sum(split.values()), 2)),
        ("in-process: CPU", s(ip["median_cpu_s"], 2)),
        (
            "in-process: peak RSS / RSS at the call",
            f"{rss(ip.get('peak_rss_mb'))} / {rss(ip.get('rss_start_mb'))}",
        ),
        ("creating the files (set-up)", s(o["create_files_s"])),
    ]
    return ["## Orphan scan: parts", "", *table(("", ""), rows, "lr"), ""]


# --------------------------------------------------------------------------- 3. recovery


def _files(x: dict[str, Any], key: str) -> str:
    tf = x.get("topic_files")
    if not tf:
        return "–"
    return mb(tf[key]) if key.endswith("bytes") else f"{tf[key]:,}"


def _state_rows(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, Any]] = [
        (
            "first version in Kafka (`log_start`) / log end",
            lambda x: f"{x['log_start']:,} / {x['log_end']:,}",
        ),
        ("records the broker holds", lambda x: f"{x['broker_records']['records']:,}"),
        ("topic size: the partition's `*.log` files", lambda x: _files(x, "log_bytes")),
        (
            "object storage: key frames (count) / commit archives (count)",
            lambda x: (
                f"{mb(x['object_storage']['keyframe_bytes'])} ({x['object_storage']['keyframes']}) / "
                f"{mb(x['object_storage']['archive_bytes'])} ({x['object_storage']['archives']})"
            ),
        ),
        (
            "recovery in-process: `recover()` + replay to the end",
            lambda x: s(x["in_process"]["median_total_s"], 2),
        ),
        (
            "recovery, materializer process: built → its Redis head at the end",
            lambda x: s(x["service"]["median_from_construction_s"], 2),
        ),
        (
            f"cold reader: new `Catalog`, `snapshot(version={r['snapshot_version']:,})`",
            lambda x: report.ms(x["cold_snapshot"]["snapshot_ms"]["median_ms"]),
        ),
    ]
    return [(label, fn(r["before"]), fn(r["after"])) for label, fn in rows]


def _recovery_details(r: dict[str, Any]) -> list[str]:
    setup, prune = r["setup"], r["prune"]
    rows: list[tuple[str, Any]] = [
        ("of which null records", lambda x: f"{x['broker_records']['null_records']:,}"),
        ("`*.log` segment files", lambda x: _files(x, "segments")),
        ("the partition directory on disk (`du`)", lambda x: _files(x, "allocated_bytes")),
        ("in-process: `recover()` alone", lambda x: s(x["in_process"]["median_recover_s"], 2)),
        (
            "in-process: the replay after it (records)",
            lambda x: (
                f"{s(x['in_process']['median_replay_s'], 2)} "
                f"({x['in_process']['runs'][-1]['records_replayed']:,})"
            ),
        ),
        (
            "live segments in the recovered image",
            lambda x: f"{x['in_process']['runs'][-1]['live_segments']:,}",
        ),
        ("materializer process: its `recover()`", lambda x: s(x["service"]["median_recover_s"], 2)),
        ("materializer process: from spawn", lambda x: s(x["service"]["median_from_spawn_s"], 2)),
        ("cold reader: opening the table", lambda x: report.ms(x["cold_snapshot"]["open_ms"]["median_ms"])),
        ("cold reader: answered from", lambda x: ", ".join(x["cold_snapshot"]["origins"])),
    ]
    steps = [
        ("commits / writer processes", f"{r['commits']:,} / {r['writers']}", s(setup["write_s"])),
        (
            "first catch-up: key frames / newest at",
            f"{setup['keyframes']} / {setup['newest_keyframe']:,}",
            s(setup["initial_catchup_s"]),
        ),
        (
            "`prune_log()`: null records / marker version",
            f"{prune['null_records']:,} / {prune['marker_version']:,}",
            s(prune["prune_log_s"]),
        ),
        ("the broker holds no record ≤ the prune point", "", s(prune.get("pruned_records_gone_s"))),
        ("the broker holds no null record", "", s(prune.get("null_records_gone_s"))),
        ("the replaced segment files are gone", "", s(prune.get("replaced_files_gone_s"))),
    ]
    out = [
        "## Recovery: set-up and pruning",
        "",
        *table(("", "", "time"), steps, "lrr"),
        "",
        *table(("cleaner setting", "value"), list(prune["cleaner_settings"].items()), "ll"),
        "",
        "## Recovery: further figures",
        "",
        *table(
            ("", "Before pruning", "After pruning"),
            [(label, fn(r["before"]), fn(r["after"])) for label, fn in rows],
            "lrr",
        ),
        "",
    ]
    if profile := r.get("recover_profile"):
        out += [
            "## cProfile: one `recover()` before pruning",
            "",
            *report.profile_table(profile, "by_cumulative_time", 12),
            "",
        ]
    return out
