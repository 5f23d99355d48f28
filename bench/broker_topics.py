"""What many table topics cost one Kafka broker: files, descriptors, maps, memory, metadata,
restart and idle CPU (docs/OPERATIONS.md, "Many tables: what the broker pays").

Starts a private single-node KRaft stack (free ports, a temporary home, the shared stack's
Kafka jars; the shared stack is never touched), creates single-partition topics with the topic
configuration segcat gives a table (``catalog.log.topics.topic_settings``) in batched
CreateTopics requests, and measures the broker after each step of ``--topics``:

    python -m bench.broker_topics --topics 1000,10000
    python -m bench.broker_topics --topics 10000 --index-bytes 65536

The figures are printed as a table (and as JSON with ``--json``); this is an operations
measurement, not one of the ``bench.runner`` benchmarks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
from confluent_kafka.cimpl import NewTopic

from bench.commit_runs import CLOCK_TICKS, process_ticks
from bench.kafka_topology_stacks import stack_settings
from bench.kafka_topology_stacks import stop as stop_stack
from bench.runner import progress
from segcat import local_stack as stack
from segcat.catalog.config import Config
from segcat.catalog.log.topics import topic_settings
from segcat.local_stack import kafka as stack_kafka
from segcat.local_stack import process
from segcat.local_stack.layout import Layout
from segcat.local_stack.settings import StackSettings

_quiet = logging.getLogger("bench.broker_topics.librdkafka")
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False

TOPIC_PREFIX = "segcat.bench_broker."
IDLE_WINDOW_S = 60.0
"""How long the broker's CPU is watched with every topic idle: long enough for the log
cleaner's and the log manager's periodic checks to run several times."""
METADATA_REPS = 5
MAX_RECORDS_PER_BATCH = 10_000
"""Kafka's ``QuorumController.MAX_RECORDS_PER_USER_OP``: the records one CreateTopics may make."""
START_TIMEOUT_S = 900.0
STOP_TIMEOUT_S = 180.0
"""A clean shutdown writes every partition's recovery checkpoint; a broker killed instead would
recover every log on restart and measure something else."""


@dataclass
class Broker:
    """The private broker: its settings, data dir, process and an admin client for it."""

    settings: StackSettings

    @property
    def layout(self) -> Layout:
        return Layout.of(self.settings)

    @property
    def data(self) -> Path:
        return stack_kafka.data_dir(self.layout, self.settings, 0)

    def pid(self) -> int:
        record = process.read_pid_file(self.layout.pid_file(stack_kafka.node_name(self.settings, 0)))
        if record is None or not process.is_ours(record):
            raise RuntimeError("the private broker is not running")
        return record.pid

    def admin(self) -> AdminClient:
        conf: dict[str, Any] = {
            **stack_kafka.stack_client_config(self.layout, self.settings),
            "logger": _quiet,
            "log_level": 2,
        }
        return AdminClient(conf)


