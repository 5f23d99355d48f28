"""segcat's side of the read-path benchmark: build tables through the real services, read them.

Tables are built as a user would: ``Table`` handle commits (bulk commits of many segments,
then a few one-segment commits) while a materializer restricted to that one table runs
with a commit-count key-frame interval K chosen so the newest key frame sits right after
the bulk. Redis then holds key frame + ``tail`` deltas, object storage the key frame
Parquet + commit archives, Kafka the whole log, and every read path can be timed.
"""

from __future__ import annotations

import gc
import hashlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bench.read_processes import (
    WatcherProcess,
    catch_up,
    make_segment,
    materializer_config,
    materializer_process,
    write_in_processes,
)
from bench.read_sizes import Sizes
from bench.runner import NS_PER_MS, measure, percentile, summary, to_ms
from segcat import load_catalog
from segcat.catalog.config import Config
from segcat.catalog.log.reader import LogReader
from segcat.catalog.log.topics import TopicAdmin
from segcat.catalog.protocol import codec
from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.names import table_name
from segcat.catalog.read.snapshot import Snapshot
from segcat.catalog.read.table import TableReader, Tables
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.frame_view import FrameView
from segcat.catalog.storage.redis import RedisStore, keys

try:  # the lean reader path (Redis key-frame format 2); absent in trees before it
    from segcat.catalog.storage import delta_arrow
    from segcat.catalog.storage.delta_arrow import EncodedCommit
    from segcat.catalog.storage.redis.store import keyframe_digest

    LEAN = True
except ImportError:  # pragma: no cover - the before run on an older tree
    LEAN = False


@dataclass
class Built:
    """A table the benchmark built, and what it expects every read to return."""

    name: str
    live: int
    commits: int
    head_offset: int
    keyframe_every: int | None
    newest_keyframe: int | None
    build_s: float
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.name,
            "live_segments": self.live,
            "commits": self.commits,
            "head_offset": self.head_offset,
            "keyframe_every_commits": self.keyframe_every,
            "newest_keyframe_version": self.newest_keyframe,
            "build_s": round(self.build_s, 1),
            **self.details,
        }


def bulk_plan(total: int, per_commit: int) -> list[int]:
    """Segments per commit adding ``total`` segments in commits of ``per_commit`` (last one smaller)."""
    full, rest = divmod(total, per_commit)
    return [per_commit] * full + ([rest] if rest else [])


def wait_for_offset(redis: RedisStore, table: str, offset: int, timeout_s: float) -> None:
    """Until the materialized head (in Redis) has applied ``offset``."""
    deadline = time.monotonic() + timeout_s
    while (head := redis.head(table)) is None or head.offset < offset:
        if time.monotonic() > deadline:
            raise TimeoutError(f"materializer did not reach offset {offset} of {table} (head {head})")
        time.sleep(0.05)


def forget_table(redis: RedisStore, table: str) -> None:
    """Delete the table's Redis keys (head, deltas, key frame) and its registration."""
    redis.client.delete(keys.head_key(table), keys.deltas_key(table), keys.keyframe_key(table))
    redis.client.srem(keys.TABLES_KEY, table_name(table).qualified)


def build_table(
    config: Config, catalog: Tables, table: str, plan: list[int], *, keyframe_every: int, prefix: str
) -> Built:
    """Create ``table`` and commit ``plan`` (segments per commit) with a materializer running."""
    catalog.create_table(table)
    assert catalog.redis is not None
    started = time.perf_counter()
    with materializer_process(materializer_config(config, keyframe_every), table):
        (result,) = write_in_processes(config, table, [(prefix, plan)])
        versions: list[int] = result["versions"]
        wait_for_offset(catalog.redis, table, versions[-1], timeout_s=1800)
    build_s = time.perf_counter() - started
    head = catalog.redis.head(table)
    files = catalog.open(table).files
    assert files is not None
    kf_versions = files.keyframe_versions()
    return Built(
        name=table,
        live=sum(plan),
        commits=len(plan),
        head_offset=versions[-1],
        keyframe_every=keyframe_every,
        newest_keyframe=kf_versions[-1] if kf_versions else None,
        build_s=build_s,
        details={
            "writer_s": round(result["seconds"], 1),
            "keyframes_written": len(kf_versions),
            "redis_keyframe_version": None if head is None else head.keyframe_version,
            "segments_per_bulk_commit": max(plan),
            "plan": plan,
            "versions": versions,
        },
    )


