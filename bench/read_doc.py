"""The words of the ``read-paths`` section of docs/BENCHMARKS.md, rendered from a results JSON.

Besides the figures, the section explains where each missed target's time goes (from the
step-by-step timings, the what-if measurements and the profiles) and what would meet it; those
explanations are derived from the figures of the same run.
"""

from __future__ import annotations

from typing import Any

from bench import report
from bench.report import get, mb, profile_table, ratio, size_label, table, targets_table


def ms(value: float | None) -> str:
    """Durations as this section prints them: one decimal from 10 ms, seconds from 10 s."""
    return report.ms(value, mid=1, seconds_from=10_000)


def _cell(timing: dict[str, Any] | None, reps: int = 5) -> str:
    """A median, with ``(n×)`` when fewer repetitions than planned fitted the time budget."""
    if timing is None:
        return "–"
    return ms(timing["median_ms"]) + (f" ({timing['reps']}×)" if timing.get("reps", reps) < reps else "")


def render(results: dict[str, Any]) -> str:
    params = results["params"]
    reps = params.get("reps", 5)
    pk = results["environment"]["packages"]
    peers = (
        f"deltalake {pk['deltalake']}, pyiceberg {pk['pyiceberg']} (SQLAlchemy {pk['SQLAlchemy']}, sqlite), "
        f"pyarrow {pk['pyarrow']}"
    )
    where = "the local stack on the same machine; warehouse: a temporary local directory"
    out = [
        *report.head(
            results, "Read paths", "all scenarios in one run", [("Peers", peers), ("Kafka and Redis", where)]
        ),
        "",
        f"Medians over {reps} timed repetitions ({params.get('fast_reps', reps)} when one call takes under "
        "100 ms) after one untimed warm-up, `gc.collect()` before each, unless a cell says otherwise (`(n×)` "
        "= n repetitions). Helpers: `bench/read_*.py`.",
        "",
        "### Targets",
        "",
        *targets_table(results["targets"], ms),
    ]
    if base := results.get("baseline"):
        rows = [
            (key, fmt(value), fmt(base["figures"].get(key)))
            for key, value in results["headline"].items()
            if value is not None or base["figures"].get(key) is not None
            for fmt in [(lambda v: "–" if v is None else f"{v:,.0f}") if "commits/s" in key else ms]
        ]
        out += [
            "",
            f"Against an earlier run (`{base['path']}`, git {base['git']}, {base['date_utc']}, load average "
            f"at start {base.get('loadavg_at_start')}; same machine, same script; note what changed in "
            "`catalog/` in between):",
            "",
            *table(("figure", "this run", "earlier run"), rows),
        ]
    if ol := results.get("open_list"):
        out += _open_list(ol, reps)
    if tt := results.get("time_travel"):
        out += _time_travel(tt, reps)
    if w := results.get("watch"):
        out += _watch(w)
    if cu := results.get("catchup"):
        out += _catchup(cu)
    if bl := results.get("bulk_load"):
        out += _bulk_load(bl, reps)
    out += _analysis(results)
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------- 1. open + list


