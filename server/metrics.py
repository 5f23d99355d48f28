"""The server's Prometheus metrics (its own registry: several servers in one process stay apart)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class ServeMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "segcat_serve_requests_total",
            "HTTP requests answered, by route and status",
            ["route", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "segcat_serve_request_seconds",
            "Time to answer a request (SSE streams: time to the first byte)",
            ["route"],
            registry=self.registry,
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.sse_clients = Gauge(
            "segcat_serve_sse_clients", "Server-Sent Events streams open", registry=self.registry
        )
        self.events_sent = Counter(
            "segcat_serve_events_sent_total", "Version events written to SSE clients", registry=self.registry
        )
        self.versions_seen = Counter(
            "segcat_serve_versions_seen_total", "Accepted versions the feeds heard of", registry=self.registry
        )
        self.feeds = Gauge("segcat_serve_feeds", "Tables followed for SSE clients", registry=self.registry)
