"""Creating tables (internal): a table's topic, then its creation record, its first commit.

``Tables.create_table`` creates one; ``create_tables`` creates many with one CreateTopics request
per batch of ``CREATE_BATCH`` and the batch's creation records produced pipelined through the
catalog's one producer, their deliveries awaited together. A creation record that lands at
offset 0 is judged here, from the empty table, by the rules every reader applies to it
(docs/PROTOCOL.md): no record precedes it, so nothing else can change its verdict. One that
lands later (someone wrote to the new topic first) is read back and judged as any write is.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from segcat.catalog.errors import InvalidArgument, InvalidTableName, SegcatError, TableAlreadyExists
from segcat.catalog.log.producer import Delivery
from segcat.catalog.log.topics import CREATE_BATCH, TopicInfo, check_max_message_bytes
from segcat.catalog.protocol import codec, locations, rules, versions
from segcat.catalog.protocol.model import Commit, LogRecord, Operation
from segcat.catalog.protocol.names import TableName, table_name
from segcat.catalog.protocol.rules import Outcome
from segcat.catalog.protocol.state import LOCATION_PROPERTY, TableState

if TYPE_CHECKING:
    from segcat.catalog.read.table import TableReader, Tables

Progress = Callable[[int], None]
"""Called with the number of tables done (created, or found with ``exist_ok``) so far."""
SHOWN = 10
"""How many names an error about many tables spells out."""


def creation_commit(name: TableName, root: str) -> Commit:
    """A new table's first commit: the protocol new tables get and where the data lives."""
    return Commit(
        commit_id=Commit.new_id(),
        table=name.qualified,
        operation=Operation.UPGRADE_PROTOCOL,
        base_version=-1,
        writer_id=f"segcat-create-{os.getpid()}",
        timestamp_ms=int(time.time() * 1000),
        table_properties={LOCATION_PROPERTY: root},
        protocol=versions.new_table_protocol(),
    )


def record_of(commit: Commit) -> tuple[bytes, bytes]:
    """The record (key, value) a commit is written as."""
    return commit.commit_id.encode(), codec.encode_commit(commit)


def confirm_creation(table: TableReader, commit: Commit, value: bytes, landed: Delivery) -> None:
    """Raise unless the creation record ``value`` of ``commit``, delivered at ``landed``, is accepted.

    At offset 0 the record is judged here from the empty table (the bytes written are the bytes
    in the log); anywhere else, or when not accepted, it is read back and judged with the
    table's own typed error (``TableReader.expect_accepted``)."""
    if landed.offset == 0:
        stamp = landed.broker_ms if landed.broker_ms is not None else commit.timestamp_ms
        record = LogRecord(0, stamp, commit.commit_id.encode(), value)
        verdict = rules.apply_record(TableState(table.name.qualified), record).verdict
        if verdict.outcome is Outcome.ACCEPTED and verdict.commit_id == commit.commit_id:
            return
    table.expect_accepted(commit, landed.offset)


def checked_names(names: Sequence[str | TableName]) -> list[TableName]:
    """Every name parsed, in order; ``InvalidTableName`` naming the first bad one (and its
    index), ``InvalidArgument`` for a name given twice or two names Kafka cannot tell apart."""
    if isinstance(names, str | bytes) or not isinstance(names, Sequence):
        raise InvalidArgument(
            f"names is a list of table names, not {type(names).__name__} (create_table creates one)"
        )
    parsed: list[TableName] = []
    topics: dict[str, TableName] = {}
    for index, raw in enumerate(names):
        try:
            name = table_name(raw)
        except InvalidTableName as exc:
            raise InvalidTableName(f"names[{index}]: {exc}; nothing was created") from exc
        # Kafka refuses a topic whose name equals another's with '.' and '_' alike
        collides = topics.get(name.topic.replace(".", "_"))
        if collides == name:
            raise InvalidArgument(f"names[{index}]: table {name} is given twice; nothing was created")
        if collides is not None:
            raise InvalidArgument(
                f"names[{index}]: table {name} and table {collides} would collide in Kafka (which treats "
                "'.' and '_' in topic names alike); nothing was created"
            )
        topics[name.topic.replace(".", "_")] = name
        parsed.append(name)
    return parsed


def table_root_under(root: str, name: TableName) -> str:
    """``<root>/<namespace>/<table>``, a relative ``root`` made absolute now."""
    if not locations.is_absolute_uri(root):
        root = os.path.abspath(root)
    return f"{root.rstrip('/')}/{name.namespace}/{name.table}"


