"""The ``kafka-topology`` tables: the doc block and the run report's details, from a results JSON."""

from __future__ import annotations

from typing import Any

from bench.report import count, get, ms, run_table, table

TOPOLOGY_LABEL = {"single": "1 broker", "three": "3 brokers"}


def _s(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f} s"


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _count(value: float | None) -> str:
    return "–" if value is None else count(value)


def _stacks(results: dict[str, Any]) -> str:
    parts = [
        f"{label}: replication {t['replication_factor']}, min ISR {t['min_insync_replicas']}"
        for key, label in TOPOLOGY_LABEL.items()
        if (t := (results.get("topologies") or {}).get(key))
    ]
    return (
        "the benchmark's own KRaft stacks (each node broker + controller, plaintext, loopback, `-Xmx512m`); "
        + ("; ".join(parts) or "3 brokers: replication 3, min ISR 2")
    )


def render(results: dict[str, Any]) -> str:
    """The run, 1 broker beside 3, and the leader and follower kills."""
    env = dict(results["environment"])
    env["kafka"] = str(env.get("kafka", "")).split(" ")[0] or "?"
    out = run_table({**results, "environment": env}, [("Stacks", _stacks(results))])
    if results.get("topologies"):
        out += ["", *_comparison(results)]
    if failover := results.get("failover"):
        out += ["", *_kills(failover, "Leader kill (3 brokers)", "leader")]
    if follower := results.get("follower_kill"):
        out += ["", *_kills(follower, "Follower kill (3 brokers)", "follower")]
    return "\n".join(out)


def details(results: dict[str, Any]) -> str:
    """Round by round, CPU per commit, and the Kafka defaults the kills depend on."""
    out: list[str] = []
    if results.get("rounds"):
        out += _rounds(results)
    if defaults := results.get("kafka_defaults"):
        out += ["## Kafka defaults in effect (none set by the stacks)", ""]
        out += [*table(("setting", "value"), [(f"`{k}`", f"{v:,}") for k, v in defaults.items()]), ""]
    if timings := results.get("timings"):
        out += [
            "## Phases of the run",
            "",
            *table(("phase", "time"), [(k, f"{v} s") for k, v in timings.items()]),
        ]
    return "\n".join(out)


def _div(a: dict[str, Any], b: dict[str, Any], *path: str) -> float | None:
    x, y = get(a, *path), get(b, *path)
    return None if x is None or not y else x / y


def _comparison(results: dict[str, Any]) -> list[str]:
    p = results["params"]
    tops = results["topologies"]
    r = results.get("ratios") or {}
    single, three = tops.get("single", {}), tops.get("three", {})

    def both(*path: str, fmt: Any = ms) -> tuple[str, str]:
        return fmt(get(single, *path)), fmt(get(three, *path))

    def pooled(top: dict[str, Any], kind: str, a: str, b: str) -> str:
        return f"{ms(get(top, kind, 'pooled', a))} / {ms(get(top, kind, 'pooled', b))}"

    seq = f"{count(p['sequential_commits'])} sequential appends, 1 writer"
    conc = f"{p['writers']} writer processes × {count(p['commits_per_writer'])} appends, one table"
    rows = [
        (f"{seq}: median", *both("latency", "median_of_runs", "median_ms"), _ratio(r.get("latency_median"))),
        (
            f"{seq}: p90",
            *both("latency", "median_of_runs", "p90_ms"),
            _ratio(_div(three, single, "latency", "median_of_runs", "p90_ms")),
        ),
        (f"{seq}: p99", *both("latency", "median_of_runs", "p99_ms"), _ratio(r.get("latency_p99"))),
        (
            f"{seq}: p99 / max, all rounds pooled",
            *(pooled(t, "latency", "p99_ms", "max_ms") for t in (single, three)),
            _ratio(r.get("latency_pooled_p99")),
        ),
        (
            f"{seq}: commits/s",
            *both("latency", "commits_per_s_median", fmt=_count),
            _ratio(_div(three, single, "latency", "commits_per_s_median")),
        ),
        (
            f"{conc}: aggregate commits/s",
            *both("throughput", "commits_per_s_median", fmt=_count),
            _ratio(r.get("throughput_commits_per_s")),
        ),
        (
            f"{conc}: latency median / p99, pooled",
            *(pooled(t, "throughput", "median_ms", "p99_ms") for t in (single, three)),
            _ratio(r.get("throughput_latency_median")),
        ),
    ]
    what = f"Medians of {p['rounds']} rounds, acks=all"
    return table((what, "1 broker", "3 brokers", "3 brokers ÷ 1"), rows, "lrrr")


