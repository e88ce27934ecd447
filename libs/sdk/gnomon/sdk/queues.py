"""Queue health as returned by :meth:`gnomon.sdk.Client.get_queue` (mirror of ``gnomon.v1.Queue``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gnomon._proto.gnomon.v1 import queue_service_pb2

from . import convert

__all__ = ["Queue", "RetryBudgetInfo", "queue_name"]

_BREAKER_PREFIX = "BREAKER_STATE_"


def queue_name(queue: str, namespace: str) -> str:
    """``"emails"`` -> ``"namespaces/<namespace>/queues/emails"``; a full name is returned unchanged.

    Raises:
        ValueError: an empty or malformed name.
    """
    if queue.startswith("namespaces/"):
        parts = queue.split("/")
        if len(parts) != 4 or parts[2] != "queues" or not parts[1] or not parts[3]:
            raise ValueError(f"not a queue name: {queue!r} (namespaces/{{ns}}/queues/{{queue}})")
        return queue
    if not queue or "/" in queue:
        raise ValueError(f"not a queue name: {queue!r}")
    return f"{convert.namespace_parent(namespace)}/queues/{queue}"


@dataclass(frozen=True, slots=True)
class RetryBudgetInfo:
    """The retry budget over its sliding window: ``used`` retries of ``allowed``, with
    ``first_attempts`` first attempts started in the ``window``."""

    used: int
    allowed: int
    first_attempts: int
    window: timedelta | None


@dataclass(frozen=True, slots=True)
class Queue:
    """One queue's health (``QueueService.GetQueue``).

    Attributes:
        name: ``namespaces/{namespace}/queues/{queue}``.
        region: region the figures are for.
        breaker_state: ``"CLOSED"``, ``"OPEN"`` or ``"HALF_OPEN"``.
        opened_time: when the breaker last opened, or ``None``.
        breaker_update_time: when the breaker last changed state, or ``None``.
        failure_ratio: failed / finished attempts in the breaker's window (0 when none finished).
        window_results: attempts counted for ``failure_ratio``.
        retry_budget: :class:`RetryBudgetInfo`.
        due_jobs: SCHEDULED jobs whose time has come (counted up to 100000, see ``due_jobs_truncated``).
        due_jobs_truncated: there are more due jobs than ``due_jobs``.
        oldest_due_age: how long the oldest due job has waited, or ``None`` when none is due.
        rate_limit: ``(rate per second, burst, tokens available now)`` of the queue's dispatch rate
            limit, or ``None`` when it has none.
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
    rate_limit: tuple[float, int, float] | None = None

    @classmethod
    def from_proto(cls, msg: queue_service_pb2.Queue) -> Queue:
        """Builds a :class:`Queue` from a ``gnomon.v1.Queue`` message."""
        name = (
            queue_service_pb2.BreakerState.Name(msg.breaker_state)
            if msg.breaker_state in queue_service_pb2.BreakerState.values()
            else f"UNKNOWN_{msg.breaker_state}"
        )
        b = msg.retry_budget
        return cls(
            name=msg.name,
            region=msg.region,
            breaker_state=name.removeprefix(_BREAKER_PREFIX),
            opened_time=convert.field_time(msg, "opened_time"),
            breaker_update_time=convert.field_time(msg, "breaker_update_time"),
            failure_ratio=msg.failure_ratio,
            window_results=msg.window_results,
            retry_budget=RetryBudgetInfo(
                used=b.used,
                allowed=b.allowed,
                first_attempts=b.first_attempts,
                window=convert.field_duration(b, "window"),
            ),
            due_jobs=msg.due_jobs,
            due_jobs_truncated=msg.due_jobs_truncated,
            oldest_due_age=convert.field_duration(msg, "oldest_due_age"),
            rate_limit=(msg.rate_limit.rate, msg.rate_limit.burst, msg.rate_limit.available)
            if msg.HasField("rate_limit")
            else None,
        )

    @property
    def queue(self) -> str:
        """The queue id (last segment of :attr:`name`)."""
        return self.name.rsplit("/", 1)[-1]

    def to_json_dict(self) -> dict[str, Any]:
        """A JSON-serialisable dict (instants RFC 3339, spans ``"12.5s"``)."""
        r, d = convert.rfc3339, convert.duration_text
        b = self.retry_budget
        return {
            "name": self.name,
            "region": self.region,
            "breaker_state": self.breaker_state,
            "opened_time": r(self.opened_time),
            "breaker_update_time": r(self.breaker_update_time),
            "failure_ratio": self.failure_ratio,
            "window_results": self.window_results,
            "retry_budget": {
                "used": b.used,
                "allowed": b.allowed,
                "first_attempts": b.first_attempts,
                "window": d(b.window),
            },
            "due_jobs": self.due_jobs,
            "due_jobs_truncated": self.due_jobs_truncated,
            "oldest_due_age": d(self.oldest_due_age),
            "rate_limit": None
            if self.rate_limit is None
            else dict(zip(("rate", "burst", "available"), self.rate_limit)),
        }
