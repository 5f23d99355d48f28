"""Writers: publish commits to a table's topic and learn their verdicts."""

from segcat.producers.intent import WriteIntent
from segcat.producers.pipeline import CommitFuture
from segcat.producers.writer import TableWriter

__all__ = ["CommitFuture", "TableWriter", "WriteIntent"]
