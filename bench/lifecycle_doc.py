"""The lifecycle benchmark's doc section and terminal summary, from a results JSON alone."""

from __future__ import annotations

from typing import Any

from bench import report

TITLE = "Lifecycle (issue 9)"
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


def _split_rows(split: dict[str, float], total: float) -> list[tuple[str, str, str]]:
    parts = {SPLIT_LABELS.get(k, k): v for k, v in split.items() if v >= 0.005}
    parts[REST] = total - sum(split.values())
    ordered = sorted(parts.items(), key=lambda kv: -kv[1])
    return [(label, s(value, 2), f"{100 * value / total:.0f} %") for label, value in ordered]


def _range(runs: list[dict[str, Any]]) -> str:
    totals = [r["total_s"] for r in runs]
    return f"{min(totals):,.2f}–{max(totals):,.2f} s" if totals else "–"


def _spread(summary: dict[str, float]) -> str:
    """ "median (min–max)" of a ``runner.summary`` in ms."""
    return (
        f"{report.ms(summary['median_ms'])} ({report.ms(summary['min_ms'], unit='')}–"
        f"{report.ms(summary['max_ms'])})"
    )


def _focus(profile: dict[str, Any] | None, name: str) -> dict[str, Any] | None:
    """The profile's row for the function called ``name`` (from its ``focus`` list), if any."""
    rows = [r for r in (profile or {}).get("focus") or [] if r["function"].endswith(f"({name})")]
    return rows[0] if rows else None


def _top(profile: dict[str, Any] | None, key: str = "by_own_time") -> dict[str, Any] | None:
    """The first segcat function of a profile ranking (built-ins such as lock waits skipped)."""
    rows = [r for r in (profile or {}).get(key) or [] if r["function"].startswith("segcat/")]
    return rows[0] if rows else None


# --------------------------------------------------------------------------- 1. vacuum


def _vacuum(v: dict[str, Any]) -> list[str]:
    setup = v["setup"]
    per_commit = v["files"] // max(setup["append_commits"], 1)
    runs = v["runs"]
    table_rows = [
        ("wall time", s(v["median_s"]), ", ".join(s(r["seconds"]) for r in runs)),
        (
            "files deleted per second",
            f"**{rate(v['files_per_s'])}**",
            ", ".join(rate(v["files"] / r["seconds"]) for r in runs),
        ),
        ("process CPU (all threads)", s(v["median_cpu_s"]), ", ".join(s(r["cpu_s"]) for r in runs)),
        (
            "peak RSS during the call (`VmHWM`, reset just before it)",
            f"**{rss(v['peak_rss_mb'])}**",
            ", ".join(rss(r["peak_rss_mb"]) for r in runs),
        ),
        ("RSS when the call starts (interpreter, imports, open table)", rss(v["rss_start_mb"]), ""),
    ]
    lines = [
        f"### 1. Vacuum of {v['files']:,} dropped files (local filesystem)",
        "",
        f"Set-up, not in the figures below: {v['files']:,} empty files in {v['dirs']:,} directories "
        f"(`os.open`/`os.close` in one loop: median {s(setup['create_files_median_s'])}), registered by "
        f"{setup['append_commits']:,} APPEND commits of {per_commit:,} segments without stats "
        f"({setup['append_commit_bytes'] / 1e3:,.0f} kB encoded, median {setup['append_median_ms']:,.0f} ms "
        f"each, {s(setup['append_s'])} in all) and dropped by {setup['delete_commits']:,} DELETE commits of "
        f"as many ids ({setup['delete_commit_bytes'] / 1e3:,.0f} kB, median "
        f"{setup['delete_median_ms']:,.0f} ms, {s(setup['delete_s'])} in all); the topic takes "
        f"{setup['max_message_bytes'] / 2**20:,.0f} MiB per record. No materializer ran on this table "
        "(no key frames, no archives): a first vacuum replays the whole log from Kafka.",
        "",
        "`vacuum(table, retain_versions=1, grace_ms=0, orphans=False, ignore_leases=True)`, each run in a "
        "fresh child process; before each, the files are created again (in fresh directories) and the "
        "table's `_catalog/_vacuum` record is removed, so each run is a first vacuum of the same log:",
        "",
        *report.table(("", "Median", "Runs"), table_rows, "lrl"),
        "",
        "Memory is the vacuum process's resident set from `/proc/self/status`: `VmHWM` after the call, "
        "reset to the current RSS by `echo 5 > /proc/self/clear_refs` just before it. "
        f"`getrusage(RUSAGE_SELF).ru_maxrss` in the same process says {rss(v.get('ru_maxrss_mb'))}: on "
        "Linux that high-water mark survives `execve`, so a spawned child starts with its parent's RSS at "
        "the fork (here the benchmark's, which had held the writer's image) and it cannot be read alone.",
        "",
        f"Floor: a bare single-threaded `os.unlink` loop over the same tree takes {s(v['unlink_floor_s'])} "
        f"({rate(v['unlink_floor_files_per_s'])} files/s).",
        "",
        "Where the time goes (median run; bench-only timers around vacuum's steps):",
        "",
        *report.table(("step", "time", "share"), _split_rows(v["median_split_s"], v["median_s"])),
    ]
    if v.get("profile"):
        lines += [
            "",
            f"cProfile of one more run ({s(v['profiled_s'])} under the profiler), top functions by own time "
            "(lock waits are the main thread waiting for its delete threads):",
            "",
            *report.profile_table(v["profile"], "by_own_time", 12),
            "",
            "by cumulative time:",
            "",
            *report.profile_table(v["profile"], "by_cumulative_time", 12),
        ]
    return lines