def build_list_table(config: Config, catalog: Tables, table: str, size: int, sizes: Sizes) -> Built:
    """``size - tail`` segments in bulk commits, a key frame right after them, then ``tail`` deltas."""
    plan = bulk_plan(size - sizes.tail_commits, sizes.per_commit[size])
    if len(plan) <= sizes.tail_commits:
        raise ValueError(f"size {size}: K={len(plan)} must exceed the {sizes.tail_commits} tail commits")
    built = build_table(  # K counts accepted commits: the table's creation (version 0) is one of them
        config, catalog, table, plan + [1] * sizes.tail_commits, keyframe_every=len(plan) + 1, prefix="s"
    )
    built.details["bulk_commits"] = len(plan)
    built.details["tail_commits"] = sizes.tail_commits
    return built


# --------------------------------------------------------------------------- open + list


ARROW_LISTING = hasattr(Snapshot, "files_arrow")
"""Whether this segcat lists as Arrow (``Snapshot.files_arrow``); older trees (the before run) do not."""


def expect(count: int, *origins: str) -> Callable[[tuple[Any, str]], None]:
    """A check of a listing: ``count`` files, answered by one of ``origins`` (any when none)."""

    def check(result: tuple[Any, str]) -> None:
        files, got = result
        if len(files) != count:
            raise AssertionError(f"listed {len(files)} files, expected {count}")
        if origins and got not in origins:
            raise AssertionError(f"answered from {got!r}, expected one of {origins!r}")

    return check


def list_files(
    table: TableReader,
    version: int | None = None,
    sources: tuple[str, ...] | None = None,
    *,
    stale_ok: bool = False,
    arrow: bool = False,
) -> tuple[Any, str]:
    """Open + list: ``snapshot()`` then ``files()`` (``arrow``: ``files_arrow()`` where segcat has it)."""
    if sources is None:
        snap = table.snapshot(version, stale_ok=stale_ok)
    else:
        snap = table.snapshot(version, sources=sources)
    if arrow and ARROW_LISTING:
        return snap.files_arrow(), snap.origin  # type: ignore[attr-defined]
    return snap.files(), snap.origin


