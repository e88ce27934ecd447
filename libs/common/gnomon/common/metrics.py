"""Metrics with the OpenTelemetry metrics API, scraped by Prometheus (and optionally pushed over OTLP).

Every process has one :class:`~opentelemetry.sdk.metrics.MeterProvider` (made at import, see
:func:`meter_provider`) with a :class:`~opentelemetry.exporter.prometheus.PrometheusMetricReader`;
:func:`serve_metrics` starts the ``GET /metrics`` endpoint for it on ``GNOMON_METRICS_LISTEN``
(``host:port``; off when empty; ``gnomon dev`` sets one per process and lists it). When
``GNOMON_OTLP_ENDPOINT`` (``host:port`` of an OTLP/gRPC collector) is set, a periodic OTLP exporter
(every ``GNOMON_OTLP_INTERVAL_S`` s, default 10; plaintext unless ``GNOMON_OTLP_INSECURE=0``) is
added to the same provider. The resource honours ``OTEL_SERVICE_NAME`` / ``OTEL_RESOURCE_ATTRIBUTES``.

Names follow Prometheus conventions (base units: seconds). Counters are created without the
``_total`` suffix: the Prometheus exporter appends it, so the exposed names are the documented
ones (docs/operations.md, "Metrics (Prometheus)"). Label-less counters get an ``add(0)`` so they are
exposed (as 0) before their first event, like prometheus-client did.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable

from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricReader
from opentelemetry.sdk.resources import Resource
from prometheus_client import start_http_server
from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common.config import MetricsSettings, TelemetrySettings

log = logging.getLogger(__name__)

_LAG_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


def _readers() -> list[MetricReader]:
    # scope_info off: no otel_scope_* labels on every series; target_info off: no extra family.
    readers: list[MetricReader] = [PrometheusMetricReader(disable_target_info=True, scope_info_enabled=False)]
    otlp = TelemetrySettings()
    endpoint = otlp.endpoint.strip()
    if endpoint:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        readers.append(
            PeriodicExportingMetricReader(
                OTLPMetricExporter(endpoint=endpoint, insecure=otlp.insecure, timeout=5),
                export_interval_millis=otlp.interval_s * 1000,
            )
        )
    return readers


_PROVIDER = MeterProvider(metric_readers=_readers(), resource=Resource.create())
_METER = _PROVIDER.get_meter("gnomon")


def meter_provider() -> MeterProvider:
    """This process's meter provider (the one the Prometheus endpoint and OTLP export read)."""
    return _PROVIDER


# --- dispatcher: claims, fencing, shards, streams -----------------------------------------------------

DISPATCH_LAG = _METER.create_histogram(
    "gnomon_dispatch_lag_seconds",
    unit="s",
    description="dispatched_at - scheduled_at of each claimed attempt (database clock).",
    explicit_bucket_boundaries_advisory=_LAG_BUCKETS,
)  # attrs: queue
CLAIMED = _METER.create_counter(
    "gnomon_claimed_attempts", description="Attempts claimed (SCHEDULED -> QUEUED)."
)  # attrs: queue
FENCED_WRITES = _METER.create_counter(
    "gnomon_fenced_writes",
    description="Claims or re-publications rejected because the shard's fencing token was stale.",
)
OWNED_SHARDS = _METER.create_gauge("gnomon_owned_shards", description="Shards this dispatcher owns now.")
CONNECTED_WORKERS = _METER.create_gauge(
    "gnomon_connected_worker_streams", description="Worker lease streams connected."
)
OUTBOX_PUBLICATION_LAG = _METER.create_histogram(
    "gnomon_outbox_publication_lag_seconds",
    unit="s",
    description="accepted_at - dispatched_at of each attempt a worker accepted: how long its QUEUED attempt row "
    "(the outbox record; there is no outbox table) waited for the accept (database clock).",
    explicit_bucket_boundaries_advisory=_LAG_BUCKETS,
)  # attrs: queue
THROTTLED_RESULTS = _METER.create_counter(
    "gnomon_throttled_results",
    description="Results with failure class THROTTLED applied (workers' throttling signals).",
)  # attrs: namespace, queue

STREAM_WRITE_ITEMS = _METER.create_counter(
    "gnomon_stream_write_items",
    description="Accepts, heartbeats, checkpoints and results of worker streams handed to the write batcher.",
)  # attrs: namespace, kind
STREAM_REFUSED_REFS = _METER.create_counter(
    "gnomon_stream_refused_refs",
    description="Attempt references of worker streams refused at the edge without a database write "
    "(STALE_ATTEMPT: not delivered to the stream, not its worker identity's).",
)  # attrs: namespace, kind

# --- dispatcher: brakes ------------------------------------------------------------------------------

BREAKER_STATE = _METER.create_gauge(
    "gnomon_breaker_open", description="1 while a queue's circuit breaker is OPEN or HALF_OPEN, else 0."
)
# attrs: namespace, queue, state
BREAKER_TRANSITIONS = _METER.create_counter(
    "gnomon_breaker_transitions", description="Circuit breaker state changes."
)
# attrs: namespace, queue, from_state, to_state

