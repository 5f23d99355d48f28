"""``HeldLease``: a version lease held for as long as a reader needs the version's files.

::

    with acquire_lease(catalog.redis, "ns.t", version) as held:
        ...  # read version's files; vacuum keeps them
        if held.lost: ...  # a renewal found the lease gone: vacuum may have moved on

Entering acquires the lease (``storage.redis.leases.LeaseStore``), a daemon thread renews it
every ``ttl/3``, leaving releases it. A renewal that finds the lease gone, or that has not
succeeded for a whole TTL (Redis unreachable), sets ``lost`` and stops: the lease may have
expired, and holding on to a stale id would only hide that. Taking it again would not help
either, as vacuum may already have run in between.

Readers that must never fail because of leases (Spark reads and the streaming source) use
:func:`try_hold`: the lease if Redis answers, else ``None`` and one warning.
"""

from __future__ import annotations

import logging
import threading
import time
from types import TracebackType
from typing import TypeAlias

from segcat.catalog.errors import ServiceUnavailable
from segcat.catalog.protocol.names import table_name
from segcat.catalog.storage.redis.keys import TableRef
from segcat.catalog.storage.redis.leases import Lease, LeaseStore, check_holder, check_ttl, check_version
from segcat.catalog.storage.redis.store import RedisClient, RedisStore

log = logging.getLogger("segcat.lease")

DEFAULT_TTL_S = 600.0
"""Ten minutes: a reader that dies holds vacuum back no longer than that."""

LeaseBackend: TypeAlias = "LeaseStore | RedisStore | RedisClient"
"""Whatever reaches Redis: a lease store, the catalog's ``RedisStore``, or a redis-py client
(single server or cluster)."""


def lease_store(backend: LeaseBackend) -> LeaseStore:
    """A ``LeaseStore`` on ``backend``'s connection pool (the same store if it is one)."""
    if isinstance(backend, LeaseStore):
        return backend
    if isinstance(backend, RedisStore):
        return LeaseStore.from_store(backend)
    return LeaseStore(backend)