def measure_open_list(catalog: Tables, built: Built, sizes: Sizes) -> dict[str, Any]:
    """Every read path of one table: Redis, object store (alone, and + Kafka tail), Kafka replay."""
    table = catalog.open(built.name)
    kf = built.newest_keyframe
    assert kf is not None
    # live at the newest key frame: the bulk, and any tail commit a frame was cut after (a
    # materializer may also cut one by segments pending or at the end of a catch-up)
    plan, versions = built.details["plan"], built.details["versions"]
    kf_live = sum(n for n, v in zip(plan, versions, strict=True) if v <= kf)
    slow = built.live >= 100_000

    def cell(
        fn: Callable[[], Any], check: Callable[[Any], None] | None, what: str, **kw: Any
    ) -> dict[str, Any]:
        timing = measure(fn, reps=sizes.reps, fast_reps=sizes.fast_reps, check=check, **kw)
        timing.details = {"what": what, **timing.details}
        return timing.to_json()

    out: dict[str, Any] = {"table": built.to_json()}
    out["redis"] = cell(
        lambda: list_files(table, arrow=True),
        expect(built.live, "redis"),
        "the head as of the log's end: Redis + one watermark request; "
        + ("files_arrow()" if ARROW_LISTING else "files() (no Arrow listing in this tree)"),
    )
    out["redis_files_list"] = cell(
        lambda: list_files(table),
        expect(built.live, "redis"),
        "the same with files(): a Python list of str",
    )
    out["redis_stale_ok"] = cell(
        lambda: list_files(table, stale_ok=True),
        expect(built.live, "redis"),
        "snapshot(stale_ok=True): the materialized head, no Kafka tail",
    )
    out["object_store"] = cell(
        lambda: list_files(table, kf, ("object-store",)),
        expect(kf_live, "object-store"),
        "key frame Parquet only (version = key frame)",
    )
    out["object_store"]["details"].update(version=kf, live_segments=kf_live)
    out["object_store_kafka_tail"] = cell(
        lambda: list_files(table, None, ("object-store", "kafka")),
        expect(built.live, "object-store+kafka", "object-store"),  # no tail when a frame is the head
        f"key frame Parquet + Kafka tail of {sizes.tail_commits} records (head)",
    )
    out["kafka"] = cell(
        lambda: list_files(table, None, ("kafka",)),
        expect(built.live, "kafka"),
        f"replay of all {built.commits} records from offset 0",
        warmup=0 if slow else 1,
        budget_s=sizes.slow_budget_s,
    )
    out["open_table"] = cell(
        lambda: catalog.open(built.name), None, "Catalog.table(name): topic metadata + config check"
    )
    out["redis_phases"] = redis_phases(catalog, table, sizes.reps)
    return out


REDIS_STEPS = (
    "redis_hget_keyframe_only",
    "redis_load_incl_checksum",
    "checksum_of_value",
    "from_ipc",
    "keyframe_checksum_not_in_chain",
    "decode_deltas",
    "frameview_apply_deltas",
    "files",
)


def redis_phases(catalog: Tables, table: TableReader, reps: int) -> dict[str, Any]:
    """Path (a) — ``lookup.from_redis`` + ``Snapshot.files`` — redone step by step (medians, ms)."""
    redis = catalog.redis
    assert redis is not None
    name = table.name.qualified
    phases: dict[str, list[float]] = {step: [] for step in REDIS_STEPS}
    size = deltas = 0
    for _ in range(reps + 1):  # the first pass is a warm-up
        gc.collect()
        marks = [time.perf_counter_ns()]
        raw = redis.client.hget(keys.keyframe_key(name), "data")
        marks.append(time.perf_counter_ns())
        loaded = redis.load(name)
        marks.append(time.perf_counter_ns())
        assert isinstance(raw, bytes) and loaded.keyframe is not None and loaded.head is not None
        size = len(raw)
        if LEAN:  # the check load() ran: CRC-32 since Redis key-frame format 2
            keyframe_digest(loaded.keyframe)
        else:
            hashlib.sha256(loaded.keyframe).hexdigest()
        marks.append(time.perf_counter_ns())
        frame = keyframe.from_ipc(loaded.keyframe, verified_bytes=True)  # as lookup.from_redis calls it
        marks.append(time.perf_counter_ns())
        if "segment_avro" in frame.table.column_names:
            keyframe.verify(frame.table)
        marks.append(time.perf_counter_ns())
        if LEAN:
            encoded = [EncodedCommit(d.version, d.timestamp_ms, d.value) for d in loaded.deltas]
            commits: list[Any] = [delta_arrow.decode(c) for c in encoded]
            marks.append(time.perf_counter_ns())
            start = FrameView.from_keyframe(frame, lean=True)  # type: ignore[call-arg]
            view = start.apply_decoded(commits, offset=max(loaded.head.offset, frame.version))
        else:
            commits = [
                CommitDelta(d.version, d.timestamp_ms, codec.decode_commit(d.value)) for d in loaded.deltas
            ]
            marks.append(time.perf_counter_ns())
            reach = max(loaded.head.offset, frame.version)
            view = FrameView.from_keyframe(frame).apply(commits, offset=reach)
        marks.append(time.perf_counter_ns())
        listed = Snapshot(view, table.root, origin="redis").files()  # the Python list, as before
        marks.append(time.perf_counter_ns())
        assert len(listed) == view.live_count
        deltas = len(commits)
        for i, step in enumerate(REDIS_STEPS):
            phases[step].append((marks[i + 1] - marks[i]) / NS_PER_MS)
        del raw, loaded, frame, view, listed
    medians = {k: round(statistics.median(v[1:]), 3) for k, v in phases.items()}
    return {"keyframe_ipc_bytes": size, "deltas": deltas, "median_ms": medians}


