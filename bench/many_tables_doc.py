"""The ``many-tables`` tables: the doc block, the run report's details and the targets, from a
results JSON alone (so ``--render`` redoes them)."""

from __future__ import annotations

from typing import Any

from bench.report import get, mb, ms, run_table, table, target, targets_table, targets_text

WATCH_P99_GOAL_MS = 20.0
"""Issue 24: commit → ``watch()`` p99 at 10,000 tables."""
NOISE_MS = 5.0
"""How far the p99 at the largest size may sit above the p99 at one table and still count as
"no worse beyond the machine's noise" (the shared 2-core machine's jitter between two runs of
the same scenario is of this order)."""


def _long(value: float | None) -> str:
    """A duration in ms, in seconds from one second on (the targets mix both)."""
    return ms(value, seconds_from=1000.0)


def _s(value: float | None, digits: int = 1) -> str:
    return "–" if value is None else f"{value:,.{digits}f} s"


def sizes(results: dict[str, Any]) -> list[tuple[int, dict[str, Any]]]:
    """The measured sizes, smallest first."""
    return sorted(((int(n), s) for n, s in (results.get("sizes") or {}).items()), key=lambda item: item[0])


FAILED = "**failed**"
STEPS = ("create", "heads", "watch", "serve", "failover")


def _latency(watch: dict[str, Any] | None) -> str:
    if watch and "error" in watch:
        return FAILED
    figures = get(watch, "arrival_minus_broker_ts")
    if not figures:
        return "–"
    text = " / ".join(ms(figures[k]) for k in ("median_ms", "p99_ms", "max_ms"))
    missing = (watch or {}).get("missing")
    return text + (f" ({missing} missed)" if missing else "")


def _create(create: dict[str, Any] | None) -> str:
    if not create:
        return "–"
    if "error" in create:
        return FAILED
    return f"{_s(create['seconds'])} ({ms(create['per_table_ms'])} each)"


def _rss(size: dict[str, Any]) -> str:
    after = get(size, "watch", "rss_bytes_after")
    start = get(size, "heads", "rss_bytes")
    return f"{mb(start)} / {mb(after)}" if after is not None else mb(start)


def _page(serve: dict[str, Any] | None) -> str:
    if not serve:
        return "–"
    if "error" in serve:
        return FAILED
    page = ms(get(serve, "first_page", "median_ms"))
    return page if serve.get("paged") else f"{page} (whole list)"


def _failover(size: dict[str, Any]) -> str:
    f = size.get("failover")
    if not f:
        return "–"
    if "error" in f:
        return FAILED
    return f"{_s(f.get('kill_to_fresh_s'), 2)} ({f['sample']} of {f['moved_tables']:,} moved)"


def _broker(costs: dict[str, Any] | None) -> str:
    if not costs:
        return "–"
    counts = [("–" if costs.get(k) is None else f"{costs[k]:,}") for k in ("open_files", "memory_maps")]
    return f"{counts[0]}, {counts[1]}, {mb(costs.get('rss_bytes'))}"


def render(results: dict[str, Any]) -> str:
    """The run, then one row per catalog size, then the targets."""
    p = results.get("params") or {}
    methods = sorted({m for _, s in sizes(results) if (m := get(s, "create", "method"))})
    served = [sv for _, s in sizes(results) if (sv := s.get("serve")) and "paged" in sv]
    pages = sorted({"paged (`limit`)" if sv["paged"] else "whole list" for sv in served})
    heap = get(results, "broker", "kafka_heap") or "?"
    session_s = p.get("session_timeout_ms", 0) / 1000
    rows = [
        (
            "Stack",
            f"the benchmark's own: one KRaft node (`-Xmx{heap}`), Redis",
        ),
        ("Create", ", ".join(f"`{m}`" if m == "create_tables" else m for m in methods) or "–"),
        (
            "Watch",
            f"{p.get('active_tables', '?')} active tables, {p.get('watch_commits', 0):,} commits "
            f"{p.get('watch_pause_s', 0) * 1000:.0f} ms apart",
        ),
        ("`/api/tables`", ", ".join(pages) or "–"),
        (
            "Failover",
            f"{p.get('materializers', 3)} materializers, session timeout {session_s:.0f} s, "
            f"kill -9 of the one owning most; {p.get('failover_sample', '?')} of its tables committed to",
        ),
    ]
    out = run_table(results, rows)
    header = (
        "Tables",
        "Create",
        "Start → every head in Redis",
        "Materializer RSS (start / after commits)",
        "Commit → `watch()` p50 / p99 / max",
        "`/api/tables` first page",
        "Kill → moved heads fresh",
    )
    body = [
        (
            f"{n:,}",
            _create(s.get("create")),
            FAILED if "error" in (s.get("heads") or {}) else _s(get(s, "heads", "since_start_s"), 2),
            _rss(s),
            _latency(s.get("watch")),
            _page(s.get("serve")),
            _failover(s),
        )
        for n, s in sizes(results)
    ]
    out += ["", *table(header, body)]
    if results.get("targets"):
        out += ["", *targets_table(results["targets"], _long)]
    return "\n".join(out)


