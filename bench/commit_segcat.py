"""segcat's commit-latency scenarios: sequential appends, concurrent writer processes, a long log.

Every commit is a ``Table.append`` of one fresh segment with two column stats; its
latency is the wall time of that call (validate + encode + produce with acks=all + delivery
report + catch-up fetch to judge the commit). Each writer makes one untimed warm-up commit
first, so connection set-up and the producer id handshake are not counted.

``PhaseProbe`` splits a commit's time into *produce* (waiting for the delivery report) and
*catch-up* (fetch + replay up to the own record) by wrapping the writer's producer and follower. It is
benchmark-only instrumentation of private attributes: if the writer's internals change, it
switches itself off and the breakdown is simply missing.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import queue
import statistics
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from contextlib import ExitStack
from ctypes import Array, c_int
from dataclasses import dataclass, field
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from typing import Any

from confluent_kafka import KafkaError, Producer

from bench.commit_runs import CpuMeter, Run, timed_commits
from bench.runner import NS_PER_MS, Tick, loadavg, summary, time_each, to_ms
from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.log.clients import producer_config
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.model import ColumnStats, ColumnType, Commit, Operation, Segment
from segcat.catalog.protocol.names import table_name

PARTITION = "2024-01"


def make_segment(prefix: str, i: int) -> Segment:
    """A fresh segment (unique id) with two typed column stats, like a small Spark file."""
    segment_id = f"{prefix}-{i:06d}"
    return Segment(
        segment_id=segment_id,
        path=f"data/part={PARTITION}/{segment_id}.parquet",
        size_bytes=4096 + i,
        row_count=100,
        partition=PARTITION,
        stats=(
            ColumnStats("id", ColumnType.INT, min=i * 100, max=i * 100 + 99, null_count=0),
            ColumnStats("name", ColumnType.STRING, min="alpha", max="omega", null_count=0),
        ),
    )


def make_commit(prefix: str, i: int, table: str, writer_id: str) -> Commit:
    return Commit(
        commit_id=Commit.new_id(),
        table=table,
        operation=Operation.APPEND,
        base_version=-1,
        writer_id=writer_id,
        timestamp_ms=int(time.time() * 1000),
        adds=(make_segment(prefix, i),),
    )


# --------------------------------------------------------------------------- phases


@dataclass
class PhaseProbe:
    """Times the produce and catch-up steps of each commit of one table handle's writer."""

    enabled: bool = False
    produce_ns: list[int] = field(default_factory=list)
    catchup_ns: list[int] = field(default_factory=list)
    records: list[int] = field(default_factory=list)
    """Records applied by each catch-up (1 = only the own commit)."""
    _acc: list[int] = field(default_factory=lambda: [0, 0, 0])

    @classmethod
    def attach(cls, table: Table) -> PhaseProbe:
        probe = cls()
        writer = table._write()  # the handle's writer, opened now: its steps are timed (white-box)
        pipeline = getattr(writer, "_pipeline", None)
        producer = getattr(pipeline, "_producer", None)
        follower = getattr(writer, "_follower", None)
        catch_up = getattr(follower, "catch_up", None)
        if producer is None or follower is None or catch_up is None or not hasattr(follower, "_position"):
            return probe
        probe.enabled = True

        class TimedProducer:
            """The writer's producer, its waits for delivery reports (``flush``/``poll``) timed."""

            def __getattr__(self, name: str) -> Any:
                return getattr(producer, name)

            def flush(self, *args: Any) -> Any:
                start = time.perf_counter_ns()
                try:
                    return producer.flush(*args)
                finally:
                    probe._acc[0] += time.perf_counter_ns() - start

            def poll(self, *args: Any) -> Any:
                start = time.perf_counter_ns()
                try:
                    return producer.poll(*args)
                finally:
                    probe._acc[0] += time.perf_counter_ns() - start

        def timed_catch_up(*args: Any, **kwargs: Any) -> Any:
            before = follower._position
            start = time.perf_counter_ns()
            try:
                return catch_up(*args, **kwargs)
            finally:
                probe._acc[1] += time.perf_counter_ns() - start
                probe._acc[2] += follower._position - before

        setattr(pipeline, "_producer", TimedProducer())  # noqa: B010 - instance-level wrap
        setattr(follower, "catch_up", timed_catch_up)  # noqa: B010
        return probe

    def reset(self) -> None:
        self._acc[:] = [0, 0, 0]

    def mark(self) -> None:
        """Close the current commit's accounting (call after each timed commit)."""
        if self.enabled:
            self.produce_ns.append(self._acc[0])
            self.catchup_ns.append(self._acc[1])
            self.records.append(self._acc[2])
        self.reset()

    def slice(self, start: int, stop: int) -> PhaseProbe:
        return PhaseProbe(
            self.enabled, self.produce_ns[start:stop], self.catchup_ns[start:stop], self.records[start:stop]
        )