def _rounds(results: dict[str, Any]) -> list[str]:
    p = results["params"]
    per_round = []
    for rnd in results["rounds"]:
        for key in rnd["order"]:
            lat, thr = get(rnd, key, "latency"), get(rnd, key, "throughput")
            cpu = (get(lat, "details", "cpu") or {}, get(thr, "details", "cpu") or {})
            per_round.append(
                (
                    str(rnd["round"]),
                    TOPOLOGY_LABEL[key],
                    ms(get(lat, "latency", "median_ms")),
                    ms(get(lat, "latency", "p99_ms")),
                    _count(get(thr, "commits_per_s")),
                    ms(get(thr, "latency", "p99_ms")),
                    " / ".join(ms(c.get("brokers_cpu_ms_per_commit")) for c in cpu),
                    " / ".join(
                        "–" if c.get("machine_busy_pct") is None else f"{c['machine_busy_pct']:.0f} %"
                        for c in cpu
                    ),
                    " / ".join(
                        f"{v[0]:.2f}" for v in (get(lat, "loadavg_before"), get(thr, "loadavg_before")) if v
                    ),
                )
            )
    header = (
        "Round",
        "Stack",
        "Sequential median",
        "Sequential p99",
        f"{p['writers']}-writer commits/s",
        f"{p['writers']}-writer p99",
        "Broker CPU per commit (seq. / conc.)",
        "Machine busy (seq. / conc.)",
        "Load before (seq. / conc.)",
    )
    return ["## Round by round, in the order run", "", *table(header, per_round, "llrrrrrrr"), ""]


def _new_leader(r: dict[str, Any]) -> str:
    new = get(r, "metadata", "new_leader")
    if new is not None:
        return str(new)
    return "?" if r["victim_role"] == "leader" else str(r["partition_before"]["leader"])


def _kills(block: dict[str, Any], title: str, role: str) -> list[str]:
    runs = block["runs"]
    med = block["summary"]["median"]
    multi = len(runs) > 1

    def row(label: str, fn: Any, median: str = "") -> tuple[str, ...]:
        cells = [fn(r) for r in runs]
        return (label, *cells, *([median] if multi else []))

    def fig(key: str, fmt: Any) -> Any:
        return lambda r: fmt(get(r, "figures", key))

    def ctrl(r: dict[str, Any]) -> str:
        was = r.get("victim_was_active_controller")
        return "yes" if was else ("no" if was is False else "?")

    rows = [
        row(
            "killed node (partition leader before → after)",
            lambda r: f"{r['victim']} ({r['partition_before']['leader']} → {_new_leader(r)})",
        ),
        row("killed node was the active controller", ctrl),
        row("steady median latency before", fig("steady_median_ms", ms), ms(med.get("steady_median_ms"))),
        row("worst commit started 2 s before to 20 s after", fig("spike_s", _s), _s(med.get("spike_s"))),
        row(
            "first commit started after the kill, acknowledged",
            fig("first_new_commit_acked_after_s", _s),
            _s(med.get("first_new_commit_acked_after_s")),
        ),
        row(
            "metadata: a new leader" if role == "leader" else "metadata: a new leader (none expected)",
            lambda r: _s(get(r, "metadata", "leader_elected_after_s")),
            _s(med.get("leader_elected_after_s")),
        ),
        row(
            "metadata: the node out of the ISR",
            lambda r: _s(get(r, "metadata", "isr_shrunk_after_s")),
            _s(med.get("isr_shrunk_after_s")),
        ),
        row(
            "controller log: a new active controller",
            lambda r: _s(get(r, "logs", "controller_takeover_after_s")),
        ),
        row(
            "controller log: the node fenced",
            lambda r: _s(get(r, "logs", "fenced_after_s")),
            _s(med.get("fenced_after_s")),
        ),
        row("median latency after, 2 nodes", fig("after_median_ms", ms), ms(med.get("after_median_ms"))),
        row(
            "commits/s before → after",
            lambda r: " → ".join(
                _count(r["figures"][k]) for k in ("commits_per_s_before", "commits_per_s_after")
            ),
        ),
        row(
            "commits acknowledged / unknown",
            lambda r: f"{count(r['figures']['acknowledged'])} / {r['figures']['unknown']}",
        ),
        row("load average (1 min) at the kill", lambda r: f"{r['loadavg_at_kill'][0]:.2f}"),
    ]
    header = (
        f"{title}: seconds after the kill",
        *(f"Kill {i + 1}" for i in range(len(runs))),
        *(["Median"] if multi else []),
    )
    return table(header, rows, "l" + "r" * (len(header) - 1))
