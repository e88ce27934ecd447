"""Namespace quotas: the limits (:class:`Quotas`), the per-process token bucket of
``max_create_rate`` (:class:`TokenBucket`), the worker-stream check a dispatcher makes at hello
(:func:`check_hello_quota`) and the in-process cache of namespace settings (:class:`NamespaceCache`)
that keeps the namespaces table off every hot path.

Every refusal is :class:`gnomon.common.errors.QuotaExceeded` (RESOURCE_EXHAUSTED, reason
QUOTA_EXCEEDED, a ``google.rpc.RetryInfo`` delay and ErrorInfo metadata ``quota``/``limit``/
``namespace``). For the job and schedule quotas a limit of 0 means "no limit". The worker-stream
quotas (:data:`STREAM_QUOTAS`) are never unlimited: None (a NULL column, 0 in the API, or a namespace
without a row) means the dispatcher's default (:class:`gnomon.common.stream_quota_settings.StreamQuotaSettings`),
resolved by :meth:`Quotas.with_defaults`.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from gnomon.common.errors import QuotaExceeded
from gnomon.common.stream_quota_settings import StreamQuotaSettings


class Quota(StrEnum):
    """The quotas a namespace may set (the ``quota`` metadata of a QUOTA_EXCEEDED error)."""

    MAX_CREATE_RATE = "max_create_rate"
    MAX_PENDING_JOBS = "max_pending_jobs"
    MAX_SCHEDULES = "max_schedules"
    MAX_WORKER_STREAMS = "max_worker_streams"
    MAX_QUEUES_PER_HELLO = "max_queues_per_hello"
    MAX_WORKER_STREAMS_PER_PRINCIPAL = "max_worker_streams_per_principal"
    MAX_QUEUES_PER_PRINCIPAL = "max_queues_per_principal"
    MAX_STREAMED_QUEUES = "max_streamed_queues"
    #: queues of a namespace with a dispatch rate limit (per region; a config default,
    #: ``GNOMON_MAX_QUEUE_LIMITS``), checked by QueueService.SetQueueRateLimit
    MAX_QUEUE_LIMITS = "max_queue_limits"
    #: worker streams one dispatcher process holds, all namespaces together (a config cap,
    #: ``GNOMON_DISPATCHER_MAX_STREAMS``; namespace ``*``), checked before the hello is read
    DISPATCHER_STREAMS = "dispatcher_streams"
    #: a namespace's fair share of that cap once most of it is used (reason STREAM_FAIR_SHARE)
    DISPATCHER_FAIR_SHARE = "dispatcher_fair_share"


#: The worker-stream quotas: None means the dispatcher's default, never "no limit".
STREAM_QUOTAS: tuple[str, ...] = (
    Quota.MAX_WORKER_STREAMS,
    Quota.MAX_QUEUES_PER_HELLO,
    Quota.MAX_WORKER_STREAMS_PER_PRINCIPAL,
    Quota.MAX_QUEUES_PER_PRINCIPAL,
    Quota.MAX_STREAMED_QUEUES,
)


@dataclass(frozen=True)
class Quotas:
    """Limits of one namespace. In the job and schedule quotas 0 means no limit; in the stream
    quotas None means the dispatcher's default (:meth:`with_defaults`).

    ``max_create_rate``: jobs created per second per API process (token bucket, burst = the rate
    rounded up, at least 1); ``max_pending_jobs``: jobs SCHEDULED or QUEUED at once;
    ``max_schedules``: schedules at once. Per dispatcher process: ``max_worker_streams``: worker
    streams of the namespace open at once; ``max_queues_per_hello``: queues one worker hello may name;
    ``max_worker_streams_per_principal``: streams one principal holds in the namespace;
    ``max_queues_per_principal``: distinct queues one principal's streams serve together;
    ``max_streamed_queues``: distinct queues all the namespace's streams serve together (each one a
    claim target of the dispatcher)."""

    max_create_rate: float = 0.0
    max_pending_jobs: int = 0
    max_schedules: int = 0
    max_worker_streams: int | None = None
    max_queues_per_hello: int | None = None
    max_worker_streams_per_principal: int | None = None
    max_queues_per_principal: int | None = None
    max_streamed_queues: int | None = None

    def with_defaults(self, defaults: StreamQuotaSettings) -> Quotas:
        """These quotas with every unset (None) stream quota replaced by its default from
        ``defaults``; the job and schedule quotas are kept as they are."""
        return replace(
            self,
            **{name: getattr(defaults, name) for name in STREAM_QUOTAS if getattr(self, name) is None},
        )


#: ``admit(conn, n)``: admits ``n`` jobs about to be written or raises :class:`QuotaExceeded`; engines
#: that count their jobs inside the write transaction call it before they write, with that
#: transaction's connection ``conn`` (the count is read on it: no second connection is taken from
#: the pool while one is held) (:meth:`gnomon.api.quotas.QuotaGuard.admitter`).
Admit = Callable[[Any, int], Awaitable[None]]

#: The limits of a namespace that has no row: no job or schedule quota, the default stream quotas.
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


@dataclass(frozen=True)
class StreamUsage:
    """What a new worker stream would bring its namespace to on this dispatcher, this stream
    counted: ``streams`` of the namespace, ``principal_streams`` of its principal there, distinct
    queues its principal's streams would serve (``principal_queues``) and the namespace's streams
    would serve (``namespace_queues``), and ``hello_queues`` named by the hello itself."""

    streams: int
    principal_streams: int
    hello_queues: int
    principal_queues: int
    namespace_queues: int


def check_hello_quota(namespace: str, principal: str, quotas: Quotas, usage: StreamUsage) -> None:
    """Checks a new worker stream of ``principal`` in ``namespace`` against the namespace's
    ``quotas`` (resolved by :meth:`Quotas.with_defaults`; a None one is not checked) given the
    ``usage`` it would bring. Raises :class:`QuotaExceeded` (RESOURCE_EXHAUSTED, QUOTA_EXCEEDED,
    metadata ``quota``/``limit``/``namespace``, plus ``principal`` for the per-principal quotas):
    ``max_queues_per_hello`` first (retry after 0 s: the hello must change), then
    ``max_worker_streams``, ``max_worker_streams_per_principal``, ``max_queues_per_principal``,
    ``max_streamed_queues`` (retry after 1 s: another stream must end first). Performs no I/O."""
    checks = (
        (Quota.MAX_QUEUES_PER_HELLO, usage.hello_queues, "queues one worker hello names", False),
        (
            Quota.MAX_WORKER_STREAMS,
            usage.streams,
            "worker streams of the namespace on this dispatcher",
            False,
        ),
        (
            Quota.MAX_WORKER_STREAMS_PER_PRINCIPAL,
            usage.principal_streams,
            "worker streams of one principal on this dispatcher",
            True,
        ),
        (
            Quota.MAX_QUEUES_PER_PRINCIPAL,
            usage.principal_queues,
            "distinct queues one principal's streams serve on this dispatcher",
            True,
        ),
        (
            Quota.MAX_STREAMED_QUEUES,
            usage.namespace_queues,
            "distinct queues the namespace's streams serve on this dispatcher",
            False,
        ),
    )
    for quota, would_be, what, per_principal in checks:
        limit = getattr(quotas, quota)
        if limit is not None and would_be > limit:
            who = (
                f"principal {principal!r} in namespace {namespace!r}"
                if per_principal
                else f"namespace {namespace!r}"
            )
            raise QuotaExceeded(
                f"this stream would bring {who} to {would_be} {what}; the quota {quota} allows {limit}",
                quota=quota,
                limit=limit,
                namespace=namespace,
                retry_after_s=0.0 if quota == Quota.MAX_QUEUES_PER_HELLO else 1.0,
                extra={"principal": principal[:128]} if per_principal else None,
            )


class NamespaceCache:
    """The quotas of each namespace, read through ``load(namespace)`` (None: the namespace has no
    row, so :data:`UNLIMITED`: no job quotas, the default stream quotas) and reused for ``ttl_s`` seconds, so a changed quota takes effect within
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

    async def quotas(
        self, namespace: str, load: Callable[[str], Awaitable[Quotas | None]] | None = None
    ) -> Quotas:
        """The namespace's quotas as of at most ``ttl_s`` seconds ago, read on a miss through ``load``
        (None: the cache's own loader). Raises what the loader raises (a database error: the
        caller's call fails UNAVAILABLE)."""
        now = self.clock()
        hit = self._entries.get(namespace)
        if hit is not None and hit[0] > now:
            return hit[1]
        quotas = await (load or self.load)(namespace) or UNLIMITED
        if len(self._entries) >= self.max_entries:
            self._entries.clear()
        self._entries[namespace] = (now + self.ttl_s, quotas)
        return quotas

    def forget(self, namespace: str) -> None:
        """Drops the cached entry (this process changed the namespace)."""
        self._entries.pop(namespace, None)