def details(results: dict[str, Any]) -> str:
    """Per size: the heads wait, the watch figures, the page, the failover step by step."""
    out: list[str] = []
    for n, s in sizes(results):
        out += [f"## {n:,} tables", ""]
        heads = s.get("heads") or {}
        rows: list[tuple[str, str]] = [
            ("create", f"{_create(s.get('create'))}, {get(s, 'create', 'method') or '–'}"),
            ("broker after create: open files, memory maps, RSS", _broker(s.get("broker"))),
            ("first head in Redis", _s(heads.get("first_s"), 2)),
            ("every head in Redis (polls)", f"{_s(heads.get('seconds'), 2)} ({heads.get('polls', '–')})"),
        ]
        rows += [(f"{key}: failed", str(s[key]["error"])) for key in STEPS if "error" in (s.get(key) or {})]
        if (w := s.get("watch")) and "error" not in w:
            f = w.get("arrival_minus_broker_ts") or {}
            rows += [
                (
                    "watch: commits, rate, warm-up rounds",
                    f"{w['commits']:,}, {w['commits_per_s']}/s, {w['warmup_rounds']}",
                ),
                ("watch: p90 / mean", f"{ms(f.get('p90_ms'))} / {ms(f.get('mean_ms'))}"),
            ]
        if (sv := s.get("serve")) and "error" not in sv:
            rows += [
                (
                    "serve: path, entries, start",
                    f"`{sv['path']}`, {sv['entries']}, {_s(sv['server_start_s'], 2)}",
                )
            ]
        if (f := s.get("failover")) and "error" not in f:
            rows += [
                ("failover: tables per instance", ", ".join(f"{m} {c:,}" for m, c in f["owned"].items())),
                ("failover: start → tables shared", _s(f["assigned_s"], 2)),
                (
                    "failover: steady commit → heads (before the kill)",
                    _s(get(f, "steady", "since_commit_s"), 3),
                ),
                ("failover: kill → coordinator shows 2 members", _s(f.get("kill_to_reassigned_s"), 2)),
                (
                    "failover: survivors' RSS",
                    ", ".join(f"{m} {mb(v)}" for m, v in f["survivors_rss_bytes"].items()),
                ),
            ]
        out += [*table(("Figure", "Value"), rows, "ll"), ""]
    if (per_table := results.get("rss_per_table_bytes")) is not None:
        out += [
            "## Materializer memory per table",
            "",
            f"RSS after start, (largest size − smallest) ÷ the tables between them: {per_table:,} bytes",
            "",
        ]
    if timings := results.get("timings"):
        out += [
            "## Phases of the run",
            "",
            *table(("phase", "seconds"), [(k, f"{v:,}") for k, v in timings.items()]),
        ]
    return "\n".join(out)


def evaluate(results: dict[str, Any]) -> None:
    """The issue's targets, on the largest size measured against the smallest."""
    measured = sizes(results)
    if not measured:
        results["targets"] = []
        return
    (small_n, small), (large_n, large) = measured[0], measured[-1]
    rss_small, rss_large = get(small, "heads", "rss_bytes"), get(large, "heads", "rss_bytes")
    if large_n != small_n and rss_small is not None and rss_large is not None:
        results["rss_per_table_bytes"] = round((rss_large - rss_small) / (large_n - small_n))
    p99_small = get(small, "watch", "arrival_minus_broker_ts", "p99_ms")
    p99_large = get(large, "watch", "arrival_minus_broker_ts", "p99_ms")
    targets = []
    if "watch" in results.get("scenarios", ["watch"]):
        targets.append(
            target(f"commit → `watch()` p99 at {large_n:,} tables", p99_large, WATCH_P99_GOAL_MS, "ms")
        )
    if large_n != small_n and p99_small is not None:
        targets.append(
            target(
                f"p99 at {large_n:,} tables no worse than at {small_n:,} (+ {NOISE_MS:.0f} ms of noise)",
                p99_large,
                p99_small + NOISE_MS,
                "ms",
            )
        )
    session_s = (get(results, "params", "session_timeout_ms") or 0) / 1000
    recovery_s = get(large, "heads", "since_start_s")
    fresh_s = get(large, "failover", "kill_to_fresh_s")
    if get(large, "failover") is not None and recovery_s is not None:
        targets.append(
            target(
                f"kill → moved heads fresh at {large_n:,} tables (session timeout + one instance's start)",
                None if fresh_s is None else fresh_s * 1000,
                (session_s + recovery_s) * 1000,
                "ms",
            )
        )
    results["targets"] = targets


def summary_text(results: dict[str, Any]) -> str:
    """The doc block and the targets, one line each, for the terminal."""
    return render(results) + "\n\n" + targets_text(results.get("targets") or [], _long)
