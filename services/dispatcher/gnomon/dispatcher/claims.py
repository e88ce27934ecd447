"""The claim loop: turns due SCHEDULED jobs of owned shards into QUEUED attempts + outbox rows.

Timing: after each claim the loop asks the database how long until the next due job of its shards
(within ``prefetch_s``) and arms a timer for exactly that, so a job due in 20 ms is claimed ~20 ms
later, not at the next poll. Hints (``WakeDispatcher``), new credits and newly acquired shards wake
it early. Never early: the claim's ``scheduled_at <= now()`` uses the database clock, so a timer
that fires early only finds nothing due yet.

Per queue, two brakes against retry storms: the circuit breaker (:mod:`gnomon.dispatcher.breaker`;
an OPEN queue is skipped, a HALF_OPEN one gets only its probes) and the retry budget
(:mod:`gnomon.dispatcher.budget`; a claim takes at most the retries the budget has left, the
excess is pushed back). Neither uses up an attempt: held-back jobs stay SCHEDULED.

Backpressure: a queue with a dispatch rate limit (:mod:`gnomon.dispatcher.rate_limits`) is claimed
for at most the tokens its shared bucket grants; unused tokens go back in the same transaction, and
an empty bucket makes the loop sleep until the next token. The rest of the backlog waits SCHEDULED
(visible in ``QueueService.GetQueue``), it does not pile up in memory.
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common import faults, metrics
from gnomon.common.config import DispatcherSettings
from gnomon.common.errors import StaleFencingToken, Unavailable
from gnomon.common.storage import claims as claim_store
from gnomon.common.storage import regions
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.queues import CLOSED, HALF_OPEN, OPEN
from gnomon.dispatcher.breaker import Breakers
from gnomon.dispatcher.budget import RetryBudget
from gnomon.dispatcher.rate_limits import RateLimits
from gnomon.dispatcher.relay import Relay
from gnomon.dispatcher.sessions import SessionRegistry
from gnomon.dispatcher.shards import ShardOwnership

log = logging.getLogger(__name__)


class ClaimLoop:
    """Claims in bounded batches (at most ``claim_batch`` per target per transaction, never more
    than the connected workers' credits) and hands the result to the relay."""

    def __init__(
        self,
        engine: AsyncEngine,
        shards: ShardOwnership,
        registry: SessionRegistry,
        relay: Relay,
        settings: DispatcherSettings,
        *,
        region: str,
        dispatcher_id: str,
        budget: RetryBudget,
        breakers: Breakers,
        rate_limits: RateLimits | None = None,
        wake: asyncio.Event | None = None,
    ):
        """``budget`` and ``breakers`` are required (and must be of ``region``): a claim loop without
        them would ignore OPEN queues and retry without limit. ``rate_limits`` defaults to the
        region's shared buckets; ``wake`` (default: a new event) wakes the loop early."""
        self.engine, self.shards, self.registry, self.relay = engine, shards, registry, relay
        self.settings, self.region, self.dispatcher_id = settings, region, dispatcher_id
        if budget.region != region or breakers.region != region:
            raise ValueError(
                f"the retry budget and breakers of a claim loop must be of its region {region!r}"
            )
        self.budget, self.breakers = budget, breakers
        self.rate_limits = rate_limits if rate_limits is not None else RateLimits(region=region)
        self.wake = wake if wake is not None else asyncio.Event()
        self.claimed_total = 0
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Starts the loop."""
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stops claiming (a claim in progress completes or rolls back)."""
        if self._task:
            self._task.cancel()

    async def claim_once(self) -> tuple[int, float | None]:
        """One claim transaction over all targets with credits. Returns ``(claimed, next_due_s)``:
        when every target got fewer jobs than it asked for, the same transaction also reads how
        long (database clock, seconds) until the next job of the owned shards is due within
        ``prefetch_s`` (``None``: none that close; 0: due now but locked by another claimer).
        Raises :class:`StaleFencingToken` (after dropping the shards) if fenced off."""
        tokens = self.shards.tokens()
        region_token = self.shards.region_token
        cap = self.registry.capacity()
        if not tokens or not cap or region_token is None:  # no tokens without the region token
            return 0, None
        limits = {t: min(self.settings.claim_batch, n) for t, n in cap.items()}
        # circuit breakers: an OPEN queue is not claimed at all, a HALF_OPEN one only for probes
        modes = {t: self.breakers.state(t) for t in limits}
        limits = {t: n for t, n in limits.items() if modes.get(t, CLOSED) != OPEN}
        if not limits:
            return 0, None
        caps: dict = {}

        async def tx(conn):
            out, full, idle, waits = [], False, set(), []
            caps.clear()
            # region fence first: a region handed over (failover / fail-back) rejects the whole claim
            await regions.check_region_fence(conn, region=self.region, token=region_token)
            caps.update(await self.budget.caps(conn, list(limits)))
            rl = self.rate_limits
            await rl.refresh(conn)
            for target, n in limits.items():
                mode = modes.get(target, CLOSED)
                if mode == HALF_OPEN:
                    n = min(n, await self.breakers.probe_allowance(conn, target))
                    if n <= 0:
                        idle.add(target)  # probes all out: nothing to claim until they finish
                        continue
                limited = rl.limited(target)
                if limited:
                    n, wait = await rl.take(conn, target, n)
                    if n <= 0:
                        idle.add(target)  # bucket empty: come back when the next token is due
                        waits.append(wait)
                        continue
                c = caps.get(target)
                got = await claim_store.claim_due(
                    conn,
                    region=self.region,
                    tokens=tokens,
                    targets=[target],
                    limit=n,
                    dispatcher_id=self.dispatcher_id,
                    # HALF_OPEN probes are few (GNOMON_BREAKER_PROBES) and are how the
                    # queue recovers: the retry budget must not hold them back, or an
                    # exhausted budget keeps the breaker HALF_OPEN for a whole window
                    retry_cap=(c.retries if c and mode != HALF_OPEN else None),
                    defer_step_s=c.spacing_s if c else 1.0,
                    breaker_state=mode if self.breakers.enabled else None,
                )
                if limited and len(got) < n:
                    await rl.give_back(conn, target, n - len(got))
                full = full or (len(got) >= n and mode != HALF_OPEN)
                out += got
            if out:
                faults.point("crash_mid_claim")  # test-only: SIGKILL with the claim written, not committed
            if full:
                return out, 0.0
            live = [t for t in limits if t not in idle]
            delay = (
                await claim_store.next_due_in(
                    conn,
                    region=self.region,
                    shards=list(tokens),
                    targets=live,
                    horizon_s=self.settings.prefetch_s,
                )
                if live
                else None
            )
            if waits:
                delay = min(waits) if delay is None else min(delay, min(waits))
            return out, delay

        try:
            claimed, delay = await run_transaction(self.engine, tx)
        except StaleFencingToken as e:
            if "region" in e.metadata:
                self.shards.region_stale()
            else:
                self.shards.drop([int(s) for s in e.metadata.get("shards", "").split(",") if s])
            log.warning("claim rejected by the fence: %s", e)
            raise
        if log.isEnabledFor(logging.DEBUG):
            log.debug("claimed %d (limits %s), next due in %s s", len(claimed), limits, delay)
        for target in limits:
            self.budget.spent(
                target,
                sum(1 for c in claimed if (c.namespace, c.queue) == target and c.attempt > 1),
                caps.get(target),
            )
        if claimed:
            faults.point("crash_after_claim")
            self.claimed_total += len(claimed)
            for c in claimed:
                metrics.CLAIMED.add(1, {"queue": c.queue})
                metrics.DISPATCH_LAG.record(
                    max(0.0, (c.dispatched_at - c.scheduled_at).total_seconds()), {"queue": c.queue}
                )
            self.relay.deliver(claimed)
        return len(claimed), delay

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.wake.wait(), max(0.0, seconds))
        except TimeoutError:
            pass
        self.wake.clear()

    async def _run(self) -> None:
        s = self.settings
        while True:
            try:
                n, delay = await self.claim_once()
                if n and delay == 0.0 and self.registry.capacity():
                    continue  # a full batch: more is probably due right now
                if delay is None:
                    await self._sleep(s.max_idle_poll_s)
                elif delay <= 0:
                    await self._sleep(0.005)  # due but locked by another claimer, or no credits left
                else:
                    await self._sleep(min(delay, s.max_idle_poll_s))
            except StaleFencingToken:
                continue
            except Unavailable as e:
                log.warning("claim loop: %s", e)
                await asyncio.sleep(0.5)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("claim loop error")
                await asyncio.sleep(0.5)
