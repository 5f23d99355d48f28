"""How every benchmark runs: command line, local stack, timing, statistics, machine, results JSON.

A benchmark module describes itself as a ``Benchmark`` (its scenarios, how to run them, how
to check and render them) and hands it to ``main``. Everything around the measuring happens
here, the same way for every benchmark, so their figures are comparable (nearest-rank
percentiles, the same warm-up and repetition rules) and every results file records the
command, the git revision and the machine it came from.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime as dt
import gc
import json
import logging
import math
import os
import platform
import pstats
import resource
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, TypeVar

from segcat.catalog.config import Config

T = TypeVar("T")
Results = dict[str, Any]
Tick = Callable[[int], None]
"""Progress callback: called with the number of operations just completed."""

REPO = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO / "bench" / "results"
DOC = REPO / "docs" / "BENCHMARKS.md"
NS_PER_MS = 1_000_000
FAST_MS = 100.0
"""A call faster than this gets ``fast_reps`` repetitions: cheap, and its median is noisier."""
PACKAGES = ("confluent-kafka", "fastavro", "pyarrow", "deltalake", "pyiceberg", "SQLAlchemy")
BENCH_MODULES = (
    "bench.commit_latency",
    "bench.read_paths",
    "bench.spark_overhead",
    "bench.lifecycle",
    "bench.serve",
    "bench.kafka_topology",
    "bench.pruning",
    "bench.stream_sink",
    "bench.iceberg_visibility",
    "bench.iceberg_publish_cost",
    "bench.scan_arrow",
    "bench.many_tables",
)


# --------------------------------------------------------------------------- progress


def progress(message: str) -> None:
    """One timestamped line on stderr (stdout is left for the summary)."""
    print(f"[{dt.datetime.now():%H:%M:%S}] {message}", file=sys.stderr, flush=True)


@contextmanager
def counting(description: str, total: int, every_s: float = 10.0) -> Iterator[Tick]:
    """Progress lines for a loop of ``total`` operations: at the start, every ``every_s``, at the end."""
    progress(f"{description} …")
    start = last = time.monotonic()
    done = 0

    def tick(n: int) -> None:
        nonlocal done, last
        done += n
        if time.monotonic() - last >= every_s:
            last = time.monotonic()
            progress(f"  {done:,} / {total:,} after {last - start:.0f} s")

    yield tick
    progress(f"  {done:,} / {total:,} in {time.monotonic() - start:.1f} s")


def quiet_logging() -> None:
    """Warnings only (the materializer logs every key frame at INFO); child processes call it too."""
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger().setLevel(logging.WARNING)


# --------------------------------------------------------------------------- statistics


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0..100) of an already sorted, non-empty sequence."""
    if not sorted_values:
        raise ValueError("percentile of an empty sample")
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def summary(samples_ms: Sequence[float]) -> dict[str, float]:
    """Count, median, nearest-rank p90 / p99, mean, min and max of samples in milliseconds."""
    s = sorted(samples_ms)
    figures = {
        "median_ms": statistics.median(s),
        "p90_ms": percentile(s, 90),
        "p99_ms": percentile(s, 99),
        "mean_ms": statistics.fmean(s),
        "min_ms": s[0],
        "max_ms": s[-1],
    }
    return {"count": len(s), **{k: round(v, 4) for k, v in figures.items()}}


def to_ms(samples_ns: Iterable[int]) -> list[float]:
    return [ns / NS_PER_MS for ns in samples_ns]


# --------------------------------------------------------------------------- timing


@dataclass
class Timing:
    """Repeated wall-time samples of one operation."""

    samples_ms: list[float]
    warmup: int = 0
    note: str = ""
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def median_ms(self) -> float:
        return statistics.median(self.samples_ms)

    def to_json(self) -> dict[str, Any]:
        return {
            **summary(self.samples_ms),
            "reps": len(self.samples_ms),
            "warmup": self.warmup,
            "samples_ms": [round(s, 3) for s in self.samples_ms],
            "note": self.note,
            "details": self.details,
        }