def create_tables(
    tables: Tables,
    names: Sequence[str | TableName],
    *,
    max_message_bytes: int,
    location_root: str | None = None,
    exist_ok: bool = False,
    progress: Progress | None = None,
) -> list[TableReader]:
    """Create the tables ``names`` (see ``Catalog.create_tables``); their readers, in order."""
    parsed = checked_names(names)
    check_max_message_bytes(max_message_bytes)
    if location_root is not None and not isinstance(location_root, str):
        raise InvalidArgument(f"location_root is a path or URI, not {type(location_root).__name__}")
    roots = {
        name: tables.table_root(name) if location_root is None else table_root_under(location_root, name)
        for name in parsed
    }
    for name, root in roots.items():
        if problem := locations.location_problem(root):
            raise InvalidArgument(f"table {name}: {problem}; nothing was created")
    if not parsed:
        return []
    tables.producer.start()  # gets its producer id while the topics are looked up and created
    found: dict[TableName, TableReader] = {}
    existing = tables.admin.existing(parsed)
    if existing and not exist_ok:
        raise TableAlreadyExists(
            f"{_listed(existing)} already exist{'s' if len(existing) == 1 else ''}; nothing was created "
            "(with exist_ok=True, --exist-ok on the command line, the others are created and the existing "
            "ones left as they are)"
        )
    for name in existing:
        found[name] = tables.open(name)  # refuses a misconfigured topic before anything is created
    report = progress or (lambda done: None)
    if found:
        report(len(found))
    todo = [name for name in parsed if name not in found]
    for start in range(0, len(todo), CREATE_BATCH):
        batch = todo[start : start + CREATE_BATCH]
        failed = _create_batch(tables, batch, roots, max_message_bytes, exist_ok, found)
        report(len(found))
        if failed:
            _raise_first(failed, batch, found, parsed)
    return [found[name] for name in parsed]


def _create_batch(
    tables: Tables,
    batch: list[TableName],
    roots: dict[TableName, str],
    max_message_bytes: int,
    exist_ok: bool,
    found: dict[TableName, TableReader],
) -> dict[TableName, SegcatError]:
    """Create ``batch`` (one CreateTopics request, its records pipelined); the tables made go to
    ``found``; the typed error of each that was not (its topic deleted again)."""
    infos = tables.admin.create_many(batch, max_message_bytes=max_message_bytes)
    failed: dict[TableName, SegcatError] = {}
    made: list[TableName] = []
    for name in batch:
        info = infos[name]
        if isinstance(info, TopicInfo):
            made.append(name)
        elif exist_ok and isinstance(info, TableAlreadyExists):
            found[name] = tables.open(name)  # created by someone else since it was looked up
        else:
            failed[name] = info
    try:
        commits = {name: creation_commit(name, roots[name]) for name in made}
        records = {name: record_of(commits[name]) for name in made}
        landed = tables.producer.write_each(
            [(name.topic, *records[name]) for name in made],
            f"writing the creation records of {len(made)} tables",
        )
        for name, outcome in zip(made, landed, strict=True):
            if isinstance(outcome, SegcatError):
                failed[name] = outcome
                continue
            info = infos[name]
            assert isinstance(info, TopicInfo)
            reader = tables.open_topic(info)
            try:
                confirm_creation(reader, commits[name], records[name][1], outcome)
            except SegcatError as exc:
                failed[name] = exc
                continue
            found[name] = reader
    except BaseException as exc:  # interrupted too: no topic without its first commit
        undone = [name for name in made if name not in found]
        _undo(tables, undone, exc)
        raise
    undone = [name for name in made if name not in found]
    for name, not_deleted in tables.admin.delete_many(undone).items():
        if not_deleted is not None:
            failed[name].args = (
                f"{failed[name]} (its topic {name.topic} could not be deleted again ({not_deleted}): "
                "delete the topic, then create the table again)",
                *failed[name].args[1:],
            )
    return failed


def _undo(tables: Tables, names: list[TableName], exc: BaseException) -> None:
    left = [name for name, failed in tables.admin.delete_many(names).items() if failed is not None]
    if isinstance(exc, SegcatError) and left:
        exc.args = (f"{exc} (the topics of {_listed(left)} could not be deleted again)", *exc.args[1:])


def _raise_first(
    failed: dict[TableName, SegcatError],
    batch: list[TableName],
    found: dict[TableName, TableReader],
    parsed: list[TableName],
) -> None:
    """Raise the first failure of the batch, saying what was created and what was not."""
    first = next(failed[name] for name in batch if name in failed)
    missing = [name for name in parsed if name not in found]
    note = (
        f"this call made or found {len(found)} of {len(parsed)} tables; not made: {_listed(missing)} "
        "(the same names again with exist_ok=True, --exist-ok on the command line, finish the job)"
    )
    first.args = (f"{first} ({note})", *first.args[1:])
    raise first


def _listed(names: Sequence[TableName]) -> str:
    shown = ", ".join(str(name) for name in names[:SHOWN])
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return f"table{'s' if len(names) > 1 else ''} {shown}{more}"
