"""Namespace quotas: the limits (:class:`Quotas`), the per-process token bucket of
``max_create_rate`` (:class:`TokenBucket`), the worker-stream check a dispatcher makes at hello
(:func:`check_hello_quota`) and the in-process cache of namespace settings (:class:`NamespaceCache`)
that keeps the namespaces table off every hot path.

Every refusal is :class:`gnomon.common.errors.QuotaExceeded` (RESOURCE_EXHAUSTED, reason
QUOTA_EXCEEDED, a ``google.rpc.RetryInfo`` delay and ErrorInfo metadata ``quota``/``limit``/
``namespace``). A limit of 0 means "no limit"; a namespace without a row has no limits.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gnomon.common.errors import QuotaExceeded


class Quota(StrEnum):
    """The quotas a namespace may set (the ``quota`` metadata of a QUOTA_EXCEEDED error)."""

    MAX_CREATE_RATE = "max_create_rate"
    MAX_PENDING_JOBS = "max_pending_jobs"
    MAX_SCHEDULES = "max_schedules"
    MAX_WORKER_STREAMS = "max_worker_streams"
    MAX_QUEUES_PER_HELLO = "max_queues_per_hello"
    #: queues of a namespace with a dispatch rate limit (per region; a config default, see
    #: ``ApiSettings.max_queue_limits_per_namespace``), checked by QueueService.SetQueueRateLimit
    MAX_QUEUE_LIMITS = "max_queue_limits"


@dataclass(frozen=True)
class Quotas:
    """Limits of one namespace; 0 in any field means no limit.

    ``max_create_rate``: jobs created per second per API process (token bucket, burst = the rate
    rounded up, at least 1); ``max_pending_jobs``: jobs SCHEDULED or QUEUED at once;
    ``max_schedules``: schedules at once; ``max_worker_streams``: worker streams open on one
    dispatcher process; ``max_queues_per_hello``: queues one worker hello may name."""

    max_create_rate: float = 0.0
    max_pending_jobs: int = 0
    max_schedules: int = 0
    max_worker_streams: int = 0
    max_queues_per_hello: int = 0


#: The limits of a namespace that has no row (none).
UNLIMITED = Quotas()


class TokenBucket:
    """A token bucket refilled at ``rate`` tokens/s up to ``burst`` tokens, starting full; ``clock``
    returns seconds (monotonic). Not thread-safe (one event loop owns it)."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self.tokens, self.at = burst, clock()

    def take(self, n: int) -> float:
        """Takes ``n`` tokens if available and returns 0.0; otherwise takes nothing and returns the
        seconds until ``n`` tokens will be there (``math.inf`` if ``n`` exceeds the burst: never)."""
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.at) * self.rate)
        self.at = now
        if n <= self.tokens:
            self.tokens -= n
            return 0.0
        if n > self.burst or self.rate <= 0:
            return math.inf
        return (n - self.tokens) / self.rate


def burst_of(rate: float) -> float:
    """The bucket size of ``max_create_rate`` ``rate``: the rate rounded up, at least 1 token."""
    return float(max(1, math.ceil(rate)))


def check_hello_quota(namespace: str, quotas: Quotas, queues: Sequence[str], open_streams: int) -> None:
    """Checks a worker hello of ``namespace`` against its ``quotas``: the hello names ``queues``
    (validated, deduplicated) and the dispatcher already has ``open_streams`` streams of that namespace
    open (this one not counted). Raises :class:`QuotaExceeded` (``max_queues_per_hello``: retry
    after 0 s, the hello must change; ``max_worker_streams``: retry after 1 s). Performs no I/O."""
    q = quotas
    if q.max_queues_per_hello and len(queues) > q.max_queues_per_hello:
        raise QuotaExceeded(
            f"the hello names {len(queues)} queues; namespace {namespace!r} allows "
            f"{q.max_queues_per_hello} per worker stream",
            quota=Quota.MAX_QUEUES_PER_HELLO,
            limit=q.max_queues_per_hello,
            namespace=namespace,
            retry_after_s=0.0,
        )
    if q.max_worker_streams and open_streams >= q.max_worker_streams:
        raise QuotaExceeded(
            f"namespace {namespace!r} already has {open_streams} worker streams on this dispatcher "
            f"(limit {q.max_worker_streams})",
            quota=Quota.MAX_WORKER_STREAMS,
            limit=q.max_worker_streams,
            namespace=namespace,
            retry_after_s=1.0,
        )


class NamespaceCache:
    """The quotas of each namespace, read through ``load(namespace)`` (None: the namespace has no
    row, so :data:`UNLIMITED`) and reused for ``ttl_s`` seconds, so a changed quota takes effect within
    that time and the namespaces table is read at most once per namespace per ``ttl_s``."""

    def __init__(
        self,
        load: Callable[[str], Awaitable[Quotas | None]],
        *,
        ttl_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = 10_000,
    ) -> None:
        self.load, self.ttl_s, self.clock, self.max_entries = load, ttl_s, clock, max_entries
        self._entries: dict[str, tuple[float, Quotas]] = {}

    async def quotas(self, namespace: str) -> Quotas:
        """The namespace's quotas as of at most ``ttl_s`` seconds ago. Raises what ``load`` raises
        (a database error: the caller's call fails UNAVAILABLE)."""
        now = self.clock()
        hit = self._entries.get(namespace)
        if hit is not None and hit[0] > now:
            return hit[1]
        quotas = await self.load(namespace) or UNLIMITED
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[namespace] = (now + self.ttl_s, quotas)
        return quotas

    def forget(self, namespace: str) -> None:
        """Drops the cached entry (this process changed the namespace)."""
        self._entries.pop(namespace, None)