# --- every server: the audit log (gnomon.common.rpc.audit) ------------------------------------------

AUDIT_ROWS_FAILED = _METER.create_counter(
    "gnomon_audit_rows_failed",
    description="Audit rows that could not be written: reason=refused (the database refused the row "
    "itself; isolated from its batch, logged at ERROR), reason=shutdown (still unwritten when the "
    "process stopped; logged at ERROR).",
)  # attrs: reason
AUDIT_BUFFER_FULL = _METER.create_counter(
    "gnomon_audit_buffer_full",
    description="Audited calls refused with UNAVAILABLE (AUDIT_UNAVAILABLE) because the audit buffer "
    "was full (GNOMON_AUDIT_BUFFER_ROWS).",
)
AUDIT_COALESCED = _METER.create_counter(
    "gnomon_audit_coalesced_calls",
    description="Refused audited calls folded into an earlier audit row of the same principal, "
    "namespace, method and outcome (GNOMON_AUDIT_COALESCE_S).",
)
for _reason in ("refused", "shutdown"):
    AUDIT_ROWS_FAILED.add(0, {"reason": _reason})

# --- reaper ------------------------------------------------------------------------------------------

LEASES_LOST = _METER.create_counter(
    "gnomon_leases_lost", description="Running attempts the reaper declared lost (lease expired), by outcome."
)
# attrs: outcome
EXPIRED_JOBS = _METER.create_counter(
    "gnomon_expired_jobs", description="Jobs that passed their deadline undispatched."
)

# --- dispatcher (results) and reaper (lost leases) ---------------------------------------------------

DEAD_LETTERS = _METER.create_counter(
    "gnomon_dead_letters",
    description="Jobs that became dead letters (DEAD), counted after the transaction that made them so "
    "committed: by the dispatcher applying a failed result, by the reaper for a lost lease.",
)
# attrs: namespace, queue, failure_class


def count_dead_letters(dead: Iterable[tuple[str, str, str]]) -> None:
    """Adds each ``(namespace, queue, failure_class)`` of ``dead`` (jobs a committed transaction made
    DEAD) to ``gnomon_dead_letters_total``."""
    for namespace, queue, failure_class in dead:
        DEAD_LETTERS.add(1, {"namespace": namespace, "queue": queue, "failure_class": failure_class})


for _c in (FENCED_WRITES, EXPIRED_JOBS, AUDIT_BUFFER_FULL, AUDIT_COALESCED):
    _c.add(0)


# --- dispatcher: observable gauges (callbacks read cached / in-memory values only) -------------------

_in_flight_source: Callable[[], int] | None = None
#: (namespace, queue) -> (due jobs, oldest due age s); written by :class:`BacklogSampler`.
_backlog: dict[tuple[str, str], tuple[int, float]] = {}


#: The planner's last look at its backlog: (earliest plan_at as epoch s, database clock minus local
#: clock at that look, s), or None before its first look / when nothing is to be planned.
_planner_due: tuple[float, float] | None = None
_planner_seen = False


def set_planner_due(earliest_plan_at: float | None, db_clock_offset_s: float) -> None:
    """Records what the planner saw on its last round: the earliest ``plan_at`` of the schedules it
    plans (epoch seconds, None when no schedule is to be planned) and the database clock minus this
    process's clock (seconds), for ``gnomon_planner_lag_seconds``."""
    global _planner_due, _planner_seen
    _planner_seen = True
    _planner_due = None if earliest_plan_at is None else (earliest_plan_at, db_clock_offset_s)


def planner_lag_s(now: float | None = None) -> float | None:
    """How long the earliest schedule due for planning has been waiting, seconds (database clock,
    estimated from this process's clock since the planner's last round, so a planner stuck in a step
    shows a growing lag); 0 when nothing is due; None before the planner's first round.
    ``now`` (epoch s) replaces this process's clock (tests)."""
    if not _planner_seen:
        return None
    if _planner_due is None:
        return 0.0
    earliest, offset = _planner_due
    db_now = (time.time() if now is None else now) + offset
    return max(0.0, db_now - earliest)


def _observe_planner_lag(_: CallbackOptions) -> Iterable[Observation]:
    lag = planner_lag_s()
    return [] if lag is None else [Observation(lag)]


def set_in_flight_source(fn: Callable[[], int] | None) -> None:
    """Registers what ``gnomon_in_flight_attempts`` reports (called at scrape time: keep it cheap)."""
    global _in_flight_source
    _in_flight_source = fn


def _observe_in_flight(_: CallbackOptions) -> Iterable[Observation]:
    if _in_flight_source is None:
        return []
    try:
        return [Observation(_in_flight_source())]
    except Exception:
        log.debug("in-flight gauge callback failed", exc_info=True)
        return []


def _observe_depth(_: CallbackOptions) -> Iterable[Observation]:
    return [Observation(n, {"namespace": ns, "queue": q}) for (ns, q), (n, _age) in list(_backlog.items())]