# --------------------------------------------------------------------------- 2. orphans


def _orphans(o: dict[str, Any]) -> list[str]:
    ip, sp, floors = o["in_process"], o["spark"], o["floors"]
    listing = floors["pyarrow_listing"]["median_ms"] / 1000
    store = floors["objectstore_list_files"]["median_ms"] / 1000
    executor = floors["executor_listing_in_process"]["median_ms"] / 1000
    files = o["files"]
    rows = [
        (
            "**in-process**: `vacuum(table, grace_ms=0, ignore_leases=True, dry_run=True)`",
            f"**{s(ip['median_s'], 2)}**",
            rate(ip["files_per_s"]),
            ", ".join(s(r["seconds"], 2) for r in ip["runs"][ip["warmup"] :]),
        ),
        (
            f"**Spark** `local[{sp['tasks']}]`: `find_orphans_spark(spark, root, [], [], now).count()`",
            f"**{s(sp['median_s'], 2)}**",
            rate(sp["files_per_s"]),
            ", ".join(s(r["total_s"], 2) for r in sp["runs"][sp["warmup"] :]),
        ),
        (
            "floor: a recursive `pyarrow.fs` listing of `data/` alone",
            s(listing, 2),
            rate(files / listing),
            "",
        ),
        ('floor: `ObjectStore.list_files("data")` (what vacuum calls)', s(store, 2), rate(files / store), ""),
        (
            "the executors' code (`_list_directories` over every directory), in-process, 1 thread",
            s(executor, 2),
            rate(files / executor),
            "",
        ),
    ]
    split = ip["median_split_s"]
    rest = ip["median_s"] - sum(split.values())
    return [
        f"### 2. Orphan scan of {files:,} files: in-process vs Spark",
        "",
        f"A table with no data commits and {files:,} empty files in {o['dirs']:,} directories under its "
        f"`data/` (created in {s(o['create_files_s'])}): every file is an orphan, and both scans report all "
        "of them (checked); neither deletes. One untimed warm-up each, then the runs below; the page cache "
        "is warm for both.",
        "",
        *report.table(("Scan", "Median", "Files/s", "Runs"), rows, "lrrl"),
        "",
        f"**Spark / in-process = {o['spark_over_in_process']:.2f}×** (above 1: Spark is slower). Not "
        f"included: starting the Spark session ({s(sp['session_start_s'])}) and the first job's warm-up "
        f"({s(sp['runs'][0]['total_s'])}: JVM code paths, Python workers). Of the Spark median, "
        f"{s(sp['median_plan_s'], 2)} is `find_orphans_spark` itself (the driver lists `data/` to hand its "
        f"{o['dirs']:,} directories to {sp['tasks']} tasks) and {s(sp['median_count_s'], 2)} the `count()` "
        "job.",
        "",
        "Where the time goes:",
        "",
        f"- **In-process** ({s(ip['median_s'], 2)}; peak RSS {rss(ip.get('peak_rss_mb'))}, from "
        f"{rss(ip.get('rss_start_mb'))} at the call): listing {s(split.get('listing'), 2)} (of which "
        f"the bare `pyarrow.fs` listing with its 1M `FileInfo` objects ≈ {s(listing, 2)}, the rest one "
        "Python tuple per file), then "
        f"{s(rest, 2)} in vacuum's per-file loop (is the path referenced, the grace and intent checks, "
        "one `Doomed` per orphan) and `_dedupe`; reading the log is "
        f"{s(split.get('replay', 0) + split.get('snapshots', 0), 2)} on this one-commit log. One thread "
        "does all of it.",
        f"- **Spark**: its tasks run the same pyarrow listing plus a Python check per file (`_candidate`: "
        "`data_path_problem`, the cut-off) and hand Arrow batches to the JVM, which anti-joins them with "
        f"the (here empty) referenced paths and counts. That Python code alone takes {s(executor, 2)} on "
        f"one thread, so {sp['tasks']} tasks cannot beat ≈ {s(executor / sp['tasks'], 2)} here; the other "
        f"{s(sp['median_s'] - executor / sp['tasks'], 2)} of Spark's {s(sp['median_s'], 2)} is moving rows "
        "from the Python workers into the JVM, the join and the job's stages. " + _spark_verdict(o, executor),
    ]


