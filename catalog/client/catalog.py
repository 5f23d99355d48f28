"""``load_catalog()`` and ``Catalog``: the tables of one segcat deployment, by name.

A catalog is the front door, as pyiceberg's: ``catalog.create_table`` (``create_tables`` for
many at once), ``load_table``,
``list_tables``, ``drop_table`` / ``undrop_table`` / ``purge_table``. It holds the clients
every table it opens shares — one Kafka admin client (made on first use), one Redis store and
one object store — and closes the tables it opened when it is closed.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType

from segcat.catalog.client.table import Table, check_writer_options
from segcat.catalog.config import Config
from segcat.catalog.errors import InvalidArgument, TableNotFound
from segcat.catalog.log.pipeline import DEFAULT_MAX_IN_FLIGHT
from segcat.catalog.log.topics import DEFAULT_MAX_MESSAGE_BYTES
from segcat.catalog.protocol.names import TableName, check_identifier, table_name
from segcat.catalog.read.purge import Progress, PurgeReport, purge
from segcat.catalog.read.table import TableReader, Tables


def load_catalog(config: Config | str | os.PathLike[str] | None = None, **settings: object) -> Catalog:
    """The catalog the configuration names: ``segcat.load_catalog()``.

    With no argument the configuration comes from the environment and the TOML file
    ``SEGCAT_CONFIG`` names, as for the ``segcat`` command; ``config`` is a ``Config`` or the
    path of a TOML file. Keywords override single settings by their TOML names
    (``bootstrap_servers=``, ``redis_url=``, ``warehouse=``, ``kafka={"security.protocol": ...}``,
    ...) and win over the environment and the file. An unknown keyword is ``InvalidArgument``
    naming it; a bad value is ``ConfigError`` naming the keyword. Nothing connects yet.
    """
    if isinstance(config, Config):
        if settings:
            raise InvalidArgument(
                f"give a Config or settings ({', '.join(sorted(settings))}), not both: "
                "load_catalog(path, **settings) reads a file and overrides it"
            )
        return Catalog(config)
    if config is not None and not isinstance(config, str | os.PathLike):
        raise InvalidArgument(f"config is a Config or a TOML file's path, not {type(config).__name__}")
    path = None if config is None else Path(config)
    return Catalog(Config.load(path=path, overrides=settings))


class Catalog:
    """The tables of one segcat deployment (a Kafka cluster, its Redis and its warehouse).

    ``load_catalog()`` makes one; ``Catalog(config)`` does the same for a ``Config`` in hand.
    Use it as a context manager, or call ``close()``: that closes every table it loaded.
    """

    def __init__(self, config: Config) -> None:
        if not isinstance(config, Config):
            raise InvalidArgument(f"Catalog takes a Config (segcat.load_catalog() loads one), not {config!r}")
        self._tables = Tables(config)
        self._handles: weakref.WeakSet[Table] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._closed = False

    @property
    def config(self) -> Config:
        return self._tables.config

    def __repr__(self) -> str:
        return f"Catalog({self.config.bootstrap_servers!r}, warehouse={self.config.warehouse!r})"

    # ------------------------------------------------------------------ tables

    def create_table(
        self,
        name: str | TableName,
        *,
        location: str | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        writer_id: str | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> Table:
        """Create table ``name`` (``"<namespace>.<table>"``) and return its handle.

        Its topic is created and its first commit records the protocol and ``location`` (where
        its data lives; default: the warehouse's ``<namespace>/<table>``, made absolute).
        ``TableAlreadyExists`` if it exists; a creation that fails leaves no topic behind.
        ``writer_id`` and ``max_in_flight`` are as for ``load_table``.
        """
        self._check_open()
        check_writer_options(writer_id, max_in_flight)
        return self._handle(
            self._tables.create_table(name, max_message_bytes=max_message_bytes, location=location),
            writer_id,
            max_in_flight,
        )

    def create_tables(
        self,
        names: Sequence[str | TableName],
        *,
        location_root: str | None = None,
        max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES,
        exist_ok: bool = False,
        progress: Callable[[int], None] | None = None,
        writer_id: str | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> list[Table]:
        """Create the tables ``names`` and return their handles, in the order of ``names``.

        Each table is made as ``create_table`` makes one, in batches: one CreateTopics request
        per batch of up to 500 topics, then the batch's creation records written through the
        catalog's one producer together. ``location_root``: the tables' data lives under
        ``<location_root>/<namespace>/<table>`` (default: the warehouse). ``progress`` is
        called with the number of tables done so far, after each batch.

        Before anything is created every name is checked: a bad name is ``InvalidTableName``
        naming it, a name given twice (or two names Kafka cannot tell apart, as ``a_b.c`` and
        ``a.b_c``) ``InvalidArgument``, and names that exist already ``TableAlreadyExists``
        naming them — unless ``exist_ok``: then those tables are left as they are and their
        handles returned (``CREATE TABLE IF NOT EXISTS``, name by name).

        A table is created whole or not at all: one whose creation fails leaves no topic
        behind. When a batch fails partway (the broker refuses a topic, a record is not
        delivered), the tables of that batch that were made are kept, the others' topics are
        deleted again, no later batch is tried, and the first failure's typed error is raised,
        naming the tables not created: the same call with ``exist_ok=True`` finishes the job.
        """
        self._check_open()
        check_writer_options(writer_id, max_in_flight)
        if progress is not None and not callable(progress):
            raise InvalidArgument(f"progress is a callable taking the count done, not {progress!r}")
        readers = self._tables.create_tables(
            names,
            max_message_bytes=max_message_bytes,
            location_root=location_root,
            exist_ok=exist_ok,
            progress=progress,
        )
        return [self._handle(reader, writer_id, max_in_flight) for reader in readers]

    def load_table(
        self,
        name: str | TableName,
        *,
        writer_id: str | None = None,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
    ) -> Table:
        """The handle of table ``name``: ``TableNotFound`` if it does not exist, ``MisconfiguredTable``
        if its topic breaks docs/PROTOCOL.md §1 (checked now, before anything is read).

        The handle is bound to the table's log as it is now (its topic id): if the table is
        purged and created again under the name, this handle never reads the new one. Each
        handle writes through a writer of its own, opened on its first write; ``writer_id``
        names it in the commits (default: host, process and a random part) and
        ``max_in_flight`` bounds the commits ``submit`` keeps unresolved.
        """
        self._check_open()
        check_writer_options(writer_id, max_in_flight)
        return self._handle(self._tables.open(name), writer_id, max_in_flight)

    def table_exists(self, name: str | TableName) -> bool:
        """Whether table ``name`` exists (dropped tables exist until they are purged)."""
        self._check_open()
        try:
            self._tables.admin.describe(table_name(name))
        except TableNotFound:
            return False
        return True

    def list_tables(self, namespace: str | None = None) -> list[TableName]:
        """Every table on the cluster (dropped ones too), or those of ``namespace``, sorted."""
        self._check_open()
        if namespace is not None:
            check_identifier(namespace, "namespace")
        names = self._tables.list_tables()
        return sorted(n for n in names if namespace is None or n.namespace == namespace)

    def drop_table(self, name: str | TableName) -> int:
        """Drop table ``name``: a commit in its log, its version returned. Readers and writers
        then get ``TableDropped``; ``undrop_table`` brings it back, ``purge_table`` deletes it.
        Needs the protocol feature ``lifecycle`` (``Table.upgrade_protocol()``)."""
        return self._reader(name).drop()

    def undrop_table(self, name: str | TableName) -> int:
        """Bring a dropped table back (before it is purged); the version of the undrop."""
        return self._reader(name).undrop()

    def purge_table(
        self, name: str | TableName, *, allow_unfenced: bool = False, progress: Progress | None = None
    ) -> PurgeReport:
        """Delete a dropped table for good: its data files, ``_catalog/``, Redis keys, then its topic.

        On protocol 3 the purge first commits its fence, after which the table can no longer
        be undropped; a protocol-2 table is refused unless ``allow_unfenced`` (docs/LIFECYCLE.md).
        ``progress`` is called with (data files deleted, data files listed).
        """
        return purge(self._tables, self._reader(name), allow_unfenced=allow_unfenced, progress=progress)

    # ------------------------------------------------------------------ lifecycle

    def close(self) -> None:
        """Close every table this catalog loaded (their writers flush first), then let go of the
        shared producer and the Redis store."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            handles = list(self._handles)
        for handle in handles:
            handle.close()
        self._tables.close()

    def __enter__(self) -> Catalog:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # ------------------------------------------------------------------ internals

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgument("this catalog is closed: load it again (segcat.load_catalog())")

    def _reader(self, name: str | TableName) -> TableReader:
        self._check_open()
        return self._tables.open(name)

    def _handle(self, reader: TableReader, writer_id: str | None, max_in_flight: int) -> Table:
        handle = Table(self, reader, writer_id=writer_id, max_in_flight=max_in_flight)
        with self._lock:
            if self._closed:  # closed while the table was being opened
                handle.close()
                raise InvalidArgument("this catalog is closed: load it again (segcat.load_catalog())")
            self._handles.add(handle)
        return handle
