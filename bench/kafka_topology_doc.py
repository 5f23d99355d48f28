"""The words of the ``kafka-topology`` section of docs/BENCHMARKS.md, rendered from a results JSON."""

from __future__ import annotations

from typing import Any

from bench.report import count, get, head, ms, table

TOPOLOGY_LABEL = {"single": "1 broker", "three": "3 brokers"}


def _s(value: float | None, digits: int = 2) -> str:
    return "–" if value is None else f"{value:.{digits}f} s"


def _ratio(value: float | None) -> str:
    return "–" if value is None else f"{value:.2f}×"


def _stacks(results: dict[str, Any]) -> str:
    tops = results.get("topologies") or {}
    parts = []
    for key, label in TOPOLOGY_LABEL.items():
        t = tops.get(key)
        if t:
            parts.append(
                f"{label}: replication {t['replication_factor']}, min ISR {t['min_insync_replicas']} "
                f"(started in {t['stack_start_s']:.0f} s)"
            )
    if not parts:
        parts.append("3 brokers: replication 3, min ISR 2")
    return (
        "private KRaft stacks started by the benchmark (each node broker + controller, plaintext, "
        "loopback, `-Xmx512m`), acks=all, idempotent producer; " + "; ".join(parts)
    )


def render(results: dict[str, Any]) -> str:
    env = dict(results["environment"])
    version = str(env.get("kafka", "")).split(" ")[0] or "?"
    env["kafka"] = f"{version} (the benchmark's own stacks, see below; the shared stack only serves Redis)"
    shown = {**results, "environment": env}
    out = head(
        shown,
        "Kafka topology: 3 brokers (acks=all, min ISR 2) vs 1, and a broker kill",
        "both topologies in one run",
        [("Stacks", _stacks(results))],
    )
    out += ["", _load_note(results)]
    if results.get("topologies"):
        out += ["", *_comparison(results)]
    if failover := results.get("failover"):
        out += ["", *_kills(results, failover, "leader")]
    if follower := results.get("follower_kill"):
        out += ["", *_kills(results, follower, "follower")]
    out += ["", *_meaning(results)]
    return "\n".join(out) + "\n"


def _load_note(results: dict[str, Any]) -> str:
    env = results["environment"]
    loads = [
        v
        for rnd in results.get("rounds", [])
        for key in ("single", "three")
        for kind in ("latency", "throughput")
        if (v := get(rnd, key, kind, "loadavg_before")) is not None
    ]
    ones = [v[0] for v in loads if v]
    spread = (
        f"; the 1-minute load average before the timed runs ranged {min(ones):.2f}–{max(ones):.2f}"
        if ones
        else ""
    )
    start = (env.get("loadavg_at_start") or [None])[0]
    if start is not None and start < int(env["nproc"]) and ones:
        return (
            f"> The machine has {env['nproc']} cores and was quiet when the run began (1-minute load "
            f"{start:.2f}); nothing else ran during it. The load during the timed runs "
            f"({min(ones):.2f}–{max(ones):.2f} before each; every figure is in the results file) is the "
            "run's own brokers and writers, which compete for the same cores: read the ratios; the "
            "topologies alternate which goes first in each round so that drift falls on both."
        )
    return (
        f"> The machine has {env['nproc']} cores and is shared: other engineers' test runs were going on "
        f"during this run{spread} (every run's load average is in the results file). Writers, "
        "brokers and those tests compete for the same two cores, so absolute figures are pessimistic "
        "and the ratios are what to read; the topologies alternate which goes first in each round so "
        "that load drift falls on both."
    )


