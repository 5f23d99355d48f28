"""The vacuum fence: how a tag (or any lease) taken while a vacuum runs is never lost.

A lease alone cannot protect a version from a vacuum that read the leases before the lease
was taken. The fence closes that race the way two flags close a mutual exclusion: each side
writes to Redis first, then reads what the other wrote.

- **Vacuum** holds a fence (a lease on its head with holder ``segcat-vacuum@host:pid``, TTL
  ``FENCE_TTL_S``, renewed every third of it) for as long as it deletes, and reads the leases
  again *after* taking it, right before each batch of deletes (``vacuum.Recheck``): every file
  a leased or tagged version lists is kept.
- **A tag's creator** takes its lease on V first, then reads the fences: a fence it sees may
  belong to a vacuum that read the leases before V's lease existed, so it waits until each of
  those fences is gone (``wait_for_older_fences``); a fence taken later belongs to a vacuum
  that will see V's lease. Only then does it check that V's files are all there.

Redis runs each script alone, so whichever of "fence taken" and "lease taken" came second
sees the first. A vacuum killed mid-run leaves a fence that expires within its TTL.
"""

from __future__ import annotations

import time

from segcat.catalog.errors import ServiceUnavailable
from segcat.catalog.read.lease import HeldLease, LeaseBackend, acquire_lease, lease_store
from segcat.catalog.storage.redis.keys import TableRef
from segcat.catalog.storage.redis.leases import Lease, default_holder

FENCE_KIND = "segcat-vacuum"
"""Holders of fences start with ``segcat-vacuum@`` (``segcat leases`` shows them)."""
FENCE_TTL_S = 30.0
"""A killed vacuum holds tag creation back no longer than this."""
DEFAULT_WAIT_S = 600.0
"""How long a tag's creator waits for the vacuums that ran when it took its lease."""
POLL_S = 0.2


def is_fence(lease: Lease) -> bool:
    """Whether ``lease`` is a running vacuum's fence rather than a reader's lease."""
    return lease.holder.startswith(FENCE_KIND + "@")


def hold_fence(backend: LeaseBackend | None, table: TableRef, version: int) -> HeldLease:
    """The fence of a vacuum of ``table`` whose head is ``version``, acquired (``ServiceUnavailable``
    when Redis cannot be reached: a vacuum that heeds leases then deletes nothing)."""
    holder = default_holder(FENCE_KIND)
    return acquire_lease(backend, table, version, ttl_s=FENCE_TTL_S, holder=holder).acquire()


def wait_for_older_fences(
    backend: LeaseBackend, table: TableRef, *, timeout_s: float = DEFAULT_WAIT_S, poll_s: float = POLL_S
) -> int:
    """Wait until every fence live now is gone; call it with a lease already held. Returns how
    many fences were waited for.

    ``ServiceUnavailable`` when Redis cannot be reached or one of them outlives ``timeout_s``
    (a vacuum that long: retry when it has ended).
    """
    store = lease_store(backend)
    older = {lease.lease_id for lease in store.live(table) if is_fence(lease)}
    deadline = time.monotonic() + timeout_s
    waiting = set(older)
    while waiting:
        if time.monotonic() >= deadline:
            raise ServiceUnavailable(
                f"a vacuum of {table} has been running for more than {timeout_s:.0f} s since this "
                "lease was taken; retry when it has ended (`segcat leases` lists it)"
            )
        time.sleep(poll_s)
        waiting &= {lease.lease_id for lease in store.live(table) if is_fence(lease)}
    return len(older)
