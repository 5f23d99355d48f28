"""The ``read-paths`` tables: the doc block and the run report's details, from a results JSON."""

from __future__ import annotations

from typing import Any

from bench import report
from bench.report import get, mb, profile_table, ratio, run_table, table, targets_table


def ms(value: float | None) -> str:
    """Durations as these tables print them: one decimal from 10 ms, seconds from 10 s."""
    return report.ms(value, mid=1, seconds_from=10_000)


def _cell(timing: dict[str, Any] | None, reps: int = 5) -> str:
    """A median, with ``(n×)`` when fewer repetitions than planned fitted the time budget."""
    if timing is None:
        return "–"
    return ms(timing["median_ms"]) + (f" ({timing['reps']}×)" if timing.get("reps", reps) < reps else "")


def render(results: dict[str, Any]) -> str:
    """The run, then one table per scenario (peers in the same run beside segcat), the targets."""
    reps = results["params"].get("reps", 5)
    pk = results["environment"]["packages"]
    peers = (
        f"deltalake {pk['deltalake']}, pyiceberg {pk['pyiceberg']} (SQLAlchemy {pk['SQLAlchemy']}, sqlite), "
        f"pyarrow {pk['pyarrow']}; warehouse: a local temporary directory"
    )
    out = run_table(results, [("Peers", peers)])
    if ol := results.get("open_list"):
        out += ["", *_open_list(ol, reps)]
        if peer := ol.get("peers"):
            out += ["", *_peers(peer, ol["segcat"].get(str(peer["size"]), {}))]
    if tt := results.get("time_travel"):
        out += ["", *_time_travel(tt, reps)]
    if w := results.get("watch"):
        out += ["", *_watch(w)]
    if cu := results.get("catchup"):
        out += ["", *_catchup(cu)]
    if bl := results.get("bulk_load"):
        out += ["", *_bulk_load(bl, reps)]
    out += ["", *targets_table(results["targets"], ms)]
    return "\n".join(out)


def details(results: dict[str, Any]) -> str:
    """How the tables were built, the Redis path step by step, the key-frame what-ifs, the
    catch-up's parts, the profiles and any earlier run compared."""
    out: list[str] = []
    if base := results.get("baseline"):
        rows = [
            (key, fmt(value), fmt(base["figures"].get(key)))
            for key, value in results["headline"].items()
            if value is not None or base["figures"].get(key) is not None
            for fmt in [(lambda v: "–" if v is None else f"{v:,.0f}") if "commits/s" in key else ms]
        ]
        out += [
            f"## Against `{base['path']}` (git {base['git']}, {base['date_utc']})",
            "",
            *table(("figure", "this run", "earlier run"), rows),
            "",
        ]
    if ol := results.get("open_list"):
        out += _open_list_details(ol)
    if tt := results.get("time_travel"):
        out += ["## cProfile: time travel (ms per call)", "", *profile_table(tt.get("profile"), top=12), ""]
    if w := results.get("watch"):
        out += _watch_details(w)
    if cu := results.get("catchup"):
        out += _catchup_details(cu)
    if bl := results.get("bulk_load"):
        out += ["## cProfile: open + list after the bulk load", "", *profile_table(bl.get("profile")), ""]
    return "\n".join(out)


# --------------------------------------------------------------------------- 1. open + list

PATHS = (
    ("redis", "Redis: key frame + deltas, `files_arrow()`"),
    ("redis_files_list", "Redis, `files()`"),
    ("object_store", "object store: key frame"),
    ("object_store_kafka_tail", "object store + Kafka tail"),
    ("kafka", "Kafka replay"),
    ("open_table", "`Catalog.table()` alone"),
)


def _open_list(ol: dict[str, Any], reps: int) -> list[str]:
    seg: dict[str, Any] = ol["segcat"]
    return table(
        ("Open + list, live segments", *(label for _, label in PATHS)),
        [(f"{int(s):,}", *(_cell(c.get(p), reps) for p, _ in PATHS)) for s, c in seg.items()],
    )


def _peers(peers: dict[str, Any], seg: dict[str, Any]) -> list[str]:
    redis_ms = get(seg, "redis", "median_ms")
    d, i = peers["delta"]["details"], peers["iceberg"]["details"]
    rows = [
        ("segcat: `snapshot()` + `files_arrow()` (Redis)", _cell(seg.get("redis")), "1.0×"),
        ("segcat: key frame Parquet (object store)", _cell(seg.get("object_store")), ""),
        (
            f"delta-rs {d.get('deltalake_version', '')}: `DeltaTable(path)` + `file_uris()`",
            _cell(peers["delta"]),
            ratio(peers["delta"]["median_ms"], redis_ms),
        ),
        (
            f"pyiceberg {i.get('pyiceberg_version', '')}: `load_table` + `scan().plan_files()`",
            _cell(peers["iceberg"]),
            ratio(peers["iceberg"]["median_ms"], redis_ms),
        ),
    ]
    return table((f"Open + list {int(peers['size']):,} files", "Median", "÷ segcat (Redis)"), rows)