def _comparison(results: dict[str, Any]) -> list[str]:
    p = results["params"]
    tops = results["topologies"]
    r = results.get("ratios") or {}
    single, three = tops.get("single", {}), tops.get("three", {})
    n = p["rounds"]

    def both(*path: str, fmt: Any = ms) -> tuple[str, str]:
        return fmt(get(single, *path)), fmt(get(three, *path))

    def cps(v: float | None) -> str:
        return "–" if v is None else count(v)

    def cpu(key: str, kind: str) -> tuple[str, str]:
        vals = []
        for top in ("single", "three"):
            runs = [get(rnd, top, kind, "details", "cpu", key) for rnd in results["rounds"]]
            got = sorted(v for v in runs if v is not None)
            vals.append("–" if not got else f"{got[len(got) // 2]:.2f} ms")
        return vals[0], vals[1]

    def busy(kind: str) -> tuple[str, str]:
        vals = []
        for top in ("single", "three"):
            runs = [get(rnd, top, kind, "details", "cpu", "machine_busy_pct") for rnd in results["rounds"]]
            got = sorted(v for v in runs if v is not None)
            vals.append("–" if not got else f"{got[len(got) // 2]:.0f} %")
        return vals[0], vals[1]

    seq = f"{count(p['sequential_commits'])} sequential appends, 1 writer"
    conc = f"{p['writers']} writer processes × {count(p['commits_per_writer'])} appends, one table"
    rows = [
        (f"{seq}: median", *both("latency", "median_of_runs", "median_ms"), _ratio(r.get("latency_median"))),
        (f"{seq}: p90", *both("latency", "median_of_runs", "p90_ms"), _ratio(_div(three, single, "p90_ms"))),
        (f"{seq}: p99", *both("latency", "median_of_runs", "p99_ms"), _ratio(r.get("latency_p99"))),
        (
            f"{seq}: p99 / max of all {n * p['sequential_commits']:,} samples pooled",
            *(_pair(t, "latency", "p99_ms", "max_ms") for t in (single, three)),
            _ratio(r.get("latency_pooled_p99")),
        ),
        (
            f"{seq}: commits/s",
            *both("latency", "commits_per_s_median", fmt=cps),
            _ratio(_div(three, single, "commits_per_s_median", kind="latency")),
        ),
        (
            f"{conc}: **aggregate commits/s**",
            *(f"**{v}**" for v in both("throughput", "commits_per_s_median", fmt=cps)),
            _ratio(r.get("throughput_commits_per_s")),
        ),
        (
            f"{conc}: commit latency median / p99 (pooled)",
            f"{ms(get(single, 'throughput', 'pooled', 'median_ms'))} / "
            f"{ms(get(single, 'throughput', 'pooled', 'p99_ms'))}",
            f"{ms(get(three, 'throughput', 'pooled', 'median_ms'))} / "
            f"{ms(get(three, 'throughput', 'pooled', 'p99_ms'))}",
            _ratio(r.get("throughput_latency_median")),
        ),
        ("Broker CPU per sequential commit (all nodes)", *cpu("brokers_cpu_ms_per_commit", "latency"), ""),
        ("Broker CPU per concurrent commit (all nodes)", *cpu("brokers_cpu_ms_per_commit", "throughput"), ""),
        ("Machine CPU busy during the sequential loop", *busy("latency"), ""),
        ("Machine CPU busy during the concurrent loop", *busy("throughput"), ""),
    ]
    per_round = []
    for rnd in results["rounds"]:
        for key in rnd["order"]:
            lat, thr = get(rnd, key, "latency"), get(rnd, key, "throughput")
            per_round.append(
                (
                    str(rnd["round"]),
                    TOPOLOGY_LABEL[key],
                    ms(get(lat, "latency", "median_ms")),
                    ms(get(lat, "latency", "p99_ms")),
                    cps(get(thr, "commits_per_s")),
                    ms(get(thr, "latency", "p99_ms")),
                    ", ".join(f"{v:.2f}" for v in (get(lat, "loadavg_before") or [])[:1])
                    + " / "
                    + ", ".join(f"{v:.2f}" for v in (get(thr, "loadavg_before") or [])[:1]),
                )
            )
    return [
        "### 1 broker vs 3 brokers",
        "",
        f"Each stack got {count(p['warmup_commits'])} untimed warm-up commits first; each figure is the "
        f"median of {n} round(s), each on a fresh table (pooled rows: every sample of the {n} rounds). "
        "Latency is the wall time of `TableWriter.append` (produce with acks=all, delivery report, "
        "catch-up fetch to judge the commit).",
        "",
        *table(("Figure", "1 broker", "3 brokers", "3 brokers / 1"), rows, "lrrr"),
        "",
        "Per round (in the order run):",
        "",
        *table(
            (
                "Round",
                "Stack",
                "Sequential median",
                "Sequential p99",
                f"{p['writers']}-writer commits/s",
                f"{p['writers']}-writer p99",
                "Load (1 min) before seq. / conc.",
            ),
            per_round,
            "llrrrrr",
        ),
    ]