def _observe_age(_: CallbackOptions) -> Iterable[Observation]:
    return [Observation(age, {"namespace": ns, "queue": q}) for (ns, q), (_n, age) in list(_backlog.items())]


IN_FLIGHT = _METER.create_observable_gauge(
    "gnomon_in_flight_attempts",
    callbacks=[_observe_in_flight],
    description="Attempts this dispatcher delivered to connected workers that have not finished "
    "(delivered, accepted or running; a disconnect forgets them).",
)
QUEUE_DEPTH = _METER.create_observable_gauge(
    "gnomon_queue_depth",
    callbacks=[_observe_depth],
    description="SCHEDULED jobs already due (not dispatched) per queue served by this dispatcher's workers; "
    "counted up to 100000; sampled every GNOMON_METRICS_BACKLOG_INTERVAL_S.",
)
PLANNER_LAG = _METER.create_observable_gauge(
    "gnomon_planner_lag_seconds",
    unit="s",
    callbacks=[_observe_planner_lag],
    description="How long the earliest schedule due for planning (plan_at) has waited, as of the scrape "
    "(0 when none is due); exported by planners from their first round on.",
)
OLDEST_DUE_AGE = _METER.create_observable_gauge(
    "gnomon_queue_oldest_due_age_seconds",
    unit="s",
    callbacks=[_observe_age],
    description="How long the oldest due, undispatched job of the queue has been due (0 when none); sampled.",
)


class BacklogSampler:
    """Background task of the dispatcher: every ``interval_s`` (default
    ``GNOMON_METRICS_BACKLOG_INTERVAL_S`` or 5 s) runs the bounded
    :func:`gnomon.common.storage.queues.read_backlog` for each (namespace, queue) that ``targets()``
    names (the queues its connected workers serve) and caches the result for the
    ``gnomon_queue_depth`` / ``gnomon_queue_oldest_due_age_seconds`` callbacks. Queues no longer
    served are dropped from the gauges."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        region: str,
        targets: Callable[[], set[tuple[str, str]]],
        interval_s: float | None = None,
    ) -> None:
        self.engine, self.region, self.targets = engine, region, targets
        self.interval_s = interval_s if interval_s is not None else MetricsSettings().backlog_interval_s
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Starts sampling in a background task on the running event loop: one sample at once, then
        one every ``interval_s`` (a failed sample is logged and the next one tried)."""
        self.task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Cancels the background task and waits for it to end; the gauges keep the last sample.
        Does nothing if not started; safe to call twice."""
        if self.task:
            self.task.cancel()
            try:
                await self.task
            except (asyncio.CancelledError, Exception):
                pass
            self.task = None

    async def sample_once(self) -> None:
        """Takes one sample now: reads the backlog (due jobs, age of the oldest) of every
        (namespace, queue) ``targets()`` names, in one connection, and replaces the cached values the
        gauges report, so a queue no longer served disappears. Database errors propagate (the cache
        is then left as it was)."""
        from gnomon.common.storage.queues import read_backlog

        targets = set(self.targets())
        fresh: dict[tuple[str, str], tuple[int, float]] = {}
        if targets:
            async with self.engine.connect() as conn:
                for ns, q in sorted(targets):
                    n, _truncated, age = await read_backlog(conn, region=self.region, namespace=ns, queue=q)
                    fresh[(ns, q)] = (n, age or 0.0)
        _backlog.clear()
        _backlog.update(fresh)

    async def _run(self) -> None:
        while True:
            t0 = time.monotonic()
            try:
                await self.sample_once()
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("queue backlog sample failed: %s", e)
            await asyncio.sleep(max(0.0, self.interval_s - (time.monotonic() - t0)))


def serve_metrics(listen: str) -> str | None:
    """Starts the scrape endpoint (``GET /metrics``) on ``host:port`` in a daemon thread; returns
    the address, or ``None`` when ``listen`` is empty. Raises ``OSError`` if the port is taken.

    Served over HTTPS with the service's own certificate when ``GNOMON_TLS_CERT_FILE`` is set (the
    default outside ``GNOMON_INSECURE``), and then with client certificates required when
    ``GNOMON_TLS_CLIENT_AUTH=require`` (the scraper presents one signed by
    ``GNOMON_TLS_CLIENT_CA_FILE``); plain HTTP otherwise. Bind it to a private interface either way:
    it serves operational figures (queue names, counts), never payloads."""
    from gnomon.common.auth.settings import TlsSettings

    if not listen:
        return None
    host, _, port = listen.rpartition(":")
    tls = TlsSettings()
    if tls.cert_file and tls.key_file:
        require = tls.client_auth == "require" and bool(tls.client_ca_file)
        start_http_server(
            int(port),
            addr=host or "127.0.0.1",
            certfile=tls.cert_file,
            keyfile=tls.key_file,
            client_cafile=tls.client_ca_file if require else None,
            client_auth_required=require,
        )
    else:
        start_http_server(int(port), addr=host or "127.0.0.1")
    return listen
