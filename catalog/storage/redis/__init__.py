"""The Redis cache of the catalog (docs/PROTOCOL.md §6): a copy of what the log decides, never
a source of truth, so every write is idempotent and monotone.

====================================  ======  ===============================================
``segcat:{t}:head``                   hash    :class:`Head`; moved by offset compare-and-set
``segcat:{t}:deltas``                 stream  accepted commits since the Redis key frame,
                                              entry id ``<version + 1>-0``
``segcat:{t}:keyframe``               hash    ``version``, ``data`` (Arrow IPC), ``sha256``
``segcat:{t}:versions``               pubsub  ``VersionChange`` JSON for one table
``segcat:versions``                   pubsub  the same events for every table
``segcat:tables``                     set     qualified names of materialized tables
====================================  ======  ===============================================

``keys`` names the keys and holds the Lua scripts; ``types`` the values; ``store`` reads and
writes them; ``subscription`` follows the channels; ``batch`` is the materializer's pipeline.
All of it runs on one server or on a Redis Cluster (``Config.redis_cluster``): the hash tag keeps
each table in one slot.
"""

from segcat.catalog.storage.redis.batch import RecordBatch
from segcat.catalog.storage.redis.store import RedisStore
from segcat.catalog.storage.redis.subscription import Subscription
from segcat.catalog.storage.redis.types import CachedTable, Head, StreamEntry, chain_is_complete

__all__ = [
    "CachedTable",
    "Head",
    "RecordBatch",
    "RedisStore",
    "StreamEntry",
    "Subscription",
    "chain_is_complete",
]