def _new_leader(r: dict[str, Any]) -> str:
    new = get(r, "metadata", "new_leader")
    if new is not None:
        return str(new)
    return "?" if r["victim_role"] == "leader" else str(r["partition_before"]["leader"])


def _count(value: float | None) -> str:
    return "–" if value is None else count(value)


def _pair(top: dict[str, Any], kind: str, a: str, b: str) -> str:
    return f"{ms(get(top, kind, 'pooled', a))} / {ms(get(top, kind, 'pooled', b))}"


def _div(a: dict[str, Any], b: dict[str, Any], key: str, kind: str = "latency") -> float | None:
    path = (kind, key) if key == "commits_per_s_median" else (kind, "median_of_runs", key)
    x, y = get(a, *path), get(b, *path)
    return None if x is None or not y else x / y


def _kills(results: dict[str, Any], block: dict[str, Any], role: str) -> list[str]:
    p = results["params"]
    runs = block["runs"]
    med = block["summary"]["median"]

    def cells(fn: Any) -> list[str]:
        return [fn(r) for r in runs]

    def fig(key: str, fmt: Any) -> list[str]:
        return [*cells(lambda r: fmt(get(r, "figures", key))), fmt(med.get(key))]

    def ctrl(r: dict[str, Any]) -> str:
        was = r.get("victim_was_active_controller")
        return "yes" if was else ("no" if was is False else "?")

    multi = len(runs) > 1
    header = ("Figure", *(f"Kill {i + 1}" for i in range(len(runs))), *(["Median"] if multi else []))

    def row(label: str, values: list[str]) -> tuple[str, ...]:
        return (label, *(values if multi else values[:1]))

    def plain(values: list[str], median: str = "") -> list[str]:
        return [*values, median]

    rows = [
        row(
            "Killed node (partition leader before → after)",
            plain(cells(lambda r: f"{r['victim']} ({r['partition_before']['leader']} → {_new_leader(r)})")),
        ),
        row("Killed node was the active KRaft controller", plain(cells(ctrl))),
        row("Killed at (after the writers' start)", plain(cells(lambda r: _s(r["killed_at_s"], 1)))),
        row("Steady median latency before the kill", fig("steady_median_ms", ms)),
        row(
            "**Latency spike** (worst commit started from 2 s before to 20 s after the kill)",
            fig("spike_s", _s),
        ),
        row("First acknowledgement after the kill (an in-flight commit)", fig("first_ack_after_s", _s)),
        row(
            "**First commit started after the kill acknowledged**", fig("first_new_commit_acked_after_s", _s)
        ),
        row(
            "Metadata shows a new leader"
            if role == "leader"
            else "Metadata shows a new leader (none expected)",
            [
                *cells(lambda r: _s(get(r, "metadata", "leader_elected_after_s"))),
                _s(med.get("leader_elected_after_s")),
            ],
        ),
        row(
            "Metadata shows the node out of the ISR",
            [
                *cells(lambda r: _s(get(r, "metadata", "isr_shrunk_after_s"))),
                _s(med.get("isr_shrunk_after_s")),
            ],
        ),
        row(
            "Controller log: a new active controller took over",
            plain(cells(lambda r: _s(get(r, "logs", "controller_takeover_after_s")))),
        ),
        row(
            "Controller log: node fenced (session timed out)",
            [*cells(lambda r: _s(get(r, "logs", "fenced_after_s"))), _s(med.get("fenced_after_s"))],
        ),
        row("Median latency after recovery (2 nodes)", fig("after_median_ms", ms)),
        row(
            "Commits/s before → after",
            [
                *cells(
                    lambda r: (
                        f"{_count(r['figures']['commits_per_s_before'])} → "
                        f"{_count(r['figures']['commits_per_s_after'])}"
                    )
                ),
                "",
            ],
        ),
        row(
            "Commits in flight at the kill",
            fig("in_flight_at_kill", lambda v: "–" if v is None else count(v)),
        ),
        row(
            "Commits acknowledged / unknown",
            [
                *cells(lambda r: f"{count(r['figures']['acknowledged'])} / {r['figures']['unknown']}"),
                "",
            ],
        ),
        row(
            "Node restarted (`local_stack.up`) / ISR whole again after",
            [
                *cells(lambda r: f"{r['restart']['up_s']:.1f} s / {r['restart']['isr_whole_after_s']:.1f} s"),
                "",
            ],
        ),
        row(
            "Load average (1 min) at the kill",
            plain(cells(lambda r: f"{r['loadavg_at_kill'][0]:.2f}")),
        ),
    ]
    what = "leader" if role == "leader" else "follower (an in-sync replica that is not the leader)"
    title = "### Leader kill (3 brokers)" if role == "leader" else "### Follower kill (3 brokers)"
    times = f"{len(runs)} time{'s' if multi else ''}" if multi else "once"
    return [
        title,
        "",
        f"{p['failover_writers']} writer processes append on a fresh table for {p['failover_seconds']:.0f} s "
        "(and on, each, until a commit it started after the kill was acknowledged); at about "
        f"{p['kill_at_s']:.0f} s the table partition's {what} is killed with SIGKILL; "
        f"afterwards the node is started again and the ISR waited for. Done {times}"
        + (", each time killing whichever node then led" if role == "leader" and multi else "")
        + ". Times are seconds after the kill; the metadata rows come from polling the partition's "
        "metadata every 0.2 s, the fencing row from the surviving controller's log (ms stamps).",
        "",
        *table(header, rows, "l" + "r" * (len(header) - 1)),
    ]


