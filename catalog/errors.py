"""Typed errors. Each one says what went wrong and what to do next."""

from __future__ import annotations


class SegcatError(Exception):
    """Base class of every error segcat raises on purpose."""


class ConfigError(SegcatError):
    """The configuration (environment or TOML file) is unusable."""


class InvalidArgument(SegcatError, ValueError):
    """A caller passed a value that can never be right (a negative version, a bad duration, …)."""


class InvalidPredicate(InvalidArgument):
    """A predicate (a row filter or a tombstone) does not parse or compares incomparable things."""


class UnsupportedProtocol(SegcatError):
    """The table's log uses a protocol version or feature this segcat does not know.

    Raised instead of judging on: a reader that guessed could see another table than the
    writers meant. Upgrade segcat to read (or write) this table.
    """


class UnsafeLocation(SegcatError):
    """A file location lies outside the table's root and the locations the table allows."""


class InvalidTableName(SegcatError, ValueError):
    """A namespace or table identifier does not match ``[A-Za-z0-9_-]{1,100}``."""


class TableNotFound(SegcatError):
    """The table's topic does not exist; create it with ``segcat table create``."""


class TableAlreadyExists(SegcatError):
    """``create`` was asked for a table whose topic already exists."""


class MisconfiguredTable(SegcatError):
    """The table's topic exists but breaks docs/PROTOCOL.md §1 (partitions, cleanup policy, …)."""


class MalformedCommit(SegcatError, ValueError):
    """A commit breaks the protocol's field rules; nothing was written."""


class CommitTooLarge(SegcatError):
    """The encoded commit exceeds the topic's ``max.message.bytes``; nothing was written."""


class DecodeError(SegcatError):
    """A record value is not a commit this code can read (bad magic, unknown schema, garbage)."""


class UnknownSchema(DecodeError):
    """The record was written with a schema fingerprint this code does not know."""


class MalformedChange(DecodeError, ValueError):
    """A version-change message (a Redis Pub/Sub event) is not one this code can read; a
    follower skips it and fills the gap it leaves from the stream or the log."""


class ServiceUnavailable(SegcatError):
    """Kafka or Redis did not answer within the configured timeout."""


class NotAuthorized(SegcatError):
    """Kafka (or Redis) knows who we are but refuses the operation: an ACL is missing.

    Nothing was written. The message names the principal and the operation; the fix is an ACL
    for that principal (docs/OPERATIONS.md lists each one's) or other credentials.
    """


class RuleRefusal(SegcatError):
    """A commit the rules REJECTED (or a writer's image shows they would): the rule, its detail,
    the offset the record took and the version that made it lose."""

    against = "conflicts with version"
    """How the message names ``conflicting_version``."""
    remedy = ""
    """Appended to the message: what the user can (not) do about it."""

    def __init__(
        self, rule: str, detail: str, *, version: int | None, conflicting_version: int | None
    ) -> None:
        self.rule = rule
        self.detail = detail
        self.version = version
        """The offset the rejected record took; None when the writer saw the refusal before sending."""
        self.conflicting_version = conflicting_version
        at = f" ({self.against} {conflicting_version})" if conflicting_version is not None else ""
        where = "not sent" if version is None else f"rejected at offset {version}"
        super().__init__(f"commit {where} by rule {rule}: {detail}{at}{self.remedy}")


class CommitConflict(RuleRefusal):
    """The log ordered a conflicting commit before ours (docs/PROTOCOL.md §4, rules 3–6).

    ``rule`` names the rule, ``conflicting_version`` the version that made ours lose,
    ``version`` the offset our rejected record took. Re-plan on the newest state and retry
    (``Table.commit_with_retry`` does that).
    """


class ColumnTypeConflict(RuleRefusal):
    """The commit gives a column stats of another type than the table fixed for it (rule 4d).

    Not a conflict to retry: the type is fixed for good, so the same data can never be accepted
    (exit code 2). Write the column with the table's type, or into another table. ``version`` is
    the offset the rejected record took (None: the writer saw it before sending),
    ``conflicting_version`` the version that fixed the type; the log's verdict stays REJECTED 4d.
    """

    against = "fixed at version"
    remedy = "; the column's type never changes"


class InvalidCommit(SegcatError):
    """The log judged our record INVALID (it reached Kafka but breaks the protocol)."""

    def __init__(self, detail: str, *, version: int) -> None:
        self.detail = detail
        self.version = version
        super().__init__(f"commit at offset {version} is INVALID: {detail}")


class VersionNotFound(SegcatError):
    """The asked version or timestamp lies outside the table's retained history."""


class VersionExpired(VersionNotFound):
    """The version is older than the table's retained history (``segcat.history.retain.*``)."""

    def __init__(self, detail: str, *, oldest: int | None) -> None:
        self.oldest = oldest
        super().__init__(detail)


class LogPruned(ServiceUnavailable):
    """Kafka no longer holds records a replay needs (pruned or compacted away): they are on
    object storage only, which could not be read."""


class TableDropped(SegcatError):
    """The table is dropped (in the recycle bin until purged); ``segcat table undrop`` brings it back."""


class TablePurging(TableDropped):
    """The table's purge has begun (its fence is in the log): it can no longer be undropped."""