# --------------------------------------------------------------------------- time travel


def measure_time_travel(
    catalog: Tables, built: Built, mid: int, expected: int, reps: int, fast_reps: int
) -> dict[str, Any]:
    table = catalog.open(built.name)
    files = table.files
    assert files is not None
    at_most = [v for v in files.keyframe_versions() if v <= mid]
    timing = measure(
        lambda: list_files(table, mid), reps=reps, fast_reps=fast_reps, check=expect(expected, "object-store")
    )
    after = [v for v in files.keyframe_versions() if v > mid]
    before = at_most[-1] if at_most else None
    if LEAN:
        chain_text = (
            "the chain reads the Redis key frame's version (one `HGET`), finds it newer than the version "
            "asked and answers from object storage: only APPENDs lie between the version and the next key "
            f"frame ({after[0] if after else None}), so that frame less the rows added after the version "
            "answers (the commit archive read for its operation column; no commit decoded)."
        )
    else:
        chain_text = (
            "the chain first loads the Redis key frame (head), finds it newer than the version asked and "
            f"falls through to object storage: key frame at version {before} + "
            f"{mid - before if before is not None else mid} commits from the commit archive."
        )
    timing.details = {
        "version": mid,
        "live_segments": expected,
        "keyframe_used": before,
        "next_keyframe": after[0] if after else None,
        "commits_from_archives": mid - before if before is not None else mid,
        "chain": "default (redis → object-store → kafka); Redis declines (its key frame is newer)",
        "chain_text": chain_text,
    }
    return {"segcat": timing.to_json(), "table": built.to_json()}


# --------------------------------------------------------------------------- watch latency


def run_watch(config: Config, catalog: Tables, table: str, commits: int, pause_s: float) -> dict[str, Any]:
    """``commits`` one-segment appends while ``table.watch()`` runs in another process.

    Latency of a version = watcher arrival (wall clock) − the record's broker timestamp
    (LogAppendTime, ms resolution). Also kept: arrival − the writer's commit-return time
    (negative when the notification beats the writer's own verdict) and − its send time.
    """
    catalog.create_table(table)
    assert catalog.redis is not None
    with (
        materializer_process(materializer_config(config), table),
        load_catalog(config).load_table(table) as writer,
    ):
        counter = 0

        def one() -> tuple[int, int, int]:
            nonlocal counter
            counter += 1
            sent = time.time_ns()
            version = writer.append([make_segment("w", counter)])
            return version, sent, time.time_ns()

        warm = one()[0]
        wait_for_offset(catalog.redis, table, warm, 60)
        watcher = WatcherProcess(config, table)
        try:
            for _ in range(100):
                one()
                if watcher.first.wait(0.5):
                    break
            else:
                raise RuntimeError("the watcher never saw a version")
            time.sleep(0.5)
            sends: dict[int, tuple[int, int]] = {}
            began = time.perf_counter()
            for _ in range(commits):
                version, sent, returned = one()
                sends[version] = (sent, returned)
                if pause_s:
                    time.sleep(pause_s)
            wall = time.perf_counter() - began
            watcher.stop_at(max(sends))
            one()  # a sentinel, so the watcher sees a version beyond the last timed one
            arrivals = watcher.result()
        finally:
            watcher.kill()
    seen = {a[0]: a for a in arrivals}
    vs_broker: list[int] = []
    vs_return: list[int] = []
    vs_send: list[int] = []
    sources: dict[str, int] = {}
    for version, (sent, returned) in sends.items():
        if (got := seen.get(version)) is None:
            continue
        _, arrived, ts_ms, _, source = got
        sources[source] = sources.get(source, 0) + 1
        vs_broker.append(arrived - ts_ms * NS_PER_MS)
        vs_return.append(arrived - returned)
        vs_send.append(arrived - sent)
    return {
        "table": table,
        "commits": commits,
        "pause_s": pause_s,
        "write_wall_s": round(wall, 2),
        "commits_per_s": round(commits / wall, 1),
        "received": len(vs_broker),
        "missing": sum(1 for v in sends if v not in seen),
        "sources": sources,
        "arrival_minus_broker_ts": summary(to_ms(vs_broker)),
        "arrival_minus_commit_return": _signed_summary(to_ms(vs_return)),
        "arrival_minus_commit_send": summary(to_ms(vs_send)),
        "samples_arrival_minus_broker_ts_us": [round(v / 1000) for v in vs_broker],
    }