class HeldLease:
    """A lease on one version, renewed in the background while held. Not re-entrant.

    Arguments are checked when it is made (``InvalidArgument``); entering it (or
    :meth:`acquire`) raises ``ServiceUnavailable`` when Redis cannot be reached, or when there
    is no Redis (``store`` None): a caller that asked for a lease is told it has none.
    """

    def __init__(
        self,
        store: LeaseStore | None,
        table: TableRef,
        version: int,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        holder: str | None = None,
    ) -> None:
        self.table = table_name(table).qualified
        self.version = check_version(version)
        self.ttl_s = ttl_s
        check_ttl(ttl_s)
        self.holder = None if holder is None else check_holder(holder)
        self._store = store
        self._lock = threading.RLock()  # a finalizer may release from inside release (GC)
        self._lease: Lease | None = None
        self._active = False
        self._stop = threading.Event()
        self._renewer: threading.Thread | None = None
        self._lost = threading.Event()

    @property
    def lease(self) -> Lease | None:
        """The lease as acquired (kept after :meth:`release`); None before :meth:`acquire`."""
        return self._lease

    @property
    def lease_id(self) -> str | None:
        """The id ``segcat leases`` shows; None before :meth:`acquire`."""
        return None if self._lease is None else self._lease.lease_id

    @property
    def lost(self) -> bool:
        """A renewal found the lease gone, or none succeeded for a whole TTL: it may have expired."""
        return self._lost.is_set()

    @property
    def held(self) -> bool:
        """Acquired, not released, not lost."""
        return self._active and not self.lost

    def acquire(self) -> HeldLease:
        """Take the lease and start renewing it; returns self."""
        with self._lock:
            if self._active:
                raise RuntimeError(f"lease on version {self.version} of {self.table} is already held")
            if self._store is None:
                raise ServiceUnavailable(
                    f"no Redis to hold a lease on version {self.version} of {self.table}: "
                    "version leases live in Redis (set SEGCAT_REDIS_URL)"
                )
            lease = self._store.acquire(self.table, self.version, self.ttl_s, self.holder)
            self._lease, self._active = lease, True
            self._stop.clear()
            self._lost.clear()
            self._renewer = threading.Thread(
                target=self._renew_loop,
                args=(self._store, lease),
                name=f"segcat-lease-{self.table}@{self.version}",
                daemon=True,
            )
            self._renewer.start()
        return self

    def release(self) -> None:
        """Stop renewing and drop the lease; never raises for Redis trouble (the TTL ends it then)."""
        with self._lock:
            if not self._active:
                return
            lease, renewer, self._active, self._renewer = self._lease, self._renewer, False, None
            assert lease is not None
            self._stop.set()
            if renewer is not None and renewer is not threading.current_thread():
                renewer.join()
            assert self._store is not None
            try:
                self._store.release(lease)
            except ServiceUnavailable as exc:
                log.warning(
                    "could not release lease %s on version %s of %s (%s); it expires within %.0f s",
                    lease.lease_id,
                    lease.version,
                    lease.table,
                    exc,
                    lease.ttl_ms / 1000,
                )

    def _renew_loop(self, store: LeaseStore, lease: Lease) -> None:
        ttl = lease.ttl_ms / 1000
        last_ok = time.monotonic()
        while not self._stop.wait(ttl / 3):
            sent = time.monotonic()
            try:
                renewed = store.renew(lease)
            except ServiceUnavailable as exc:
                if time.monotonic() - last_ok >= ttl:
                    self._lose(lease, f"no renewal succeeded for {ttl:.0f} s ({exc})")
                    return
                log.warning("renewing lease %s of %s failed, retrying: %s", lease.lease_id, lease.table, exc)
                continue
            if not renewed:
                self._lose(lease, "Redis no longer holds it (expired or released)")
                return
            last_ok = sent  # the new expiry counts from no earlier than when the renewal was sent

    def _lose(self, lease: Lease, why: str) -> None:
        if self._stop.is_set():
            return  # released meanwhile: nothing was lost
        self._lost.set()
        log.warning(
            "lost lease %s on version %s of %s: %s; vacuum may remove files of that version",
            lease.lease_id,
            lease.version,
            lease.table,
            why,
        )

    def __enter__(self) -> HeldLease:
        return self.acquire()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()

    def __repr__(self) -> str:
        state = "lost" if self.lost else "held" if self._active else "not held"
        return f"HeldLease({self.table}@{self.version}, {self.lease_id}, {state})"


def acquire_lease(
    redis_store_or_client: LeaseBackend | None,
    table_name: TableRef,
    version: int,
    ttl_s: float = DEFAULT_TTL_S,
    holder: str | None = None,
) -> HeldLease:
    """A lease on ``version`` of ``table_name``, taken when the ``with`` block is entered.

    Arguments are checked now (``InvalidArgument``); ``ServiceUnavailable`` on entering when
    Redis cannot be reached or is None. ``Table.lease(version, ttl_s)`` is this on the table's
    ``RedisStore``.
    """
    store = None if redis_store_or_client is None else lease_store(redis_store_or_client)
    return HeldLease(store, table_name, version, ttl_s=ttl_s, holder=holder)


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_once(where: str, message: str, *args: object) -> None:
    with _warned_lock:
        first = where not in _warned
        _warned.add(where)
    log.log(logging.WARNING if first else logging.DEBUG, message, *args)


def try_hold(
    backend: LeaseBackend | None,
    table: TableRef,
    version: int,
    *,
    ttl_s: float = DEFAULT_TTL_S,
    holder: str | None = None,
) -> HeldLease | None:
    """A held lease, or None (and one warning per Redis address and process) if Redis does not answer.

    For readers that must work without leases: their read is then not protected from vacuum,
    which the warning says. ``InvalidArgument`` still raises (a caller's mistake, not an outage).
    """
    return hold_or_warn(acquire_lease(backend, table, version, ttl_s=ttl_s, holder=holder))


def hold_or_warn(held: HeldLease) -> HeldLease | None:
    """``held`` acquired, or None (and one warning per Redis address and process) if Redis does
    not answer: ``try_hold`` for a lease made elsewhere (``Table.lease``)."""
    try:
        return held.acquire()
    except ServiceUnavailable as exc:
        where = "no-redis" if held._store is None else held._store.where
        _warn_once(
            where,
            "reading version %s of %s without a version lease (%s): vacuum cannot see this read",
            held.version,
            held.table,
            exc,
        )
        return None