def _spark_verdict(o: dict[str, Any], executor: float) -> str:
    ip, sp = o["in_process"], o["spark"]
    if o["spark_over_in_process"] < 1:
        return (
            f"Spark wins here because its {sp['tasks']} tasks split the per-file Python work that the "
            "in-process scan does on one thread (the in-process scan is single-threaded: CPU "
            f"{s(ip['median_cpu_s'], 2)} for {s(ip['median_s'], 2)} of wall time); with both cores shared "
            "by the driver JVM, the Python workers, the broker and the benchmark, that is as far as 2 CPUs "
            "go. Spark's real case is object stores, where listing is a network round trip per directory "
            "and many executors list at once."
        )
    return (
        "On 2 CPUs shared by the driver JVM, 2 Python workers, the broker and the benchmark there is "
        "little to spread the listing over; Spark pays off where listing is a network round trip per "
        "directory (object stores) and there are many executors."
    )


# --------------------------------------------------------------------------- 3. recovery


def _files(x: dict[str, Any], key: str) -> str:
    tf = x.get("topic_files")
    if not tf:
        return "–"
    return mb(tf[key]) if key.endswith("bytes") else f"{tf[key]:,}"


def _state_rows(r: dict[str, Any]) -> list[tuple[str, str, str]]:
    rows: list[tuple[str, Any]] = [
        ("log end (offset of the last record)", lambda x: f"{x['log_end']:,}"),
        ("first version in Kafka (`log_start`)", lambda x: f"{x['log_start']:,}"),
        ("records the broker holds (read from offset 0)", lambda x: f"{x['broker_records']['records']:,}"),
        ("of which null records", lambda x: f"{x['broker_records']['null_records']:,}"),
        (
            "**topic size**: the partition's `*.log` files on the broker",
            lambda x: f"**{_files(x, 'log_bytes')}**",
        ),
        ("number of `*.log` segment files", lambda x: _files(x, "segments")),
        (
            "the partition directory on disk (`du`: allocated blocks, indexes included)",
            lambda x: _files(x, "allocated_bytes"),
        ),
        (
            "object storage: key frames (count) / commit archives (count)",
            lambda x: (
                f"{mb(x['object_storage']['keyframe_bytes'])} ({x['object_storage']['keyframes']}) / "
                f"{mb(x['object_storage']['archive_bytes'])} ({x['object_storage']['archives']})"
            ),
        ),
        (
            "**recovery, in-process**: `TableMaterializer(name, config, None, files).recover()` + replay "
            "to the end",
            lambda x: f"**{s(x['in_process']['median_total_s'], 2)}**",
        ),
        (
            "— `recover()`: the newest key frame from object storage",
            lambda x: s(x["in_process"]["median_recover_s"], 2),
        ),
        (
            "— replaying the records after it (count)",
            lambda x: (
                f"{s(x['in_process']['median_replay_s'], 2)} "
                f"({x['in_process']['runs'][-1]['records_replayed']:,})"
            ),
        ),
        (
            "— live segments in the recovered image",
            lambda x: f"{x['in_process']['runs'][-1]['live_segments']:,}",
        ),
        (
            "**recovery, materializer process** (Redis flushed): `Materializer` built → its Redis head "
            "at the end",
            lambda x: f"**{s(x['service']['median_from_construction_s'], 2)}**",
        ),
        ("— of which its `recover()`", lambda x: s(x["service"]["median_recover_s"], 2)),
        (
            "— the same from process spawn (interpreter and imports included)",
            lambda x: s(x["service"]["median_from_spawn_s"], 2),
        ),
        (
            f"**cold reader**: new `Catalog`, `snapshot(version={r['snapshot_version']:,})`",
            lambda x: f"**{report.ms(x['cold_snapshot']['snapshot_ms']['median_ms'])}**",
        ),
        (
            "— opening the table first (`Catalog(config).load_table(name)`)",
            lambda x: report.ms(x["cold_snapshot"]["open_ms"]["median_ms"]),
        ),
        ("— answered from", lambda x: ", ".join(x["cold_snapshot"]["origins"])),
    ]
    return [(label, fn(r["before"]), fn(r["after"])) for label, fn in rows]