def _span(values: list[float]) -> str:
    """ "a–b s" over the runs (one value: "a s")."""
    if not values:
        return "–"
    lo, hi = min(values), max(values)
    return f"{lo:.1f} s" if round(lo, 1) == round(hi, 1) else f"{lo:.1f}–{hi:.1f} s"


def _round_ratios(results: dict[str, Any]) -> list[float]:
    """3 brokers / 1 of the sequential median, round by round."""
    out = []
    for rnd in results.get("rounds", []):
        a = get(rnd, "three", "latency", "latency", "median_ms")
        b = get(rnd, "single", "latency", "latency", "median_ms")
        if a is not None and b:
            out.append(a / b)
    return out


def _replication(results: dict[str, Any]) -> str:
    r = results.get("ratios") or {}
    tops = results["topologies"]
    single = get(tops, "single", "latency", "median_of_runs", "median_ms")
    three = get(tops, "three", "latency", "median_of_runs", "median_ms")
    per_round = _round_ratios(results)
    spread = f" (round by round {min(per_round):.1f}× to {max(per_round):.1f}×)" if len(per_round) > 1 else ""
    busy = [
        v
        for rnd in results.get("rounds", [])
        for key in ("single", "three")
        for kind in ("latency", "throughput")
        if (v := get(rnd, key, kind, "details", "cpu", "machine_busy_pct")) is not None
    ]
    saturated = (
        f" The two cores were {min(busy):.0f}–{max(busy):.0f} % busy during every timed loop (whatever "
        "else ran included): each hop of a commit — writer, leader, follower fetch, leader again — waits "
        "for a core, and the 3-broker path has more hops and three JVMs to schedule, so on this "
        "machine the ratio is likely larger than on a cluster with a machine per broker."
        if busy
        else ""
    )
    return (
        f"- **Replication cost.** With acks=all the leader acknowledges a commit only once every "
        f"in-sync follower has fetched it, so each commit waits for a follower fetch round trip: "
        f"median {ms(three)} on 3 brokers vs {ms(single)} on one, {_ratio(r.get('latency_median'))}"
        f"{spread}. With {results['params']['writers']} concurrent writers the 3-broker stack reaches "
        f"{_ratio(r.get('throughput_commits_per_s'))} of the single broker's commits/s; the followers' "
        "fetches and three JVMs instead of one take CPU from the same two cores (broker CPU per commit "
        "above; it counts everything the nodes did during the loop, idle work included). Min ISR 2 "
        "does not shorten the wait: acks=all waits for the whole current ISR, min ISR only decides "
        f"when the leader refuses writes.{saturated}"
    )


