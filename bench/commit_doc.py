"""The words of the ``commit-latency`` section of docs/BENCHMARKS.md, rendered from a results JSON.

Observations are plain statements derived from the figures (no judgement beyond the
arithmetic); the suggestions appear only while the concurrent-writer target is missed.
"""

from __future__ import annotations

from typing import Any

from bench.report import count, get, head, ms, table, targets_table

SEQUENTIAL = (
    ("segcat_sequential", "segcat"),
    ("delta_sequential", "delta-rs"),
    ("iceberg_sequential", "pyiceberg"),
)


def render(results: dict[str, Any]) -> str:
    env, params = results["environment"], results["params"]
    runs: dict[str, Any] = results["runs"]
    conc, floor, long_run = (
        runs.get("segcat_concurrent"),
        runs.get("kafka_floor"),
        runs.get("segcat_long_log"),
    )
    pk = env["packages"]
    peers = (
        f"deltalake {pk['deltalake']}, pyiceberg {pk['pyiceberg']} (SQLAlchemy {pk['SQLAlchemy']}, sqlite), "
        f"pyarrow {pk['pyarrow']}"
    )
    out = head(
        results,
        "Commit latency: segcat vs delta-rs vs pyiceberg",
        "all scenarios in one run",
        [("Peers", peers)],
    )

    rows = []
    label = f"{count(params['sequential_commits'])} sequential one-file appends, 1 writer, fresh table"
    for key, system in SEQUENTIAL:
        if run := runs.get(key):
            system = "**segcat**" if system == "segcat" else system
            rows.append((label, system, count(run["commits"]), *_lat(run), count(run["commits_per_s"])))
    if conc:
        what = (
            f"{conc['writers']} writer processes × {count(params['commits_per_writer'])} appends, one table"
        )
        rows.append(
            (
                what,
                "**segcat**",
                count(conc["commits"]),
                *_lat(conc),
                f"**{count(conc['commits_per_s'])}** (aggregate)",
            )
        )
    if cpipe := runs.get("segcat_concurrent_pipelined"):
        what = (
            f"{cpipe['writers']} writer processes × {count(params['commits_per_writer'])} appends, one "
            f"table, {cpipe['details']['window']} in flight each (`append_async`)"
        )
        rows.append(
            (
                what,
                "**segcat**",
                count(cpipe["commits"]),
                *_lat(cpipe),
                f"**{count(cpipe['commits_per_s'])}** (aggregate)",
            )
        )
    if pipe := runs.get("segcat_pipelined"):
        d = pipe["details"]
        rates = ", ".join(count(r) for r in d["rates"])
        what = (
            f"1 process, 1 writer, {count(pipe['commits'])} one-file `append_async` calls, "
            f"{count(d['window'])} in flight; median of {d['runs']} runs ({rates} commits/s)"
        )
        rows.append(
            (what, "**segcat**", count(pipe["commits"]), *_lat(pipe), f"**{count(pipe['commits_per_s'])}**")
        )
    if floor:
        what = (
            f"reference: {floor['writers']} bare producers × {count(params['commits_per_writer'])} records "
            "(produce + delivery report only, no catch-up)"
        )
        rows.append(
            (
                what,
                "Kafka floor",
                count(floor["commits"]),
                *_lat(floor),
                f"{count(floor['commits_per_s'])} (aggregate)",
            )
        )
    out += [
        "",
        "### Results",
        "",
        *table(("Scenario", "System", "Timed commits", "Median", "p99", "Commits/s"), rows, "llrrrr"),
        "",
    ]
    if runs.get("segcat_pipelined") or runs.get("segcat_concurrent_pipelined"):
        out += [
            "A pipelined commit's latency is submit → its future settled (verdict known): with many in "
            "flight it includes the wait behind the commits submitted before it.",
            "",
        ]
    ratios = [
        f"{name} median / segcat median = **{value:.1f}×**"
        for name, value in (
            ("delta-rs", results["ratios"].get("delta_over_segcat_median")),
            ("pyiceberg", results["ratios"].get("iceberg_over_segcat_median")),
        )
        if value is not None
    ]
    if ratios:
        out += ["Ratios: " + "; ".join(ratios) + ".", ""]

    growth = {
        name: runs[key]["details"]["growth"]
        for key, name in SEQUENTIAL
        if "growth" in (get(runs, key, "details") or {})
    }
    if growth:
        w = next(iter(growth.values()))["window"]
        out += [
            f"Within those runs, median of the first vs the last {w} commits (does a commit get dearer as "
            "the table grows?):",
            "",
            *table(
                ("System", f"First {w}", f"Last {w}"),
                [(n, ms(g["first_median_ms"]), ms(g["last_median_ms"])) for n, g in growth.items()],
            ),
            "",
        ]

    if long_run:
        out += _long_log(long_run)
    out += _before_after(results)
    out += ["### Targets", "", *targets_table(results["targets"]), ""]
    out += _breakdown(runs, conc, long_run)
    out += _cpu(runs, env, conc, floor)
    if notes := observations(results):
        out += ["### Observations", "", *(f"- {note}" for note in notes), ""]
    if any(t["unit"] == "commits/s" and t["met"] is False for t in results["targets"]):
        out += [
            "### What limits the concurrent-writer rate, and what would close the gap",
            "",
            *(f"- {s}" for s in SUGGESTIONS),
            "",
        ]
    out += ["### Method", "", *(f"- {item}" for item in METHOD)]
    return "\n".join(out)