def _recovery(r: dict[str, Any]) -> list[str]:
    setup, prune, b, a = r["setup"], r["prune"], r["before"], r["after"]
    kept = (b.get("topic_files") or {}).get("log_bytes")
    now = (a.get("topic_files") or {}).get("log_bytes")
    shrink = f"{kept / now:,.0f}× smaller" if kept and now else "–"
    settings = ", ".join(f"`{k}={v}`" for k, v in prune["cleaner_settings"].items())
    if "null_records_gone_s" not in prune:
        waited = f"; null records were still there when the wait ended ({prune['last_state']})."
    else:
        waited = f" and no null record after {s(prune.get('null_records_gone_s'))}"
        if "replaced_files_gone_s" in prune:
            waited += (
                "; the segment files the cleaner replaced were gone from the broker's directory after "
                f"{s(prune['replaced_files_gone_s'])} (`file.delete.delay.ms`, 60 s by default)."
            )
        elif prune.get("pending_deletions"):
            waited += f"; files awaiting deletion when measured: {', '.join(prune['pending_deletions'])}."
        else:
            waited += "."
    return [
        f"### 3. Recovery and topic size of a {r['commits']:,}-commit table, before and after pruning",
        "",
        f"Set-up: {r['commits']:,} one-segment APPEND commits (two column stats each) from {r['writers']} "
        f"`TableWriter` processes in {s(setup['write_s'])} ({rate(setup['commits_per_s'])} commits/s), then "
        f"a materializer (K = {r['keyframe_every']:,}: a key frame every {r['keyframe_every']:,} commits; T "
        f"and D out of the way) caught up from scratch in {s(setup['initial_catchup_s'])}: "
        f"{setup['keyframes']} key frames, the newest at version {setup['newest_keyframe']:,}. Redis is a "
        "private `redis-server`, flushed before each materializer-process run. Medians of "
        f"{len(b['service']['runs'])} runs (in-process recovery after one warm-up; cold reads "
        f"{b['cold_snapshot']['snapshot_ms']['count']} runs).",
        "",
        f"Pruning: `table.prune_log()` cut the log at version {prune['prune_point']:,} ({prune['limit']}) in "
        f"{s(prune['prune_log_s'])}: {prune['null_records']:,} null records and the `segcat.log.start` "
        f"marker (version {prune['marker_version']:,}). With the topic's cleaner made aggressive "
        f"({settings}) and one small append every 3 s to keep the log dirty ({prune['roll_commits']} "
        f"in all), the broker held no record ≤ the prune point after {s(prune.get('pruned_records_gone_s'))}"
        + waited,
        "",
        *report.table(("", "Before pruning", "After pruning"), _state_rows(r), "lrr"),
        "",
        f"Topic size {mb(kept)} → {mb(now)} ({shrink}). The version read lies between two key frames, so "
        "the cold read loads one key frame and applies archived commits; after pruning the version is "
        "before the log's start, so that is the only way to answer it.",
        *_recover_profile(r.get("recover_profile")),
    ]


def _recover_note(profile: dict[str, Any] | None) -> str:
    whole, decode = _focus(profile, "recover"), _focus(profile, "decode_segments")
    if not whole or not decode:
        return ""
    avro = _focus(profile, "segment_from_avro")
    return (
        f" Profiled, {decode['cumtime_ms'] / 1000:,.2f} s of a {whole['cumtime_ms'] / 1000:,.2f} s "
        "`recover()` is `keyframe.decode_segments`: every row's Avro bytes decoded back into a Python "
        "`Segment` for the image the rules judge on"
        + (f" ({avro['ncalls']:,} `segment_from_avro` calls)." if avro else ".")
    )


