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

    async def claim_once(self) -> tuple[int, float | None]:
        """One claim transaction over all targets with credits. Returns ``(claimed, next_due_s)``:
        when every target got fewer jobs than it asked for, the same transaction also reads how
        long (database clock, seconds) until the next job of the owned shards is due within
        ``prefetch_s`` (``None``: none that close; 0: due now but locked by another claimer).
        Raises :class:`StaleFencingToken` (after dropping the shards) if fenced off."""
        tokens = self.shards.tokens()
        cap = self.registry.capacity()
        if not tokens or not cap:
            return 0, None
        limits = {t: min(self.settings.claim_batch, n) for t, n in cap.items()}

        async def tx(conn):
            out, full = [], False
            for target, n in limits.items():
                got = await store.claim_due(conn, region=self.region, tokens=tokens, targets=[target], limit=n,
                                            dispatcher_id=self.dispatcher_id)
                full = full or len(got) >= n
                out += got
            delay = None if full else await store.next_due_in(
                conn, region=self.region, shards=list(tokens), targets=list(limits),
                horizon_s=self.settings.prefetch_s)
            return out, (0.0 if full else delay)

        try:
            claimed, delay = await run_transaction(self.engine, tx)
        except StaleFencingToken as e:
            self.shards.drop([int(s) for s in e.metadata.get("shards", "").split(",") if s])
            log.warning("claim rejected by the fence: %s", e)
            raise
        if log.isEnabledFor(logging.DEBUG):
            log.debug("claimed %d (limits %s), next due in %s s", len(claimed), limits, delay)
        if claimed:
            faults.point("crash_after_claim")
            self.claimed_total += len(claimed)
            self.relay.deliver(claimed)
        return len(claimed), delay

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
                n, delay = await self.claim_once()
                if n and delay == 0.0 and self.registry.capacity():
                    continue                      # a full batch: more is probably due right now
                if delay is None:
                    await self._sleep(s.max_idle_poll_s)
                elif delay <= 0:
                    await self._sleep(0.005)      # due but locked by another claimer, or no credits left
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
