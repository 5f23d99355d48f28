"""Commit → SSE event, ``bench.serve``'s scenarios ``sse1`` / ``sse1000``, and the same under
cProfile (``profile``) and with the collector's pauses timed (``gc``): passes of timed commits
on a fixed schedule, every (client, version) pair's latency and where the time goes."""

from __future__ import annotations

import json
import signal
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench import runner
from bench.read_processes import make_segment
from bench.runner import Results, percentile, progress, summary
from bench.serve_clients import ClientProcess, RedisProbe
from bench.serve_services import CpuWatch, Services, scrape
from segcat.catalog.protocol.names import table_name

if TYPE_CHECKING:  # the run's parameters; bench.serve imports this module
    from bench.serve import Params


def _signed(samples_ms: list[float]) -> dict[str, float]:
    out = summary(samples_ms)
    out["median_ms"] = round(percentile(sorted(samples_ms), 50), 4)
    out["negative_share"] = round(sum(1 for v in samples_ms if v < 0) / len(samples_ms), 3)
    return out


def sse_scenario(
    services: Services,
    table: str,
    clients: int,
    commits: int,
    pause_s: float,
    kind: str,
    around: tuple[Callable[[], None], Callable[[], None]] | None = None,
    repeats: int = 1,
) -> Results:
    """``repeats`` passes (each: a fresh client process, warm-up, ``commits`` timed commits); the
    figures pool every pass's pairs, ``passes`` has each pass's headline figures."""
    before = scrape(services.url)
    sends: dict[int, tuple[int, int]] = {}
    arrivals: list[list[tuple[int, int]]] = [[] for _ in range(clients)]
    seen: list[tuple[int, int, int]] = []
    usages: list[dict[str, Any]] = []
    passes: list[Results] = []
    connected: dict[str, float] = {}
    info: dict[str, Any] = {}
    warm_commits = 0
    for number in range(repeats):
        one = _sse_pass(services, table, clients, commits, pause_s, kind, around, f"p{number}")
        connected, info = one["connected"], one["got"]["info"]
        warm_commits += one["warm_commits"]
        alone = _latencies(
            one["sends"], one["got"], one["seen"], clients, commits, pause_s, 0, one["usage"], {}, {}, {}
        )
        passes.append(
            {
                "commit_to_event": alone["commit_to_event"],
                "fan_out_span_per_version": alone["fan_out_span_per_version"],
                "commit_to_notification": alone["commit_to_notification"],
                "missing_pairs": alone["missing_pairs"],
                "server_cpu_us_per_event": _per_event_us(alone),
                "loadavg_after": runner.loadavg(),
            }
        )
        sends.update(one["sends"])
        for index, received in enumerate(one["got"]["arrivals"]):
            arrivals[index].extend(received)
        seen.extend(one["seen"])
        usages.append(one["usage"])
        progress(
            f"  pass {number + 1}/{repeats}: p50 {alone['commit_to_event']['median_ms']:.1f} ms, p99 "
            f"{alone['commit_to_event']['p99_ms']:.1f} ms"
        )
    after = scrape(services.url)
    pooled = _latencies(
        sends,
        {"info": info, "arrivals": arrivals},
        seen,
        clients,
        commits * repeats,
        pause_s,
        warm_commits,
        _pool_usage(usages),
        before,
        connected,
        after,
    )
    pooled["passes"] = passes
    return pooled


def _per_event_us(r: Results) -> float | None:
    cpu = r["cpu"]["cpu_s"].get("server")
    return None if cpu is None or not r["pairs"] else round(cpu * 1e6 / r["pairs"], 1)