BEFORE_AFTER = (
    ("segcat_sequential", "1 writer, sequential appends"),
    ("segcat_concurrent", "8 writer processes, one commit in flight each"),
    ("segcat_concurrent_pipelined", "8 writer processes, pipelined"),
    ("segcat_pipelined", "1 process, pipelined appends"),
    ("kafka_floor", "Kafka floor (bare producers)"),
)


def _before_after(results: dict[str, Any]) -> list[str]:
    """This run beside a run of the previous code in the same session (``--before``)."""
    before = results.get("before")
    if not before:
        return []
    runs = results["runs"]
    rows = []
    for key, label in BEFORE_AFTER:
        if key not in runs:
            continue
        old, new = before["runs"].get(key), runs[key]
        was = f"{count(old['commits_per_s'])} commits/s, median {ms(old['median_ms'])}" if old else "–"
        now = f"{count(new['commits_per_s'])} commits/s, median {ms(new['latency']['median_ms'])}"
        rows.append((label, was, now))
    load = before.get("loadavg_at_start")
    return [
        "### Before / after (same session)",
        "",
        f"*Before*: the previous code (tree {before.get('tree')}, `{before['results_file']}`, started "
        f"{before.get('date_utc')}, 1-minute load {load[0] if load else '?'}), run from a git worktree of it "
        "with the same command right before this run.",
        "",
        *table(("Scenario", "Before", "After"), rows),
        "",
    ]


def _lat(run: dict[str, Any]) -> tuple[str, str]:
    return ms(run["latency"]["median_ms"]), ms(run["latency"]["p99_ms"])


def _long_log(run: dict[str, Any]) -> list[str]:
    d, n = run["details"], run["commits"]
    w = d["window"]
    windows = (
        (f"1–{count(w)}", d["first_window"]),
        (f"{count(n - w + 1)}–{count(n)}", d["last_window"]),
        (f"all {count(n)}", run["latency"]),
    )
    change = d["last_window"]["median_ms"] / d["first_window"]["median_ms"] - 1
    out = [
        f"### Log-length independence (segcat, one writer, {count(n)} sequential appends on one table)",
        "",
        *table(
            ("Commits", "Median", "p99", "Mean"),
            [(what, ms(s["median_ms"]), ms(s["p99_ms"]), ms(s["mean_ms"])) for what, s in windows],
        ),
        "",
        f"Last-window median vs first-window median: {change:+.0%}. Throughput over the whole run: "
        f"{count(run['commits_per_s'])} commits/s.",
    ]
    if cold := d.get("cold_writer"):
        out.append(
            f"For contrast, a *new* writer opened on that {count(cold['log_records'])}-record log took "
            f"{ms(cold['open_ms'])} to open and {ms(cold['first_commit_ms'])} for its first commit, which "
            "replays the whole log: a long-lived writer pays that once, not per commit."
        )
    return [*out, ""]


