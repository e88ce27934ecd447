"""Standby for other regions' shards (docs/regions.md).

A dispatcher started with ``GNOMON_DISPATCHER_STANDBY_FOR=a,b`` watches those home regions. When
no dispatcher of region ``a`` has been registered for ``failover_after_s`` seconds and nobody holds
``a``'s region ownership key, it starts a second set of shard ownership, claim loop and outbox relay
for region ``a`` (its own etcd session lease; the shards of ``a`` under ``a``'s keys). That set
takes ``a``'s region key (the region token, recorded in ``region_owners``) and then ``a``'s shard
keys, exactly as ``a``'s own dispatchers would; its claims obey ``a``'s circuit breakers and retry
budget (the set is a :class:`gnomon.dispatcher.region.RegionStack`, built like the home region's): the failover goes through the same lease + fencing
mechanism at region granularity. Jobs of ``a`` that fell due meanwhile are late, not lost; the
standby's workers (its connected sessions) run them. Planners and reapers of the standby region
serve ``a`` as long as ``region_owners`` names it (``gnomon.common.storage.regions.served_regions``).

Fail-back: as soon as a dispatcher whose home is ``a`` registers again, the standby stops claiming
for ``a`` and revokes that set's lease (its shard keys and ``a``'s region key go with it); ``a``'s
dispatcher takes the region key under a larger token, so any late write of the standby is rejected
by the region fence.
"""

from __future__ import annotations

import asyncio
import logging
import time

from gnomon.common.coordination.etcd_types import EtcdError
from gnomon.common.coordination.registry import home_alive, region_key
from gnomon.dispatcher.region import DispatcherContext, RegionStack

log = logging.getLogger(__name__)


class Standby:
    """Takes over and gives back the regions in ``regions`` for the dispatcher described by ``ctx``.
    ``failover_after_s``: how long (seconds) a region must have no registered dispatcher before it is
    taken over; ``scan_s``: period of the checks, seconds."""

    def __init__(
        self, ctx: DispatcherContext, regions: list[str], *, failover_after_s: float, scan_s: float = 1.0
    ):
        self.ctx, self.regions, self.failover_after_s, self.scan_s = ctx, regions, failover_after_s, scan_s
        self.serving: dict[str, RegionStack] = {}
        self._absent_since: dict[str, float] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Starts watching."""
        self._task = asyncio.create_task(self._run())

    async def drain(self) -> None:
        """Stops watching and stops claiming for every region served (their shards stay owned until
        :meth:`stop`, so results of attempts still running land under a valid token)."""
        if self._task:
            self._task.cancel()
        for stack in self.serving.values():
            await stack.stop_claiming()

    async def stop(self) -> None:
        """Stops watching and gives back every region served (revoking their leases)."""
        if self._task:
            self._task.cancel()
        for r in list(self.serving):
            await self._give_back(r)

    async def _run(self) -> None:
        while True:
            for r in self.regions:
                try:
                    await self.check(r)
                except (EtcdError, OSError) as e:
                    log.info("standby check of region %s failed: %s", r, e)
                except Exception:
                    log.exception("standby check of region %s failed", r)
            await asyncio.sleep(self.scan_s)

    async def check(self, region: str) -> None:
        """One decision for ``region``: take it over, keep serving it, or give it back."""
        ctx = self.ctx
        alive = await home_alive(ctx.etcd, ctx.prefix, region)
        if region in self.serving:
            if alive:
                log.warning("home region %s is back: giving it back", region)
                await self._give_back(region)
            return
        if alive:
            self._absent_since.pop(region, None)
            return
        since = self._absent_since.setdefault(region, time.monotonic())
        if time.monotonic() - since < self.failover_after_s:
            return
        if await ctx.etcd.get(region_key(ctx.prefix, region)) is not None:
            return  # held: its home's last holder is alive, or another standby
        log.warning("no dispatcher of region %s for %.1f s: taking it over", region, time.monotonic() - since)
        stack = RegionStack(ctx, region)
        await stack.start()
        self.serving[region] = stack

    async def _give_back(self, region: str) -> None:
        await self.serving.pop(region).stop()  # deletes its shard keys and revokes the lease (region key too)
        self._absent_since.pop(region, None)