def _open_list_details(ol: dict[str, Any]) -> list[str]:
    seg: dict[str, Any] = ol["segcat"]
    out = [
        "## The tables listed",
        "",
        *table(
            (
                "live segments",
                "segments per bulk commit",
                "commits",
                "build: writer + materializer",
                "writer alone",
                "key frames",
                "Redis key frame (IPC)",
                "live at the key frame",
            ),
            [
                (
                    f"{int(s):,}",
                    f"{c['table']['segments_per_bulk_commit']:,}",
                    f"{c['table']['commits']:,}",
                    f"{c['table']['build_s']:,.0f} s",
                    f"{c['table'].get('writer_s', 0):,.0f} s",
                    c["table"].get("keyframes_written", "–"),
                    mb(get(c, "redis_phases", "keyframe_ipc_bytes")),
                    f"{get(c, 'object_store', 'details', 'live_segments') or 0:,}",
                )
                for s, c in seg.items()
            ],
        ),
        "",
    ]
    if peers := ol.get("peers"):
        d, i = peers["delta"]["details"], peers["iceberg"]["details"]
        out += [
            "## The peers' tables",
            "",
            *table(
                ("system", "commits", "built in", "layout"),
                [
                    (
                        "delta-rs",
                        str(d.get("commits")),
                        f"{d.get('build_s')} s",
                        f"{d.get('checkpoint')}; checkpoints at {d.get('checkpoint_versions')}",
                    ),
                    (
                        "pyiceberg",
                        str(i.get("commits", "–")),
                        f"{i.get('build_s')} s",
                        f"{i.get('how')}; {i.get('manifests_at_head')} manifests; {i.get('catalog')}",
                    ),
                ],
                "lrrl",
            ),
            "",
        ]
    phases = {s: c["redis_phases"] for s, c in seg.items() if c.get("redis_phases")}
    if phases:
        steps = list(next(iter(phases.values()))["median_ms"])
        out += [
            "## The Redis path step by step (medians)",
            "",
            *table(
                ("step", *(f"{int(s):,}" for s in phases)),
                [(step, *(ms(p["median_ms"].get(step)) for p in phases.values())) for step in steps],
            ),
            "",
        ]
    for size, c in seg.items():
        if w := c.get("whatif"):
            out += _whatif(int(size), w)
    for name, prof in ol.get("profiles", {}).items():
        out += [f"## cProfile: open + list from Redis, {name.split('_', 1)[1]}", "", *profile_table(prof), ""]
    return out


def _whatif(size: int, w: dict[str, Any]) -> list[str]:
    header = (
        "Redis key frame variant",
        "size",
        "redis-py GET",
        "bare-socket GET",
        "IPC read",
        "SHA-256",
        "CRC-32",
    )
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
    return [
        f"## Key-frame variants at {size:,} segments (`bench/read_whatif.py`)",
        "",
        *table(header, rows),
        "",
        *table(
            (
                f"Listing {w['rows']:,} paths",
                "`Snapshot.files()`",
                "Arrow array only",
                "`to_pylist()` only",
                "key-frame content checksum",
            ),
            [
                (
                    "",
                    ms(li["files_ms"]),
                    ms(li["arrow_array_only_ms"]),
                    ms(li["to_pylist_only_ms"]),
                    ms(w.get("keyframe_checksum_ms")),
                )
            ],
        ),
        "",
    ]


# --------------------------------------------------------------------------- 2. time travel


def _time_travel(tt: dict[str, Any], reps: int) -> list[str]:
    seg, d, i, t = tt["segcat"], tt["delta"], tt["iceberg"], tt["table"]
    sd = seg["details"]
    rows = [("segcat", f"`table.snapshot(version={sd['version']})` + `files()`", _cell(seg, reps), "1.0×")]
    if only := tt.get("segcat_object_store_only"):
        what = 'the same, `sources=("object-store",)`'
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
            f"`scan(snapshot_id=<snapshot {i['details'].get('snapshot_index')}>)` + `plan_files()`",
            _cell(i, reps),
            ratio(i["median_ms"], seg["median_ms"]),
        ),
    ]
    what = (
        f"Time travel: {t['commits']} commits × {t['live_segments'] // t['commits']:,} segments, "
        f"{sd['live_segments']:,} live at the version"
    )
    return table((what, "call", "median", "÷ segcat"), rows, "llrr")


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
        s = run["arrival_minus_broker_ts"]
        if key == "floor":
            label = (
                f"floor, no segcat: bare producer → consumer → PUBLISH ({run['pause_s'] * 1000:.0f} ms pause)"
            )
            received, rate = f"{s['count']:,} / {run['commits'] - s['count']}", "–"
        else:
            label = (
                f"segcat, {run['pause_s'] * 1000:.0f} ms pause" if run["pause_s"] else "segcat, back to back"
            )
            received, rate = f"{run['received']:,} / {run['missing']}", f"{run['commits_per_s']:,.0f}"
        rows.append(
            (
                label,
                f"{run['commits']:,}",
                rate,
                *(ms(s[k]) for k in ("median_ms", "p90_ms", "p99_ms", "max_ms")),
                received,
            )
        )
    header = (
        "Commit → `watch()` (broker time → arrival)",
        "commits",
        "commits/s",
        "p50",
        "p90",
        "p99",
        "max",
        "received / missing",
    )
    return table(header, rows)


