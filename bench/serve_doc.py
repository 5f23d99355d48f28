"""The ``serve`` tables: the doc block and the run report's details, from a results JSON."""

from __future__ import annotations

from typing import Any

from bench import report
from bench.report import ms, run_table, table, targets_table
from bench.runner import Results
from bench.serve_snapshot import ARROW

SSE_STAGES = (
    ("append", "`append()` call (produce, delivery report, verdict)"),
    ("send_to_broker_ts", "commit start → broker timestamp (ms resolution)"),
    ("broker_ts_to_notification", "broker timestamp → the materializer's Redis notification"),
    ("commit_to_notification", "commit start → Redis notification"),
    ("notification_to_event", "Redis notification → SSE event at the client (all pairs)"),
    ("first_client_per_version", "commit start → the first client's event, per version"),
    ("last_client_per_version", "commit start → the last client's event, per version"),
    ("fan_out_span_per_version", "fan-out span: last − first client, per version"),
    ("append_return_to_event", "`append()` return → event (all pairs)"),
)
PROCS = ("server", "clients", "materializer", "broker", "benchmark")
SNAPSHOT_LABELS = {
    "json_all": "JSON, one page (`?limit={full:,}`)",
    "json_paged": "JSON, pages of {paged:,} following `next`",
    "json_default_page": "JSON, the default page (1,000)",
    "arrow": "Arrow IPC stream (`Accept: " + ARROW + "`)",
}
IDLE = ("asyncio/runners.py", "select", "epoll", "run_forever", "run_until_complete")
"""Profile rows that are the event loop waiting (uvloop's C loop counts its idle time as its own)."""


def _kb(n: float | None) -> str:
    if n is None:
        return "–"
    return f"{n / 1e6:,.1f} MB" if n >= 1e6 else f"{n / 1e3:,.1f} kB"


def _sse_runs(results: Results) -> list[Results]:
    return [results[k] for k in ("sse1", "sse1000") if k in results]


def render(results: Results) -> str:
    """The run, commit → SSE event by the number of clients, the snapshot as JSON and as Arrow,
    the materializer's tick by the tables it follows, and the targets."""
    pk = results.get("packages", {})
    server = (
        f"`segcat serve` (one process): uvicorn {pk.get('uvicorn')} (uvloop {pk.get('uvloop')}, "
        f"httptools {pk.get('httptools')}), FastAPI {pk.get('fastapi')}, "
        f"sse-starlette {pk.get('sse-starlette')}"
    )
    lines = run_table(results, [("Server", server)])
    if sse := _sse_runs(results):
        lines += ["", *_sse(sse)]
    if snap := results.get("snapshot"):
        lines += ["", *_snapshot(snap)]
    if tick := results.get("tick"):
        lines += ["", *_tick(tick)]
    lines += ["", *targets_table(results.get("targets", []), ms)]
    if (digest := results.get("source_digest")) and digest.get("changed"):
        lines += ["", f"> **segcat's source changed during this run** ({digest['start']} → {digest['end']})."]
    return "\n".join(lines)


def details(results: Results) -> str:
    """Each pass, where the time goes stage by stage, the slowest pairs, CPU, the profile, the
    collector's pauses, the snapshot route's steps, memory and other work on the machine."""
    lines: list[str] = []
    if sse := _sse_runs(results):
        lines += _sse_details(sse)
    if prof := results.get("profile"):
        lines += _profile(prof)
    if gc_run := results.get("gc"):
        lines += _gc(gc_run)
    if snap := results.get("snapshot"):
        steps = snap["server_steps"]
        lines += [
            "## The snapshot route's steps, in-process (medians)",
            "",
            *table(("Step", "Median"), [(k, ms(v)) for k, v in steps["median_ms"].items()]),
            "",
        ]
    rss = [
        (key, f"{results[key]['server_rss_mb']['VmHWM']:,.0f} MB")
        for key in ("sse1", "sse1000", "snapshot", "tick")
        if (results.get(key) or {}).get("server_rss_mb")
    ]
    if rss:
        lines += [
            "## The server's peak resident memory (`VmHWM`) after each scenario",
            "",
            *table(("", ""), rss),
            "",
        ]
    other = [
        (when, o["command"], f"{o['cpu_pct']} %")
        for when in ("other_work_at_start", "other_work_at_end")
        for o in results.get(when) or []
    ]
    if other:
        lines += [
            "## Other work on the machine (CPU over 3 s)",
            "",
            *table(("when", "process", "CPU"), other),
            "",
        ]
    if (errors := results.get("server_log")) and errors.get("error_lines"):
        lines += [
            "## ERROR lines in the server's log",
            "",
            *table(("message", "count"), list(errors["messages"].items())),
            "",
        ]
    return "\n".join(lines)


# --------------------------------------------------------------------------- commit → SSE event


def _sse(sse: list[Results]) -> list[str]:
    rows = [
        (
            f"{r['clients']:,}",
            f"{r['commits']} ({r['pause_s'] * 1000:.0f} ms apart"
            + (f", {len(r['passes'])} passes" if len(r.get("passes", [])) > 1 else "")
            + ")",
            f"{r['pairs']:,}",
            *(ms(r["commit_to_event"][k]) for k in ("median_ms", "p90_ms", "p99_ms", "max_ms")),
            f"{r['missing_pairs']:,}",
        )
        for r in sse
    ]
    header = ("Commit → SSE event: clients", "Timed commits", "Pairs", "p50", "p90", "p99", "Max", "Missing")
    return table(header, rows)


def _per_event(r: Results) -> str:
    cpu = r["cpu"]["cpu_s"].get("server")
    return "–" if cpu is None or not r["pairs"] else f"{cpu * 1e6 / r['pairs']:,.0f} µs"