def _open_list(ol: dict[str, Any], reps: int) -> list[str]:
    seg: dict[str, Any] = ol["segcat"]
    cells = list(seg.values())
    tail = cells[0]["table"].get("tail_commits")
    per_commit = ", ".join(f"{int(s):,}: {c['table']['segments_per_bulk_commit']:,}" for s, c in seg.items())
    notes = [c["kafka"]["note"] for c in cells if c["kafka"].get("note")]
    kf_lives = ", ".join(
        f"{get(c, 'object_store', 'details', 'live_segments') or 0:,} of {int(s):,}" for s, c in seg.items()
    )
    paths = ("redis", "redis_files_list", "object_store", "object_store_kafka_tail", "kafka", "open_table")
    out = [
        "",
        "### 1. Open + list all live segments (`snapshot()` then `files_arrow()`; `files()` beside it)",
        "",
        *table(
            (
                "live segments",
                "(a) Redis: key frame + deltas",
                "(a) with `files()`",
                "(b) object store: key frame",
                "(b′) object store + Kafka tail",
                "(c) Kafka replay",
                "`Catalog.table()`",
            ),
            [(f"{int(s):,}", *(_cell(c.get(p), reps) for p in paths)) for s, c in seg.items()],
            "rrrrrrr",
        ),
        "",
        f"How the tables were built: one `TableWriter` (own process) commits the bulk ({per_commit} segments "
        "per commit; every segment has id, path, partition, size, rows and min/max/null-count stats of an "
        f"INT and a STRING column), then {tail} one-segment commits. A materializer (own process, pattern = "
        "that one table) runs during the writes with K = the number of bulk commits and T/D off, so the "
        f"newest key frame sits right after the bulk and Redis holds key frame + {tail} deltas. (a) is the "
        "default chain at the head (answered by Redis), listing with `Snapshot.files_arrow()` (Arrow "
        'strings; `files()` is the same as a Python list: column "(a) with `files()`"); (b) asks for '
        "the key-frame version with "
        f'`sources=("object-store",)` (live then: {kf_lives}); (b′) is the '
        "chain without Redis at the head: key frame + the Kafka records after it, judged by the rules; (c) "
        'replays the whole log (`sources=("kafka",)`). `Catalog.table()` (topic metadata + config check) '
        "is not part of (a)–(c): a reader opens a table once." + (f" (c): {notes[0]}." if notes else ""),
        "",
        *table(
            (
                "table",
                "commits",
                "build: writer + materializer",
                "writer alone",
                "key frames",
                "Redis key frame (IPC)",
            ),
            [
                (
                    f"{int(s):,}",
                    f"{c['table']['commits']:,}",
                    f"{c['table']['build_s']:,.0f} s",
                    f"{c['table'].get('writer_s', 0):,.0f} s",
                    c["table"].get("keyframes_written", "–"),
                    mb(get(c, "redis_phases", "keyframe_ipc_bytes")),
                )
                for s, c in seg.items()
            ],
        ),
    ]
    if peers := ol.get("peers"):
        out += _peers(peers, seg.get(str(peers["size"]), {}), tail)
    phases = {s: c["redis_phases"] for s, c in seg.items() if c.get("redis_phases")}
    if phases:
        steps = list(next(iter(phases.values()))["median_ms"])
        out += [
            "",
            "Where path (a) spends its time: its steps redone one by one, as `lookup.from_redis` and "
            "`Snapshot.files()` run them (medians). `redis_load_incl_checksum` (`RedisStore.load`: one MULTI "
            "for head + key frame + deltas, then the value's checksum: CRC-32 since Redis key-frame format "
            "2, SHA-256 before) contains `checksum_of_value`; `keyframe_checksum_not_in_chain` is the "
            "content checksum of a whole (format-1) frame, which the chain skips for Redis bytes (0 for a "
            "lean frame); "
            "`decode_deltas` is `delta_arrow.decode` since format 2 (`codec.decode_commit` before); "
            "`files` is the Python list; `redis_hget_keyframe_only` is the bare transfer.",
            "",
            *table(
                ("step", *(f"{int(s):,}" for s in phases)),
                [(step, *(ms(p["median_ms"].get(step)) for p in phases.values())) for step in steps],
            ),
        ]
    if whatifs := {s: c["whatif"] for s, c in seg.items() if c.get("whatif")}:
        out += _whatif(whatifs)
    for name, prof in ol.get("profiles", {}).items():
        out += [
            "",
            f"cProfile of (a) at {name.split('_', 1)[1]} (ms per call, top 10 by cumulative time):",
            "",
        ]
        out += profile_table(prof)
    return out


def _peers(peers: dict[str, Any], seg: dict[str, Any], tail: int) -> list[str]:
    redis_ms, store_ms = get(seg, "redis", "median_ms"), get(seg, "object_store", "median_ms")
    tail_ms = get(seg, "object_store_kafka_tail", "median_ms")
    d, i = peers["delta"]["details"], peers["iceberg"]["details"]
    rows = [
        ("segcat (a) Redis: `snapshot()` + `files_arrow()`", ms(redis_ms), redis_ms),
        ("segcat (b) object store: key frame Parquet", ms(store_ms), store_ms),
        ("segcat (b′) object store + Kafka tail", ms(tail_ms), tail_ms),
        (
            f"delta-rs {d.get('deltalake_version', '')}: `DeltaTable(path)` + `file_uris()`",
            _cell(peers["delta"]),
            peers["delta"]["median_ms"],
        ),
        (
            f"pyiceberg {i.get('pyiceberg_version', '')}: `load_table` + `scan().plan_files()`",
            _cell(peers["iceberg"]),
            peers["iceberg"]["median_ms"],
        ),
    ]
    return [
        "",
        f"Beside delta-rs and pyiceberg at {int(peers['size']):,} files, same commit plan, same run:",
        "",
        *table(
            ("system", "open + list", "÷ segcat (a) Redis", "÷ segcat (b) object store"),
            [(what, shown, ratio(v, redis_ms), ratio(v, store_ms)) for what, shown, v in rows],
        ),
        "",
        f"delta-rs table: {d.get('commits')} `create_write_transaction` commits of `AddAction`s (JSON stats: "
        f"numRecords, min, max, nullCount) built in {d.get('build_s')} s; {d.get('checkpoint')}, i.e. a "
        f"checkpoint exists at version(s) {d.get('checkpoint_versions')} and the last {tail} commits are "
        f"JSON. pyiceberg table: {i.get('how')} ({i.get('manifests_at_head')} manifests at the head), "
        f"{i.get('catalog')}, built in {i.get('build_s')} s. Data files for both: one 100-row Parquet file "
        "hard-linked under every name (pyiceberg reads each footer in `add_files`).",
    ]