def _pool_usage(usages: list[dict[str, Any]]) -> dict[str, Any]:
    """CPU of several passes as one: seconds added up, shares over the summed wall time."""
    wall = sum(u["wall_s"] for u in usages)
    names = {name for u in usages for name in u["cpu_s"]}
    cpu = {name: round(sum(u["cpu_s"].get(name, 0.0) for u in usages), 2) for name in names}
    busy = [u["machine_busy_pct"] * u["wall_s"] for u in usages if "machine_busy_pct" in u]
    return {
        "wall_s": round(wall, 2),
        "cpu_s": cpu,
        "cpu_share_pct": {name: round(100 * value / wall, 1) for name, value in cpu.items()},
        **({"machine_busy_pct": round(sum(busy) / wall, 1)} if busy else {}),
        "passes": usages,
    }


def _sse_pass(
    services: Services,
    table: str,
    clients: int,
    commits: int,
    pause_s: float,
    kind: str,
    around: tuple[Callable[[], None], Callable[[], None]] | None,
    tag: str,
) -> dict[str, Any]:
    from segcat import load_catalog

    config = services.config
    name = table_name(table).qualified
    progress(f"{clients:,} SSE client(s) ({kind}) on {name}")
    client = ClientProcess(services.url, table, clients, kind)
    probe: RedisProbe | None = None
    prefix = f"s{clients}{tag}"
    try:
        client.wait(client.ready, "connected", 300)
        connected = scrape(services.url)
        progress(
            f"  connected ({connected.get('segcat_serve_sse_clients', 0):.0f} streams open on the server)"
        )
        probe = RedisProbe(config, table)
        sends: dict[int, tuple[int, int]] = {}
        counter = 0
        with load_catalog(config).load_table(table, writer_id=f"bench-serve-{clients}") as writer:

            def one() -> int:
                nonlocal counter
                counter += 1
                return writer.append([make_segment(prefix, counter)])

            services.wait_materialized(table, one(), 120)  # the materializer has the table
            warm_deadline = time.monotonic() + 120
            while not client.warmed.is_set():
                client.warm_target.value = one()
                client.warmed.wait(1.0)
                if time.monotonic() > warm_deadline:
                    raise TimeoutError("no warm-up version reached every SSE client")
            warm_commits = counter
            time.sleep(1.0)
            cpu = CpuWatch(services.pids(config))
            if around is not None:
                around[0]()
            cpu.start()
            client.timing.set()
            began = time.perf_counter()
            for k in range(commits):
                due = began + k * pause_s
                if (wait := due - time.perf_counter()) > 0:
                    time.sleep(wait)
                sent = time.time_ns()
                version = writer.append([make_segment(prefix, counter + 1)])
                counter += 1
                sends[version] = (sent, time.time_ns())
            client.stop_at.value = max(sends)
            client.wait(client.done, "every client has the last version", 120)
            usage = cpu.stop()
            got = client.result()
            if (window := got["info"].get("cpu_window_s")) is not None:  # it has exited by now
                usage["cpu_s"]["clients"] = round(window, 2)
                usage["cpu_share_pct"]["clients"] = round(100 * window / usage["wall_s"], 1)
            if around is not None:
                around[1]()
        seen = probe.result()
        probe = None
    finally:
        client.kill()
        if probe is not None:
            probe.stop.set()
            probe.proc.kill()
    time.sleep(1.0)
    return {
        "sends": sends,
        "got": got,
        "seen": seen,
        "usage": usage,
        "warm_commits": warm_commits,
        "connected": connected,
    }


