"""Pipelined commits on a real broker: ``submit`` / ``append_async`` futures against a replay.

The replay of the log is the judge: every future must hold exactly what a fresh reader's
rules say about that commit's record (its version, or the error ``commit()`` raises for its
verdict), a commit refused before sending must be absent from the log, and records must
reach the log in submit order.
"""

from __future__ import annotations

import threading
import uuid
from concurrent.futures import Future, wait
from dataclasses import dataclass
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from segcat import Catalog, Table, load_catalog
from segcat.catalog.config import Config
from segcat.catalog.errors import CommitConflict, InvalidArgument, MalformedCommit, NotAuthorized, SegcatError
from segcat.catalog.log.producer import SharedProducer
from segcat.catalog.log.reader import LogReader
from segcat.catalog.protocol.model import Operation
from segcat.catalog.protocol.replay import Applied, replay
from segcat.catalog.protocol.rules import Outcome, Rule
from segcat.catalog.protocol.state import TableState
from segcat.catalog.write.writer import Writer
from tests.factories import segment

pytestmark = pytest.mark.kafka


@dataclass(frozen=True)
class Judged:
    offset: int
    outcome: Outcome
    rule: Rule | None
    conflicting_version: int | None


def judged_log(config: Config, table: Table) -> dict[str, Judged]:
    """commit_id → the verdict a fresh replay of the whole log gives its (first) record."""
    out: dict[str, Judged] = {}

    def note(applied: Applied, _: TableState) -> None:
        v = applied.verdict
        if v.commit_id is not None and v.commit_id not in out:
            out[v.commit_id] = Judged(v.offset, v.outcome, v.rule, v.conflicting_version)

    with LogReader(config, table.name) as reader:
        replay(reader.read(0), TableState(table.name.qualified), listener=note)
    return out


def assert_agrees(future: Future[int], commit_id: str, log: dict[str, Judged]) -> None:
    """The future holds what the replay says about ``commit_id``."""
    error = future.exception(timeout=60)
    if error is None:
        record = log[commit_id]
        assert record.outcome is Outcome.ACCEPTED
        assert future.result() == record.offset
        return
    assert isinstance(error, CommitConflict), repr(error)
    if error.version is None:  # refused on the writer's image: never sent
        assert commit_id not in log
        return
    record = log[commit_id]
    assert (record.outcome, record.offset) == (Outcome.REJECTED, error.version)
    assert error.rule == str(record.rule)
    assert error.conflicting_version == record.conflicting_version


def test_many_appends_in_flight_resolve_to_the_versions_of_the_replay(config: Config, table: Table) -> None:
    with load_catalog(config).load_table(table.name) as writer:
        commits = [writer.new_commit(Operation.APPEND, adds=[segment(f"s{i}")]) for i in range(400)]
        futures = [writer.submit(c) for c in commits]
        versions = [f.result(timeout=60) for f in futures]
    log = judged_log(config, table)
    for commit, future in zip(commits, futures, strict=True):
        assert_agrees(future, commit.commit_id, log)
    assert versions == sorted(versions) and len(set(versions)) == len(versions)  # submit order
    assert table.snapshot().live_count == 400


def test_append_async_and_resubmitting_an_in_flight_commit(config: Config, table: Table) -> None:
    with load_catalog(config).load_table(table.name) as writer:
        first = writer.append_async([segment("a")], properties={"job": "1"})
        commit = writer.new_commit(Operation.APPEND, adds=[segment("b")])
        sent = writer.submit(commit)
        again = writer.submit(commit)  # same commit id while in flight: the same future
        assert again is sent
        version = sent.result(timeout=60)
        assert writer.submit(commit).result(timeout=0) == version  # known to the image: not re-sent
        assert first.result(timeout=60) < version
    log = judged_log(config, table)
    assert len(log) == 3  # the table's protocol record, a and b: nothing sent twice
    assert table.history()[-1].version == version


def test_a_conflict_among_pipelined_commits_fails_only_its_own_future(config: Config, table: Table) -> None:
    with load_catalog(config).load_table(table.name) as writer:
        writer.append([segment("a"), segment("b")])
        before = [writer.append_async([segment(f"x{i}")]) for i in range(20)]
        compact_1 = writer.new_commit(Operation.COMPACT, drops=["a"], adds=[segment("a1")])
        compact_2 = writer.new_commit(Operation.COMPACT, drops=["a", "b"], adds=[segment("ab")])
        first, second = writer.submit(compact_1), writer.submit(compact_2)  # both judged on one image
        after = [writer.append_async([segment(f"y{i}")]) for i in range(20)]
        won = first.result(timeout=60)
        with pytest.raises(CommitConflict) as info:
            second.result(timeout=60)
        assert [f.result(timeout=60) for f in before + after]
    assert info.value.rule == str(Rule.CONCURRENT_DROP)
    assert info.value.conflicting_version == won
    assert info.value.version is not None and info.value.version > won  # it was sent and lost
    log = judged_log(config, table)
    assert_agrees(first, compact_1.commit_id, log)
    assert_agrees(second, compact_2.commit_id, log)
    live = {s.segment_id for s in table.snapshot().segment_list()}
    assert live == {"a1", "b"} | {f"x{i}" for i in range(20)} | {f"y{i}" for i in range(20)}


