"""Table upkeep off the hot path: prune, vacuum and purge by table properties, lifecycle gauges.

A daemon thread looks at the tables this instance materializes once a minute; it never
blocks the record loop (it has its own Kafka, Redis and storage clients). What it does is
decided by table properties (docs/LIFECYCLE.md), so the same rules hold whichever instance
owns a table:

- ``segcat.log.retain.versions`` / ``segcat.log.retain.ms``: prune the Kafka log (at most
  every ``segcat.log.prune.every.ms``, default 10 minutes);
- ``segcat.vacuum.every.ms``: run vacuum that often (its own retention and grace properties);
- a dropped table is purged ``segcat.dropped.retain.ms`` (default 7 days) after its drop,
  counted in broker time: from the drop record's ``LogAppendTime`` to a clock record's
  (``broker_clock``), never from the time the dropping client wrote into ``segcat.dropped``
  nor this machine's clock alone. Only tables whose log can record the purge's fence
  (protocol ≥ 3) are purged unattended; a protocol-2 table is left, with one warning.

One table's failure is logged and counted; the others go on.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from segcat.catalog.config import Config
from segcat.catalog.errors import SegcatError, ServiceUnavailable
from segcat.catalog.protocol import lifecycle
from segcat.catalog.protocol.model import Protocol
from segcat.catalog.read import broker_clock
from segcat.catalog.read.purge import drop_info, purge
from segcat.catalog.read.table import Tables
from segcat.catalog.read.vacuum import vacuum
from segcat.catalog.storage.redis.leases import LeaseStore
from segcat.materializer import metrics

log = logging.getLogger("segcat.materializer.maintenance")

INTERVAL_S = 60.0
LOG_RETAIN_VERSIONS = "segcat.log.retain.versions"
LOG_RETAIN_MS = "segcat.log.retain.ms"
PRUNE_EVERY_MS = "segcat.log.prune.every.ms"
VACUUM_EVERY_MS = "segcat.vacuum.every.ms"
DROPPED_RETAIN_MS = "segcat.dropped.retain.ms"
DEFAULT_PRUNE_EVERY_MS = 10 * 60 * 1000
DEFAULT_DROPPED_RETAIN_MS = 7 * 24 * 3600 * 1000


@dataclass(frozen=True)
class TableFacts:
    """What upkeep needs of one table, copied from the materializer's image."""

    name: str
    properties: dict[str, str]
    dropped: bool
    log_start: int
    open_intents: int
    dropped_at_ms: int | None = None
    """The broker time of the drop's record (None: unknown here, the log is asked)."""
    protocol: Protocol | None = None
    """The table's protocol (None: unknown here, the log is asked)."""


def _int(properties: dict[str, str], key: str, default: int | None = None) -> int | None:
    raw = properties.get(key)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError:
        log.warning("table property is not an integer", extra={"property": key, "value": raw[:40]})
        return None


