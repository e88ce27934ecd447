"""Queue health (``QueueService``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

__all__ = ["Queue", "RetryBudgetInfo", "RateLimit"]


@dataclass(frozen=True, slots=True)
class RetryBudgetInfo:
    """The retry budget over its sliding window: ``used`` retries of ``allowed``, with
    ``first_attempts`` first attempts started in the ``window`` (a ``timedelta``, ``None`` if unset)."""

    used: int
    allowed: int
    first_attempts: int
    window: timedelta | None


class RateLimit(NamedTuple):
    """A queue's dispatch rate limit: ``rate`` dispatches per second (shared by the region's
    dispatchers), ``burst`` dispatches at once, ``available`` tokens now. A tuple, so
    ``rate, burst, available = q.rate_limit`` works."""

    rate: float
    burst: int
    available: float


@dataclass(frozen=True, slots=True)
class Queue:
    """One queue's health (``QueueService.GetQueue``).

    Attributes:
        name: ``namespaces/{namespace}/queues/{queue}``.
        region: region the figures are for.
        breaker_state: ``"CLOSED"``, ``"OPEN"`` or ``"HALF_OPEN"``.
        opened_time: when the breaker last opened, or ``None``.
        breaker_update_time: when the breaker last changed state, or ``None``.
        failure_ratio: failed / finished attempts in the breaker's window, 0-1 (0 when none finished).
        window_results: attempts counted for ``failure_ratio``.
        retry_budget: :class:`RetryBudgetInfo`.
        due_jobs: SCHEDULED jobs whose time has come (counted up to 100000, see ``due_jobs_truncated``).
        due_jobs_truncated: there are more due jobs than ``due_jobs``.
        oldest_due_age: how long the oldest due job has waited, or ``None`` when none is due.
        rate_limit: :class:`RateLimit` ``(rate per second, burst, tokens available now)`` of the
            queue's dispatch rate limit, or ``None`` when it has none.
    """

    name: str
    region: str
    breaker_state: str
    opened_time: datetime | None
    breaker_update_time: datetime | None
    failure_ratio: float
    window_results: int
    retry_budget: RetryBudgetInfo
    due_jobs: int
    due_jobs_truncated: bool
    oldest_due_age: timedelta | None
    rate_limit: RateLimit | None = None

    @property
    def queue(self) -> str:
        """The queue id (last segment of :attr:`name`)."""
        return self.name.rsplit("/", 1)[-1]