def _recover_profile(profile: dict[str, Any] | None) -> list[str]:
    if not profile:
        return []
    return [
        "",
        "cProfile of one more `recover()` (before pruning), by cumulative time:",
        "",
        *report.profile_table(profile, "by_cumulative_time", 12),
    ]


# --------------------------------------------------------------------------- notes


def _notes(results: dict[str, Any]) -> list[str]:
    notes: list[str] = []
    if v := results.get("vacuum"):
        split = v["median_split_s"]
        replays = split.get("snapshots", 0.0) + split.get("replay", 0.0)
        records = v["setup"]["append_commits"] + v["setup"]["delete_commits"]
        if split.get("snapshots", 0.0) > 0.1 * replays:
            how = f"three replays of the same {records:,} records (two head snapshots, then the history)"
        else:
            how = f"one replay of the {records:,} records (`_History.replay`)"
        top = _top(v.get("profile"))
        text = (
            f"**Vacuum, {v['files']:,} dropped files: {s(v['median_s'])}, {rate(v['files_per_s'])} files/s, "
            f"peak RSS {rss(v['peak_rss_mb'])}.** Reading the log: {s(replays)} "
            f"({100 * replays / v['median_s']:.0f} %) for {how}, decoding every segment and judging it by "
            f"the rules; deleting: {s(split.get('delete'))} (a bare `os.unlink` loop: "
            f"{s(v['unlink_floor_s'])}). The peak memory is the image of {v['files']:,} segments the replay "
            "builds (one `Segment` and one index entry each) and the list of files to delete."
        )
        if top:
            text += (
                f" Under cProfile ({s(v['profiled_s'])} in all) the top segcat function by own time is "
                f"`{top['function']}` ({top['tottime_ms'] / 1000:,.1f} s own, {top['ncalls']:,} calls)"
            )
            keys = _focus(v.get("profile"), "path_key")
            if keys:
                text += (
                    f"; by cumulative time `path_key` ({keys['ncalls']:,} calls, "
                    f"{keys['cumtime_ms'] / 1000:,.1f} s with `locations.resolve` / `canonical`) resolves "
                    "every added and dropped path against the table's location, for the rules' "
                    "duplicate-path check and the image's path index"
                )
            text += "."
        notes.append(text)
    if o := results.get("orphans"):
        notes.append(
            f"**Orphan scan, {o['files']:,} files: in-process {s(o['in_process']['median_s'], 2)}, Spark "
            f"{s(o['spark']['median_s'], 2)} ({o['spark_over_in_process']:.2f}×).** Both are bound by a "
            "Python step per file after pyarrow's listing; Spark adds moving rows into the JVM and a job, "
            "with 2 cores shared by everything (section 2)."
        )
    if r := results.get("recovery"):
        b, a = r["before"], r["after"]
        notes.append(
            f"**Recovery {s(b['in_process']['median_total_s'], 2)} before pruning, "
            f"{s(a['in_process']['median_total_s'], 2)} after (in-process; a materializer process "
            f"{s(b['service']['median_from_construction_s'], 2)} / "
            f"{s(a['service']['median_from_construction_s'], 2)}).** "
            "Recovery never replays the log from its start: it loads the newest key frame (here "
            f"{b['in_process']['runs'][-1]['live_segments']:,} live segments) and applies the few records "
            "after it, so its cost follows the table's live size, not the log's length, and pruning "
            "leaves it alone (the two medians differ by the run-to-run spread: in-process runs "
            f"{_range(b['in_process']['runs'][1:])} before, {_range(a['in_process']['runs'][1:])} after); "
            "loading the key frame is nearly all of it." + _recover_note(r.get("recover_profile"))
        )
        kept = (b.get("topic_files") or {}).get("log_bytes")
        now = (a.get("topic_files") or {}).get("log_bytes")
        notes.append(
            f"**Topic size {mb(kept)} → {mb(now)}** once the cleaner has run: pruning moves the history to "
            "object storage (already there: the archives), so the broker keeps only the records after the "
            "prune point. The cold read of a pruned version is a key frame read plus archived commits "
            f"either way: {_spread(b['cold_snapshot']['snapshot_ms'])} before, "
            f"{_spread(a['cold_snapshot']['snapshot_ms'])} after (median, min–max of "
            f"{a['cold_snapshot']['snapshot_ms']['count']}): the same path both times; the difference "
            "was not separated from this shared machine's noise."
        )
        store = a["object_storage"]
        notes.append(
            f"**Object storage** holds {mb(store['keyframe_bytes'])} of key frames ({store['keyframes']}, "
            f"each a full image: K = {r['keyframe_every']:,} on a table growing to "
            f"{a['in_process']['runs'][-1]['live_segments']:,} segments) and {mb(store['archive_bytes'])} of "
            "commit archives: after pruning those are the history, and the key frames are the bulk of it. "
            "Vacuum's history retention (`segcat.history.retain.*`, not set here) is what trims them."
        )
    return notes