def _whatif(whatifs: dict[str, Any]) -> list[str]:
    out = [
        "",
        "What-if measurements on the same Redis key frames (`bench/read_whatif.py`; nothing in segcat "
        "changed): the frame re-encoded, stored under a benchmark key, fetched with redis-py as configured "
        "and with a bare socket reading into one buffer, read back with pyarrow, and hashed.",
        "",
    ]
    header = (
        "Redis key frame variant",
        "size",
        "redis-py GET",
        "bare-socket GET",
        "IPC read",
        "SHA-256",
        "CRC-32",
    )
    for size, w in whatifs.items():
        rows = [
            (
                variant,
                mb(v["bytes"]),
                ms(v["redis_py_get_ms"]),
                ms(v.get("raw_socket_get_ms")),
                ms(v["read_ipc_ms"]),
                ms(v["sha256_ms"]),
                ms(v["crc32_ms"]),
            )
            for variant, v in w["variants"].items()
        ]
        li = w["listing"]
        out += [
            f"{int(size):,} segments:",
            "",
            *table(header, rows),
            "",
            f"Listing {w['rows']:,} paths: `Snapshot.files()` {ms(li['files_ms'])}; the same joined paths "
            f"kept as an Arrow array {ms(li['arrow_array_only_ms'])}; `to_pylist()` of them alone "
            f"{ms(li['to_pylist_only_ms'])}. The key-frame content checksum (skipped by the chain for Redis "
            f"bytes, still run for object-store bytes): {ms(w.get('keyframe_checksum_ms'))}.",
            "",
        ]
    return out


# --------------------------------------------------------------------------- 2. time travel


def _time_travel(tt: dict[str, Any], reps: int) -> list[str]:
    seg, d, i, t = tt["segcat"], tt["delta"], tt["iceberg"], tt["table"]
    sd = seg["details"]
    rows = [
        (
            "segcat",
            f"`table.snapshot(version={sd['version']})` + `files()`, default chain",
            _cell(seg, reps),
            "1.0×",
        )
    ]
    if only := tt.get("segcat_object_store_only"):
        what = 'the same, `sources=("object-store",)` (no Redis detour)'
        rows.append(("segcat", what, _cell(only, reps), ratio(only["median_ms"], seg["median_ms"])))
    rows += [
        (
            "delta-rs",
            f"`DeltaTable(path, version={d['details'].get('version')})` + `file_uris()`",
            _cell(d, reps),
            ratio(d["median_ms"], seg["median_ms"]),
        ),
        (
            "pyiceberg",
            f"`load_table` + `scan(snapshot_id=<snapshot {i['details'].get('snapshot_index')}>)` + "
            "`plan_files()`",
            _cell(i, reps),
            ratio(i["median_ms"], seg["median_ms"]),
        ),
    ]
    return [
        "",
        "### 2. Time travel to the middle version",
        "",
        f"Tables of {t['commits']} commits × {t['live_segments'] // t['commits']:,} segments (built like the "
        f"tables above, same plan for all three systems); the middle version has {sd['live_segments']:,} "
        "live segments.",
        "",
        *table(("system", "call", "median", "÷ segcat"), rows, "llrr"),
        "",
        f"segcat: key frames every K = {t.get('keyframe_every_commits')} commits; {sd.get('chain_text', '')} "
        f"delta-rs: {d['details'].get('checkpoint')} (checkpoints at versions "
        f"{d['details'].get('checkpoint_versions')}). pyiceberg: {i['details'].get('how')}.",
        "",
        "cProfile of segcat's time travel (default chain; ms per call, top 12 by cumulative time):",
        "",
        *profile_table(tt.get("profile"), top=12),
    ]


