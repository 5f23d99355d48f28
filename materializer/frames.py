"""The image's Arrow form, and the key frames sealed from it for the publishers that write them.

A key frame is the image's rows (one per live segment) and its metadata, sealed with a
checksum. Building one costs in proportion to the live segments (fold, sort, checksum), so
each table's ``FrameBuilder`` keeps the rows of the last frame it built and brings them
forward by the accepted commits since (``FrameView.apply``), in the service's writer thread
(``FrameWriter``), off the path of the records and their notifications.

A publisher asks for a frame of the image as it is now with ``request(outputs)``. The requests
made while the loader hands out one delta (a *round*) become one job at the end of the round:
one fold, one seal, then every output writes the sealed frame, durable ones first (object
storage: the archive, then the frame) and caches after (Redis), so a cache never holds a frame
that storage lacks. A durable output that fails stops the table at its next step (``failure``);
a cache handles its own failures. A publisher that keeps a copy of every frame (Redis)
``subscribe``s: it is offered each durable frame and may add an output of its own.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

import pyarrow as pa

from segcat.catalog.protocol.delta import CommitDelta
from segcat.catalog.protocol.state import TableState
from segcat.catalog.storage import keyframe
from segcat.catalog.storage.frame_view import FrameView
from segcat.materializer import metrics
from segcat.materializer.frame_writer import FrameWriter

log = logging.getLogger("segcat.materializer")

DRAIN_S = 60.0
"""How long recovery waits for the table's background writes before rebuilding without them."""


@dataclass(frozen=True, slots=True)
class Pending:
    """An accepted commit not yet in a key frame: its delta and its record's value."""

    delta: CommitDelta
    value: bytes


@dataclass(frozen=True, slots=True)
class SealedFrame:
    """A key frame of the image at ``offset``, sealed (metadata and checksum attached)."""

    table: pa.Table
    version: int
    """The last accepted version it holds (what the frame is named by)."""
    offset: int
    log_id: str | None


class FrameOutput(ABC):
    """One destination of a sealed frame, run in the writer thread."""

    durable: ClassVar[bool] = True
    """Object storage: a failure stops the table (parked at ``stage``); written before caches."""
    stage: ClassVar[str] = "keyframe"
    done: ClassVar[str | None] = None
    """The log line of a job that wrote this output (the first durable output's wins)."""

    @abstractmethod
    def write(self, frame: SealedFrame) -> None: ...

    def log_fields(self) -> dict[str, Any]:
        """What this output adds to the job's log line."""
        return {}


Offer = Callable[[Sequence[FrameOutput]], FrameOutput | None]
"""Called with the outputs of a durable frame about to be submitted: an output to add, or None."""


@dataclass(frozen=True)
class _Job:
    """What the writer thread needs to fold, seal and write one frame (all of it immutable)."""

    generation: int
    commits: tuple[Pending, ...]
    """The accepted commits since the previous job (the rows skip those they hold already)."""
    image: TableState
    """A private copy of the image's metadata, without its segments (the rows carry those)."""
    live_count: int
    offset: int
    version: int
    log_id: str | None
    outputs: tuple[FrameOutput, ...]


