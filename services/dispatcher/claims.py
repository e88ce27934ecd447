"""The claim loop: turns due SCHEDULED jobs of owned shards into QUEUED attempts + outbox rows.

Timing: after each claim the loop asks the database how long until the next due job of its shards
(within ``prefetch_s``) and arms a timer for exactly that, so a job due in 20 ms is claimed ~20 ms
later, not at the next poll. Hints (``WakeDispatcher``), new credits and newly acquired shards wake
it early. Never early: the claim's ``scheduled_at <= now()`` uses the database clock, so a timer
that fires early only finds nothing due yet.
"""
from __future__ import annotations

import asyncio
import logging

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common import faults
from gnomon.common.config import DispatcherSettings
from gnomon.common.errors import StaleFencingToken, Unavailable
from gnomon.common.storage import dispatch as store
from gnomon.common.storage.engine import run_transaction
from gnomon.dispatcher.relay import Relay
from gnomon.dispatcher.sessions import SessionRegistry
from gnomon.dispatcher.shards import ShardOwnership

log = logging.getLogger(__name__)


class ClaimLoop:
    """Claims in bounded batches (at most ``claim_batch`` per target per transaction, never more
    than the connected workers' credits) and hands the result to the relay."""

    def __init__(self, engine: AsyncEngine, shards: ShardOwnership, registry: SessionRegistry, relay: Relay,
                 settings: DispatcherSettings, *, region: str, dispatcher_id: str):
        self.engine, self.shards, self.registry, self.relay = engine, shards, registry, relay
        self.settings, self.region, self.dispatcher_id = settings, region, dispatcher_id
        self.wake = asyncio.Event()
        self.claimed_total = 0
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Starts the loop."""
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Stops claiming (a claim in progress completes or rolls back)."""
        if self._task:
            self._task.cancel()

    async def claim_once(self) -> int:
        """One claim transaction over all targets with credits; returns the number claimed.
        Raises :class:`StaleFencingToken` (after dropping the shards) if fenced off."""
        tokens = self.shards.tokens()
        cap = self.registry.capacity()
        if not tokens or not cap:
            return 0
        limits = {t: min(self.settings.claim_batch, n) for t, n in cap.items()}

        async def tx(conn):
            out = []
            for target, n in limits.items():
                out += await store.claim_due(conn, region=self.region, tokens=tokens, targets=[target], limit=n,
                                             dispatcher_id=self.dispatcher_id)
            return out

        try:
            claimed = await run_transaction(self.engine, tx)
        except StaleFencingToken as e:
            self.shards.drop([int(s) for s in e.metadata.get("shards", "").split(",") if s])
            log.warning("claim rejected by the fence: %s", e)
            raise
        if log.isEnabledFor(logging.DEBUG):
            log.debug("claimed %d (limits %s)", len(claimed), limits)
        if claimed:
            faults.point("crash_after_claim")
            self.claimed_total += len(claimed)
            self.relay.deliver(claimed)
        return len(claimed)

    async def _sleep(self, seconds: float) -> None:
        try:
            await asyncio.wait_for(self.wake.wait(), max(0.0, seconds))
        except asyncio.TimeoutError:
            pass
        self.wake.clear()

    async def _run(self) -> None:
        s = self.settings
        while True:
            try:
                n = await self.claim_once()
                if n and n >= min(s.claim_batch, 1):
                    # more may be due right now: loop without sleeping while we filled credits
                    if self.registry.capacity():
                        continue
                tokens, cap = self.shards.tokens(), self.registry.capacity()
                if not tokens or not cap:
                    await self._sleep(s.max_idle_poll_s)
                    continue
                delay = await run_transaction(self.engine, lambda c: store.next_due_in(
                    c, region=self.region, shards=list(tokens), targets=list(cap), horizon_s=s.prefetch_s))
                if delay is None:
                    await self._sleep(s.max_idle_poll_s)
                elif delay <= 0:
                    # due but locked by another claimer or just claimed elsewhere: brief pause
                    await self._sleep(0.005)
                else:
                    await self._sleep(min(delay, s.max_idle_poll_s))
            except StaleFencingToken:
                continue
            except Unavailable as e:
                log.warning("claim loop: %s", e)
                await asyncio.sleep(0.5)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - keep the loop alive; the next iteration retries
                log.exception("claim loop error")
                await asyncio.sleep(0.5)