# --------------------------------------------------------------------------- 5. bulk load


def _bulk_load(bl: dict[str, Any], reps: int) -> list[str]:
    rows = [
        (
            f"+{m['at_s']:.0f} s ({m['started_s']:.1f}–{m['ended_s']:.1f} s)",
            str(m["redis_keyframe_version"]),
            str(m.get("redis_keyframe_version_after")),
            m["origin"],
            _cell(m["open_list"], reps),
            _cell(m["open_list_files"], reps),
        )
        for m in bl["moments"]
    ]
    return [
        "",
        f"### 5. Open + list right after a bulk load ({bl['commits']} commits × "
        f"{bl['per_commit']:,} segments)",
        "",
        f"One `TableWriter` (own process) appends {bl['live']:,} segments in {bl['commits']} commits "
        f"({bl['writer_s']} s) while a materializer runs with {bl['materializer']}; then `snapshot()` + "
        f"{bl['listing']} (and + `files()`) is timed at the moments below after the last commit (each "
        f'cell: {reps} repetitions after a warm-up, the cells of a moment back to back). "Key frame" is '
        "the Redis head's key-frame version before and after the cell (the last version is "
        f"{bl['last_version']}): until one exists past the bulk, the reader applies the deltas after it.",
        "",
        *table(
            (
                "moment after the last commit",
                "Redis key frame",
                "… after the cell",
                "answered by",
                "open + list",
                "with `files()`",
            ),
            rows,
            "lrrlrr",
        ),
        "",
        "cProfile of one open + list at the end (ms per call, top 10 by cumulative time):",
        "",
        *profile_table(bl.get("profile"), top=10),
    ]


# --------------------------------------------------------------------------- 3. watch


def spikes(run: dict[str, Any], threshold_ms: float = 40.0) -> list[int]:
    """Indices (0-based, in commit order) of the samples above ``threshold_ms``."""
    return [
        n
        for n, us in enumerate(run.get("samples_arrival_minus_broker_ts_us", []))
        if us > threshold_ms * 1000
    ]


def _watch(w: dict[str, Any]) -> list[str]:
    rows = []
    for key, run in w.items():
        if key == "floor":
            continue
        s, r = run["arrival_minus_broker_ts"], run["arrival_minus_commit_return"]
        rows.append(
            (
                f"paced ({run['pause_s'] * 1000:.0f} ms pause)" if run["pause_s"] else "back to back",
                f"{run['commits']:,}",
                f"{run['commits_per_s']:,.0f}",
                *(ms(s[k]) for k in ("median_ms", "p90_ms", "p99_ms", "max_ms")),
                f"{run['received']:,} / {run['missing']}",
                ", ".join(f"{k}: {v}" for k, v in run["sources"].items()),
                f"{r['median_ms']:.2f} / {r['p99_ms']:.2f} ms",
            )
        )
    if floor := w.get("floor"):
        s = floor["arrival_minus_broker_ts"]
        rows.append(
            (
                f"floor, no segcat (paced, {floor['pause_s'] * 1000:.0f} ms pause)",
                f"{floor['commits']:,}",
                "–",
                *(ms(s[k]) for k in ("median_ms", "p90_ms", "p99_ms", "max_ms")),
                f"{s['count']:,} / {floor['commits'] - s['count']}",
                "bare consumer → PUBLISH",
                "–",
            )
        )
    header = (
        "writer",
        "commits",
        "commits/s",
        "p50",
        "p90",
        "p99",
        "max",
        "received / missing",
        "via",
        "− commit return p50 / p99",
    )
    out = [
        "",
        "### 3. Commit → `watch()` notification latency",
        "",
        "One `TableWriter` (benchmark process) appends one segment per commit to a fresh table; a "
        "materializer (default K = 1,000 / T = 60 s / D = 8 MiB) runs in its own process and `table.watch()` "
        "iterates in a third. Latency = the watcher's arrival time − the record's broker timestamp "
        "(LogAppendTime; same machine clock; the broker stamps whole milliseconds, so each figure carries up "
        "to +1 ms). The last column is the arrival minus the moment the writer's `append()` returned (it "
        "already knows its verdict then; negative = the notification came first). The floor row sends "
        "records through the same hops with no segcat in them (`bench/watch_floor.py`: a bare idempotent "
        "producer, a bare consumer in its own process that PUBLISHes each record's offset and time, a "
        "subscriber process).",
        "",
        *table(header, rows, "lrrrrrrrlr"),
    ]
    for key, run in w.items():
        if key != "floor" and (hot := spikes(run)):
            out += [
                "",
                f"{key.replace('_', ' ')}: samples above 40 ms at commit indices {hot[:12]}"
                + (" …" if len(hot) > 12 else ""),
            ]
    return out