def _breakdown(
    runs: dict[str, Any], conc: dict[str, Any] | None, long_run: dict[str, Any] | None
) -> list[str]:
    labels = {
        "segcat_sequential": "1 writer",
        "segcat_concurrent": f"{conc['writers'] if conc else '?'} writers",
        "segcat_long_log": f"1 writer, {count(long_run['commits']) if long_run else '?'}-commit log",
    }
    rows = [
        (
            label,
            ms(runs[key]["latency"]["median_ms"]),
            ms(b["produce_median_ms"]),
            ms(b["catchup_median_ms"]),
            ms(b["other_median_ms"]),
            ms(b["catchup_p99_ms"]),
            f"{b['records_per_catchup_mean']:.1f} / {b['records_per_catchup_max']}",
        )
        for key, label in labels.items()
        if (b := get(runs, key, "details", "breakdown"))
    ]
    if not rows:
        return []
    header = (
        "Writers",
        "Commit",
        "Produce",
        "Catch-up",
        "Other",
        "Catch-up p99",
        "Records applied per catch-up (mean / max)",
    )
    out = [
        "### Where a segcat commit's time goes",
        "",
        "Medians per commit. *Produce*: send → delivery report (acks=all). *Catch-up*: the writer's tailer "
        "fetching and replaying the log up to its own record to judge it (docs/PROTOCOL.md §4). *Other*: "
        "validation, Avro encoding, bookkeeping.",
        "",
        *table(header, rows),
        "",
    ]
    if conc and (per := conc["details"].get("per_writer_commits_per_s")):
        before, after = conc.get("loadavg_before"), conc.get("loadavg_after")
        load = f"{before[0]:.2f} before → {after[0]:.2f} after (1-minute)" if before and after else "n/a"
        out += [
            f"With {conc['writers']} writers: per-writer rates {min(per):,.0f}–{max(per):,.0f} commits/s; "
            f"start skew after the barrier {conc['details']['start_skew_ms']:.1f} ms; load average {load}.",
            "",
        ]
    return out


def _cpu(
    runs: dict[str, Any], env: dict[str, Any], conc: dict[str, Any] | None, floor: dict[str, Any] | None
) -> list[str]:
    labels = {
        "segcat_sequential": "segcat, 1 writer",
        "segcat_concurrent": f"segcat, {conc['writers'] if conc else '?'} writers",
        "segcat_concurrent_pipelined": "segcat, writers pipelining",
        "segcat_pipelined": "segcat, 1 pipelining writer",
        "kafka_floor": f"Kafka floor, {floor['writers'] if floor else '?'} bare producers",
        "segcat_long_log": "segcat, long log",
        "delta_sequential": "delta-rs",
        "iceberg_sequential": "pyiceberg",
    }
    rows = [
        (
            label,
            f"{cpu['machine_busy_pct']:.0f} %" if "machine_busy_pct" in cpu else "–",
            ms(cpu.get("machine_cpu_ms_per_commit")),
            ms(cpu.get("writer_cpu_ms_per_commit")),
            ms(cpu.get("broker_cpu_ms_per_commit")) if label.startswith(("segcat", "Kafka")) else "–",
        )
        for key, label in labels.items()
        if (cpu := get(runs, key, "details", "cpu"))
    ]
    if not rows:
        return []
    return [
        "### CPU per commit",
        "",
        f"CPU time over each timed loop divided by its commits ({env['nproc']} CPUs shared by everything). "
        "*Machine*: all processes (from `/proc/stat`); *client*: the process(es) doing the commits (all "
        "their threads); *broker*: the Kafka JVM.",
        "",
        *table(("Scenario", "Machine busy", "Machine CPU", "Client CPU", "Broker CPU"), rows),
        "",
    ]


def _cpu_of(runs: dict[str, Any], key: str) -> dict[str, Any]:
    return dict(get(runs, key, "details", "cpu") or {})


