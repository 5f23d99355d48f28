"""Shared CLI rendering: timestamps, replay progress bars, segment tables."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from segcat import Segment

console = Console()
err_console = Console(stderr=True)


def fmt_ts(ms: int) -> str:
    if ms < 0:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, tz=dt.UTC).isoformat(timespec="milliseconds")


def print_note(note: str | None) -> None:
    """What the caller should know about how a version or time was resolved (stderr, dim)."""
    if note:
        err_console.print(note, style="dim", markup=False, highlight=False, soft_wrap=True)


@contextmanager
def replay_progress(label: str) -> Iterator[Callable[[int, int], None]]:
    """A ``progress(done, total)`` callback (``Table.snapshot(progress=...)``) that drives a progress
    bar over the records of a log being replayed; shown from 2,000 records on."""
    progress: Progress | None = None

    def advance(done: int, total: int) -> None:
        nonlocal progress
        if total < 2_000 or (done - 1) % 500 != 0:
            return
        if progress is None:
            progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=True,
            )
            progress.start()
            progress.add_task(label, total=total)
        progress.update(progress.task_ids[0], completed=done)

    try:
        yield advance
    finally:
        if progress is not None:
            progress.stop()


def segments_view(segments: list[Segment], title: str, limit: int) -> RichTable:
    view = RichTable(title=title)
    for column in ("segment_id", "partition", "rows", "bytes", "path"):
        view.add_column(column)
    for seg in segments[:limit]:
        view.add_row(
            seg.segment_id, seg.partition or "-", f"{seg.row_count:,}", f"{seg.size_bytes:,}", seg.path
        )
    if len(segments) > limit:
        view.caption = f"… and {len(segments) - limit:,} more (use --limit)"
    return view