def render(results: dict[str, Any]) -> str:
    scope = "all scenarios in one run, each with its own table and warehouse directory"
    rows = [("Spark", f"pyspark {results.get('pyspark', '?')}, `local[2]` (`si.local_session()`)")]
    lines = report.head(results, TITLE, scope, rows)
    lines += [
        "",
        "Vacuum of dropped files, orphan scan in-process vs Spark, and a materializer's recovery and the "
        "topic's size before and after log pruning, on one 2-CPU VM shared by the broker, Redis, Spark and "
        "the benchmark (and other work: see the load averages). Wall-clock medians of several runs.",
        "",
    ]
    if v := results.get("vacuum"):
        lines += [*_vacuum(v), ""]
    if o := results.get("orphans"):
        lines += [*_orphans(o), ""]
    if r := results.get("recovery"):
        lines += [*_recovery(r), ""]
    lines += ["### Where the time goes, per row", "", *report.bullets(_notes(results)), ""]
    if (digest := results.get("source_digest")) and digest.get("changed"):
        lines += [
            "> **segcat's source changed while this run was measuring** (digest "
            f"{digest['start']} at the start, {digest['end']} at the end): figures may mix two versions.",
            "",
        ]
    return "\n".join(lines).rstrip() + "\n"


# --------------------------------------------------------------------------- terminal


def summary(results: dict[str, Any]) -> str:
    rows: list[tuple[str, str, str]] = []
    if v := results.get("vacuum"):
        rows += [
            (f"vacuum {v['files']:,} dropped files", s(v["median_s"]), f"{rate(v['files_per_s'])} files/s"),
            (
                "  peak RSS (VmHWM) of the vacuum",
                rss(v["peak_rss_mb"]),
                f"at the call {rss(v['rss_start_mb'])}",
            ),
            ("  set-up: create the files (median)", s(v["setup"]["create_files_median_s"]), ""),
            ("  set-up: register + drop commits", s(v["setup"]["append_s"] + v["setup"]["delete_s"]), ""),
            (
                "  floor: bare os.unlink",
                s(v["unlink_floor_s"]),
                f"{rate(v['unlink_floor_files_per_s'])} files/s",
            ),
        ]
    if o := results.get("orphans"):
        ip, sp = o["in_process"], o["spark"]
        rows += [
            (
                f"orphans {o['files']:,}: in-process",
                s(ip["median_s"], 2),
                f"{rate(ip['files_per_s'])} files/s",
            ),
            ("orphans: Spark local[2]", s(sp["median_s"], 2), f"{rate(sp['files_per_s'])} files/s"),
            ("orphans: Spark / in-process", f"{o['spark_over_in_process']:.2f}×", ""),
        ]
    if r := results.get("recovery"):
        for label in ("before", "after"):
            x = r[label]
            tf = x.get("topic_files") or {}
            ip, sv, cs = x["in_process"], x["service"], x["cold_snapshot"]
            rows += [
                (
                    f"{label} pruning: topic *.log",
                    mb(tf.get("log_bytes")),
                    f"{x['broker_records']['records']:,} records",
                ),
                (
                    f"{label} pruning: recovery in-process",
                    s(ip["median_total_s"], 2),
                    f"recover() {s(ip['median_recover_s'], 2)}",
                ),
                (
                    f"{label} pruning: recovery, materializer",
                    s(sv["median_from_construction_s"], 2),
                    f"from spawn {s(sv['median_from_spawn_s'], 2)}",
                ),
                (
                    f"{label} pruning: cold snapshot(v={r['snapshot_version']:,})",
                    report.ms(cs["snapshot_ms"]["median_ms"]),
                    ", ".join(cs["origins"]),
                ),
            ]
    return "\n".join(report.table(("measurement", "median", "note"), rows, "lrl")) if rows else "(nothing)"