def _latencies(
    sends: dict[int, tuple[int, int]],
    got: dict[str, Any],
    seen: list[tuple[int, int, int]],
    clients: int,
    commits: int,
    pause_s: float,
    warm_commits: int,
    usage: dict[str, Any],
    before: dict[str, float],
    connected: dict[str, float],
    after: dict[str, float],
) -> Results:
    notified = {v: (t, ts) for v, t, ts in seen}
    from_send: list[float] = []
    from_return: list[float] = []
    from_notification: list[float] = []
    per_version: dict[int, list[int]] = {v: [] for v in sends}
    missing = duplicates = 0
    per_client_p50: list[float] = []
    split: list[tuple[float, float]] = []
    for arrivals in got["arrivals"]:
        by_version: dict[int, int] = {}
        for version, at in arrivals:
            if version in by_version:
                duplicates += 1
            by_version.setdefault(version, at)
        mine: list[float] = []
        for version, (sent, returned) in sends.items():
            at = by_version.get(version)
            if at is None:
                missing += 1
                continue
            from_send.append((at - sent) / 1e6)
            mine.append((at - sent) / 1e6)
            from_return.append((at - returned) / 1e6)
            per_version[version].append(at)
            if version in notified:
                from_notification.append((at - notified[version][0]) / 1e6)
                split.append(((at - sent) / 1e6, (notified[version][0] - sent) / 1e6))
        if mine:
            per_client_p50.append(statistics.median(mine))
    commit_to_notification = [(notified[v][0] - s) / 1e6 for v, (s, _) in sends.items() if v in notified]
    send_to_broker = [notified[v][1] - s / 1e6 for v, (s, _) in sends.items() if v in notified]
    broker_to_notification = [(notified[v][0] / 1e6 - notified[v][1]) for v in sends if v in notified]
    append_ms = [(r - s) / 1e6 for s, r in sends.values()]
    spans = [(max(ts) - min(ts)) / 1e6 for ts in per_version.values() if ts]
    first = [(min(ts) - sends[v][0]) / 1e6 for v, ts in per_version.items() if ts]
    last = [(max(ts) - sends[v][0]) / 1e6 for v, ts in per_version.items() if ts]
    events = after.get("segcat_serve_events_sent_total", 0) - before.get("segcat_serve_events_sent_total", 0)
    split.sort()
    tail = split[max(0, len(split) - max(1, len(split) // 100)) :]  # the slowest 1 % of pairs
    return {
        "clients": clients,
        "commits": commits,
        "pause_s": pause_s,
        "warm_commits": warm_commits,
        "client": got["info"],
        "pairs": len(from_send),
        "missing_pairs": missing,
        "duplicate_events": duplicates,
        "notifications_seen": sum(1 for v in sends if v in notified),
        "commit_to_event": summary(from_send),
        "append_return_to_event": _signed(from_return),
        "append": summary(append_ms),
        "commit_to_notification": summary(commit_to_notification) if commit_to_notification else None,
        "send_to_broker_ts": _signed(send_to_broker) if send_to_broker else None,
        "broker_ts_to_notification": _signed(broker_to_notification) if broker_to_notification else None,
        "notification_to_event": summary(from_notification) if from_notification else None,
        "first_client_per_version": summary(first),
        "last_client_per_version": summary(last),
        "fan_out_span_per_version": summary(spans),
        "per_client_median": summary(per_client_p50) if per_client_p50 else None,
        "slowest_1pct": {
            "pairs": len(tail),
            "commit_to_event_median_ms": round(statistics.median(t for t, _ in tail), 3) if tail else None,
            "commit_to_notification_median_ms": round(statistics.median(n for _, n in tail), 3)
            if tail
            else None,
            "notification_to_event_median_ms": round(statistics.median(t - n for t, n in tail), 3)
            if tail
            else None,
        },
        "cpu": usage,
        "cpu_ms_per_commit": {k: round(v * 1000 / commits, 2) for k, v in usage["cpu_s"].items()},
        "server_metrics": {
            "sse_clients_connected": connected.get("segcat_serve_sse_clients"),
            "sse_clients_after_disconnect": after.get("segcat_serve_sse_clients"),
            "events_sent": events,
            "feeds": after.get("segcat_serve_feeds"),
        },
        "versions": [
            [v, sends[v][0], min(ts), max(ts), len(ts)] for v, ts in sorted(per_version.items()) if ts
        ],
        "samples_commit_to_event_ms": sorted(round(v, 3) for v in from_send)
        if len(from_send) <= 2_000
        else [round(percentile(sorted(from_send), q / 10), 3) for q in range(1, 1001)],
    }


def _hook_window(
    services: Services, dump: Path, *, timeout_s: float, poll_s: float, settle_s: float
) -> tuple[Callable[[], None], Callable[[], None]]:
    """Start and stop of a hook in the running server (SIGUSR1, SIGUSR2); stop returns once the
    hook has written ``dump``, plus ``settle_s`` because the file may still be being written."""
    server = services.server
    assert server is not None

    def start() -> None:
        server.send_signal(signal.SIGUSR1)

    def stop() -> None:
        server.send_signal(signal.SIGUSR2)
        deadline = time.monotonic() + timeout_s
        while not dump.exists() and time.monotonic() < deadline:
            time.sleep(poll_s)
        time.sleep(settle_s)

    return start, stop


def profile_scenario(services: Services, table: str, p: Params, workdir: Path) -> Results:
    """The big SSE scenario again (fewer commits) on a server restarted under cProfile: where the
    event loop spends its time per delivered event. Its latencies are not the reference (cProfile
    slows every Python call)."""
    stats = workdir / "serve.prof"
    services.stop_server()
    services.start_server(profile_to=stats)
    commits = max(10, p.big_commits // 3)
    window = _hook_window(services, stats, timeout_s=60, poll_s=0.2, settle_s=1.0)
    measured = sse_scenario(services, table, p.big_clients, commits, p.big_pause_s, p.client, window)
    services.stop_server()
    events = measured["pairs"]
    prof = runner.profile_file(stats, top=40, focus=PROFILE_FOCUS) if stats.exists() else None
    services.start_server()  # anything after this scenario gets the plain server back
    return {
        "clients": p.big_clients,
        "commits": commits,
        "pairs": events,
        "commit_to_event": measured["commit_to_event"],
        "fan_out_span_per_version": measured["fan_out_span_per_version"],
        "cpu": measured["cpu"],
        "profile": prof,
        "note": "the event loop's thread from the first timed commit until every client had the last one",
    }


def gc_scenario(services: Services, table: str, p: Params, workdir: Path) -> Results:
    """The big SSE scenario on ``segcat serve`` with a ``gc.callbacks`` hook: the collector's pauses
    in the server while the timed commits run (the hook itself costs a call per collection)."""
    out_file = workdir / "gc.json"
    services.stop_server()
    services.start_server(gc_to=out_file)
    window = _hook_window(services, out_file, timeout_s=30, poll_s=0.1, settle_s=0.5)
    try:
        measured = sse_scenario(
            services, table, p.big_clients, p.big_commits, p.big_pause_s, p.client, window
        )
    finally:
        services.stop_server()
        services.start_server()
    found = json.loads(out_file.read_text()) if out_file.exists() else {"pauses": []}
    by_generation: dict[str, Any] = {}
    for generation in (0, 1, 2):
        pauses = sorted(ms_ for gen, ms_, _ in found["pauses"] if gen == generation)
        by_generation[str(generation)] = {
            "count": len(pauses),
            "total_ms": round(sum(pauses), 1),
            "max_ms": round(pauses[-1], 1) if pauses else None,
            "median_ms": round(statistics.median(pauses), 2) if pauses else None,
        }
    hit = []
    for generation, pause_ms, ended in found["pauses"]:
        if generation != 2:
            continue
        start_ns, end_ns = (ended - pause_ms / 1000) * 1e9, ended * 1e9
        for version, sent, _, last, _ in measured["versions"]:
            if sent < end_ns and last > start_ns:  # the version was in flight during the pause
                hit.append(
                    {
                        "pause_ms": round(pause_ms, 1),
                        "version": version,
                        "last_ms": round((last - sent) / 1e6, 1),
                    }
                )
    return {
        **measured,
        "gc": {
            "threshold": found.get("threshold"),
            "by_generation": by_generation,
            "pauses": found["pauses"],
            "versions_in_flight_during_gen2": hit,
        },
    }


PROFILE_FOCUS = (
    *("_fan_out", "follow", "_chained", "stream", "_event", "version_event", "asdict", "dumps"),
    *("_stream_response", "_send_with_timeout", "ensure_bytes", "encode", "send", "write", "put_nowait"),
    *("__call__", "observed", "get", "_ping"),
)