class FrameBuilder:
    """One table's frame rows and frame jobs. ``writer`` None: jobs run inline, at submit."""

    def __init__(self, label: str, writer: FrameWriter | None) -> None:
        self._label = label
        self._writer = writer
        self._rows = FrameView.from_state(TableState(label))
        """The rows of the last frame built; owned by the writer thread while jobs are queued."""
        self._commits: list[Pending] = []
        self._outputs: list[FrameOutput] = []
        """Requested in this round."""
        self._offers: list[Offer] = []
        self._generation = 0
        """Bumped by ``restart``: jobs of an earlier image are dropped."""
        self._failed: tuple[str, Exception] | None = None

    # ------------------------------------------------------------------ the loader's side

    def restart(self) -> None:
        """Before a recovery: let this table's queued jobs finish, then forget the old image."""
        if self._writer is not None and not self._writer.drain(self._label, DRAIN_S):
            log.warning("key-frame writes still running; recovering anyway", extra={"table": self._label})
        self._generation += 1
        self._failed = None
        self._commits = []
        self._outputs = []

    def load(self, rows: FrameView) -> None:
        """The recovered image's rows (after ``restart``)."""
        self._rows = rows

    def add(self, delta: CommitDelta, value: bytes) -> None:
        """An accepted commit, to fold into the next frame."""
        self._commits.append(Pending(delta, value))

    def failure(self) -> tuple[str, Exception] | None:
        """A durable output that failed (stage, error), until the next ``restart``."""
        return self._failed

    def submit(self, state: TableState, log_id: str | None) -> None:
        """End of a round: hand the frame requested in it (if any) to the writer thread."""
        if not self._outputs:
            return
        outputs, self._outputs = self._outputs, []
        if any(o.durable for o in outputs):
            for offer in self._offers:
                extra = offer(outputs)
                if extra is not None:
                    outputs.append(extra)
        outputs.sort(key=lambda o: not o.durable)  # stable: durable outputs in the order asked
        commits, self._commits = tuple(self._commits), []
        job = _Job(
            self._generation,
            commits,
            _metadata_of(state),
            state.live_count,
            state.version,
            state.last_accepted_version,
            log_id,
            tuple(outputs),
        )
        if self._writer is None:
            self._write(job)
        else:
            self._writer.submit(self._label, lambda: self._write(job))

    # ------------------------------------------------------------------ the publishers' side

    def request(self, *outputs: FrameOutput) -> None:
        """A frame of the image as it is at the end of this round, written by ``outputs``."""
        self._outputs.extend(outputs)

    def subscribe(self, offer: Offer) -> None:
        """Be offered every durable frame before it is submitted."""
        self._offers.append(offer)

    @property
    def inline(self) -> bool:
        """Whether jobs run at ``submit`` (no writer thread)."""
        return self._writer is None

    @property
    def cutting(self) -> bool:
        """Whether a durable frame is requested in this round."""
        return any(o.durable for o in self._outputs)

    @property
    def busy(self) -> bool:
        """Whether a frame is requested in this round or still being written."""
        return bool(self._outputs) or (self._writer is not None and self._writer.pending(self._label) > 0)

    # ------------------------------------------------------------------ the writer thread

    def _write(self, job: _Job) -> None:
        """Fold the commits into the rows (a big commit's segments cut from its record's bytes, not
        encoded again), seal, write the durable outputs, then the caches."""
        if job.generation != self._generation or self._failed is not None:
            return  # an earlier image's, or after a failure: recovery rebuilds from storage
        started = time.perf_counter()
        stage = "keyframe"
        try:
            rows = self._rows.apply(
                [p.delta for p in job.commits],
                offset=job.offset,
                values={p.delta.version: p.value for p in job.commits},
            )
            if job.generation != self._generation:
                return  # recovered meanwhile: the new image owns the rows now
            self._rows = rows
            sealed = keyframe.seal(
                rows.rows, job.image, rows.layout, log_id=job.log_id, live_count=job.live_count
            )
            frame = SealedFrame(sealed, job.version, job.offset, job.log_id)
            for output in job.outputs:
                if output.durable:
                    stage = output.stage
                    output.write(frame)
        except Exception as exc:
            self._failed = (stage, exc)
            return
        for output in job.outputs:
            if not output.durable:
                output.write(frame)
        seconds = time.perf_counter() - started
        if any(o.durable for o in job.outputs):
            metrics.KEYFRAME_SECONDS.labels(self._label).observe(seconds)
        extra: dict[str, Any] = {
            "table": self._label,
            "version": job.version,
            "live_segments": job.live_count,
        }
        for output in job.outputs:
            extra.update(output.log_fields())
        extra["seconds"] = round(seconds, 3)
        log.info(next((o.done for o in job.outputs if o.done), "key frame written"), extra=extra)


def _metadata_of(state: TableState) -> TableState:
    """The image's fields at one offset without its segments: all that sealing a frame reads
    besides the rows. Taken on the main loop (the containers copied), read by the writer thread
    while the loader goes on changing the working image."""
    values: dict[str, Any] = {}
    for f in fields(state):
        if f.name in ("segments", "paths"):
            continue
        value = getattr(state, f.name)
        values[f.name] = type(value)(value) if isinstance(value, dict | list) else value
    return TableState(**values)