def test_a_conflict_the_image_already_shows_fails_the_future_unsent(config: Config, table: Table) -> None:
    with load_catalog(config).load_table(table.name) as writer:
        writer.append([segment("a")])
        writer.compact(["a"], [segment("a1")])
        stale = writer.new_commit(Operation.COMPACT, drops=["a"], adds=[segment("a2")])
        future = writer.submit(stale)
        with pytest.raises(CommitConflict) as info:
            future.result(timeout=60)
        assert info.value.version is None
    assert stale.commit_id not in judged_log(config, table)


def test_malformed_commits_are_raised_at_submit_and_nothing_is_sent(config: Config, table: Table) -> None:
    with load_catalog(config).load_table(table.name) as writer:
        with pytest.raises(MalformedCommit, match="APPEND may not carry drops"):
            writer.submit(writer.new_commit(Operation.APPEND, adds=[segment("a")], drops=["zzz"]))
        ok = writer.append_async([segment("b")])
        assert ok.result(timeout=60) == 1
    assert len(judged_log(config, table)) == 2


def test_threads_sharing_one_writer_each_get_their_own_verdicts(config: Config, table: Table) -> None:
    threads, each = 6, 40
    results: dict[int, list[tuple[str, int]]] = {t: [] for t in range(threads)}
    errors: list[BaseException] = []
    with load_catalog(config).load_table(table.name) as writer:

        def work(t: int) -> None:
            try:
                for i in range(each):
                    commit = writer.new_commit(Operation.APPEND, adds=[segment(f"t{t}-{i}")])
                    if i % 3 == 0:  # a mix of blocking and pipelined calls
                        results[t].append((commit.commit_id, writer.submit(commit).result(timeout=60)))
                    else:
                        results[t].append((commit.commit_id, writer.commit(commit)))
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(120)
    assert not errors, errors
    log = judged_log(config, table)
    for t in range(threads):
        versions = [v for _, v in results[t]]
        assert versions == sorted(versions)  # each thread's commits in its own order
        for cid, version in results[t]:
            assert log[cid] == Judged(version, Outcome.ACCEPTED, None, None)
    assert table.snapshot().live_count == threads * each


def test_close_with_futures_in_flight_resolves_every_one(config: Config, table: Table) -> None:
    writer = load_catalog(config).load_table(table.name)
    commits = [writer.new_commit(Operation.APPEND, adds=[segment(f"c{i}")]) for i in range(300)]
    futures = [writer.submit(c) for c in commits]
    writer.close()
    assert all(f.done() for f in futures)  # none left unresolved
    log = judged_log(config, table)
    for commit, future in zip(commits, futures, strict=True):
        error = future.exception(timeout=0)
        assert error is None or isinstance(error, SegcatError)
        if error is None:
            assert_agrees(future, commit.commit_id, log)
    with pytest.raises(InvalidArgument, match="closed"):
        writer.append_async([segment("late")])
    writer.close()  # twice is harmless


def test_waiting_inside_a_future_callback_is_refused_not_a_deadlock(config: Config, table: Table) -> None:
    seen: list[tuple[bool, BaseException | None]] = []
    main = threading.current_thread()
    with load_catalog(config).load_table(table.name) as writer:
        inner = writer.new_commit(Operation.APPEND, adds=[segment("inner")])

        def callback(_: Future[int]) -> None:
            try:
                writer.commit(inner)
                seen.append((threading.current_thread() is main, None))
            except InvalidArgument as exc:
                seen.append((threading.current_thread() is main, exc))

        outer = writer.append_async([segment("outer")])
        outer.add_done_callback(callback)
        wait([outer], timeout=60)  # waits without driving: the judge thread settles the future
        writer.append([segment("after")])  # the writer still works
    ((on_main, error),) = seen
    assert on_main or isinstance(error, InvalidArgument)  # on the judge thread: refused, not hung
    assert (inner.commit_id in judged_log(config, table)) == (error is None)


# --------------------------------------------------------------------------- property