def observations(results: dict[str, Any]) -> list[str]:
    """Plain statements derived from the figures (no judgement beyond the arithmetic)."""
    runs: dict[str, Any] = results["runs"]
    nproc = str(results["environment"]["nproc"])
    cpus = int(nproc) if nproc.isdigit() else 0
    target_cps = next((t["limit"] for t in results["targets"] if t["unit"] == "commits/s"), 2000.0)
    out: list[str] = []
    seq, conc = runs.get("segcat_sequential"), runs.get("segcat_concurrent")
    cpu1, cpun = _cpu_of(runs, "segcat_sequential"), _cpu_of(runs, "segcat_concurrent")
    if conc is not None and cpun.get("machine_cpu_ms_per_commit") and cpus:
        total = float(cpun["machine_cpu_ms_per_commit"])
        wcpu_n = float(cpun.get("writer_cpu_ms_per_commit", 0))
        bcpu_n = float(cpun.get("broker_cpu_ms_per_commit", 0))
        w = conc["writers"]
        out.append(
            f"The {w}-writer run is CPU-bound: the machine was {float(cpun.get('machine_busy_pct', 0)):.0f} "
            f"% busy and each commit cost {total:.2f} ms of CPU in all ({wcpu_n:.2f} ms in the writer "
            f"processes, {bcpu_n:.2f} ms in the broker), a ceiling of {cpus} CPUs / {total:.2f} ms ≈ "
            f"{cpus * 1000 / total:,.0f} commits/s; {conc['commits_per_s']:,.0f} commits/s were measured. "
            f"{target_cps:,.0f} commits/s on this machine would need ≤ {cpus * 1000 / target_cps:.2f} ms of "
            "CPU per commit, everything included."
        )
        floor, cpuf = runs.get("kafka_floor"), _cpu_of(runs, "kafka_floor")
        if floor is not None and cpuf.get("broker_cpu_ms_per_commit"):
            out.append(
                f"The Kafka floor run sends the same encoded commits from {floor['writers']} bare producers "
                "(idempotent, acks=all, zstd, one record in flight each, waiting for each delivery report) "
                f"and skips catch-up and judging: {floor['commits_per_s']:,.0f} records/s, at "
                f"{float(cpuf['broker_cpu_ms_per_commit']):.2f} ms of broker CPU and "
                f"{float(cpuf.get('writer_cpu_ms_per_commit', 0)):.2f} ms of client CPU per record. "
                "Producing is therefore not what limits segcat here: its commits cost the broker "
                f"{bcpu_n:.2f} ms and the writers {wcpu_n:.2f} ms each. The difference comes from tailing: "
                "each writer's consumer fetches every commit (the only Kafka traffic a writer adds to a bare "
                "producer's), and its catch-up loop decodes and judges it."
            )
        b = conc["details"].get("breakdown") or {}
        if cpu1 and b:
            out.append(
                "Compared with one writer, a commit's writer-side CPU went from "
                f"{cpu1.get('writer_cpu_ms_per_commit', 0):.2f} to {wcpu_n:.2f} ms and the broker's from "
                f"{cpu1.get('broker_cpu_ms_per_commit', 0):.2f} to {bcpu_n:.2f} ms: every writer's tailer "
                "fetches, decodes and judges every other writer's commits (on average "
                f"{b['records_per_catchup_mean']:.1f} records per catch-up), so that work grows with the "
                "number of writers, and the broker answers one fetch per tailing writer per commit."
            )
        if (codec := results.get("codec")) and b:
            out.append(
                "Applying one record (Avro decode + rules + fold into the image) costs "
                f"{codec['apply_us']:.0f} µs and encoding one {codec['record_bytes']:.0f}-byte commit "
                f"{codec['encode_us']:.0f} µs in-process, so replaying the other writers' commits explains "
                f"only about {b['records_per_catchup_mean'] * codec['apply_us'] / 1000:.2f} ms of the "
                f"writers' {wcpu_n:.2f} ms CPU per commit; the rest is the Kafka clients (each writer runs a "
                "librdkafka producer and consumer, with their own threads) and the Python around them."
            )
        if seq is not None and b and (b1 := seq["details"].get("breakdown")):
            out.append(
                f"With {w} writer processes on {cpus} CPUs, latency is mostly waiting for a CPU: median "
                f"produce {b['produce_median_ms']:.2f} ms (alone: {b1['produce_median_ms']:.2f} ms), median "
                f"catch-up {b['catchup_median_ms']:.2f} ms (alone: {b1['catchup_median_ms']:.2f} ms), "
                f"catch-up p99 {b['catchup_p99_ms']:.1f} ms."
            )
    for key, what in (("segcat_pipelined", "one pipelining writer"), ("segcat_concurrent_pipelined", "")):
        run, cpu = runs.get(key), _cpu_of(runs, key)
        if run is None or not cpu.get("writer_cpu_ms_per_commit") or not cpu.get("machine_cpu_ms_per_commit"):
            continue
        client, broker = float(cpu["writer_cpu_ms_per_commit"]), float(cpu.get("broker_cpu_ms_per_commit", 0))
        machine = float(cpu["machine_cpu_ms_per_commit"])
        who = what or f"{run['writers']} pipelining writer processes"
        line = (
            f"With {who}, a commit cost {client:.3f} ms of client CPU and {broker:.3f} ms of broker CPU "
            f"({run['commits_per_s']:,.0f} commits/s measured); the machine was "
            f"{float(cpu.get('machine_busy_pct', 0)):.0f} % busy and spent {machine:.3f} ms per commit in "
            f"all, so {max(0.0, machine - client - broker):.3f} ms per commit went to other processes."
        )
        if key == "segcat_pipelined":
            line += (
                f" The writer's Python threads share one interpreter lock, so one process gets about one "
                f"core: at this CPU per commit, ≈ {1000 / client:,.0f} commits/s even on an idle machine."
            )
        out.append(line)
    growth = {
        n: runs[k]["details"]["growth"] for k, n in SEQUENTIAL if "growth" in (get(runs, k, "details") or {})
    }
    if "segcat" in growth and len(growth) > 1:
        parts = [f"{n} {ms(g['first_median_ms'])} → {ms(g['last_median_ms'])}" for n, g in growth.items()]
        seg_first = growth["segcat"]["first_median_ms"]
        early = [
            f"{n} {g['first_median_ms'] / seg_first:.0f}×"
            for n, g in growth.items()
            if n != "segcat" and seg_first
        ]
        out.append(
            "The peers' commits get dearer as the table grows (median of the first → last "
            f"{growth['segcat']['window']} commits: {'; '.join(parts)}): each of their commits does work "
            "proportional to the table's file count (delta-rs 1.x materialises the active-file metadata; "
            "pyiceberg's `add_files` by default reads every data manifest to reject duplicate files, and "
            "each earlier commit left one manifest). Measured on the first commits only, where tables are "
            f"small, the ratios to segcat are {', '.join(early)}."
        )
    loads = {
        key: max(run["loadavg_before"][0], run["loadavg_after"][0])
        for key, run in runs.items()
        if run.get("loadavg_before") and run.get("loadavg_after")
    }
    seg_loads = [v for k, v in loads.items() if k.startswith(("segcat", "kafka"))]
    peer_loads = [v for k, v in loads.items() if not k.startswith(("segcat", "kafka"))]
    if seg_loads and peer_loads and cpus:
        line = (
            f"The machine is shared: the 1-minute load average was {min(seg_loads):.1f}–{max(seg_loads):.1f} "
            f"around the Kafka scenarios and {min(peer_loads):.1f}–{max(peer_loads):.1f} around the peers' "
            f"({cpus} CPUs)."
        )
        seg_cpu = cpu1.get("writer_cpu_ms_per_commit", 0) + cpu1.get("broker_cpu_ms_per_commit", 0)
        peer_cpu = [
            (n, _cpu_of(runs, k).get("writer_cpu_ms_per_commit")) for k, n in SEQUENTIAL if n != "segcat"
        ]
        if seg_cpu and any(v for _, v in peer_cpu):
            cmp = [f"{n} {v:,.1f} ms ({v / seg_cpu:,.0f}×)" for n, v in peer_cpu if v]
            line += (
                " Contention inflates wall-clock figures, not CPU time: the peers' own CPU per commit "
                f"({'; '.join(cmp)}) compared with segcat's writer + broker CPU per commit ({seg_cpu:.2f} "
                "ms) tells the same story as the latency ratios."
            )
        out.append(line)
    return out


