"""The broker's clock: the only clock that decides when something may be deleted.

Every record's time is its ``LogAppendTime``: the broker stamps it when it appends the
record, whatever the writer's clock says. Grace periods and retentions count in that time
(docs/LIFECYCLE.md, "Whose clock"). The newest record's time is always at or before the
broker's now, so judging by it only ever deletes less; when it is too old to decide (an idle
table), ``now_ms`` asks the broker for its now by appending one record that changes nothing.
"""

from __future__ import annotations

import os
import time

from segcat.catalog.errors import InvalidArgument, ServiceUnavailable
from segcat.catalog.log.producer import write_commit
from segcat.catalog.protocol import lifecycle
from segcat.catalog.protocol.model import Commit, Intent, Operation, Protocol
from segcat.catalog.read.table import TableReader

CLOCK_PREFIX = "data/"


def now_ms(table: TableReader, protocol: Protocol, base_version: int) -> int:
    """The broker's time now: the ``LogAppendTime`` of a record appended for the purpose.

    The record is an ``INTENT`` that closes an intent nobody opened (a fresh id, ``ttl_ms``
    0): on a live table it is NOTED and changes nothing, on a dropped one it is REJECTED and
    changes nothing either; its broker time counts all the same. Needs the ``lifecycle``
    feature (elsewhere an ``INTENT`` is INVALID): ``InvalidArgument`` without it.
    """
    if not lifecycle.has_feature(protocol):
        raise InvalidArgument(
            f"table {table.name} has no 'lifecycle' feature: no clock record can be written"
        )
    commit = Commit(
        commit_id=Commit.new_id(),
        table=table.name.qualified,
        operation=Operation.INTENT,
        base_version=base_version,
        writer_id=f"segcat-clock-{os.getpid()}",
        timestamp_ms=int(time.time() * 1000),
        intent=Intent(Commit.new_id(), CLOCK_PREFIX, 0),
    )
    offset, stamped = write_commit(table.config, table.name, commit)
    return stamped if stamped is not None else record_time_ms(table, offset)


def record_time_ms(table: TableReader, offset: int) -> int:
    """The broker time of the record at ``offset`` (from Kafka, or the archives once pruned)."""
    for applied in table.records(offset, offset + 1):
        return applied.timestamp_ms
    raise ServiceUnavailable(f"the record at offset {offset} of {table.name} could not be read")
