"""The queue engine of the API: one queue's circuit breaker, retry budget, due backlog and dispatch
rate limit, read in one transaction, and the rate limit set. Knows nothing of gRPC
(:class:`gnomon.api.queue_servicer.QueueServicer` validates, converts and calls it).

Instants are UTC-aware datetimes; errors are those of
:func:`gnomon.common.storage.engine.run_transaction` (an unknown queue is not an error: it reads as
empty, breaker CLOSED).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common.config import BreakerSettings, RetryBudgetSettings
from gnomon.common.domain.policies import BreakerState
from gnomon.common.retry import budget_allowed
from gnomon.common.storage import queues as qstore
from gnomon.common.storage import rate_limits
from gnomon.common.storage.engine import run_transaction

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class QueueStatus:
    """One queue of a region as GetQueue shows it.

    ``breaker``: the ``queue_state`` row (None: never evaluated, i.e. CLOSED); ``window_results`` /
    ``window_failures``: results and failures within the breaker window; ``retries`` /
    ``first_attempts``: attempts claimed within the retry-budget window, ``allowed_retries`` the
    budget for that window and ``budget_window_s`` its length in seconds; ``due_jobs``: due SCHEDULED
    jobs counted (``due_truncated`` when there are more), ``oldest_due_s`` how long the oldest has
    been due in seconds (None: none due); ``rate_limit``: the dispatch limit (None: unlimited)."""

    breaker: dict[str, Any] | None
    window_results: int
    window_failures: int
    retries: int
    first_attempts: int
    allowed_retries: int
    budget_window_s: float
    due_jobs: int
    due_truncated: bool
    oldest_due_s: float | None
    rate_limit: rate_limits.Limit | None

    @property
    def breaker_state(self) -> str:
        """The stored breaker state, a :class:`BreakerState` value (CLOSED when the queue was never
        evaluated)."""
        return self.breaker["state"] if self.breaker else BreakerState.CLOSED

    @property
    def failure_ratio(self) -> float:
        """Failures / results within the breaker window (0.0 without results)."""
        return self.window_failures / self.window_results if self.window_results else 0.0


class QueueEngine:
    """Queue reads and the rate-limit write for ``region`` over ``engine``; ``budget`` and ``breaker``
    (default: the settings' defaults) give the windows the counts are taken over;
    ``max_queue_limits`` (0: none) is the quota on queues with a rate limit per namespace."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        region: str,
        budget: RetryBudgetSettings | None = None,
        breaker: BreakerSettings | None = None,
        max_queue_limits: int = 0,
    ):
        self.engine, self.region = engine, region
        #: quota max_queue_limits: most queues of a namespace with a rate limit (0 = no limit)
        self.max_queue_limits = max_queue_limits
        self.budget, self.breaker = budget or RetryBudgetSettings(), breaker or BreakerSettings()

    async def status(self, namespace: str, queue: str) -> QueueStatus:
        """Breaker row, window counts, backlog and rate limit of the queue, read in one transaction."""
        b, k, region = self.budget, self.breaker, self.region

        async def tx(conn):
            row = await qstore.get_state(conn, region=region, namespace=namespace, queue=queue)
            results, failures = await qstore.failure_stats(
                conn, region=region, namespace=namespace, queue=queue, window_s=k.window_s, since=_EPOCH
            )
            counts = await qstore.budget_counts(
                conn, region=region, namespace=namespace, queue=queue, window_s=b.window_s
            )
            backlog = await qstore.read_backlog(conn, region=region, namespace=namespace, queue=queue)
            limit = await rate_limits.get_limit(conn, region=region, namespace=namespace, queue=queue)
            return row, results, failures, counts, backlog, limit

        row, results, failures, counts, (due, truncated, oldest), limit = await run_transaction(
            self.engine, tx
        )
        return QueueStatus(
            breaker=row,
            window_results=results,
            window_failures=failures,
            retries=counts.retries,
            first_attempts=counts.first_attempts,
            allowed_retries=budget_allowed(
                counts.first_attempts, ratio=b.ratio, window_s=b.window_s, min_per_s=b.min_per_s
            ),
            budget_window_s=b.window_s,
            due_jobs=due,
            due_truncated=truncated,
            oldest_due_s=oldest,
            rate_limit=limit,
        )

    async def set_rate_limit(self, namespace: str, queue: str, *, rate: float, burst: int) -> None:
        """Sets the queue's dispatch limit to ``rate`` jobs/s with bursts of ``burst``, in one
        transaction (:func:`gnomon.common.storage.rate_limits.set_limit` says what ``rate`` 0 does).
        Raises :class:`gnomon.common.errors.QuotaExceeded` (quota ``max_queue_limits``, nothing
        written) for a new limit past the namespace's quota."""
        await run_transaction(
            self.engine,
            lambda c: rate_limits.set_limit(
                c,
                region=self.region,
                namespace=namespace,
                queue=queue,
                rate=rate,
                burst=burst,
                max_per_namespace=self.max_queue_limits,
            ),
        )
