"""Prometheus metrics of the materializer (served on ``/metrics`` by ``segcat.materializer.endpoints``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

REGISTRY = CollectorRegistry()

RECORDS = Counter(
    "segcat_materializer_records_total",
    "Log records applied, by table and verdict",
    ["table", "outcome"],
    registry=REGISTRY,
)
LAG = Gauge(
    "segcat_materializer_lag_records",
    "High watermark minus next offset to apply",
    ["table"],
    registry=REGISTRY,
)
HEAD = Gauge(
    "segcat_materializer_head_version", "Last accepted version applied", ["table"], registry=REGISTRY
)
LIVE_SEGMENTS = Gauge(
    "segcat_materializer_live_segments", "Live segments at the head", ["table"], registry=REGISTRY
)
KEYFRAME_SECONDS = Histogram(
    "segcat_materializer_keyframe_write_seconds",
    "Time to build and write one key frame",
    ["table"],
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
KEYFRAME_BYTES = Gauge(
    "segcat_materializer_keyframe_bytes",
    "Size of the last key frame (Arrow IPC, as stored in Redis)",
    ["table"],
    registry=REGISTRY,
)
REDIS_PUBLISH_SECONDS = Histogram(
    "segcat_materializer_redis_publish_seconds",
    "Time to publish one accepted commit to Redis",
    ["table"],
    registry=REGISTRY,
    buckets=(0.0002, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
)
RECOVERIES = Counter(
    "segcat_materializer_recoveries_total",
    "Table recoveries on assignment, by source",
    ["table", "source"],
    registry=REGISTRY,
)
REDIS_ERRORS = Counter(
    "segcat_materializer_redis_errors_total",
    "Redis writes that failed (retried later)",
    ["table"],
    registry=REGISTRY,
)
REDIS_AVAILABLE = Gauge(
    "segcat_materializer_redis_available",
    "1 while Redis answers, 0 while the materializer backs off from it",
    registry=REGISTRY,
)
TABLE_PARKED = Gauge(
    "segcat_materializer_table_parked",
    "1 while the table is parked after a failure (its partition paused, retried with back-off)",
    ["table"],
    registry=REGISTRY,
)
TABLE_FAILURES = Counter(
    "segcat_materializer_table_failures_total",
    "Failures that parked a table, by the stage that failed",
    ["table", "stage"],
    registry=REGISTRY,
)
KAFKA_ERRORS = Counter(
    "segcat_materializer_kafka_errors_total",
    "Client-level errors reported by librdkafka, by error name",
    ["error"],
    registry=REGISTRY,
)
LOG_START = Gauge(
    "segcat_table_log_start_version",
    "The first version still in Kafka (segcat.log.start; 0 until the log is pruned)",
    ["table"],
    registry=REGISTRY,
)
INTENTS_OPEN = Gauge(
    "segcat_table_intents_open",
    "Write intents open at the head (expired ones included)",
    ["table"],
    registry=REGISTRY,
)
LEASES = Gauge("segcat_table_leases", "Live version leases in Redis", ["table"], registry=REGISTRY)
PRUNED_RECORDS = Counter(
    "segcat_table_pruned_records_total",
    "Null records written by log pruning (each lets the cleaner remove a commit key)",
    ["table"],
    registry=REGISTRY,
)
FILES_DELETED = Counter(
    "segcat_table_files_deleted_total",
    "Files deleted by vacuum or purge, by reason (dropped, orphan, history, purge)",
    ["table", "reason"],
    registry=REGISTRY,
)
BYTES_DELETED = Counter(
    "segcat_table_bytes_deleted_total",
    "Bytes deleted by vacuum, by reason",
    ["table", "reason"],
    registry=REGISTRY,
)
MAINTENANCE_FAILURES = Counter(
    "segcat_table_maintenance_failures_total",
    "Prune / vacuum / purge rounds that failed (retried next round)",
    ["table"],
    registry=REGISTRY,
)
LOG_HOLES = Counter(
    "segcat_materializer_log_holes_total",
    "Offsets Kafka skipped that no commit archive covers (records compacted away unarchived)",
    ["table"],
    registry=REGISTRY,
)