def _sse_details(sse: list[Results]) -> list[str]:
    def p50_p99(s: dict[str, Any] | None) -> list[str]:
        return ["–", "–"] if not s else [ms(s["median_ms"]), ms(s["p99_ms"])]

    header = ["Stage"]
    for r in sse:
        header += [f"{r['clients']:,}: p50", f"{r['clients']:,}: p99"]
    stages = [[label, *(cell for r in sse for cell in p50_p99(r.get(key)))] for key, label in SSE_STAGES]
    passes = [
        (
            f"{r['clients']:,}",
            str(number),
            ms(one["commit_to_event"]["median_ms"]),
            ms(one["commit_to_event"]["p99_ms"]),
            ms(one["commit_to_event"]["max_ms"]),
            ms(one["fan_out_span_per_version"]["p99_ms"]),
            "–" if one["server_cpu_us_per_event"] is None else f"{one['server_cpu_us_per_event']:,.0f} µs",
        )
        for r in sse
        for number, one in enumerate(r.get("passes", []), 1)
    ]
    slowest = [
        (
            f"{r['clients']:,}",
            f"{r['slowest_1pct']['pairs']:,}",
            ms(r["slowest_1pct"]["commit_to_event_median_ms"]),
            ms(r["slowest_1pct"]["commit_to_notification_median_ms"]),
            ms(r["slowest_1pct"]["notification_to_event_median_ms"]),
        )
        for r in sse
    ]
    cpu = [
        (
            f"{r['clients']:,}",
            f"{r['cpu']['wall_s']:.1f} s",
            f"{r['cpu'].get('machine_busy_pct', 0):.0f} %",
            *(f"{r['cpu']['cpu_share_pct'].get(k, 0):.0f} %" for k in PROCS),
            _per_event(r),
        )
        for r in sse
    ]
    return [
        "## Commit → SSE event, stage by stage (the Redis notification as a plain subscriber saw it)",
        "",
        *table(header, stages),
        "",
        "## Each pass",
        "",
        *table(("Clients", "Pass", "p50", "p99", "Max", "Fan-out span p99", "Server CPU per event"), passes),
        "",
        "## The slowest 1 % of pairs (medians within them)",
        "",
        *table(
            ("Clients", "Pairs", "commit → event", "commit → notification", "notification → event"), slowest
        ),
        "",
        "## CPU while the timed commits ran (share of one core; machine: of both)",
        "",
        *table(("Clients", "Wall", "Machine busy", *PROCS, "Server CPU per event"), cpu),
        "",
    ]


def _busy_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if not any(word in r["function"] for word in IDLE)]


def _profile(prof: Results) -> list[str]:
    p = prof.get("profile") or {}
    lines = [
        f"## cProfile: the server's event loop, {prof['clients']:,} clients, {prof['commits']} commits "
        "(ms in all)",
        "",
        *table(
            ("Under the profiler: commit → event", "p50", "p99"),
            [("", ms(prof["commit_to_event"]["median_ms"]), ms(prof["commit_to_event"]["p99_ms"]))],
        ),
        "",
    ]
    if p:
        lines += report.profile_table({"by_own_time": _busy_rows(p["by_own_time"])}, "by_own_time", 12)
        lines += [
            "",
            *report.profile_table({"by_cumulative_time": _busy_rows(p["by_cumulative_time"])}, top=12),
        ]
        lines += [""]
    return lines


def _gc(r: Results) -> list[str]:
    gc_ = r["gc"]
    rows = [
        (g, f"{d['count']:,}", ms(d["total_ms"]), ms(d["median_ms"]), ms(d["max_ms"]))
        for g, d in gc_["by_generation"].items()
    ]
    hits = [
        (str(h["version"]), ms(h["pause_ms"]), ms(h["last_ms"]))
        for h in gc_["versions_in_flight_during_gen2"]
    ]
    return [
        f"## Garbage collection in the server, {r['clients']:,} clients "
        f"(threshold {tuple(gc_['threshold'] or ())})",
        "",
        *table(("Generation", "Collections", "Total pause", "Median", "Max"), rows),
        "",
        *table(
            ("Version in flight during a generation-2 pause", "pause", "commit start → its last client"), hits
        ),
        "",
    ]


# --------------------------------------------------------------------------- snapshot and tick


def _snapshot(snap: Results) -> list[str]:
    v = snap["variants"]
    rows = [
        (
            SNAPSHOT_LABELS[key].format(full=snap["full_limit"], paged=snap["paged_limit"]),
            v[key]["requests"],
            f"{v[key]['rows']:,}",
            _kb(v[key]["bytes"]),
            ms(v[key]["request"]["median_ms"]),
            ms(v[key]["decode"]["median_ms"]),
            ms(v[key]["total"]["median_ms"]),
        )
        for key in ("json_all", "json_paged", "json_default_page", "arrow")
        if key in v
    ]
    what = f"Snapshot of {snap['segments']:,} live segments (from {v['json_all'].get('origin', '?')})"
    return table((what, "Requests", "Segments", "Body", "Request", "Decode", "Total"), rows)


def _tick(tick: Results) -> list[str]:
    rows = [
        (
            f"{r['tables']:,}"
            + (
                ""
                if r.get("fetch_wait_max_ms") is None
                else f" (`fetch.wait.max.ms={r['fetch_wait_max_ms']}`)"
            ),
            ms((r["tick"] or {}).get("median_ms")),
            ms((r["tick"] or {}).get("max_ms")),
            ms(r["commit_to_notification"]["median_ms"]),
            ms(r["commit_to_notification"]["p99_ms"]),
        )
        for r in tick["runs"].values()
    ]
    header = (
        "Materializer tick: tables followed",
        "Tick median",
        "Tick max",
        "commit → notification p50",
        "p99",
    )
    return table(header, rows)
