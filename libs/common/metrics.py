"""Prometheus metrics (prometheus-client) and the scrape endpoint every service can expose.

Names follow Prometheus conventions (base units: seconds; ``_total`` for counters). The endpoint is
off unless ``GNOMON_METRICS_LISTEN`` (``host:port``) is set; ``gnomon dev`` sets one per process and
lists it. OpenTelemetry export is planned with the fault/scale work (issue 5).
"""
from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram, start_http_server

DISPATCH_LAG = Histogram(
    "gnomon_dispatch_lag_seconds", "dispatched_at - scheduled_at of each claimed attempt (database clock).",
    ["queue"], buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300))
CLAIMED = Counter("gnomon_claimed_attempts_total", "Attempts claimed (SCHEDULED -> QUEUED).", ["queue"])
FENCED_WRITES = Counter("gnomon_fenced_writes_total",
                        "Claims or re-publications rejected because the shard's fencing token was stale.")
OWNED_SHARDS = Gauge("gnomon_owned_shards", "Shards this dispatcher owns now.")
CONNECTED_WORKERS = Gauge("gnomon_connected_worker_streams", "Worker lease streams connected.")
BREAKER_STATE = Gauge("gnomon_breaker_open", "1 while a queue's circuit breaker is OPEN or HALF_OPEN, else 0.",
                      ["namespace", "queue", "state"])
BREAKER_TRANSITIONS = Counter("gnomon_breaker_transitions_total", "Circuit breaker state changes.",
                              ["namespace", "queue", "from_state", "to_state"])
LEASES_LOST = Counter("gnomon_leases_lost_total", "Running attempts the reaper declared lost, by outcome.",
                      ["outcome"])
EXPIRED_JOBS = Counter("gnomon_expired_jobs_total", "Jobs that passed their deadline undispatched.")


def serve_metrics(listen: str) -> str | None:
    """Starts the scrape endpoint (``GET /metrics``) on ``host:port`` in a daemon thread; returns
    the address, or ``None`` when ``listen`` is empty. Raises ``OSError`` if the port is taken."""
    if not listen:
        return None
    host, _, port = listen.rpartition(":")
    start_http_server(int(port), addr=host or "127.0.0.1")
    return listen