class PurgeStopped(SegcatError):
    """A purge stopped because the table is no longer the dropped table it set out to delete
    (undropped, or its topic replaced); the message says what, if anything, was deleted."""


class IncompatibleSchema(SegcatError, ValueError):
    """Live files of one table hold a column in types no reader can widen to one type.

    The message names the column, both types and a file (with the version that added it) of
    each; rewrite or drop one side's files (``REPLACE``) to read the table again.
    """


class UnsupportedPredicate(SegcatError):
    """A tombstone (or row filter) whose exact meaning on rows segcat does not model outside Spark:
    free protocol-1 text, or a column/literal combination whose Spark coercion is not pinned down
    (docs/PROTOCOL.md §4a). Read such a table with Spark (``si.read``), which applies it itself."""


class DataFileMissing(SegcatError):
    """A data file a version references is gone from storage (vacuumed, or deleted by hand).

    The message names the file and the version that added it; a reader that holds a version
    lease before it reads (``Table.lease``, ``Table.changes``) never meets it for files vacuum
    would otherwise have deleted.
    """


class CorruptKeyFrame(SegcatError):
    """A key frame failed its checksum or could not be parsed; fall back to an older one + replay."""


class CorruptArchive(SegcatError):
    """A commit archive failed its checksum, its range checks or could not be parsed; replay from Kafka."""


class ArchiveGap(SegcatError):
    """The commit archives on object storage do not cover a range of versions; replay it from Kafka.

    ``covered_upto`` is the last version the archives did cover, ``wanted_upto`` the bound asked for
    (None = as far as any archive goes).
    """

    def __init__(self, detail: str, *, covered_upto: int, wanted_upto: int | None) -> None:
        self.covered_upto = covered_upto
        self.wanted_upto = wanted_upto
        super().__init__(detail)


class MissingExtra(SegcatError, ImportError):
    """The code asked for needs optional dependencies this install lacks (pyproject's extras:
    ``spark``, ``server``, ``materializer``, ``stack``); the message names the ``pip install``
    that brings them (``catalog/extras.py``)."""

    def __init__(self, detail: str, *, extras: tuple[str, ...]) -> None:
        self.extras = extras
        super().__init__(detail)



# ---------------------------------------------------------------------------- the rows stream


class StreamChangeCommit(SegcatError):
    """A stream of a table's rows met a version that removes rows (``DELETE``, ``REPLACE``, a
    tombstone, a drop of partitions): an append-only stream cannot say that. The message names
    the version, its operation and the options that would skip it (``skipChangeCommits``,
    ``ignoreDeletes``), or the change feed (``readChangeFeed``) that carries deletes."""


class StreamSchemaChanged(SegcatError):
    """A stream of a table's rows met a version whose files hold columns or types the stream's
    schema (the table's when the query started) cannot carry; restarting the query picks up the
    new schema. The message names the version, the file and the column. Also raised when a stream
    starts on a table without files and is given no schema (``.schema(...)``): it has none to
    declare, as Delta refuses to stream a table whose schema is not set."""


class StreamDataLoss(SegcatError):
    """A stream restarted from its checkpoint cannot continue where it stopped: the versions after
    its position were pruned from the log, or files it must still read were vacuumed. With
    ``failOnDataLoss=false`` the stream resumes at the earliest position that exists instead."""


# ---------------------------------------------------------------------------- exit codes

EXIT_ERROR = 1
EXIT_INVALID = 2
EXIT_CONFLICT = 3
EXIT_NOT_FOUND = 4
EXIT_UNAVAILABLE = 5
EXIT_NOT_AUTHORIZED = 6
EXIT_INTERRUPTED = 130

_EXIT_CODES: tuple[tuple[type[SegcatError], int], ...] = (
    (InvalidArgument, EXIT_INVALID),  # InvalidPredicate too
    (MalformedCommit, EXIT_INVALID),
    (InvalidCommit, EXIT_INVALID),
    (ColumnTypeConflict, EXIT_INVALID),
    (CommitTooLarge, EXIT_INVALID),
    (InvalidTableName, EXIT_INVALID),
    (IncompatibleSchema, EXIT_INVALID),
    (ConfigError, EXIT_INVALID),
    (CommitConflict, EXIT_CONFLICT),
    (PurgeStopped, EXIT_CONFLICT),
    (TableAlreadyExists, EXIT_CONFLICT),
    (TableNotFound, EXIT_NOT_FOUND),
    (TableDropped, EXIT_NOT_FOUND),
    (VersionNotFound, EXIT_NOT_FOUND),
    (DataFileMissing, EXIT_NOT_FOUND),
    (ServiceUnavailable, EXIT_UNAVAILABLE),
    (NotAuthorized, EXIT_NOT_AUTHORIZED),
)


def exit_code(exc: BaseException) -> int:
    """The process exit code for an error (README, "Exit codes"), the same for every segcat
    program: 2 invalid input, 3 conflict, 4 not found, 5 service unavailable, 6 not authorized,
    1 anything else."""
    for kind, code in _EXIT_CODES:
        if isinstance(exc, kind):
            return code
    return EXIT_ERROR
