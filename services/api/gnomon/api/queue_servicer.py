"""``gnomon.v1.QueueService``: a queue's circuit breaker, retry budget and backlog (thin adapter
over the queue engine, :class:`gnomon.api.queues.QueueEngine`)."""

from __future__ import annotations

import math
from datetime import timedelta

from gnomon._proto.gnomon.v1 import queue_service_pb2 as qpb
from gnomon._proto.gnomon.v1 import queue_service_pb2_grpc
from gnomon.api.queues import QueueEngine, QueueStatus
from gnomon.common.errors import InvalidArgument, Validator
from gnomon.common.names import parse_queue_name, queue_name
from gnomon.common.storage import queues as qstore
from gnomon.common.timeconv import to_duration, to_timestamp

_STATES: dict[str, qpb.BreakerState] = {
    qstore.CLOSED: qpb.BREAKER_STATE_CLOSED,
    qstore.OPEN: qpb.BREAKER_STATE_OPEN,
    qstore.HALF_OPEN: qpb.BREAKER_STATE_HALF_OPEN,
}
MAX_RATE, MAX_BURST = 100_000.0, 100_000


class QueueServicer(queue_service_pb2_grpc.QueueServiceServicer):
    """Validates, calls the queue engine (``queues``: one queue of the API's region per call) and
    converts."""

    def __init__(self, queues: QueueEngine):
        self.queues = queues

    async def GetQueue(self, request, context):
        """Queue ``name`` of this region: breaker state and failure ratio, retry budget window
        (counts, window as a Duration), due backlog (``due_jobs``, oldest due age) and dispatch rate
        limit (jobs/s, burst). INVALID_ARGUMENT for a bad name; an unknown queue reads as empty."""
        ns, queue = parse_queue_name(request.name)
        return qpb.GetQueueResponse(queue=self._proto(ns, queue, await self.queues.status(ns, queue)))

    def _proto(self, ns: str, queue: str, st: QueueStatus) -> qpb.Queue:
        """A :class:`QueueStatus` -> ``gnomon.v1.Queue``."""
        row = st.breaker
        q = qpb.Queue(
            name=queue_name(ns, queue),
            region=self.queues.region,
            breaker_state=_STATES.get(st.breaker_state, qpb.BREAKER_STATE_UNSPECIFIED),
            failure_ratio=st.failure_ratio,
            window_results=st.window_results,
            retry_budget=qpb.RetryBudget(
                used=st.retries,
                first_attempts=st.first_attempts,
                allowed=st.allowed_retries,
                window=to_duration(timedelta(seconds=st.budget_window_s)),
            ),
            due_jobs=st.due_jobs,
            due_jobs_truncated=st.due_truncated,
        )
        if row and row["opened_at"] is not None:
            q.opened_time.CopyFrom(to_timestamp(row["opened_at"]))
        if row and row["version"] > 1:
            q.breaker_update_time.CopyFrom(to_timestamp(row["updated_at"]))
        if st.oldest_due_s is not None:
            q.oldest_due_age.CopyFrom(to_duration(timedelta(seconds=st.oldest_due_s)))
        limit = st.rate_limit
        if limit is not None:
            q.rate_limit.CopyFrom(qpb.RateLimit(rate=limit.rate, burst=limit.burst, available=limit.tokens))
        return q

    async def SetQueueRateLimit(self, request, context):
        """Sets the queue's dispatch rate limit: ``rate`` jobs/s (0-100000; 0 stops dispatch),
        ``burst`` 1-100000 (0 = the rate rounded up); returns the queue as GetQueue does.
        INVALID_ARGUMENT lists every bad field; RESOURCE_EXHAUSTED (QUOTA_EXCEEDED, quota
        ``max_queue_limits``) for a new limit past the namespace's quota."""
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
        await self.queues.set_rate_limit(ns, queue, rate=rate, burst=burst)
        got = await self.GetQueue(qpb.GetQueueRequest(name=request.name), context)
        return qpb.SetQueueRateLimitResponse(queue=got.queue)