# --------------------------------------------------------------------------- 4. catch-up

SPLIT_LABELS = {
    "keyframes_and_archives": "key frames + commit archives (`write_keyframe`)",
    "redis_writes": "Redis writes (`RedisPublisher.publish` + `flush`)",
    "decode_and_rules": "decode + rules (`rules.apply_record`)",
    "ticks": "ticks (`_tick`)",
    "recovery": "recovery",
    "rest": "the rest (Kafka polling, events, metrics, bookkeeping, group join)",
}


def _median_run(cu: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any], list[tuple[str, float]]]:
    """The timed runs by speed, the median one, and its wall time by part (largest first)."""
    timed = sorted((r for r in cu["runs"] if not r["profiled"]), key=lambda r: r["commits_per_s"])
    mid = timed[len(timed) // 2]
    return timed, mid, sorted(mid.get("split_s", {}).items(), key=lambda kv: kv[1], reverse=True)


def _catchup(cu: dict[str, Any]) -> list[str]:
    timed, mid, split = _median_run(cu)
    b = cu["build"]
    out = [
        "",
        "### 4. Materializer catch-up from a cold start",
        "",
        f"A log of {cu['records']:,} one-segment APPEND commits, written by {b['writers']} `TableWriter` "
        f"processes in {b['build_s']:,.0f} s with no materializer running. Each run starts a fresh "
        "materializer process (new consumer group, empty warehouse, the table's Redis keys deleted; default "
        "K = 1,000, T, D) and is timed from its `ready` callback until its image has applied the last offset "
        "(polled every 2 ms).",
        "",
        f"- median **{cu['median_commits_per_s']:,.0f} commits/s** ({cu['median_seconds']:.1f} s); runs: "
        + ", ".join(f"{r['commits_per_s']:,.0f}" for r in timed)
        + "; from the first applied record on (group join and assignment, "
        + f"~{mid['seconds_ready_to_assigned']:.1f} s, "
        f"excluded): {cu['median_commits_per_s_after_first_record']:,.0f} commits/s",
        "- median run, wall time by part (bench-only timers around the materializer's methods, each part "
        "exclusive of the others): "
        + ", ".join(f"{SPLIT_LABELS.get(k, k)} {v:.1f} s" for k, v in split)
        + f"; process CPU {mid['process_cpu_s']:.1f} s of {mid['seconds_from_ready']:.1f} s wall; "
        f"{mid['keyframes']:.0f} key frames",
    ]
    if floor := cu.get("replay_floor"):
        out.append(
            "- floor: a bare replay of the same log in the benchmark process (`Table.state()`: fetch, Avro "
            f"decode, rules; no Redis, no key frames) takes {_cell(floor)} = {floor['commits_per_s']:,.0f} "
            "commits/s"
        )
    out += [
        "",
        "cProfile of one more (profiled, so slower) catch-up, the materializer thread, top 15 by own time "
        "(ms over the whole run):",
        "",
        *profile_table(cu.get("profile"), key="by_own_time", top=15),
    ]
    if get(cu, "profile", "focus"):
        out += ["", "The same profile, selected functions by cumulative time:", ""]
        out += profile_table(cu["profile"], key="focus", top=20)
    return out


# --------------------------------------------------------------------------- analysis


def _fn(prof: dict[str, Any] | None, name: str) -> float | None:
    """Cumulative ms of the function called ``name`` in a profile summary (largest match)."""
    found: list[float] = [
        row["cumtime_ms"]
        for key in ("focus", "by_cumulative_time", "by_own_time")
        for row in (prof or {}).get(key, [])
        if row["function"].endswith(f"({name})") or f"'{name}'" in row["function"]
    ]
    return max(found) if found else None


def _smaller(part: float | None, whole: float | None) -> str:
    return "–" if not part or not whole else f"−{100 * (1 - part / whole):.0f} %"


def _redis_analysis(size: str, cell: dict[str, Any]) -> str:
    ph = cell["redis_phases"]["median_ms"]
    deltas = ph["decode_deltas"] + ph["frameview_apply_deltas"]
    text = (
        f"- **{size_label(size)} from Redis: {ms(cell['redis']['median_ms'])}.** Step by step: transfer of "
        f"the {mb(cell['redis_phases']['keyframe_ipc_bytes'])} key frame "
        f"{ms(ph['redis_load_incl_checksum'] - ph['checksum_of_value'])}; its checksum "
        f"{ms(ph['checksum_of_value'])}; IPC read (LZ4) {ms(ph['from_ipc'])}; the "
        f"{cell['redis_phases']['deltas']} deltas {ms(deltas)}; `files()` (Python list) {ms(ph['files'])}; "
        f"the whole open + list with `files_arrow()` {ms(cell['redis']['median_ms'])}, with `files()` "
        f"{ms(get(cell, 'redis_files_list', 'median_ms'))}."
    )
    if w := cell.get("whatif"):
        lean, stored = (
            w["variants"].get("without segment_avro, lz4", {}),
            w["variants"].get("as stored in Redis", {}),
        )
        li = w["listing"]
        projected = (
            sum(lean.get(k) or 0 for k in ("redis_py_get_ms", "crc32_ms", "read_ipc_ms"))
            + deltas
            + li["files_ms"]
        )
        if (stored.get("bytes") or 0) > (lean.get("bytes") or 0):
            text += (
                " Without the `segment_avro` column, which no reader uses, the LZ4 frame is "
                f"{mb(lean.get('bytes'))} instead of {mb(stored.get('bytes'))} "
                f"({_smaller(lean.get('bytes'), stored.get('bytes'))}; "
                f"GET {ms(lean.get('redis_py_get_ms'))} vs "
                f"{ms(stored.get('redis_py_get_ms'))}, IPC read {ms(lean.get('read_ipc_ms'))} vs "
                f"{ms(stored.get('read_ipc_ms'))}, SHA-256 {ms(lean.get('sha256_ms'))} vs "
                f"{ms(stored.get('sha256_ms'))}, CRC-32 {ms(lean.get('crc32_ms'))})."
            )
        else:
            text += (
                f" The Redis frame is lean already ({mb(stored.get('bytes'))}, no `segment_avro`; "
                f"CRC-32 of it {ms(lean.get('crc32_ms'))})."
            )
        text += (
            " Of `files()`, "
            f"{ms(li['to_pylist_only_ms'])} is turning the Arrow result into Python strings; the Arrow array "
            f"itself takes {ms(li['arrow_array_only_ms'])}. Lean frame + CRC-32 + today's `files()` ≈ "
            f"{ms(projected)} (sum of parts measured alone); with an Arrow result ≈ "
            f"{ms(projected - li['files_ms'] + li['arrow_array_only_ms'])}."
        )
    return text


def _analysis(results: dict[str, Any]) -> list[str]:
    params, seg = results["params"], get(results, "open_list", "segcat") or {}
    sizes = sorted({str(params.get("peer_size")), str(max(params.get("list_sizes") or [0]))}, key=int)
    out = ["", "### Where the time goes, and what would meet the missed targets", ""]
    out += [_redis_analysis(s, seg[s]) for s in sizes if "redis_phases" in seg.get(s, {})]
    out += [
        "",
        "  Done for issue 12 (items 2 and 3; `catalog/read`, `catalog/storage`): the Redis copy of the key "
        "frame is lean (no `segment_avro`; Redis key-frame format 2, docs/PROTOCOL.md §6) and guarded by a "
        "CRC-32 instead of a SHA-256; readers keep lean views and decode the deltas' record bytes straight "
        "into Arrow columns (`delta_arrow`, `add_columns`: no `Segment` objects, no Avro re-encoding); "
        "listing stays in Arrow (`Snapshot.files_arrow()`); `Segment` objects are built on request from the "
        "Parquet copy of the same key frame. What is left of (a) is moving the frame (the GET), LZ4, and "
        "the strings of the listing; past that, a smaller frame (zstd halves it, at 3× the decode time; "
        "dictionary-encoded paths) or a listing that hands out the relative paths with the root beside "
        "them would be next.",
    ]
    if tt := results.get("time_travel"):
        out += _analysis_time_travel(tt)
    if bl := results.get("bulk_load"):
        out += _analysis_bulk_load(bl)
    if w := results.get("watch"):
        out += _analysis_watch(w)
    if cu := results.get("catchup"):
        out += _analysis_catchup(cu)
    return out


def _analysis_time_travel(tt: dict[str, Any]) -> list[str]:
    prof, chain = tt.get("profile"), tt["segcat"]["median_ms"]
    delta = get(tt, "delta", "median_ms")
    return [
        "",
        f"- **Time travel: {ms(chain)}** (default chain; delta-rs {ms(delta)} in the same run, "
        f"{ratio(delta, chain)} segcat's time). Profile (ms per call): `from_redis` "
        f"{ms(_fn(prof, 'from_redis'))} (one `HGET` of the key frame's version: the frame is not fetched), "
        f"`from_next_keyframe` {ms(_fn(prof, 'from_next_keyframe'))}, of which the Parquet key frame "
        f"{ms(_fn(prof, 'read_keyframe'))} (read lean: the wide columns only, `segment_avro` neither read "
        "nor hashed; `segcat.meta_checksum` and the pages' CRCs checked) and the commit archives' heads "
        f"{ms(_fn(prof, '_read_heads'))} (version and operation columns only, `segcat.heads_checksum`), "
        f"then `before_appends` {ms(_fn(prof, 'before_appends'))}; `files()` {ms(_fn(prof, 'files'))}. "
        "No commit is decoded: only APPENDs lie between the version and the next key frame, so that frame "
        "less the rows added after the version is the answer (a version after a COMPACT, DELETE or property "
        "change takes the newest frame before it plus the archived commits, decoded straight into Arrow). "
        "What is left is Parquet decoding of the wide columns and the Python strings of `files()` "
        "(`files_arrow()` skips those).",
    ]


def _analysis_bulk_load(bl: dict[str, Any]) -> list[str]:
    worst = max(bl["moments"], key=lambda m: m["open_list"]["median_ms"])
    first = bl["moments"][0]
    prof = bl.get("profile")
    return [
        "",
        f"- **Bulk load: {ms(first['open_list']['median_ms'])} at +{first['at_s']:.0f} s, "
        f"{ms(worst['open_list']['median_ms'])} at worst (+{worst['at_s']:.0f} s).** The reader decodes the "
        "Redis deltas after the newest key frame straight into Arrow (`add_columns.parse`: ~5 µs per "
        "segment in pure Python, against ~11 µs for fastavro's dicts and ~35 µs for `Segment` objects plus "
        "re-encoding before), so its cost is the number of segments since the last key frame: the "
        "materializer now cuts a frame once the segments pending reach max(S, live / 10) (S = "
        "`keyframe_every_segments`), which bounds it. Profile of the last read (ms per call): "
        f"`from_redis` {ms(_fn(prof, 'from_redis'))}, `RedisStore.load` {ms(_fn(prof, 'load'))}, "
        f"`delta_arrow.decode` {ms(_fn(prof, 'decode'))}, `apply_decoded` {ms(_fn(prof, 'apply_decoded'))}, "
        f"`files_arrow` {ms(_fn(prof, 'files_arrow'))}. To be cheaper at any moment: a smaller S (the reader "
        "pays ~8 µs per pending segment), or deltas kept in Redis in a form readers concatenate "
        "(the added rows as Arrow IPC beside each record).",
    ]


def _analysis_watch(w: dict[str, Any]) -> list[str]:
    paced, b2b = w.get("paced", {}), w.get("back_to_back", {})

    def lat(run: dict[str, Any], key: str) -> float | None:
        value: float | None = get(run, "arrival_minus_broker_ts", key)
        return value

    p90_paced, p90_b2b = lat(paced, "p90_ms") or 0.0, lat(b2b, "p90_ms") or 0.0
    floor = w.get("floor", {})
    text = (
        f"- **Notifications: p99 {ms(lat(paced, 'p99_ms'))} paced, {ms(lat(b2b, 'p99_ms'))} back to back** "
        f"(median {ms(lat(paced, 'median_ms'))} / {ms(lat(b2b, 'median_ms'))}). The materializer judges each "
        "record and sends the poll batch's Redis writes (one pipeline of EVALSHA: head, stream entry and "
        "PUBLISH) before it reads on; key frames and archives are written by a background thread, so a "
        "notification never waits for one. The slowest samples (up to "
        f"{ms(max(lat(paced, 'max_ms') or 0.0, lat(b2b, 'max_ms') or 0.0))}; paced at commit indices "
        f"{spikes(paced)[:6]}, back to back {spikes(b2b)[:6]}) are spread over the run: writer, broker, "
        "materializer, watcher and Redis share two cores."
    )
    if lat(floor, "median_ms") is not None:
        text += (
            " The floor, the same hops with no segcat in them (a bare producer, a bare consumer that "
            "PUBLISHes each record, a subscriber; `bench/watch_floor.py`, paced the same, same run): median "
            f"{ms(lat(floor, 'median_ms'))}, p99 {ms(lat(floor, 'p99_ms'))}, max {ms(lat(floor, 'max_ms'))}; "
            "the difference is what judging the record, the Redis script and decoding the event cost here."
        )
    if p90_b2b > 2 * p90_paced and p90_b2b > 10:
        text += (
            f" Back to back (~{b2b.get('commits_per_s', 0):,.0f} commits/s) notifications also queue (p90 "
            f"{ms(p90_b2b)}): writer, broker, materializer and watcher share two cores."
        )
    return ["", text]


def _analysis_catchup(cu: dict[str, Any]) -> list[str]:
    _, mid, split = _median_run(cu)
    prof, floor = cu.get("profile"), get(cu, "replay_floor", "commits_per_s")

    def s(name: str) -> str:
        value = _fn(prof, name)
        return "–" if value is None else f"{value / 1000:.1f} s"

    floor_text = ""
    if floor is not None:
        floor_text = (
            f"A bare replay of the same log (fetch + decode + rules, nothing written) runs at {floor:,.0f} "
            "commits/s"
            + (
                ": the target is within reach of the per-record path itself; the gap is what the "
                "materializer writes per record and per key frame. "
                if floor >= 20_000
                else ", so even with every write moved off the per-record path the target is only just "
                f"{'within' if floor >= 0.9 * 20_000 else 'out of'} reach in Python. "
            )
        )
    return [
        "",
        f"- **Catch-up: {cu['median_commits_per_s']:,.0f} commits/s, target 20,000.** In the median run "
        + ", ".join(f"{SPLIT_LABELS.get(k, k)} took {v:.1f} s" for k, v in split[:3])
        + f" of {mid['seconds_from_ready']:.1f} s. "
        + floor_text
        + f"Profiled run (whole run): Redis `flush` {s('flush')}, `KeyframePublisher.write_keyframe` "
        f"{s('write_keyframe')} (of which Parquet writes {s('to_parquet')}, `seal` {s('seal')}, `to_ipc` "
        f"{s('to_ipc')}, `put_keyframe` {s('put_keyframe')}, re-encoding segments to Avro in `segment_rows` "
        f"{s('segment_rows')}, and the key-frame metadata — a 20,000-entry dedup window as JSON — dumped by "
        f"`_meta` {s('_meta')} and parsed again by `verify` ({s('raw_decode')} of JSON decoding)), "
        f"`apply_record` {s('apply_record')}, the tick's `get_watermark_offsets` "
        f"{s('get_watermark_offsets')}, `check_redis` {s('check_redis')}, prometheus `labels()` "
        f"{s('labels')}.",
        "  Suggestions: (1) key frames: during catch-up, write the intermediate ones to object storage only "
        "(not also as IPC to Redis), and carry each segment's Avro bytes from the record instead of "
        "re-encoding them in `keyframe.segment_rows`; (2) the Redis writes are pipelined per poll batch, but "
        "each record still runs the record script and appends a delta that the next key frame trims: while "
        "catching up (`notify=False`) skip them and `resync_redis()` once caught up (it writes key frame + "
        "head already); (3) keep the dedup window out of the JSON metadata (a column, or a separate small "
        "object) so a key frame does not serialize and re-parse it; (4) `check_redis` (every tick) transfers "
        "and hashes the whole Redis key frame to learn that it exists — `HGET … version` would do (at 1M "
        "segments that is a 70 MB transfer per second); (5) the tick's `get_watermark_offsets(cached=False)` "
        "blocks the poll loop on a broker round trip — the consumer's own lag statistics would do; (6) cache "
        "the prometheus children instead of `labels()` per record; (7) `RedisStore` re-parses the table name "
        f"(`TableName.parse`, {s('parse')} in the profile) several times per record from the qualified "
        "string the materializer passes: pass the `TableName`.",
    ]
