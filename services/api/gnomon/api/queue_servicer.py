"""``gnomon.v1.QueueService``: a queue's circuit breaker, retry budget and backlog (thin adapter
over :mod:`gnomon.common.storage.queues`)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon._proto.gnomon.v1 import queue_service_pb2 as qpb
from gnomon._proto.gnomon.v1 import queue_service_pb2_grpc
from gnomon.common.config import BreakerSettings, RetryBudgetSettings
from gnomon.common.errors import InvalidArgument, Validator
from gnomon.common.names import parse_queue_name, queue_name
from gnomon.common.retry import budget_allowed
from gnomon.common.storage import queues as qstore
from gnomon.common.storage import rate_limits
from gnomon.common.storage.engine import run_transaction
from gnomon.common.timeconv import to_duration, to_timestamp

_STATES = {
    qstore.CLOSED: qpb.BREAKER_STATE_CLOSED,
    qstore.OPEN: qpb.BREAKER_STATE_OPEN,
    qstore.HALF_OPEN: qpb.BREAKER_STATE_HALF_OPEN,
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MAX_RATE, MAX_BURST = 100_000.0, 100_000


class QueueServicer(queue_service_pb2_grpc.QueueServiceServicer):
    """Reads one queue of the API's region: breaker row, window counts, backlog (one transaction)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        region: str,
        budget: RetryBudgetSettings | None = None,
        breaker: BreakerSettings | None = None,
    ):
        self.engine, self.region = engine, region
        self.budget, self.breaker = budget or RetryBudgetSettings(), breaker or BreakerSettings()

    async def GetQueue(self, request, context):
        """Queue ``name`` of this region: breaker state and failure ratio, retry budget window
        (counts, window as a Duration), due backlog (``due_jobs``, oldest due age) and dispatch rate
        limit (jobs/s, burst). INVALID_ARGUMENT for a bad name; an unknown queue reads as empty."""
        ns, queue = parse_queue_name(request.name)
        b, k, region = self.budget, self.breaker, self.region

        async def tx(conn):
            row = await qstore.get_state(conn, region=region, namespace=ns, queue=queue)
            results, failures = await qstore.failure_stats(
                conn, region=region, namespace=ns, queue=queue, window_s=k.window_s, since=_EPOCH
            )
            counts = await qstore.budget_counts(
                conn, region=region, namespace=ns, queue=queue, window_s=b.window_s
            )
            backlog = await qstore.read_backlog(conn, region=region, namespace=ns, queue=queue)
            limit = await rate_limits.get_limit(conn, region=region, namespace=ns, queue=queue)
            return row, results, failures, counts, backlog, limit

        row, results, failures, counts, (due, truncated, oldest), limit = await run_transaction(
            self.engine, tx
        )
        q = qpb.Queue(
            name=queue_name(ns, queue),
            region=region,
            breaker_state=_STATES.get(row["state"] if row else qstore.CLOSED, qpb.BREAKER_STATE_UNSPECIFIED),
            failure_ratio=failures / results if results else 0.0,
            window_results=results,
            retry_budget=qpb.RetryBudget(
                used=counts.retries,
                first_attempts=counts.first_attempts,
                allowed=budget_allowed(
                    counts.first_attempts, ratio=b.ratio, window_s=b.window_s, min_per_s=b.min_per_s
                ),
                window=to_duration(timedelta(seconds=b.window_s)),
            ),
            due_jobs=due,
            due_jobs_truncated=truncated,
        )
        if row and row["opened_at"] is not None:
            q.opened_time.CopyFrom(to_timestamp(row["opened_at"]))
        if row and row["version"] > 1:
            q.breaker_update_time.CopyFrom(to_timestamp(row["updated_at"]))
        if oldest is not None:
            q.oldest_due_age.CopyFrom(to_duration(timedelta(seconds=oldest)))
        if limit is not None:
            q.rate_limit.CopyFrom(qpb.RateLimit(rate=limit.rate, burst=limit.burst, available=limit.tokens))
        return qpb.GetQueueResponse(queue=q)

    async def SetQueueRateLimit(self, request, context):
        """Sets the queue's dispatch rate limit: ``rate`` jobs/s (0-100000; 0 stops dispatch),
        ``burst`` 1-100000 (0 = the rate rounded up); returns the queue as GetQueue does.
        INVALID_ARGUMENT lists every bad field."""
        v = Validator()
        try:
            ns, queue = parse_queue_name(request.name)
        except InvalidArgument as e:
            v.violations += e.violations
        rate = request.rate
        v.check(
            math.isfinite(rate) and 0 <= rate <= MAX_RATE,
            "rate",
            f"must be between 0 and {MAX_RATE:g} per second",
        )
        burst = request.burst or (max(1, math.ceil(rate)) if math.isfinite(rate) else 1)
        v.check(1 <= burst <= MAX_BURST, "burst", f"must be between 1 and {MAX_BURST} (0 = rate rounded up)")
        v.raise_if_any()
        await run_transaction(
            self.engine,
            lambda c: rate_limits.set_limit(
                c, region=self.region, namespace=ns, queue=queue, rate=rate, burst=burst
            ),
        )
        got = await self.GetQueue(qpb.GetQueueRequest(name=request.name), context)
        return qpb.SetQueueRateLimitResponse(queue=got.queue)