class Maintenance:
    """The upkeep thread; ``facts`` returns the tables this instance owns right now."""

    def __init__(
        self, config: Config, facts: Callable[[], list[TableFacts]], *, interval_s: float = INTERVAL_S
    ) -> None:
        self.config = config
        self.facts = facts
        self.interval_s = interval_s
        self.stop = threading.Event()
        self._catalog: Tables | None = None
        self._last_prune: dict[str, float] = {}
        self._last_vacuum: dict[str, float] = {}
        self._unfenced_warned: set[str] = set()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="segcat-maintenance", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.stop.set()
        if self._thread is not None:
            self._thread.join(10)

    def _run(self) -> None:
        while not self.stop.wait(self.interval_s):
            self.run_once()

    @property
    def catalog(self) -> Tables:
        if self._catalog is None:
            self._catalog = Tables(self.config)
        return self._catalog

    def run_once(self, now_ms: int | None = None) -> None:
        """One round over every owned table (also called directly by tests)."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        try:
            tables = self.facts()
        except RuntimeError:  # the image changed while it was copied: next round
            return
        for facts in tables:
            try:
                self._upkeep(facts, now)
            except Exception as exc:  # one table's trouble never stops the upkeep of the others
                metrics.MAINTENANCE_FAILURES.labels(facts.name).inc()
                log.warning(
                    "table upkeep failed",
                    extra={"table": facts.name, "error": f"{type(exc).__name__}: {exc}"},
                    exc_info=not isinstance(exc, SegcatError | OSError),
                )

    def _upkeep(self, facts: TableFacts, now: int) -> None:
        metrics.LOG_START.labels(facts.name).set(facts.log_start)
        metrics.INTENTS_OPEN.labels(facts.name).set(facts.open_intents)
        if self.catalog.redis is not None:
            try:
                leases = LeaseStore.from_store(self.catalog.redis).live(facts.name)
                metrics.LEASES.labels(facts.name).set(len(leases))
            except ServiceUnavailable:
                pass
        props = facts.properties
        if facts.dropped:
            self._purge_when_due(facts, now)
            return
        retain_versions = _int(props, LOG_RETAIN_VERSIONS)
        retain_ms = _int(props, LOG_RETAIN_MS)
        every = _int(props, PRUNE_EVERY_MS, DEFAULT_PRUNE_EVERY_MS) or DEFAULT_PRUNE_EVERY_MS
        if (retain_versions is not None or retain_ms is not None) and self._due(
            self._last_prune, facts.name, every
        ):
            result = self.catalog.open(facts.name).prune_log(
                retain_versions=retain_versions, retain_age_ms=retain_ms
            )
            if result.marker_version is not None:
                metrics.PRUNED_RECORDS.labels(facts.name).inc(len(result.plan.nulls))
                log.info(
                    "log pruned",
                    extra={"table": facts.name, "log_start": result.plan.prune_point + 1},
                )
        vacuum_every = _int(props, VACUUM_EVERY_MS)
        if vacuum_every is not None and self._due(self._last_vacuum, facts.name, vacuum_every):
            report = vacuum(self.catalog.open(facts.name))
            for reason, counts in report.by_reason().items():
                metrics.FILES_DELETED.labels(facts.name, reason).inc(counts["files"])
                metrics.BYTES_DELETED.labels(facts.name, reason).inc(counts["bytes"])

    def _purge_when_due(self, facts: TableFacts, now: int) -> None:
        """Purge a dropped table once its retention has passed in broker time.

        This machine's clock only rules out what is not due yet; the broker's time (one clock
        record) decides. The drop's time is its record's broker time, never the value the
        dropping client wrote."""
        keep = _int(facts.properties, DROPPED_RETAIN_MS, DEFAULT_DROPPED_RETAIN_MS)
        if keep is None:
            return
        table = self.catalog.open(facts.name)
        dropped_ms, protocol = facts.dropped_at_ms, facts.protocol
        if dropped_ms is None or protocol is None:
            info = drop_info(table)
            if info is None:
                return
            dropped_ms, protocol = info.broker_ms, info.protocol
        if now - dropped_ms < keep:
            return
        if not lifecycle.has_purge_fence(protocol):
            if facts.name not in self._unfenced_warned:
                self._unfenced_warned.add(facts.name)
                log.warning(
                    "dropped table past its retention not purged: at protocol 2 its log cannot record "
                    "a purge; undrop, upgrade, drop and purge it, or `segcat table purge --allow-unfenced`",
                    extra={"table": facts.name, "protocol": protocol.version},
                )
            return
        if broker_clock.now_ms(table, protocol, -1) - dropped_ms < keep:
            return  # this machine's clock runs ahead of the broker's
        purged = purge(self.catalog, table)
        deleted = purged.data_files + purged.catalog_objects
        metrics.FILES_DELETED.labels(facts.name, "purge").inc(deleted)
        log.info("dropped table purged", extra={"table": facts.name, "files": deleted})

    @staticmethod
    def _due(last: dict[str, float], name: str, every_ms: int) -> bool:
        now = time.monotonic()
        if now - last.get(name, float("-inf")) < every_ms / 1000:
            return False
        last[name] = now
        return True