@contextlib.contextmanager
def private_broker(heap: str, keep: bool, log_copy: Path | None = None) -> Iterator[Broker]:
    """A single-node stack in a temporary home on free ports, stopped and removed (unless
    ``keep``) however the block ends; its broker log copied to ``log_copy`` first."""
    root = Path(tempfile.mkdtemp(prefix="segcat-broker-topics-"))
    # a restart with many logs takes minutes on a small machine: wait for it, up to a point
    settings = replace(stack_settings(root / "single", 1, set()), start_timeout_s=START_TIMEOUT_S)
    settings = replace(settings, kafka_heap=heap or StackSettings.load().kafka_heap)
    try:
        progress(f"starting a private broker on {settings.bootstrap_servers} (heap {settings.kafka_heap})")
        stack.up(settings)
        yield Broker(settings)
    finally:
        if log_copy is not None:
            with contextlib.suppress(OSError):
                shutil.copyfile(Layout.of(settings).log_file(stack_kafka.NAME), log_copy)
        stop_stack(settings)
        if keep:
            progress(f"kept the private broker's home under {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------- creating


def create_topics(
    broker: Broker, names: list[str], config: dict[str, str], batch: int
) -> tuple[float, float]:
    """Seconds until the controller acknowledged ``names`` (``batch`` per CreateTopics request,
    each awaited before the next) and until the broker has a log directory for each."""
    admin = broker.admin()
    start = time.monotonic()
    for i in range(0, len(names), batch):
        chunk = [
            NewTopic(n, num_partitions=1, replication_factor=1, config=config) for n in names[i : i + batch]
        ]
        futures = admin.create_topics(chunk, request_timeout=120, operation_timeout=120)
        for future in futures.values():
            future.result(timeout=180)
        progress(f"  created {min(i + batch, len(names))} / {len(names)}")
    acknowledged = time.monotonic() - start
    wanted = set(names)
    while True:
        on_disk = {p.name.rsplit("-", 1)[0] for p in broker.data.iterdir() if p.is_dir()}
        if wanted <= on_disk:
            return acknowledged, time.monotonic() - start
        if time.monotonic() - start > 600:
            raise RuntimeError(f"{len(wanted - on_disk)} topics have no log directory after 600 s")
        time.sleep(0.2)


# --------------------------------------------------------------------------- measuring


def _status_kb(pid: int, key: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def heap_used_mb(pid: int) -> tuple[float, float] | None:
    """(used, committed) MiB of the Java heap after a full GC (``jcmd GC.run`` first, so the
    figure is what the topics keep alive, not garbage), or None without ``jcmd``."""
    jcmd = shutil.which("jcmd")
    if jcmd is None:
        return None
    subprocess.run([jcmd, str(pid), "GC.run"], capture_output=True, timeout=60, check=False)
    out = subprocess.run(
        [jcmd, str(pid), "GC.heap_info"], capture_output=True, text=True, timeout=60, check=False
    )
    m = re.search(r"total (\d+)K, used (\d+)K", out.stdout)
    if m is None:
        return None
    return int(m.group(2)) / 1024, int(m.group(1)) / 1024


def gc_seconds(pid: int) -> float | None:
    """Seconds the JVM has spent in garbage collection since it started (``jstat``'s GCT)."""
    jstat = shutil.which("jstat")
    if jstat is None:
        return None
    out = subprocess.run(
        [jstat, "-gcutil", str(pid)], capture_output=True, text=True, timeout=60, check=False
    )
    lines = out.stdout.split()
    if "GCT" not in lines:
        return None
    header = out.stdout.splitlines()[0].split()
    values = out.stdout.splitlines()[1].split()
    return float(values[header.index("GCT")])


def log_dir_facts(data: Path) -> dict[str, Any]:
    files = dirs = 0
    apparent = allocated = 0
    for root, dirnames, filenames in os.walk(data):
        dirs += len(dirnames)
        for name in filenames:
            st = os.lstat(os.path.join(root, name))
            files += 1
            apparent += st.st_size
            allocated += st.st_blocks * 512
    meta = data / "__cluster_metadata-0"
    meta_log = sum(p.stat().st_size for p in meta.glob("*.log")) if meta.is_dir() else 0
    snapshots = sorted(meta.glob("*.checkpoint")) if meta.is_dir() else []
    return {
        "dirs": dirs,
        "files": files,
        "apparent_mb": apparent / 2**20,
        "allocated_mb": allocated / 2**20,
        "metadata_log_mb": meta_log / 2**20,
        "metadata_snapshot_mb": (snapshots[-1].stat().st_size / 2**20) if snapshots else 0.0,
    }


def process_facts(pid: int) -> dict[str, Any]:
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    index_maps = sum(1 for line in maps if line.endswith((".index", ".timeindex")))
    heap = heap_used_mb(pid)
    return {
        "fds": len(os.listdir(f"/proc/{pid}/fd")),
        "maps": len(maps),
        "index_maps": index_maps,
        "rss_mb": _status_kb(pid, "VmRSS") / 1024,
        "vsz_gb": _status_kb(pid, "VmSize") / 2**20,
        "threads": _status_kb(pid, "Threads"),
        "heap_used_mb": heap[0] if heap else None,
        "heap_committed_mb": heap[1] if heap else None,
    }


def metadata_ms(broker: Broker, expect: int) -> tuple[float, float]:
    """(median ms of a metadata request for all topics on a warm client, ms of a fresh
    client's first one, connection included): what a client listing every table pays."""
    fresh_start = time.monotonic()
    admin = broker.admin()
    md = admin.list_topics(timeout=60)
    fresh = (time.monotonic() - fresh_start) * 1000
    if sum(1 for t in md.topics if t.startswith(TOPIC_PREFIX)) < expect:
        raise RuntimeError(f"metadata lists fewer than {expect} bench topics")
    times = []
    for _ in range(METADATA_REPS):
        t0 = time.monotonic()
        admin.list_topics(timeout=60)
        times.append((time.monotonic() - t0) * 1000)
    return statistics.median(times), fresh


def idle_cpu_percent(pid: int, window_s: float) -> float | None:
    before = process_ticks(pid)
    time.sleep(window_s)
    after = process_ticks(pid)
    if before is None or after is None:
        return None
    return (after - before) / CLOCK_TICKS / window_s * 100


def set_cleaner_backoff(broker: Broker, ms: int) -> None:
    """Change ``log.cleaner.backoff.ms`` on the running broker (a dynamic broker setting)."""
    target = ConfigResource(
        ResourceType.BROKER,
        "1",
        incremental_configs=[
            ConfigEntry("log.cleaner.backoff.ms", str(ms), incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin = broker.admin()  # kept alive until the futures are done
    for future in admin.incremental_alter_configs([target]).values():
        future.result(timeout=30)


def restart_s(broker: Broker, expect: int) -> tuple[float, float, float, str]:
    """Clean stop, then (seconds the stop took, seconds until the broker answers, seconds until
    the metadata shows every topic with a leader, the broker's own log-loading line)."""
    start = time.monotonic()
    stack.down(broker.settings, services=["kafka"], timeout_s=STOP_TIMEOUT_S)
    stopped = time.monotonic() - start
    start = time.monotonic()
    stack.up(broker.settings)
    answers = time.monotonic() - start
    admin = broker.admin()
    while True:
        with contextlib.suppress(KafkaException):
            md = admin.list_topics(timeout=30)
            led = sum(
                1
                for name, t in md.topics.items()
                if name.startswith(TOPIC_PREFIX) and t.partitions[0].leader >= 0
            )
            if led >= expect:
                break
        if time.monotonic() - start > 600:
            raise RuntimeError("topics without a leader 600 s after the restart")
        time.sleep(0.2)
    led_s = time.monotonic() - start
    return stopped, answers, led_s, loading_line(broker)


def loading_line(broker: Broker) -> str:
    log = broker.layout.log_file(stack_kafka.node_name(broker.settings, 0))
    found = ""
    with contextlib.suppress(OSError):
        for line in log.read_text(errors="replace").splitlines():
            m = re.search(r"(Loaded \d+ logs in \d+ms|[Ll]ogs loading complete in \d+ ms[^.]*)", line)
            if m:
                found = m.group(1)
    return found


# --------------------------------------------------------------------------- report


ROWS = [
    ("created", "topics created in this step", "{:,}"),
    ("create_ack_s", "… acknowledged by the controller (s)", "{:.1f}"),
    ("create_s", "… until every log exists (s)", "{:.1f}"),
    ("create_per_s", "… logs created per second", "{:.0f}"),
    ("load_1m", "machine load average, 1 min", "{:.1f}"),
    ("dirs", "directories in the log dir", "{:,}"),
    ("files", "files in the log dir", "{:,}"),
    ("apparent_mb", "log dir, apparent size (MiB)", "{:,.0f}"),
    ("allocated_mb", "log dir, allocated on disk (MiB)", "{:,.1f}"),
    ("metadata_log_mb", "`__cluster_metadata` log (MiB)", "{:.2f}"),
    ("metadata_snapshot_mb", "newest metadata snapshot (MiB)", "{:.2f}"),
    ("fds", "open file descriptors", "{:,}"),
    ("maps", "memory maps", "{:,}"),
    ("index_maps", "… of them index / time-index files", "{:,}"),
    ("rss_mb", "broker RSS (MiB)", "{:,.0f}"),
    ("vsz_gb", "broker virtual size (GiB)", "{:,.1f}"),
    ("heap_used_mb", "Java heap used after a full GC (MiB)", "{:,.0f}"),
    ("threads", "threads", "{:,}"),
    ("metadata_ms", "metadata request, all topics, warm client (ms)", "{:.0f}"),
    ("metadata_fresh_ms", "… a new client's first one (ms)", "{:.0f}"),
    ("idle_cpu_pct", "broker CPU, all topics idle, `log.cleaner.backoff.ms=1000` (% of a core)", "{:.1f}"),
    ("idle_cpu_default_backoff_pct", "… with `log.cleaner.backoff.ms=15000`, Kafka's default", "{:.1f}"),
    ("stop_s", "clean stop (s)", "{:.1f}"),
    ("restart_answer_s", "clean restart: broker answers (s)", "{:.1f}"),
    ("restart_leaders_s", "clean restart: every topic has a leader (s)", "{:.1f}"),
    ("restart_loading", "broker's own log-loading line", "{}"),
    ("restart_gc_s", "… of it in garbage collection (s)", "{:.1f}"),
    ("restart_rss_mb", "after the restart: RSS (MiB)", "{:,.0f}"),
    ("restart_heap_used_mb", "after the restart: heap used after a full GC (MiB)", "{:,.0f}"),
]


def max_map_count() -> int | None:
    try:
        return int(Path("/proc/sys/vm/max_map_count").read_text())
    except (OSError, ValueError):
        return None


def render(steps: list[dict[str, Any]]) -> str:
    head = "| topics | " + " | ".join(f"{s['topics']:,}" for s in steps) + " |"
    lines = [head, "|---|" + "---:|" * len(steps)]
    for key, label, fmt in ROWS:
        if all(s.get(key) is None for s in steps):
            continue
        cells = ["—" if s.get(key) is None else fmt.format(s[key]) for s in steps]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.broker_topics", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--topics", default="10000", help="comma-separated totals to measure at (ascending)")
    parser.add_argument("--batch", type=int, default=1000, help="topics per CreateTopics request")
    parser.add_argument("--index-bytes", type=int, default=None, help="segment.index.bytes for the topics")
    parser.add_argument("--heap", default="", help="broker -Xmx (the local stack's default if empty)")
    parser.add_argument("--idle-s", type=float, default=IDLE_WINDOW_S, help="idle CPU window (s)")
    parser.add_argument("--no-restart", action="store_true", help="skip the restart at the last step")
    parser.add_argument("--keep", action="store_true", help="keep the broker's home")
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    try:
        totals = sorted({int(x) for x in args.topics.split(",")})
    except ValueError:
        parser.error(f"--topics takes comma-separated counts, not {args.topics!r}")
    config = Config.load(env={"SEGCAT_BOOTSTRAP_SERVERS": "127.0.0.1:1"})
    topic_config = topic_settings(config)
    if args.index_bytes is not None:
        topic_config["segment.index.bytes"] = str(args.index_bytes)
    # a topic is a topic record, a partition record and a record per setting (and one more, as
    # measured), and one CreateTopics request one controller batch of fewer than 10,000 records
    largest = (MAX_RECORDS_PER_BATCH - 1) // (3 + len(topic_config))
    if not 1 <= args.batch <= largest:
        parser.error(f"--batch must be 1..{largest}: Kafka refuses a larger CreateTopics with these settings")
    steps: list[dict[str, Any]] = []
    log_copy = args.json.with_suffix(".kafka.log") if args.json is not None else None
    with private_broker(args.heap, args.keep, log_copy) as broker:
        pid = broker.pid()
        steps.append({"topics": 0, **log_dir_facts(broker.data), **process_facts(pid)})
        done = 0
        for total in totals:
            names = [f"{TOPIC_PREFIX}t{i:06d}" for i in range(done, total)]
            progress(f"creating {len(names)} topics (to {total})")
            acknowledged, took = create_topics(broker, names, topic_config, args.batch)
            done = total
            step: dict[str, Any] = {
                "topics": total,
                "created": len(names),
                "create_ack_s": acknowledged,
                "create_s": took,
                "create_per_s": len(names) / took,
            }
            step["metadata_ms"], step["metadata_fresh_ms"] = metadata_ms(broker, total)
            progress(f"  watching idle CPU for {args.idle_s:.0f} s")
            step["idle_cpu_pct"] = idle_cpu_percent(pid, args.idle_s)
            if total == totals[-1]:
                set_cleaner_backoff(broker, 15_000)
                step["idle_cpu_default_backoff_pct"] = idle_cpu_percent(pid, args.idle_s)
                set_cleaner_backoff(broker, 1_000)
            step |= log_dir_facts(broker.data) | process_facts(pid) | {"load_1m": os.getloadavg()[0]}
            steps.append(step)
            progress(render(steps))
        if not args.no_restart and done:
            progress("restarting the broker")
            stopped, answer, leaders, line = restart_s(broker, done)
            steps[-1] |= {
                "stop_s": stopped,
                "restart_answer_s": answer,
                "restart_leaders_s": leaders,
                "restart_loading": line,
            }
            pid = broker.pid()
            steps[-1]["restart_gc_s"] = gc_seconds(pid)  # before process_facts' own full GC
            again = process_facts(pid)
            steps[-1] |= {"restart_rss_mb": again["rss_mb"], "restart_heap_used_mb": again["heap_used_mb"]}
    out = {
        "command": " ".join(["python -m bench.broker_topics", *(argv if argv is not None else sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": f"{platform.node()} {os.cpu_count()} cores, {platform.platform()}",
        "topic_config": topic_config,
        "limits": {
            "ulimit_n": resource.getrlimit(resource.RLIMIT_NOFILE),
            "vm.max_map_count": max_map_count(),
        },
        "steps": steps,
    }
    print(render(steps))
    print(f"\n{out['command']} · {out['date']} · {out['machine']}")
    if args.json is not None:
        args.json.write_text(json.dumps(out, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