def _signed_summary(samples_ms: list[float]) -> dict[str, float]:
    """``summary`` of samples that may be negative, with the nearest-rank median (a sample, not
    a mean of two) and the share of negative ones (the notification came first)."""
    out = summary(samples_ms)
    out["median_ms"] = round(percentile(sorted(samples_ms), 50), 4)
    out["negative_share"] = round(sum(1 for v in samples_ms if v < 0) / len(samples_ms), 3)
    return out


# --------------------------------------------------------------------------- catch-up


def build_log(config: Config, catalog: Tables, table: str, commits: int, writers: int) -> dict[str, Any]:
    """``commits`` one-segment appends from ``writers`` processes at once, no materializer running."""
    catalog.create_table(table)
    share, rest = divmod(commits, writers)
    plans = [(f"c{w}", [1] * (share + (1 if w < rest else 0))) for w in range(writers)]
    started = time.perf_counter()
    results = write_in_processes(config, table, plans)
    seconds = time.perf_counter() - started
    with LogReader(config, table_name(table)) as reader:
        high = reader.watermarks()[1]
    return {
        "table": table,
        "records": high,
        "writers": writers,
        "build_s": round(seconds, 1),
        "writer_s": [round(r["seconds"], 1) for r in results],
    }


def measure_catchup(
    config: Config, catalog: Tables, table: str, end_offset: int, workdir: Path, reps: int, profile_to: Path
) -> dict[str, Any]:
    """Cold starts: each a new consumer group, an empty warehouse and no Redis keys for the table."""
    assert catalog.redis is not None
    runs: list[dict[str, Any]] = []
    records = end_offset + 1
    for rep in range(reps + 1):
        profiled = rep == reps
        forget_table(catalog.redis, table)
        cfg = replace(materializer_config(config), warehouse=str(workdir / f"catchup-warehouse-{rep}"))
        result = catch_up(cfg, table, end_offset, profile_to=profile_to if profiled else None)
        marks = result["marks"]
        if "caught_up" not in marks:
            raise RuntimeError(f"catch-up did not finish: {result}")
        total = marks["caught_up"] - marks["ready"]
        steady = marks["caught_up"] - marks["first_record"]
        run: dict[str, Any] = {
            "profiled": profiled,
            "seconds_from_ready": round(total, 3),
            "seconds_from_first_record": round(steady, 3),
            "seconds_ready_to_assigned": round(marks.get("assigned", marks["ready"]) - marks["ready"], 3),
            "commits_per_s": round(records / total, 1),
            "commits_per_s_after_first_record": round((end_offset - result["first_version"]) / steady, 1),
            "process_cpu_s": round(result["process_cpu_s"], 2),
            "keyframes": result["keyframes"],
        }
        if not profiled:
            split = {k: round(v, 2) for k, v in result["split_s"].items()}
            split["rest"] = round(total - sum(split.values()), 2)
            run["split_s"] = split
        runs.append(run)
    timed = [r for r in runs if not r["profiled"]]
    return {
        "table": table,
        "records": records,
        "runs": runs,
        "median_commits_per_s": statistics.median(r["commits_per_s"] for r in timed),
        "median_commits_per_s_after_first_record": statistics.median(
            r["commits_per_s_after_first_record"] for r in timed
        ),
        "median_seconds": statistics.median(r["seconds_from_ready"] for r in timed),
    }