@st.composite
def plans(draw: st.DrawFn) -> list[tuple[str, tuple[int, ...]]]:
    """Appends of fresh segments mixed with compactions of the four base segments (which race)."""
    steps = draw(
        st.lists(
            st.one_of(
                st.just(("append", ())),
                st.tuples(
                    st.just("compact"),
                    st.lists(st.integers(0, 3), min_size=1, max_size=2, unique=True).map(tuple),
                ),
            ),
            min_size=1,
            max_size=25,
        )
    )
    return steps


@pytest.fixture(scope="module")
def shared_table(catalog: Catalog) -> Table:
    return catalog.create_table(f"test.writer_pipeline_{uuid.uuid4().hex[:8]}")


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(plan=plans())
def test_pipelined_outcomes_equal_the_replay_verdicts(
    config: Config, shared_table: Table, plan: list[tuple[str, tuple[int, ...]]]
) -> None:
    run = uuid.uuid4().hex[:8]
    base = [f"{run}-base{i}" for i in range(4)]
    with load_catalog(config).load_table(shared_table.name) as writer:
        writer.append([segment(sid) for sid in base])
        sent: list[tuple[str, Future[int]]] = []
        for k, (kind, picks) in enumerate(plan):
            if kind == "append":
                commit = writer.new_commit(Operation.APPEND, adds=[segment(f"{run}-a{k}")])
            else:
                drops = [base[i] for i in picks]
                commit = writer.new_commit(Operation.COMPACT, drops=drops, adds=[segment(f"{run}-c{k}")])
            sent.append((commit.commit_id, writer.submit(commit)))
        for _, future in sent:
            future.exception(timeout=60)
    log = judged_log(config, shared_table)
    for commit_id, future in sent:
        assert_agrees(future, commit_id, log)
    offsets = [log[cid].offset for cid, f in sent if cid in log]
    assert offsets == sorted(offsets)  # the records are in submit order
    winners = [cid for cid, f in sent if f.exception() is None]
    compactions = sum(1 for kind, _ in plan if kind == "compact")
    assert len(winners) >= len(plan) - compactions  # every append wins


_REFUSED = KafkaError(
    KafkaError.CLUSTER_AUTHORIZATION_FAILED, "Failed to acquire idempotence PID", fatal=True
)


class _FatallyRefusing:
    """A producer after librdkafka's fatal error, as confluent-kafka shows it: serving the queue
    raises the cause (``cause_once``: only the first time, then ``produce`` says only ``_FATAL``,
    as measured against a broker refusing the PID; otherwise every time, records purged unsent).
    It is the real producer until the principal is ``refused`` (every client from then on)."""

    def __init__(self, real: Producer, refused: threading.Event, *, cause_once: bool) -> None:
        self._real = real
        self._refused = refused
        self._cause_once = cause_once
        self._cause_told = False

    @property
    def refusing(self) -> bool:
        return self._refused.is_set()

    def produce(self, *args: Any, **kwargs: Any) -> None:
        if not self.refusing:
            return self._real.produce(*args, **kwargs)
        if self._cause_once:
            raise KafkaException(
                KafkaError(KafkaError._FATAL, "Unable to produce message: Local: Fatal error")
            )
        return None

    def _serve(self, *args: Any) -> int:
        if not self.refusing:
            return self._real.poll(*args)
        if self._cause_once and self._cause_told:
            return 0
        self._cause_told = True
        raise KafkaException(_REFUSED)

    poll = flush = _serve

    def __len__(self) -> int:
        return len(self._real)


@pytest.mark.parametrize("cause_once", [False, True], ids=["raised-by-every-poll", "told-once"])
def test_a_fatal_refusal_fails_commits_typed(config: Config, table: Table, cause_once: bool) -> None:
    """CI found a writer without the idempotent-write right raising librdkafka's KafkaException
    out of ``commit()`` (the fatal error surfaced from ``poll``); ``segcat commit`` as the reader
    principal then said "unexpected KafkaException ... a bug in segcat" (the writer's final flush
    met it again) or, when ``produce`` came first and said only ``_FATAL``, ServiceUnavailable.
    Now every commit in flight and every later one gets ``NotAuthorized`` naming the principal,
    and closing the writer raises nothing over it."""
    refused = threading.Event()

    def client(settings: dict[str, Any]) -> Producer:
        return _FatallyRefusing(Producer(settings), refused, cause_once=cause_once)  # type: ignore[return-value]

    shared = SharedProducer(config, client_factory=client)
    with Writer(config, table.name.qualified, producer=shared) as writer:
        writer.append([segment("kept")])
        refused.set()
        with pytest.raises(NotAuthorized, match="nothing was written"):
            writer.append([segment("refused")])
        with pytest.raises(NotAuthorized):
            writer.append_async([segment("later")]).result(timeout=30)
    assert table.snapshot().live_count == 1