def _watch_details(w: dict[str, Any]) -> list[str]:
    rows = [
        (
            key,
            ", ".join(f"{k}: {v}" for k, v in run["sources"].items()),
            f"{run['arrival_minus_commit_return']['median_ms']:.2f} ms",
            f"{run['arrival_minus_commit_return']['p99_ms']:.2f} ms",
            str(spikes(run)[:12]),
        )
        for key, run in w.items()
        if key != "floor"
    ]
    header = (
        "writer",
        "via",
        "− `append()` return p50",
        "− `append()` return p99",
        "samples over 40 ms (index)",
    )
    return ["## Watch: how notifications arrived", "", *table(header, rows, "llrrl"), ""]


# --------------------------------------------------------------------------- 4. catch-up

SPLIT_LABELS = {
    "keyframes_and_archives": "key frames + commit archives (`write_keyframe`)",
    "redis_writes": "Redis writes (`RedisPublisher.publish` + `flush`)",
    "decode_and_rules": "decode + rules (`rules.apply_record`)",
    "ticks": "ticks (`_tick`)",
    "recovery": "recovery",
    "rest": "the rest (Kafka polling, events, metrics, bookkeeping, group join)",
}


def _median_run(cu: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The timed runs by speed and the median one."""
    timed = sorted((r for r in cu["runs"] if not r["profiled"]), key=lambda r: r["commits_per_s"])
    return timed, timed[len(timed) // 2]


def _catchup(cu: dict[str, Any]) -> list[str]:
    timed, _ = _median_run(cu)
    rows = [
        (
            "materializer, cold start",
            f"{cu['median_seconds']:.1f} s",
            f"{cu['median_commits_per_s']:,.0f}",
            ", ".join(f"{r['commits_per_s']:,.0f}" for r in timed),
        )
    ]
    if floor := cu.get("replay_floor"):
        rows.append(
            (
                "floor: bare replay in-process (fetch, decode, rules)",
                _cell(floor),
                f"{floor['commits_per_s']:,.0f}",
                "",
            )
        )
    what = f"Catch-up of {cu['records']:,} one-segment commits"
    return table((what, "Median", "Commits/s", "Runs (commits/s)"), rows, "lrrl")


def _catchup_details(cu: dict[str, Any]) -> list[str]:
    _, mid = _median_run(cu)
    split = sorted(mid.get("split_s", {}).items(), key=lambda kv: kv[1], reverse=True)
    b = cu["build"]
    out = [
        "## Catch-up: the median run",
        "",
        *table(
            ("part (bench-only timers, exclusive)", "wall time"),
            [(SPLIT_LABELS.get(k, k), f"{v:.1f} s") for k, v in split]
            + [
                ("process CPU", f"{mid['process_cpu_s']:.1f} s"),
                ("wall time from `ready`", f"{mid['seconds_from_ready']:.1f} s"),
                ("group join and assignment", f"{mid['seconds_ready_to_assigned']:.1f} s"),
                ("key frames written", f"{mid['keyframes']:.0f}"),
                (
                    "commits/s from the first applied record",
                    f"{cu['median_commits_per_s_after_first_record']:,.0f}",
                ),
                (f"the log: {b['writers']} writer processes", f"{b['build_s']:,.0f} s"),
            ],
            "lr",
        ),
        "",
        "## cProfile: catch-up, the materializer thread, by own time",
        "",
        *profile_table(cu.get("profile"), key="by_own_time", top=15),
        "",
    ]
    if get(cu, "profile", "focus"):
        out += [
            "## cProfile: catch-up, selected functions",
            "",
            *profile_table(cu["profile"], key="focus", top=20),
            "",
        ]
    return out


# --------------------------------------------------------------------------- 5. bulk load


def _bulk_load(bl: dict[str, Any], reps: int) -> list[str]:
    rows = [
        (
            f"+{m['at_s']:.0f} s",
            f"{m['redis_keyframe_version']} → {m.get('redis_keyframe_version_after')}",
            m["origin"],
            _cell(m["open_list"], reps),
            _cell(m["open_list_files"], reps),
        )
        for m in bl["moments"]
    ]
    what = (
        f"Open + list after {bl['commits']} commits × {bl['per_commit']:,} segments "
        f"(last version {bl['last_version']})"
    )
    return table(
        (what, "Redis key frame (before → after)", "answered by", "`files_arrow()`", "`files()`"),
        rows,
        "lrlrr",
    )