def breakdown(latencies_ns: Sequence[int], probes: Sequence[PhaseProbe]) -> dict[str, Any] | None:
    """Medians of produce / catch-up / the rest, and records fetched per catch-up."""
    produce = [v for p in probes if p.enabled for v in p.produce_ns]
    catchup = [v for p in probes if p.enabled for v in p.catchup_ns]
    records = [v for p in probes if p.enabled for v in p.records]
    if not produce or len(produce) != len(latencies_ns):
        return None
    other = [t - p - c for t, p, c in zip(latencies_ns, produce, catchup, strict=True)]
    p, c, o = (summary(to_ms(x)) for x in (produce, catchup, other))
    return {
        "produce_median_ms": p["median_ms"],
        "produce_p99_ms": p["p99_ms"],
        "catchup_median_ms": c["median_ms"],
        "catchup_p99_ms": c["p99_ms"],
        "other_median_ms": o["median_ms"],
        "produce_share": round(sum(produce) / sum(latencies_ns), 4),
        "catchup_share": round(sum(catchup) / sum(latencies_ns), 4),
        "records_per_catchup_mean": round(statistics.fmean(records), 3),
        "records_per_catchup_max": max(records),
    }


# --------------------------------------------------------------------------- tables


def create_table(config: Config, name: str) -> None:
    Catalog(config).create_table(name)


def drop_table(config: Config, name: str) -> None:
    TopicAdmin(config).delete(table_name(name))


def _check_live(writer: Table, expected: int) -> int:
    live = len(writer.refresh().segments)
    if live != expected:
        raise AssertionError(f"expected {expected} live segments after the run, found {live}")
    return live


# --------------------------------------------------------------------------- sequential


def run_sequential(
    config: Config,
    table: str,
    commits: int,
    *,
    tick: Tick,
    scenario: str = "sequential",
    windows: int | None = None,
    cold_start: bool = False,
    meter: CpuMeter | None = None,
) -> Run:
    """One long-lived writer doing ``commits`` sequential one-segment appends on a fresh table.

    ``windows``: also report the first and the last ``windows`` commits separately (log-length
    independence). ``cold_start``: afterwards, time the first commit of a brand-new writer,
    which has to replay the whole log first.
    """
    create_table(config, table)
    batches = [[make_segment("s", i)] for i in range(commits)]
    with load_catalog(config).load_table(table, writer_id="bench-sequential") as writer:
        probe = PhaseProbe.attach(writer)
        writer.append([make_segment("warmup", 0)])
        probe.reset()
        run = timed_commits(
            "segcat", scenario, batches, writer.append, tick=tick, meter=meter, after=probe.mark
        )
        run.details["live_segments_after"] = _check_live(writer, commits + 1)
    latencies = run.latencies_ns
    run.details["breakdown"] = breakdown(latencies, [probe])
    if windows:
        head, tail = latencies[:windows], latencies[-windows:]
        run.details["window"] = windows
        run.details["first_window"] = summary(to_ms(head))
        run.details["last_window"] = summary(to_ms(tail))
        run.details["first_window_breakdown"] = breakdown(head, [probe.slice(0, windows)])
        run.details["last_window_breakdown"] = breakdown(tail, [probe.slice(commits - windows, commits)])
    if cold_start:
        run.details["cold_writer"] = _cold_writer(config, table, commits + 1)
    return run