def replay_floor(catalog: Tables, table: str, records: int, reps: int) -> dict[str, Any]:
    """A bare replay of the log (``Table.state()``: read + decode + rules), the materializer's floor."""
    handle = catalog.open(table)

    def check(version: int) -> None:
        if version != records - 1:
            raise AssertionError(f"replayed to {version}, expected {records - 1}")

    timing = measure(lambda: handle.state().version, reps=reps, warmup=0, check=check)
    return {**timing.to_json(), "commits_per_s": round(records / (timing.median_ms / 1000), 1)}


def drop_tables(config: Config, catalog: Tables, tables: list[str]) -> None:
    admin = TopicAdmin(config)
    for table in tables:
        try:
            if catalog.redis is not None:
                forget_table(catalog.redis, table)
            admin.delete(table_name(table))
        except Exception as exc:  # cleanup is best effort
            print(f"could not drop {table}: {exc}")


# --------------------------------------------------------------------------- bulk load


BULK_MOMENTS_S = (3.0, 20.0, 40.0, 70.0)
"""When, after the bulk load's last commit, open + list is timed: before the periodic key frame
(T = 60 s by default) and after it."""


def measure_bulk_load(
    config: Config, catalog: Tables, table: str, commits: int, per_commit: int, reps: int
) -> dict[str, Any]:
    """``commits`` × ``per_commit`` segments appended with a default-settings materializer running,
    then open + list timed at ``BULK_MOMENTS_S`` after the last commit (Redis head, default chain)."""
    catalog.create_table(table)
    assert catalog.redis is not None
    live = commits * per_commit
    moments: list[dict[str, Any]] = []
    with materializer_process(materializer_config(config), table):
        (result,) = write_in_processes(config, table, [("b", [per_commit] * commits)])
        done = time.perf_counter()
        versions: list[int] = result["versions"]
        handle = catalog.open(table)
        for moment in BULK_MOMENTS_S:
            time.sleep(max(0.0, done + moment - time.perf_counter()))
            started = time.perf_counter() - done
            head = catalog.redis.head(table)
            arrow = measure(lambda: list_files(handle, arrow=True), reps=reps, check=expect(live))
            listed = measure(lambda: list_files(handle), reps=reps, check=expect(live))
            after = catalog.redis.head(table)
            moments.append(
                {
                    "at_s": moment,
                    "started_s": round(started, 2),
                    "ended_s": round(time.perf_counter() - done, 2),
                    "redis_keyframe_version": None if head is None else head.keyframe_version,
                    "redis_keyframe_version_after": None if after is None else after.keyframe_version,
                    "redis_head_version": None if head is None else head.version,
                    "origin": list_files(handle)[1],
                    "open_list": arrow.to_json(),
                    "open_list_files": listed.to_json(),
                }
            )
    return {
        "commits": commits,
        "per_commit": per_commit,
        "live": live,
        "last_version": versions[-1],
        "writer_s": round(result["seconds"], 1),
        "listing": "files_arrow()" if ARROW_LISTING else "files() (no Arrow listing in this tree)",
        "materializer": "default settings (K = 1,000 commits, T = 60 s, D = 8 MiB)",
        "moments": moments,
    }
