"""Writing a table (internal; users write through ``segcat.Table``): commits built from
segments, their verdicts, and write intents.

Every record goes to the table's topic through the one producer pipeline in
``segcat.catalog.log.pipeline``.
"""

from segcat.catalog.log.pipeline import CommitFuture
from segcat.catalog.write.intent import WriteIntent
from segcat.catalog.write.writer import Writer

__all__ = ["CommitFuture", "WriteIntent", "Writer"]