def _cold_writer(config: Config, table: str, records: int) -> dict[str, Any]:
    """A new writer's first commit on a long log: open + replay of every record + commit."""
    start = time.perf_counter_ns()
    with load_catalog(config).load_table(table, writer_id="bench-cold") as writer:
        writer._write()  # open the writer here (key frame, no replay): "open" is what it always was
        opened = time.perf_counter_ns()
        writer.append([make_segment("cold", 0)])
        done = time.perf_counter_ns()
    return {
        "log_records": records,
        "open_ms": round((opened - start) / NS_PER_MS, 3),
        "first_commit_ms": round((done - opened) / NS_PER_MS, 3),
    }


def measure_codec(count: int = 2000) -> dict[str, float]:
    """In-process cost of encoding a one-segment commit, and of applying it (decode + judge +
    fold into the image): the part of a writer's CPU that replaying other writers' commits adds."""
    from segcat.catalog.protocol import rules
    from segcat.catalog.protocol.model import LogRecord
    from segcat.catalog.protocol.state import TableState

    commits = [make_commit("codec", i, "bench.codec", "bench-codec") for i in range(count)]
    start = time.perf_counter_ns()
    values = [codec.encode_commit(c) for c in commits]
    encode_ns = (time.perf_counter_ns() - start) / count
    records = [
        LogRecord(i, 0, c.commit_id.encode(), v) for i, (c, v) in enumerate(zip(commits, values, strict=True))
    ]
    state = TableState("bench.codec")
    start = time.perf_counter_ns()
    for record in records:
        rules.apply_record(state, record)
    apply_ns = (time.perf_counter_ns() - start) / count
    return {
        "record_bytes": float(len(values[0])),
        "encode_us": round(encode_ns / 1000, 2),
        "apply_us": round(apply_ns / 1000, 2),
    }


# --------------------------------------------------------------------------- pipelined


def pipelined_loop(
    writer: Table, batches: Sequence[list[Segment]], window: int, after: Callable[[], None]
) -> tuple[list[int], int]:
    """``append_async`` every batch with at most ``window`` commits unresolved; each commit's
    latency is submit → its future settled (taken by a done-callback), and the loop's wall time.
    The first error raises."""
    submitted: list[int] = [0] * len(batches)
    settled: list[int] = [0] * len(batches)
    in_flight: deque[Future[int]] = deque()
    first = time.perf_counter_ns()
    for i, batch in enumerate(batches):
        if len(in_flight) >= window:
            in_flight.popleft().result()
            after()
        submitted[i] = time.perf_counter_ns()
        future = writer.append_async(batch)
        future.add_done_callback(lambda _, i=i: settled.__setitem__(i, time.perf_counter_ns()))
        in_flight.append(future)
    while in_flight:
        in_flight.popleft().result()
        after()
    wall = time.perf_counter_ns() - first
    return [max(0, end - start) for start, end in zip(submitted, settled, strict=True)], wall