def _leader_kill(results: dict[str, Any], d: dict[str, Any]) -> str:
    session = d.get("broker.session.timeout.ms", 9000) / 1000
    heartbeat = d.get("broker.heartbeat.interval.ms", 2000) / 1000
    fetch = d.get("controller.quorum.fetch.timeout.ms", 2000) / 1000
    election = d.get("controller.quorum.election.timeout.ms", 1000) / 1000
    text = (
        "- **Leader kill.** A SIGKILLed node says nothing; the active KRaft controller notices only "
        f"when the node's broker session expires, `broker.session.timeout.ms` = {session:.0f} s after "
        f"its last heartbeat (`broker.heartbeat.interval.ms` = {heartbeat:.0f} s, so "
        f"{session - heartbeat:.0f}–{session:.0f} s after the kill). Fencing removes the node from every "
        "ISR and elects a new leader from the remaining ISR in the same metadata update. Meanwhile the "
        "writers' idempotent producers keep retrying (`message.timeout.ms` = the 30 s request "
        "timeout), so in-flight commits are acknowledged late, not lost or left unknown. When the "
        "killed node was also the active controller, a new one is elected first "
        f"(`controller.quorum.fetch.timeout.ms` = {fetch:.0f} s, `controller.quorum.election.timeout.ms`"
        f" = {election:.0f} s), and it starts every broker's session afresh when it becomes active, so "
        "fencing comes about one election later."
    )
    runs = get(results, "failover", "runs") or []
    if not runs:
        return text
    plain = [r for r in runs if r.get("victim_was_active_controller") is False]
    ctrl = [r for r in runs if r.get("victim_was_active_controller")]
    fenced = [v for r in plain if (v := get(r, "logs", "fenced_after_s")) is not None]
    client = [
        f - m
        for r in runs
        if (f := get(r, "figures", "first_new_commit_acked_after_s")) is not None
        and (m := get(r, "metadata", "leader_elected_after_s")) is not None
    ]
    gaps = [v for r in runs if (v := get(r, "figures", "first_new_commit_acked_after_s")) is not None]
    unknown = sum(get(r, "figures", "unknown") or 0 for r in runs)
    text += f" Measured over {len(runs)} kill(s): "
    if fenced:
        text += f"the controller fenced the node {_span(fenced)} after the kill"
        text += (
            f" (past {session:.0f} s the fencing check itself ran late, presumably on the overloaded "
            "cores: the last heartbeat cannot be later than the kill); "
            if max(fenced) > session
            else "; "
        )
    for r in ctrl:
        takeover, fence = get(r, "logs", "controller_takeover_after_s"), get(r, "logs", "fenced_after_s")
        if takeover is not None and fence is not None:
            text += (
                f"when it was the controller that died, a new one took over after {takeover:.1f} s and "
                f"fenced it {fence - takeover:.1f} s after that ({fence:.1f} s after the kill); "
            )
    if client:
        text += (
            f"the writers' first new commit was acknowledged {_span(client)} after the metadata showed "
            "the new leader (the clients' side: finding the new leader, retrying the produce, fetching "
            "the commit back to judge it); "
        )
    text += (
        f"in all, {_span(gaps)} from the kill until a commit started after it was acknowledged, with "
        f"{unknown} commit(s) of unknown outcome."
    )
    return text