SUGGESTIONS = [
    "**Pipelined and group commits are in** (`TableWriter.submit` / `append_async`, threads sharing a "
    "writer share its produce requests and catch-ups): the *pipelined* rows above. A writer process "
    "committing one at a time (`append`) still pays a produce round trip and a catch-up per commit.",
    "**Applying every record in every writer.** Each of N writer processes keeps its own image, so every "
    "commit is decoded and judged N times (see the codec figures in the observations): with 8 writers that "
    "alone approaches the whole per-commit CPU budget of this machine. What would close it: a cheaper "
    "decode + judge (the codec and rules work in progress), or one image per host shared by its writers "
    "(one follower for all writers of a table in a process; across processes a local tailer service).",
    "**Fetches.** Every tailing writer takes a fetch response per commit. Measured and rejected here: "
    "`fetch.wait.max.ms`=2 with `fetch.min.bytes`=4096 on the writers' consumers (the single writer's median "
    "rose to ~3.5 ms and the 8-writer rate fell), and pausing the consumer between catch-ups (librdkafka's "
    "resume then stalled catch-ups by ~0.5 s). Both stay available through `Config.kafka`.",
    "**More CPU.** One 2-CPU machine runs the broker, all writers and the benchmark at once; with the broker "
    "on its own host, as in production, the writers keep both cores.",
]

