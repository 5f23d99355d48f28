"""Shared CLI rendering: timestamps, replay progress bars, segment tables."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table as RichTable

from segcat.catalog.protocol.model import Segment
from segcat.catalog.protocol.replay import Applied, Listener
from segcat.catalog.protocol.state import TableState
from segcat.catalog.read.table import Table

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
def replay_progress(table: Table, label: str) -> Iterator[Listener]:
    """A listener that drives a progress bar over the records of ``table``'s log."""
    total = max(table.head_offset() + 1, 0)
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
        disable=total < 2_000,
    )
    with progress:
        task = progress.add_task(label, total=total)

        def advance(applied: Applied, _: TableState) -> None:
            if applied.verdict.offset % 500 == 0:
                progress.update(task, completed=applied.verdict.offset + 1)

        yield advance


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