def run_pipelined(
    config: Config,
    tables: Callable[[], str],
    commits: int,
    window: int,
    runs: int,
    *,
    tick: Tick,
    meter: CpuMeter | None = None,
) -> Run:
    """One process, one writer, ``commits`` one-segment ``append_async`` calls with ``window`` in
    flight, ``runs`` times on fresh tables; the run with the median rate is reported, every
    run's rate is kept."""
    measured: list[Run] = []
    for r in range(runs):
        table = tables()
        create_table(config, table)
        batches = [[make_segment(f"p{r}", i)] for i in range(commits)]
        with load_catalog(config).load_table(table, writer_id=f"bench-pipelined-{r}") as writer:
            writer.append([make_segment(f"warmup{r}", 0)])
            load_before = loadavg()
            if meter is not None:
                meter.start()
            cpu_start = time.process_time_ns()
            latencies, wall = pipelined_loop(writer, batches, window, lambda: tick(1))
            client_cpu = time.process_time_ns() - cpu_start
            run = Run("segcat", "pipelined", latencies, wall, load_before=load_before)
            if meter is not None:
                run.details["cpu"] = meter.stop(commits, client_cpu)
            run.load_after = loadavg()
            run.details["live_segments_after"] = _check_live(writer, commits + 1)
        measured.append(run)
    rates = [run.commits_per_s for run in measured]
    chosen = sorted(measured, key=lambda run: run.commits_per_s)[len(measured) // 2]
    chosen.details |= {"window": window, "runs": runs, "rates": [round(x, 1) for x in rates]}
    return chosen


# --------------------------------------------------------------------------- concurrent

Setup = tuple[list[Any], Callable[[Any], object], PhaseProbe]
"""The items to commit, how to commit one, and the phase probe (disabled for bare producers)."""


@dataclass
class WorkerResult:
    index: int
    latencies_ns: list[int] = field(default_factory=list)
    start_ns: int = 0
    end_ns: int = 0
    cpu_ns: int = 0
    """CPU time of the writer process (all its threads) over its timed commits."""
    probe: PhaseProbe | None = None
    error: str | None = None


def _writer_setup(
    config: Config, table: str, index: int, commits: int, stack: ExitStack, window: int = 1
) -> Setup:
    """A table handle that has made its warm-up commit. With ``window`` > 1 the commit step
    takes every batch at once and pipelines them (``pipelined_loop``), returning the latencies."""
    writer = stack.enter_context(load_catalog(config).load_table(table, writer_id=f"bench-writer-{index}"))
    probe = PhaseProbe.attach(writer) if window == 1 else PhaseProbe()
    writer.append([make_segment(f"warmup{index}", 0)])
    batches = [[make_segment(f"w{index}", i)] for i in range(commits)]
    if window == 1:
        return batches, writer.append, probe
    return batches, lambda items: pipelined_loop(writer, items, window, lambda: None), probe


def _producer_setup(config: Config, table: str, index: int, commits: int, stack: ExitStack) -> Setup:
    """The Kafka floor: the same encoded commits, produced one at a time with the writer's
    producer settings (idempotent, acks=all, zstd) and waited for, but no catch-up and no
    judging. What any one-record-per-commit, one-in-flight writer costs at the least."""
    name = table_name(table)
    producer = Producer(producer_config(config, TopicAdmin(config).describe(name).max_message_bytes))
    stack.callback(producer.flush, 10)

    def encoded(prefix: str, i: int) -> tuple[bytes, bytes]:
        commit = make_commit(prefix, i, name.qualified, f"bench-raw-{index}")
        return commit.commit_id.encode(), codec.encode_commit(commit)

    def send(record: tuple[bytes, bytes]) -> None:
        done: list[KafkaError | None] = []
        producer.produce(
            name.topic, value=record[1], key=record[0], on_delivery=lambda err, _: done.append(err)
        )
        while not done:
            producer.poll(0.05)
        if done[0] is not None:
            raise RuntimeError(f"delivery failed: {done[0]}")

    records = [encoded(f"raw{index}", i) for i in range(commits)]
    send(encoded(f"rawwarmup{index}", 0))
    return records, send, PhaseProbe()


def _worker(
    config: Config,
    table: str,
    index: int,
    commits: int,
    raw: bool,
    barrier: Barrier,
    progress: Array[c_int],
    results: Queue[WorkerResult],
    window: int = 1,
) -> None:
    """One writer process: warm up, wait at the barrier, then ``commits`` timed commits
    (one at a time, or ``window`` in flight)."""
    out = WorkerResult(index)
    try:
        with ExitStack() as stack:
            if raw:
                items, commit, probe = _producer_setup(config, table, index, commits, stack)
            else:
                items, commit, probe = _writer_setup(config, table, index, commits, stack, window)
            probe.reset()
            barrier.wait(timeout=300)

            def after() -> None:
                probe.mark()
                progress[index] += 1

            out.start_ns = time.perf_counter_ns()  # CLOCK_MONOTONIC: comparable across processes
            cpu_start = time.process_time_ns()
            if window > 1:
                out.latencies_ns, _ = commit(items)
                progress[index] += len(items)
            else:
                out.latencies_ns, _ = time_each(items, commit, after)
            out.end_ns = time.perf_counter_ns()
            out.cpu_ns = time.process_time_ns() - cpu_start
            out.probe = probe
    except BaseException as exc:
        barrier.abort()
        out.error = f"{type(exc).__name__}: {exc}"
    results.put(out)


def run_concurrent(
    config: Config,
    table: str,
    writers: int,
    commits_per_writer: int,
    *,
    tick: Tick,
    timeout_s: float = 1800.0,
    meter: CpuMeter | None = None,
    raw: bool = False,
    window: int = 1,
) -> Run:
    """``writers`` spawned processes committing to one table at once, started by a barrier.

    The parent joins the barrier too, so it can start the CPU meter as the writers start.
    ``raw``: bare producers instead of ``Table`` (see ``_producer_setup``); ``window``:
    each writer keeps that many commits in flight (``append_async``) instead of one.
    """
    create_table(config, table)
    ctx = mp.get_context("spawn")
    barrier = ctx.Barrier(writers + 1)
    progress = ctx.RawArray(c_int, writers)
    results: Queue[WorkerResult] = ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker,
            args=(config, table, i, commits_per_writer, raw, barrier, progress, results, window),
            name=f"bench-writer-{i}",
        )
        for i in range(writers)
    ]
    load_before = loadavg()
    for proc in procs:
        proc.start()
    collected: list[WorkerResult] = []
    reported = 0
    deadline = time.monotonic() + timeout_s
    total = writers * commits_per_writer
    cpu: dict[str, Any] | None = None
    try:
        # a writer that fails before starting breaks the barrier; its error comes through the queue
        with contextlib.suppress(threading.BrokenBarrierError):
            barrier.wait(timeout=300)
        if meter is not None:
            meter.start()
        while len(collected) < writers:
            try:
                collected.append(results.get(timeout=0.1))
            except queue.Empty:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"writers did not finish within {timeout_s:.0f} s") from None
                if not any(p.is_alive() for p in procs) and results.empty():
                    raise RuntimeError("a writer process died without reporting") from None
            done = sum(progress[:])
            if done > reported:
                tick(done - reported)
                reported = done
            if done == total and meter is not None and cpu is None:
                cpu = meter.stop(total)
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.terminate()
                proc.join(timeout=5)
    errors = [r.error for r in collected if r.error]
    if errors:
        raise RuntimeError(f"{len(errors)} writer(s) failed: {errors[0]}")
    collected.sort(key=lambda r: r.index)
    latencies = [ns for r in collected for ns in r.latencies_ns]
    wall = max(r.end_ns for r in collected) - min(r.start_ns for r in collected)
    run = Run(
        "kafka" if raw else "segcat",
        "raw-produce" if raw else ("concurrent" if window == 1 else "concurrent-pipelined"),
        latencies,
        wall,
        writers=writers,
        load_before=load_before,
        load_after=loadavg(),
    )
    start_skew = max(r.start_ns for r in collected) - min(r.start_ns for r in collected)
    run.details["start_skew_ms"] = round(start_skew / NS_PER_MS, 3)
    run.details["per_writer_commits_per_s"] = [
        round(len(r.latencies_ns) / ((r.end_ns - r.start_ns) / 1e9), 1) for r in collected
    ]
    run.details["breakdown"] = breakdown(latencies, [r.probe for r in collected if r.probe is not None])
    if window > 1:
        run.details["window"] = window
    if cpu is not None:
        cpu["writer_cpu_ms_per_commit"] = round(sum(r.cpu_ns for r in collected) / 1e6 / total, 3)
        run.details["cpu"] = cpu
    if not raw:
        with load_catalog(config).load_table(table, writer_id="bench-check") as checker:
            run.details["live_segments_after"] = _check_live(checker, writers * (commits_per_writer + 1))
    return run