METHOD = [
    "**segcat**: `TableWriter.append([Segment(...)])`, one fresh segment with two typed column stats (`id` "
    "INT, `name` STRING) and a partition per commit; latency = wall time of the call, which returns only "
    "after the commit's verdict is known (produce with `acks=all` + idempotence, delivery report, catch-up "
    "fetch and deterministic validation). Topic created by `Catalog.create_table` with the docs/PROTOCOL.md "
    "§1 settings.",
    "**Concurrent**: writer processes started with `multiprocessing` (spawn); each opens its writer and "
    "makes one warm-up commit, then all wait on a barrier; the aggregate rate is all timed commits / (last "
    "writer's end − first writer's start). Latencies of all writers are pooled for the median and p99.",
    "**Pipelined**: `TableWriter.append_async([Segment(...)])` with at most W commits unresolved (waiting "
    "for the oldest future before submitting another); latency = submit → the future settled (a done "
    "callback's clock); the rate is commits / the loop's wall time. The one-process scenario runs several "
    "times on fresh tables and reports the run with the median rate (all rates are listed).",
    '**delta-rs**: `DeltaTable.create_write_transaction([AddAction(...)], mode="append")` on a local '
    "directory table, one long-lived `DeltaTable` object, stats JSON in each add action, default post-commit "
    "hook (checkpoint every 100 versions). The Parquet files are written before the timed loop.",
    "**pyiceberg**: `SqlCatalog` on a sqlite file with a local warehouse directory; "
    "`table.add_files([path])` per commit with its defaults (reads the file's footer for stats, checks for "
    "duplicate files, writes manifest + manifest list + metadata JSON, updates the catalog row). Files "
    "written before the timed loop.",
    "Every system gets one untimed warm-up commit; before the segcat scenarios the broker is warmed up by "
    "untimed commits on a scratch table (a production broker is long-running). All data and logs live on the "
    "same local ext4 disk; none of the three fsyncs per commit (Kafka relies on replication for durability, "
    "here replication factor 1), so the comparison is of commit protocols, not of disks. Production Kafka "
    "with replication factor 3 adds a replication round trip per commit.",
    "p99 is nearest-rank over all timed commits. The machine is shared (other processes may run); load "
    "averages are recorded in the results JSON.",
]