def measure(
    fn: Callable[[], T],
    *,
    reps: int,
    fast_reps: int | None = None,
    warmup: int = 1,
    budget_s: float | None = None,
    check: Callable[[T], None] | None = None,
) -> Timing:
    """Samples of ``fn()``: ``warmup`` untimed calls, then ``reps`` timed ones, each after a
    ``gc.collect()``; ``check`` validates every result outside the timing.

    With ``fast_reps``, a call faster than ``FAST_MS`` gets that many repetitions instead;
    with ``budget_s``, the repetitions after the first are cut to what fits the budget (at
    least one), and the note says so.
    """
    for _ in range(warmup):
        result = fn()
        if check is not None:
            check(result)
        del result
    samples: list[float] = []
    wanted = reps
    while len(samples) < wanted:
        gc.collect()
        start = time.perf_counter_ns()
        result = fn()
        elapsed = time.perf_counter_ns() - start
        samples.append(elapsed / NS_PER_MS)
        if check is not None:
            check(result)
        del result
        if len(samples) == 1 and fast_reps is not None and samples[0] < FAST_MS:
            wanted = max(reps, fast_reps)
        if budget_s is not None and len(samples) == 1:
            wanted = max(1, min(wanted, int(budget_s // max(elapsed / 1e9, 1e-9))))
    note = ""
    if len(samples) < reps:
        note = f"{len(samples)} repetition(s) only: one call takes {samples[0] / 1000:.1f} s"
    gc.collect()
    return Timing(samples, warmup, note)


def timed(fn: Callable[[], T]) -> tuple[T, float]:
    """``fn()`` and its wall time in ms."""
    start = time.perf_counter_ns()
    result = fn()
    return result, (time.perf_counter_ns() - start) / NS_PER_MS


def time_each(
    items: Iterable[T], fn: Callable[[T], object], after: Callable[[], None] | None = None
) -> tuple[list[int], int]:
    """Wall time (ns) of ``fn(item)`` per item, and of the whole loop; ``after`` runs after each
    item, outside its sample (bookkeeping, progress)."""
    samples: list[int] = []
    first = time.perf_counter_ns()
    for item in items:
        start = time.perf_counter_ns()
        fn(item)
        samples.append(time.perf_counter_ns() - start)
        if after is not None:
            after()
    return samples, time.perf_counter_ns() - first


# --------------------------------------------------------------------------- profiles


def _where(filename: str) -> str:
    for marker in ("site-packages/", f"{REPO}/", "lib/python3"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    return os.path.basename(filename)


def summarize_profile(
    stats: pstats.Stats, calls: int = 1, top: int = 15, focus: tuple[str, ...] = ()
) -> dict[str, Any]:
    """The ``top`` functions by own and by cumulative time, in ms per profiled call; ``focus``
    names functions (the part in parentheses) reported whatever their rank."""
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, Any]] = stats.stats  # type: ignore[attr-defined]
    per = max(calls, 1)
    rows: list[dict[str, Any]] = [
        {
            "function": f"{_where(filename)}:{line}({func})" if line else func,
            "ncalls": ncalls // per,
            "tottime_ms": round(tottime * 1000 / per, 2),
            "cumtime_ms": round(cumtime * 1000 / per, 2),
        }
        for (filename, line, func), (_, ncalls, tottime, cumtime, _) in raw.items()
        if "/bench/" not in filename  # the benchmark's own lambdas and wrappers
    ]
    picked = [r for r in rows if r["function"].rsplit("(", 1)[-1].rstrip(")") in focus]
    return {
        "calls": calls,
        "by_own_time": sorted(rows, key=lambda r: r["tottime_ms"], reverse=True)[:top],
        "by_cumulative_time": sorted(rows, key=lambda r: r["cumtime_ms"], reverse=True)[:top],
        "focus": sorted(picked, key=lambda r: r["cumtime_ms"], reverse=True),
    }


def profile(
    fn: Callable[[], object], *, calls: int = 3, top: int = 15, focus: tuple[str, ...] = ()
) -> dict[str, Any]:
    """cProfile ``calls`` calls of ``fn`` (after one warm-up); figures per call."""
    fn()
    profiler = cProfile.Profile()
    for _ in range(calls):
        gc.collect()
        profiler.enable()
        fn()
        profiler.disable()
    return summarize_profile(pstats.Stats(profiler), calls, top, focus)


def profile_file(path: Path, *, top: int = 20, focus: tuple[str, ...] = ()) -> dict[str, Any]:
    """Summary of a cProfile dump written by another process (one profiled call)."""
    return summarize_profile(pstats.Stats(str(path)), 1, top, focus)


# --------------------------------------------------------------------------- machine


def _run(*cmd: str) -> str:
    """A command's stdout, or "" when it fails (a missing tool must not stop a benchmark)."""
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


def loadavg() -> list[float]:
    return [round(v, 2) for v in os.getloadavg()]


def package_version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    """The ``Mem:`` line of ``free -h`` as "total X, available Y"."""
    for line in _run("free", "-h").splitlines():
        if line.startswith("Mem:"):
            cols = line.split()
            return f"{cols[1]} total, {cols[-1]} available"
    return "unknown"


def _java() -> str:
    from segcat.local_stack import kafka as stack_kafka

    try:
        java = stack_kafka.find_java()
    except Exception:
        return "not found"
    done = subprocess.run([java, "-version"], capture_output=True, text=True, check=False)
    first = (done.stderr or done.stdout).strip().splitlines()
    return first[0].replace('"', "") if first else "unknown"


def _is_local_stack(config: Config) -> bool:
    from segcat.local_stack import kafka as stack_kafka
    from segcat.local_stack.settings import StackSettings

    return config.bootstrap_servers == stack_kafka.address(StackSettings.load())


def _kafka(config: Config) -> str:
    """The local stack's broker version; an external cluster's version is not known here."""
    from segcat.local_stack.settings import StackSettings

    if _is_local_stack(config):
        return (
            f"{StackSettings.load().kafka_version} (local stack: one KRaft broker, replication factor "
            f"{config.replication_factor})"
        )
    return f"unknown (external cluster at {config.bootstrap_servers})"


def git_revision() -> str:
    rev = _run("git", "-C", str(REPO), "rev-parse", "--short", "HEAD")
    if not rev:
        return "unknown (not a git checkout)"
    dirty = _run("git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no")
    return f"{rev}{' (uncommitted changes in the tree)' if dirty else ''}"


def describe(config: Config) -> dict[str, Any]:
    """The machine and software a run measures, and the load on the machine as it starts."""
    from confluent_kafka import libversion

    return {
        "date_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": _run("nproc") or str(os.cpu_count()),
        "cpu": _cpu_model(),
        "memory": _memory(),
        "kernel": f"{platform.system()} {platform.release()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "java": _java(),
        "kafka": _kafka(config),
        "librdkafka": libversion()[0],
        "packages": {name: package_version(name) for name in PACKAGES},
        "git": git_revision(),
        "loadavg_at_start": loadavg(),
    }


def wait_for_other_benchmarks(own: str, limit_s: float) -> dict[str, Any]:
    """Poll every 20 s until no other benchmark process runs, for at most ``limit_s``: on a
    2-core machine a concurrent benchmark would be measured too."""

    def busy() -> list[str]:
        found = []
        for module in BENCH_MODULES:
            if module == own:
                continue
            pids = [p for p in _run("pgrep", "-f", module).split() if int(p) != os.getpid()]
            if pids:
                found.append(f"{module} ({', '.join(pids)})")
        return found

    start = time.monotonic()
    others = busy()
    while others and time.monotonic() - start < limit_s:
        progress(f"waiting for other benchmarks to finish: {', '.join(others)}")
        time.sleep(20)
        others = busy()
    waited = round(time.monotonic() - start, 1)
    if others:
        progress(f"still running after {waited} s, measuring anyway: {', '.join(others)}")
    return {"waited_s": waited, "still_running": others}


# --------------------------------------------------------------------------- local stack


def ensure_stack(config: Config, *, start: bool = True) -> None:
    """Make sure Kafka (and Redis, when configured) answer; start the local stack if that is
    where the config points, fail otherwise."""
    from segcat import local_stack as stack
    from segcat.local_stack.probe import kafka_answers, redis_answers
    from segcat.local_stack.settings import StackSettings

    redis_ok = config.redis_url is None or redis_answers(config.redis_url, 2.0)
    if redis_ok and kafka_answers(config.bootstrap_servers, timeout_s=5.0):
        return
    if not (start and _is_local_stack(config)):
        raise SystemExit(
            f"Kafka at {config.bootstrap_servers} or Redis at {config.redis_url} does not answer"
            + ("" if _is_local_stack(config) else " (not the local stack, so it is not started here)")
        )
    progress("the local stack is down: starting it")
    stack.up(StackSettings.load())


# --------------------------------------------------------------------------- results


def relative(path: Path) -> str:
    """``path`` as the docs cite it: relative to the repository when it is inside it."""
    resolved = path.resolve()
    return str(resolved.relative_to(REPO)) if resolved.is_relative_to(REPO) else str(path)


def load_results(path: Path) -> Results:
    """A saved results JSON; files written before the shared runner named a few keys differently."""
    results: Results = json.loads(path.read_text())
    results.setdefault("params", results.get("parameters") or results.get("sizes") or {})
    results.setdefault("mode", "quick" if results.get("quick") else "full")
    results.setdefault("results_file", relative(path))
    return results


# --------------------------------------------------------------------------- the command


@dataclass
class Context:
    """What a benchmark's ``run`` gets: the parsed arguments and the chosen scenarios."""

    args: argparse.Namespace
    config: Config
    quick: bool
    only: tuple[str, ...]
    """The scenarios to run, in the benchmark's order."""


@dataclass(frozen=True)
class Benchmark:
    """One benchmark: what is specific to it. ``main`` does the rest."""

    name: str
    """Results-file prefix and doc section (``<!-- name:start -->``)."""
    module: str
    description: str
    scenarios: tuple[str, ...]
    run: Callable[[Context], Results]
    """Measures the chosen scenarios; returns ``params`` and the figures (merged into the results)."""
    render: Callable[[Results], str]
    """The doc block's tables, from results alone (so ``--render`` can redo it)."""
    details: Callable[[Results], str] | None = None
    """The run report's further tables (breakdowns, profiles), written beside the results JSON."""
    summary: Callable[[Results], str] | None = None
    """What is printed after a run (default: the doc block)."""
    evaluate: Callable[[Results], None] | None = None
    """Adds targets and derived figures; runs again on ``--render``."""
    options: Callable[[argparse.ArgumentParser], None] | None = None
    command_prefix: str = ""
    """Environment the reproduce command needs (e.g. ``SPARK_LOCAL_IP=127.0.0.1 ``)."""
    wait_for_others_s: float = 0.0
    """How long a full run waits for other benchmarks to finish first (``--no-wait`` skips it)."""


def _parser(bench: Benchmark) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {bench.module}", description=bench.description)
    add = parser.add_argument
    add("--quick", action="store_true", help="small sizes for a smoke run (the doc is left alone)")
    add(
        "--only",
        action="append",
        metavar="SCENARIO",
        help=f"comma-separated or repeated subset of: {', '.join(bench.scenarios)}",
    )
    add("--keep", action="store_true", help="keep the benchmark's topics, Redis keys and tables")
    add("--no-doc", action="store_true", help="do not update the doc block (with --render: print it)")
    add("--write-doc", action="store_true", help="update the doc section after a quick or partial run too")
    add("--doc", type=Path, default=DOC, help="the Markdown file holding the section (default: %(default)s)")
    add("--render", type=Path, metavar="RESULTS_JSON", help="only re-render the doc section from a saved run")
    add("--results-dir", type=Path, default=RESULTS_DIR)
    add("--no-start-stack", action="store_true", help="fail instead of starting the local stack")
    if bench.wait_for_others_s:
        add("--no-wait", action="store_true", help="do not wait for other benchmarks to finish")
    if bench.options is not None:
        bench.options(parser)
    return parser


def _write_section(bench: Benchmark, results: Results, doc: Path, *, show: bool) -> None:
    from bench import report

    body = bench.render(results)
    if show:
        print(body)
    else:
        report.update_section(doc, bench.name, body)
        progress(f"updated the {bench.name} section of {relative(doc)}")


def write_report(bench: Benchmark, results: Results, results_json: Path) -> Path:
    """Every table of a run (the doc block, then the details) in a Markdown file beside its JSON."""
    parts = [f"# {bench.name}: {results_json.name}", "", bench.render(results)]
    if bench.details is not None:
        parts += ["", bench.details(results)]
    path = results_json.with_suffix(".md")
    path.write_text("\n".join(parts).rstrip() + "\n")
    return path


def command(bench: Benchmark, argv: Sequence[str]) -> str:
    """The command line that reproduces a run, as the doc section shows it."""
    return " ".join([f"{bench.command_prefix}.venv/bin/python -m {bench.module}", *map(shlex.quote, argv)])


def main(bench: Benchmark, argv: list[str] | None = None) -> int:
    """Parse the shared flags, run (or re-render), save the results, print the summary, update the doc."""
    argv = sys.argv[1:] if argv is None else argv
    parser = _parser(bench)
    args = parser.parse_args(argv)
    quiet_logging()
    if args.render:
        saved = load_results(args.render)
        saved.setdefault("command", command(bench, []))
        if bench.evaluate is not None:
            bench.evaluate(saved)
        _write_section(bench, saved, args.doc, show=args.no_doc)
        progress(f"report: {relative(write_report(bench, saved, args.render))}")
        return 0

    chosen = {s.strip() for part in args.only or [] for s in part.split(",") if s.strip()}
    if chosen - set(bench.scenarios):
        parser.error(
            f"unknown scenario(s) {sorted(chosen - set(bench.scenarios))}; choose from {bench.scenarios}"
        )
    only = tuple(s for s in bench.scenarios if s in chosen) if chosen else bench.scenarios
    config = Config.load()
    ensure_stack(config, start=not args.no_start_stack)
    waited = None
    if bench.wait_for_others_s and not args.quick:
        waited = wait_for_other_benchmarks(bench.module, 0 if args.no_wait else bench.wait_for_others_s)
    environment = describe(config)
    mode = "quick" if args.quick else "full"
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S")
    path = args.results_dir / f"{bench.name}-{stamp}{'-quick' if args.quick else ''}.json"
    progress(
        f"{bench.name} ({mode}) against {config.bootstrap_servers}; {environment['nproc']} CPUs, load "
        f"{environment['loadavg_at_start']}"
    )
    measured = bench.run(Context(args, config, args.quick, only))
    rss = (
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,
    )
    results: Results = {
        "benchmark": bench.name,
        "mode": mode,
        "command": command(bench, argv),
        "results_file": relative(path),
        "scenarios": list(only),
        "environment": environment,
        **({"waited_for_others": waited} if waited is not None else {}),
        **measured,
        "finished_utc": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "loadavg_at_end": loadavg(),
        "peak_rss_mb": {
            "benchmark_process": round(rss[0] / 1024),
            "largest_child_process": round(rss[1] / 1024),
        },
    }
    if bench.evaluate is not None:
        bench.evaluate(results)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(results, indent=1, default=str) + "\n")
    progress(f"results: {relative(path)}, report: {relative(write_report(bench, results, path))}")
    print((bench.summary or bench.render)(results))
    complete = not args.quick and only == bench.scenarios
    if not args.no_doc and (complete or args.write_doc):
        _write_section(bench, results, args.doc, show=False)
    return 0
