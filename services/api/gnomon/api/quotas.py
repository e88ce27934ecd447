"""Namespace quotas on the API's write paths: :class:`QuotaGuard` admits the jobs a method will
write (:meth:`QuotaGuard.admit`, as the method's :class:`gnomon.common.auth.policy.Admission` in the
policy table says: the exact count, against ``max_pending_jobs``, and ``max_create_rate`` for jobs
created at once: CreateJob, BatchCreateJobs, TriggerSchedule; ``max_pending_jobs`` only for those
created paced: BackfillSchedule, ReplayDeadLetters) and schedule creates (``max_schedules``) before
anything is written, or refuses with :class:`gnomon.common.errors.QuotaExceeded` (RESOURCE_EXHAUSTED +
RetryInfo).

Cost on the hot path: the namespace's quotas come from a cache (:class:`NamespaceCache`, at most
``settings_ttl_s`` old, 5 s by default), so a namespace without limits costs one dict lookup. The
pending count (SCHEDULED + QUEUED jobs) is read only for a namespace with ``max_pending_jobs`` set,
counted up to the limit, and reused for ``pending_ttl_s`` (1 s by default); jobs this process admits
are added to the cached count at once. **Staleness**: another API process's creates and jobs
finishing are seen only when the count is read again, so a namespace may overshoot
``max_pending_jobs`` by what the other API processes admit within ``pending_ttl_s``, and may be
refused for up to ``pending_ttl_s`` after its backlog drained. ``max_create_rate`` is a token bucket
per API process: N API processes admit up to N times the rate. ``max_schedules`` is counted afresh
on every CreateSchedule (not a hot path); concurrent creates may overshoot it by their number.
Admission happens after validation and before the write, so a create that is then refused for another
reason (a reused ``request_id``, the database down) or that is an idempotent repeat has still used its
token and been counted as pending until the next count.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gnomon.common.auth.policy import POLICY
from gnomon.common.errors import QuotaExceeded
from gnomon.common.quotas import Admit, NamespaceCache, Quota, Quotas, TokenBucket, burst_of
from gnomon.common.storage import namespaces as ns_store
from gnomon.common.storage.engine import run_transaction

#: Seconds a refused pending-jobs create is told to wait (RetryInfo): the count's refresh time.
PENDING_RETRY_S = 1.0
#: Seconds a refused schedule create is told to wait.
SCHEDULES_RETRY_S = 5.0


class QuotaGuard:
    """Checks namespace quotas for the API over ``engine`` (see the module docstring for the cache
    times ``settings_ttl_s`` and ``pending_ttl_s``, seconds; ``clock`` returns monotonic seconds)."""

    def __init__(
        self,
        engine: AsyncEngine,
        *,
        settings_ttl_s: float = 5.0,
        pending_ttl_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine, self.pending_ttl_s, self.clock = engine, pending_ttl_s, clock
        self.cache = NamespaceCache(ns_store.quotas_loader(engine), ttl_s=settings_ttl_s, clock=clock)
        self._buckets: dict[str, TokenBucket] = {}
        self._pending: dict[str, tuple[float, int]] = {}

    def forget(self, namespace: str) -> None:
        """Drops what this process cached about ``namespace`` (it was just changed here)."""
        self.cache.forget(namespace)
        self._buckets.pop(namespace, None)
        self._pending.pop(namespace, None)

    async def admit(self, method: str, namespace: str, n: int, conn: AsyncConnection | None = None) -> None:
        """Admits the ``n`` (>= 0) jobs the call of ``method`` (``/package.Service/Method``) will write
        in ``namespace``, as the method's ``admits`` in the policy table declares (the one place the
        job quotas are enforced): a rated admission goes through :meth:`admit_jobs`, a paced one
        through :meth:`admit_pending`. ``n`` 0 is admitted without a read. ``conn``: the caller's
        open transaction, on which the namespace row and the pending count are read (None: their own
        transactions). Raises
        :class:`QuotaExceeded`; ``ValueError`` when the method declares no admission (a bug: it
        would create jobs unchecked)."""
        rule = POLICY.get(method)
        if rule is None or rule.admits is None or not rule.admits.counts:
            raise ValueError(f"{method} declares no admission in the policy table")
        if n <= 0:
            return
        if rule.admits.rated:
            await self.admit_jobs(namespace, n, conn)
        else:
            await self.admit_pending(namespace, n, conn)

    def admitter(self, method: str, namespace: str) -> Admit:
        """``admit(conn, n)``: :meth:`admit` of ``method`` in ``namespace`` on the transaction
        ``conn`` (None: outside any), bound to each admitted call by the authorization interceptor
        (:mod:`gnomon.common.rpc.admission`; the API passes this method as the server's admitter).
        The engine calls it once, before it writes: inside its write transaction when it counts
        there (a refusal rolls the transaction back). Raises ``ValueError`` at once for a method
        that declares no counting admission."""
        rule = POLICY.get(method)
        if rule is None or rule.admits is None or not rule.admits.counts:
            raise ValueError(f"{method} declares no admission in the policy table")

        async def admit(conn: AsyncConnection, n: int) -> None:
            await self.admit(method, namespace, n, conn)

        return admit

    async def _quotas(self, namespace: str, conn: AsyncConnection | None) -> Quotas:
        if conn is None:
            return await self.cache.quotas(namespace)
        return await self.cache.quotas(namespace, lambda ns: ns_store.find_quotas(conn, ns))

    async def admit_jobs(self, namespace: str, n: int, conn: AsyncConnection | None = None) -> None:
        """Admits ``n`` new jobs in ``namespace`` or raises :class:`QuotaExceeded` (nothing is taken
        from the rate bucket then). ``max_pending_jobs`` is checked first, then ``max_create_rate``;
        a batch larger than the rate's burst is refused with no retry delay that could help (it must
        be split: RetryInfo says 0 s and the message says so). ``conn``: as in :meth:`admit`."""
        q = await self._quotas(namespace, conn)
        await self._check_pending(namespace, q.max_pending_jobs, n, conn)
        if q.max_create_rate:
            bucket = self._bucket(namespace, q.max_create_rate)
            wait = bucket.take(n)
            if wait:
                never = math.isinf(wait)
                raise QuotaExceeded(
                    f"namespace {namespace!r} allows {q.max_create_rate:g} job creates per second "
                    + (f"(bursts of {bucket.burst:g}): split the batch" if never else "on this API server"),
                    quota=Quota.MAX_CREATE_RATE,
                    limit=q.max_create_rate,
                    namespace=namespace,
                    retry_after_s=0.0 if never else wait,
                )
        hit = self._pending.get(namespace)
        if q.max_pending_jobs and hit is not None:
            self._pending[namespace] = (hit[0], hit[1] + n)

    async def admit_pending(self, namespace: str, n: int, conn: AsyncConnection | None = None) -> None:
        """Refuses a call that will create ``n`` (>= 1) jobs in ``namespace`` later or paced
        (BackfillSchedule, ReplayDeadLetters) when ``pending + n`` would exceed ``max_pending_jobs``:
        raises :class:`QuotaExceeded` (RetryInfo :data:`PENDING_RETRY_S`). Takes no create-rate
        token and adds nothing to the cached count (such calls pace their own creates). ``conn``: as in
        :meth:`admit`."""
        q = await self._quotas(namespace, conn)
        await self._check_pending(namespace, q.max_pending_jobs, n, conn)

    async def _check_pending(self, namespace: str, limit: int, n: int, conn: AsyncConnection | None) -> None:
        if not limit:
            return
        pending = await self._pending_count(namespace, limit, conn)
        if pending + n > limit:
            raise QuotaExceeded(
                f"namespace {namespace!r} has {pending} pending jobs (SCHEDULED or QUEUED); "
                f"{n} more would exceed max_pending_jobs {limit}",
                quota=Quota.MAX_PENDING_JOBS,
                limit=limit,
                namespace=namespace,
                retry_after_s=PENDING_RETRY_S,
            )

    async def admit_schedule(self, namespace: str) -> None:
        """Admits one new schedule in ``namespace`` or raises :class:`QuotaExceeded` (``max_schedules``)."""
        q = await self.cache.quotas(namespace)
        if not q.max_schedules:
            return
        limit = q.max_schedules
        count = await run_transaction(
            self.engine, lambda c: ns_store.count_schedules(c, namespace, cap=limit)
        )
        if count >= limit:
            raise QuotaExceeded(
                f"namespace {namespace!r} has {count} schedules, its max_schedules",
                quota=Quota.MAX_SCHEDULES,
                limit=limit,
                namespace=namespace,
                retry_after_s=SCHEDULES_RETRY_S,
            )

    def _bucket(self, namespace: str, rate: float) -> TokenBucket:
        bucket = self._buckets.get(namespace)
        if bucket is None or bucket.rate != rate:
            bucket = self._buckets[namespace] = TokenBucket(rate, burst_of(rate), self.clock)
        return bucket

    async def _pending_count(self, namespace: str, limit: int, conn: AsyncConnection | None) -> int:
        now = self.clock()
        hit = self._pending.get(namespace)
        if hit is not None and hit[0] > now:
            return hit[1]
        if conn is not None:
            count = await ns_store.count_pending_jobs(conn, namespace, cap=limit + 1)
        else:
            count = await run_transaction(
                self.engine, lambda c: ns_store.count_pending_jobs(c, namespace, cap=limit + 1)
            )
        self._pending[namespace] = (now + self.pending_ttl_s, count)
        return count
