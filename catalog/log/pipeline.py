"""``CommitPipeline``: a writer's commits in flight, produced in submit order and judged together.

``Writer.submit`` hands each checked, encoded commit to ``send``, which produces it at
once through the config's ``SharedProducer`` (the one producer of every record a client
writes, with the one mapping of failures to typed errors, ``write_errors``); records may
linger ``LINGER_MS`` so that those submitted together share a produce request. The *judge's
work* is one round: serve the delivery reports, catch the writer's follower up to the highest
delivered offset (one fetch and one replay for every commit delivered by then), and settle
each future by its own record's verdict.

Who does that work: a daemon thread, the *judge*, for commits nobody waits for; a thread
that blocks on a fresh commit (``commit()``, or ``result()`` right after ``submit``) does it
itself, flushing at once, so a lone commit costs no linger and no thread hand-off. One
thread at a time serves (``_serving``); other waiting threads wait to be settled or to take
over, so threads sharing a writer share its produce requests and catch-ups.

The image is guarded by ``lock``, held only while it changes (the follower applies records
under it) and while ``submit`` prejudges and produces (so records reach the producer in
submit order, judged on a whole image); never while waiting for Kafka.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, wait
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException, Message

from segcat.catalog.config import Config
from segcat.catalog.errors import (
    ConfigError,
    InvalidArgument,
    NotAuthorized,
    SegcatError,
    ServiceUnavailable,
)
from segcat.catalog.log.follower import Follower
from segcat.catalog.log.producer import FLUSH_S, LINGER_MS, POLL_S, SharedProducer
from segcat.catalog.log.write_errors import retriable, write_error
from segcat.catalog.protocol.model import LogRecord
from segcat.catalog.protocol.names import TableName
from segcat.catalog.protocol.replay import Applied, Listener
from segcat.catalog.protocol.rules import Prechecked, Verdict
from segcat.catalog.protocol.state import TableState

log = logging.getLogger("segcat.writer")

ToVersion = Callable[[Verdict], int]
"""A verdict on one of our records → its version, or the typed error ``commit()`` raises."""

DEFAULT_MAX_IN_FLIGHT = 1024
"""Commits one writer holds unresolved before ``submit`` waits: bounds memory and the producer queue."""

__all__ = ["DEFAULT_MAX_IN_FLIGHT", "LINGER_MS", "CommitFuture", "CommitPipeline"]


class CommitFuture(Future[int]):
    """A commit's version. ``result()`` does the judge's work in the waiting thread: it sends
    the queued records at once (no linger) and catches up itself, with no thread hand-off."""

    def __init__(self, pipeline: CommitPipeline | None = None) -> None:
        super().__init__()
        self._pipeline = pipeline
        self.sent_at = time.monotonic()

    def result(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        if self._pipeline is not None and not self.done():
            self._pipeline.drive(self, timeout)
        return super().result(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))


@dataclass(eq=False)
class InFlight:
    """One commit sent and not yet settled."""

    commit_id: str
    key: bytes
    value: bytes
    future: CommitFuture
    attempts: int
    attempt: int = 1
    offset: int | None = None
    """From the delivery report: where the record landed."""
    verdict: Verdict | None = None
    """The rules' verdict on our record, as the follower applied it."""
    error: BaseException | None = field(default=None, repr=False)
    prechecked: Prechecked | None = field(default=None, repr=False)
    """The commit itself, when its record decodes to it exactly: judged without decoding (``_own``)."""


def _settle(future: CommitFuture, outcome: ToVersion, verdict: Verdict) -> None:
    try:
        future.set_result(outcome(verdict))
    except SegcatError as exc:
        future.set_exception(exc)


