"""Prometheus metrics of one app: requests and latency by endpoint, index size, query encoding time."""
from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """Own registry per app, so that several apps (tests) never share counters."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("uhdsearch_requests", "HTTP requests by endpoint, method and status",
                                ["endpoint", "method", "status"], registry=self.registry)
        self.latency = Histogram("uhdsearch_request_seconds", "Request latency by endpoint", ["endpoint"],
                                 buckets=LATENCY_BUCKETS, registry=self.registry)
        self.encode = Histogram("uhdsearch_encode_seconds", "Query encoding time per call", buckets=LATENCY_BUCKETS,
                                registry=self.registry)
        self.documents = Gauge("uhdsearch_index_documents", "Live documents in the served snapshot",
                               registry=self.registry)
        self.segments = Gauge("uhdsearch_index_segments", "Segments of the served snapshot (1: static index)",
                              registry=self.registry)
        self.pending = Gauge("uhdsearch_pending_changes", "Documents added or deleted, not yet committed",
                             registry=self.registry)
        self.generation = Gauge("uhdsearch_index_generation", "Commit generation served (-1: static index)",
                                registry=self.registry)
        self.explain_cache = Gauge("uhdsearch_explain_cache_lookups", "/explain's documents found encoded (hit) or "
                                   "encoded (miss) since start", ["result"], registry=self.registry)