def _meaning(results: dict[str, Any]) -> list[str]:
    d = results.get("kafka_defaults") or {}
    lines = ["### What the figures mean", ""]
    if results.get("topologies"):
        lines.append(_replication(results))
    lines.append(_leader_kill(results, d))
    session = d.get("broker.session.timeout.ms", 9000) / 1000
    fk = get(results, "follower_kill", "summary", "median")
    lag = d.get("replica.lag.time.max.ms", 30000) / 1000
    lines.append(
        "- **Follower kill.** acks=all writes wait for the dead follower as long as it is in the ISR. "
        f"The leader would drop it after `replica.lag.time.max.ms` = {lag:.0f} s, but in KRaft the "
        f"controller's fencing ({session:.0f} s session) removes it from every ISR first, so the stall "
        "is bounded by the session timeout, not by the 30 s lag limit"
        + (
            f": here the ISR shrank {_s(fk.get('isr_shrunk_after_s'), 1)} after the kill and the first "
            "commit started after it was acknowledged after "
            f"{_s(fk.get('first_new_commit_acked_after_s'), 1)}."
            if fk
            else "."
        )
    )
    lines.append(
        "- Defaults checked in Kafka's source rather than assumed: `KRaftConfigs` "
        "(`broker.session.timeout.ms` 9000, `broker.heartbeat.interval.ms` 2000), `ReplicationConfigs` "
        "(`replica.lag.time.max.ms` 30000), `QuorumConfig` (`controller.quorum.election.timeout.ms` 1000, "
        "`controller.quorum.fetch.timeout.ms` 2000), `ReplicationControlManager.handleBrokerFenced` "
        "(fencing removes the broker from every ISR, electing new leaders where it led), "
        "`BrokerHeartbeatManager.register` (a newly active controller touches every broker's session). "
        "The benchmark's stacks set none of these."
    )
    return lines


def summary(results: dict[str, Any]) -> str:
    lines: list[str] = []
    tops = results.get("topologies") or {}
    rows = []
    for key, t in tops.items():
        lat, thr = t.get("latency") or {}, t.get("throughput") or {}
        rows.append(
            (
                TOPOLOGY_LABEL[key],
                ms(get(lat, "median_of_runs", "median_ms")),
                ms(get(lat, "median_of_runs", "p99_ms")),
                ms(get(lat, "pooled", "p99_ms")),
                "–" if not thr else count(thr["commits_per_s_median"]),
            )
        )
    if rows:
        lines += table(("stack", "seq median", "seq p99", "pooled p99", "8-writer commits/s"), rows)
        lines += [f"3 brokers / 1: {k} {_ratio(v)}" for k, v in (results.get("ratios") or {}).items()]
    for name in ("failover", "follower_kill"):
        if block := results.get(name):
            med = block["summary"]["median"]
            lines.append(
                f"{name} (median of {block['summary']['runs']}): spike {_s(med['spike_s'])}, "
                f"first new commit acked {_s(med['first_new_commit_acked_after_s'])}, leader elected "
                f"{_s(med['leader_elected_after_s'])}, ISR shrunk {_s(med['isr_shrunk_after_s'])}, fenced "
                f"{_s(med['fenced_after_s'])}, steady {ms(med['steady_median_ms'])}, acknowledged "
                f"{med['acknowledged']}, unknown {med['unknown']}; controller killed: "
                f"{block['summary']['victim_was_active_controller']}"
            )
    if t := results.get("timings"):
        lines.append("timings: " + ", ".join(f"{k} {v} s" for k, v in t.items()))
    return "\n".join(lines)
