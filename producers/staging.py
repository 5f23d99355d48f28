"""One commit's files, staged by any writer (Spark's jobs, ``segcat.write``): the parts both share.

A commit's id exists before its first file does (every file records it in its footer, with
the table and the writer: ``segment_files.FileSpec.provenance``), and a write intent protects
the files from vacuum until the commit that adds them closes it (``writing_files``). What the
files hold decides the rest: a partition name the rules would refuse is refused here, naming
the column (``check_partition_names``), and an overwrite drops what it read in its scope
(``plan_replace``).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from segcat import Commit, InvalidArgument, Isolation, Operation, Segment, Table, WriteIntent
from segcat.catalog.protocol.rules import MAX_ID_LENGTH, partition_problem
from segcat.catalog.protocol.state import TableState
from segcat.producers.segment_files import FileSpec

INTENT_PREFIX = "data/"
INTENT_TTL_S = 600.0
"""A killed job's files stay protected this long (plus vacuum's grace); renewed every 200 s."""


@dataclass(frozen=True)
class Attempt:
    """One commit attempt, named before any of its files is written."""

    table: str
    writer_id: str
    commit_id: str
    intent: WriteIntent | None = None

    def stamp(self, spec: FileSpec) -> FileSpec:
        """``spec`` whose files record this attempt (table, commit id, writer id) in their footers."""
        return dataclasses.replace(spec, table=self.table, commit_id=self.commit_id, writer_id=self.writer_id)

    def adopt(self, planned: Commit) -> Commit:
        """``planned`` under this attempt's commit id, the one its files record."""
        if (planned.table, planned.writer_id) != (self.table, self.writer_id):
            raise RuntimeError("a commit planned by another writer cannot adopt this attempt's files")
        return dataclasses.replace(planned, commit_id=self.commit_id)


@contextlib.contextmanager
def writing_files(writer: Table) -> Iterator[Attempt]:
    """The span in which one commit's files are written (every Spark job of a stage, or one
    ``segcat.write``, runs inside).

    The commit id is minted here, before the first file exists, and the write intent is
    published (on tables with the ``lifecycle`` feature): vacuum leaves everything under
    ``data/`` alone while it lives. The commit closes it (``WriteIntent.commit``); a job that
    fails aborts it here, and a killed one lets it expire.

    Decision: the prefix is ``data/``, not the partitions the job will write (known only once
    the rows are); the intent's id is the commit id every file's footer records, so vacuum
    keeps exactly this job's files under ``data/``, and other writers' orphans still go.
    """
    commit_id = Commit.new_id()
    intent = writer.intent(INTENT_PREFIX, ttl_s=INTENT_TTL_S, intent_id=commit_id)
    intent.open()
    attempt = Attempt(writer.name.qualified, writer.writer_id, commit_id, intent if intent.active else None)
    try:
        yield attempt
    except BaseException:
        intent.abort()
        raise


def check_partition_names(adds: Sequence[Segment], keys: tuple[str, ...]) -> None:
    """``InvalidArgument`` naming the partition columns when a value makes a partition name the
    rules refuse (longer than docs/PROTOCOL.md allows, or holding control characters): the rules
    would refuse the commit without saying which column.

    The values are known only once the job has run, so the files are written by then: the
    aborted intent leaves them to vacuum, and nothing is committed.
    """
    columns = f"partition column{'s' if len(keys) > 1 else ''} {', '.join(keys)}"
    for added in adds:
        if added.partition is None:
            continue
        if len(added.partition) > MAX_ID_LENGTH:
            raise InvalidArgument(
                f"a value of {columns} makes a partition "
                f"name of {len(added.partition)} characters; a partition name holds at most {MAX_ID_LENGTH} "
                f"(docs/PROTOCOL.md): partition by a shorter column (a prefix, bucket or hash of it); "
                "nothing was committed"
            )
        problem = partition_problem(added.partition)
        if problem is not None:
            raise InvalidArgument(
                f"a value of {columns} makes a partition name the rules refuse ({problem}, "
                f"{added.partition[:80]!r}; docs/PROTOCOL.md): clean the values or partition by "
                "another column; nothing was committed"
            )


def plan_replace(
    writer: Table,
    state: TableState,
    adds: list[Segment],
    keys: tuple[str, ...],
    replace_scope: Iterable[str] | None,
    isolation: Isolation,
    properties: dict[str, str],
) -> Commit | None:
    """Drop what the job read in the scope (at base), add what it wrote."""
    if replace_scope is not None:
        scope = tuple(dict.fromkeys(replace_scope))
        if not scope:
            raise ValueError("replace_scope is empty; pass None to replace the whole table")
    elif keys:
        scope = tuple(sorted({s.partition for s in adds if s.partition is not None}))
        if not scope:
            return None  # nothing in df, no scope given: nothing to replace
    else:
        scope = ()  # the whole table
    outside = sorted({str(s.partition) for s in adds if scope and s.partition not in scope})
    if outside:
        raise ValueError(f"df holds partitions outside replace_scope: {', '.join(outside[:5])}")
    wanted = set(scope)
    drops = sorted(
        sid for sid, live in state.segments.items() if not scope or live.segment.partition in wanted
    )
    if not adds and not drops:
        return None
    return writer.new_commit(
        Operation.REPLACE,
        adds=adds,
        drops=drops,
        replace_scope=scope,
        isolation=isolation,
        properties={**properties, "segcat.replace.partitions": str(len(scope))},
        base_version=state.version,
    )