def check_max_in_flight(value: object) -> int:
    """``InvalidArgument`` unless ``value`` can bound the commits in flight (a positive integer)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(f"max_in_flight must be a positive integer, not {value!r}")
    return value


class CommitPipeline:
    """The in-flight commits of one writer, its judge thread, and the follower it catches up."""

    def __init__(
        self,
        config: Config,
        name: TableName,
        producer: SharedProducer,
        follower: Follower,
        lock: threading.RLock,
        outcome: ToVersion,
        on_applied: Listener | None = None,
        *,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> None:
        """``lock`` must be the follower's guard; ``outcome`` turns our verdicts into results.
        ``producer`` may serve other tables too: a delivery report reaches this pipeline whichever
        thread serves it."""
        check_max_in_flight(max_in_flight)
        self._config = config
        self._name = name
        self._producer = producer
        self._follower = follower
        self.lock = lock
        self._outcome = outcome
        self._on_applied = on_applied
        self._max_in_flight = max_in_flight
        self._follow_lock = threading.Lock()
        """One catch-up at a time: the follower's consumer is not shared between threads."""
        self._entries: dict[str, InFlight] = {}
        """Every unsettled commit (under ``lock``, like the two below)."""
        self._delivered: dict[str, InFlight] = {}
        """Those whose record has an offset and no verdict yet: what the next catch-up must reach."""
        self._ready: list[InFlight] = []
        """Those with a verdict or an error, for ``_settle_ready``."""
        self._reports: collections.deque[tuple[InFlight, KafkaError | None, int | None]] = collections.deque()
        self._wake = threading.Condition(threading.Lock())
        self._closing = False
        self._drivers = 0
        """Callers blocked in ``drive``: while there are any, a send does not wake the judge (the
        waiting caller serves: no thread hand-off for a lone commit)."""
        self._room_waiters = 0
        self._serving = threading.Lock()
        """Held by the one thread (the judge or a waiting caller) serving the producer and catching up."""
        self._unflushed = 0
        """Records sent for waiting threads since the last flush (under ``lock``)."""
        self._broken: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=f"segcat-judge-{name.qualified}", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ sending

    def pending(self, commit_id: str) -> CommitFuture | None:
        """The future of ``commit_id`` when it is in flight (call with ``lock`` held)."""
        entry = self._entries.get(commit_id)
        return None if entry is None else entry.future

    def wait_for_room(self) -> None:
        """Block while ``max_in_flight`` commits are unresolved (call without ``lock``)."""
        if len(self._entries) < self._max_in_flight:
            return
        with self._wake:
            self._room_waiters += 1
            try:
                while (
                    len(self._entries) >= self._max_in_flight and not self._closing and self._broken is None
                ):
                    self._wake.wait(0.1)
            finally:
                self._room_waiters -= 1

    def check_open(self) -> None:
        if self._closing:
            raise InvalidArgument(f"the writer of {self._name} is closed: load the table again")
        if isinstance(self._broken, NotAuthorized | ConfigError):  # a refusal every later commit meets too
            raise type(self._broken)(str(self._broken))
        if self._broken is not None:
            raise ServiceUnavailable(f"the writer of {self._name} stopped: {self._broken}") from self._broken

    def send(
        self, commit_id: str, key: bytes, value: bytes, attempts: int, prechecked: Prechecked | None = None
    ) -> CommitFuture:
        """Produce one record and return its future (call with ``lock`` held: submit order).
        ``prechecked``: the commit the record decodes to, and where its field rules passed."""
        self.check_open()
        future = CommitFuture(self)
        future.set_running_or_notify_cancel()  # a record once sent cannot be taken back
        entry = InFlight(commit_id, key, value, future, attempts, prechecked=prechecked)
        self._entries[commit_id] = entry
        try:
            self._produce(entry)
        except BaseException:
            del self._entries[commit_id]
            raise
        if self._drivers:  # a waiting caller does the judge's work: it flushes this record at once
            self._unflushed += 1
        else:
            with self._wake:
                self._wake.notify_all()
        return future

    def _produce(self, entry: InFlight) -> None:
        doing = f"writing commit {entry.commit_id} to {self._name.topic}"

        def delivered(err: KafkaError | None, msg: Message) -> None:
            self._reports.append((entry, err, None if err is not None else msg.offset()))

        deadline = time.monotonic() + self._config.request_timeout_s
        while True:
            try:
                self._producer.produce(
                    self._name.topic, key=entry.key, value=entry.value, on_delivery=delivered
                )
                return
            except BufferError:  # the producer's queue is full: let the judge drain it
                if time.monotonic() > deadline:
                    raise ServiceUnavailable(f"{doing}: the producer queue stayed full") from None
                time.sleep(0.005)
            except KafkaException as exc:  # the producer stopped (e.g. no idempotent-write right)
                raise write_error(exc, self._config, doing) from exc

    def _serve(self, *, urgent: bool) -> None:
        """Serve the producer's queue (delivery reports; ``urgent``: flush what lingers first)."""
        if urgent:
            self._producer.flush(FLUSH_S)
        else:
            self._producer.poll(0 if self._reports or self._delivered else POLL_S)

    # ------------------------------------------------------------------ following

    def catch_up(self, upto: int | None = None) -> TableState:
        """Apply the log up to ``upto`` (default: its end), then settle what that decided."""
        with self._follow_lock:
            state = self._follower.catch_up(upto, listener=self._listen, own=self._own)
        self._settle_ready()
        return state

    def _own(self, record: LogRecord) -> Prechecked | None:
        """Our own record, to judge by the commit we hold (runs under ``lock``, in the replay).

        Only the record the delivery report placed at this offset, with the very key and value
        bytes we produced: anything else there (a re-send's first attempt, another writer's
        record under our commit id) is decoded and judged like every other record."""
        key = record.key
        if key is None or not self._delivered:
            return None
        entry = self._delivered.get(key.decode("utf-8", errors="replace"))
        if (
            entry is None
            or entry.prechecked is None
            or entry.offset != record.offset
            or record.value != entry.value
            or key != entry.key
        ):
            return None
        return entry.prechecked

    def _listen(self, applied: Applied, state: TableState) -> None:
        """Runs under ``lock`` (the follower's guard), for every record the image applies."""
        cid = applied.verdict.commit_id
        if cid is not None and (entry := self._entries.get(cid)) is not None:
            self._decided(entry, applied.verdict, None)  # the first record wins; a re-send is its DUPLICATE
        if self._on_applied is not None:
            self._on_applied(applied, state)

    def _decided(self, entry: InFlight, verdict: Verdict | None, error: BaseException | None) -> None:
        """Record the first verdict or error of ``entry`` (call with ``lock`` held)."""
        if entry.verdict is None and entry.error is None:
            entry.verdict, entry.error = verdict, error
            self._delivered.pop(entry.commit_id, None)
            self._ready.append(entry)

    def _settle_ready(self) -> None:
        """Resolve the futures whose verdicts are known (outside ``lock``: callbacks may submit)."""
        with self.lock:
            ready, self._ready = self._ready, []
            for entry in ready:
                self._entries.pop(entry.commit_id, None)
        for entry in ready:
            if entry.future.done():
                continue
            if entry.error is not None:
                entry.future.set_exception(entry.error)
            else:
                assert entry.verdict is not None
                _settle(entry.future, self._outcome, entry.verdict)
        if ready and self._room_waiters:
            with self._wake:
                self._wake.notify_all()

    def _fail(self, entry: InFlight, error: BaseException) -> None:
        with self.lock:
            self._decided(entry, None, error)

    # ------------------------------------------------------------------ the judge

    def _run(self) -> None:
        try:
            while self._next_round():
                with self._serving:
                    self._round(urgent=self._take_unflushed())
        except BaseException as exc:  # never leave a future unresolved, whatever went wrong
            log.exception("the commit pipeline of %s stopped", self._name)
            self._broken = exc
            self.fail_all(ServiceUnavailable(f"the writer of {self._name} stopped: {exc}"))

    def _next_round(self) -> bool:
        """Wait for work; False once closing with nothing left in flight."""
        with self._wake:
            while not self._entries and not self._reports and not self._closing:
                self._wake.wait()
            return bool(self._entries) or not self._closing

    def drive(self, future: Future[int], timeout: float | None) -> None:
        """Until ``future`` is done (or ``timeout``): the judge's work, in this thread.

        One thread at a time serves the producer and catches up, for every commit in flight
        (``_serving``); a waiting thread that cannot take that over waits for its future,
        which the serving thread (or the judge, once the last one left) settles.
        """
        if self.on_judge_thread():
            raise InvalidArgument("waiting for a commit inside a commit future's callback would wait forever")
        deadline = None if timeout is None else time.monotonic() + timeout

        def waiting() -> bool:
            return not future.done() and (deadline is None or time.monotonic() < deadline)

        fresh = time.monotonic() - getattr(future, "sent_at", 0.0) < LINGER_MS / 1000
        if not fresh and not self._drivers:
            return  # sent long ago and the judge is at work: just wait for it (no hand-over)
        with self.driving():
            if fresh:
                with self.lock:
                    self._unflushed += 1  # our record may still linger: the next round flushes
            while waiting():
                if self._serving.acquire(blocking=False):
                    try:
                        while waiting():
                            self._round(urgent=self._take_unflushed())
                    finally:
                        self._serving.release()
                        self._wake_judge()  # the others' commits: the judge serves them now
                else:
                    wait([future], timeout=POLL_S)

    def _wake_judge(self) -> None:
        with self._wake:
            if self._entries or self._closing:
                self._wake.notify_all()

    def _take_unflushed(self) -> bool:
        with self.lock:
            unflushed, self._unflushed = self._unflushed, 0
        return unflushed > 0

    @contextlib.contextmanager
    def driving(self) -> Iterator[None]:
        """Mark this thread as about to wait for a commit (before submitting it: the judge
        then leaves the delivery reports to the waiting thread's flush)."""
        with self._wake:
            self._drivers += 1
        try:
            yield
        finally:
            with self._wake:
                self._drivers -= 1
            self._wake_judge()  # commits sent meanwhile that nobody waits for

    def _round(self, *, urgent: bool = False) -> None:
        """Serve delivery reports, then one catch-up to the newest delivered offset.

        ``urgent`` (a caller starts to block): flush, sending what lingers now (flushing on every
        round would wake the producer's threads each time); otherwise poll, so records submitted
        together share produce requests.
        """
        try:
            self._serve(urgent=urgent)
        except KafkaException as exc:  # fatal (e.g. no idempotent-write right): nothing in flight lands
            error = write_error(exc, self._config, f"writing to {self._name.topic}")
            self._broken = error
            self.fail_all(error)
            return
        landed: list[InFlight] = []
        while self._reports:
            entry, err, offset = self._reports.popleft()
            if entry.future.done():
                continue
            if err is None and offset is not None and offset >= 0:
                entry.offset = offset
                landed.append(entry)
            else:
                self._delivery_failed(entry, err)
        with self.lock:
            for entry in landed:
                if entry.verdict is None and entry.error is None:
                    self._delivered[entry.commit_id] = entry
            target = max((e.offset for e in self._delivered.values() if e.offset is not None), default=None)
        if target is not None:
            try:
                self.catch_up(target)
            except SegcatError as exc:  # e.g. a timed-out fetch: every commit waiting on it learns why
                with self.lock:
                    for entry in list(self._delivered.values()):
                        if entry.offset is not None and entry.offset <= target:
                            self._decided(entry, None, exc)
            with self.lock:
                position = self._follower.position
                for entry in list(self._delivered.values()):
                    if entry.offset is not None and entry.offset < position:
                        unseen = ServiceUnavailable(
                            f"record at offset {entry.offset} was not seen while catching up"
                        )
                        self._decided(entry, None, unseen)
        self._settle_ready()

    def _delivery_failed(self, entry: InFlight, err: KafkaError | None) -> None:
        """Re-send the very same record (its commit id makes a duplicate harmless), after
        checking that the earlier attempt did not reach the log after all. A failure that is the
        broker's answer about the record (``write_errors.retriable``: refused, no topic, too large)
        fails the commit at once."""
        cid = entry.commit_id
        error = write_error(
            self._producer.cause(err), self._config, f"writing commit {cid} to {self._name.topic}"
        )
        if not retriable(error):
            self._fail(entry, error)
            return
        log.warning("commit %s: delivery failed (attempt %d/%d): %s", cid, entry.attempt, entry.attempts, err)
        try:
            state = self.catch_up()
        except SegcatError:
            state = None
        if entry.verdict is not None or entry.future.done():
            return
        known = None if state is None else state.recent_commits.get(cid)
        if known is not None:
            with self.lock:
                self._entries.pop(cid, None)
            if not entry.future.done():
                entry.future.set_result(known)
            return
        if entry.attempt >= entry.attempts:
            self._fail(
                entry,
                ServiceUnavailable(
                    f"commit {cid} could not be delivered after {entry.attempts} attempts: {err}"
                ),
            )
            return
        entry.attempt += 1
        try:
            self._produce(entry)
        except SegcatError as exc:
            self._fail(entry, exc)

    # ------------------------------------------------------------------ closing

    def fail_all(self, error: SegcatError) -> None:
        """Settle what has a verdict, fail every other commit still in flight with ``error``."""
        self._settle_ready()
        with self.lock:
            left = list(self._entries.values())
            self._entries.clear()
            self._delivered.clear()
            self._ready.clear()
        for entry in left:
            if not entry.future.done():
                entry.future.set_exception(error)
        with self._wake:
            self._wake.notify_all()

    def close(self, timeout_s: float) -> None:
        """Stop accepting commits, wait up to ``timeout_s`` for those in flight, fail the rest."""
        if threading.current_thread() is self._thread:
            raise InvalidArgument("a table's writer cannot be closed from a commit future's callback")
        with self._wake:
            self._closing = True
            self._wake.notify_all()
        self._thread.join(timeout_s)
        self.fail_all(
            ServiceUnavailable(
                f"the writer of {self._name} was closed before this commit's verdict was known; it may "
                "still be in the log: send the same commit again (same commit_id) to learn its version"
            )
        )

    def on_judge_thread(self) -> bool:
        """Whether the caller is the judge (where blocking on a commit would wait forever)."""
        return threading.current_thread() is self._thread
