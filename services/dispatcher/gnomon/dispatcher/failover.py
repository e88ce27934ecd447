"""Standby for other regions' shards (docs/regions.md).

A dispatcher started with ``GNOMON_DISPATCHER_STANDBY_FOR=a,b`` watches those home regions. When
no dispatcher of region ``a`` has been registered for ``failover_after_s`` seconds and nobody holds
``a``'s region ownership key, it starts a second set of shard ownership, claim loop and outbox relay
for region ``a`` (its own etcd session lease; the shards of ``a`` under ``a``'s keys). That set
takes ``a``'s region key (the region token, recorded in ``region_owners``) and then ``a``'s shard
keys, exactly as ``a``'s own dispatchers would: the failover goes through the same lease + fencing
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
from dataclasses import dataclass

from gnomon.common.coordination.etcd import EtcdError
from gnomon.common.coordination.registry import home_alive, region_key
from gnomon.dispatcher.claims import ClaimLoop
from gnomon.dispatcher.relay import Relay
from gnomon.dispatcher.shards import ShardOwnership

log = logging.getLogger(__name__)


@dataclass
class _Served:
    shards: ShardOwnership
    relay: Relay
    claims: ClaimLoop


class Standby:
    """Takes over and gives back the regions in ``regions`` for dispatcher ``d``
    (a :class:`gnomon.dispatcher.service.Dispatcher`)."""

    def __init__(self, d, regions: list[str], *, failover_after_s: float, scan_s: float = 1.0):
        self.d, self.regions, self.failover_after_s, self.scan_s = d, regions, failover_after_s, scan_s
        self.serving: dict[str, _Served] = {}
        self._absent_since: dict[str, float] = {}
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        """Starts watching."""
        self._task = asyncio.create_task(self._run())

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
        d = self.d
        alive = await home_alive(d.etcd, d.etcd_s.prefix, region)
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
        if await d.etcd.get(region_key(d.etcd_s.prefix, region)) is not None:
            return  # held: its home's last holder is alive, or another standby
        log.warning("no dispatcher of region %s for %.1f s: taking it over", region, time.monotonic() - since)
        shards = ShardOwnership(
            d.etcd,
            d.engine,
            prefix=d.etcd_s.prefix,
            region=region,
            shards=d.cluster.shards,
            dispatcher_id=d.id,
            address=d.address,
            ttl_s=d.etcd_s.lease_ttl_s,
            scan_s=d.settings.shard_scan_s,
            home_region=d.cluster.region,
            standby=True,
        )
        relay = Relay(
            d.engine,
            d.registry,
            shards,
            region=region,
            interval_s=d.settings.relay_interval_s,
            batch=d.settings.claim_batch,
        )
        claims = ClaimLoop(d.engine, shards, d.registry, relay, d.settings, region=region, dispatcher_id=d.id)
        await shards.start()
        relay.start()
        claims.start()
        shards.changed = claims.wake
        self.serving[region] = _Served(shards, relay, claims)

    async def _give_back(self, region: str) -> None:
        s = self.serving.pop(region)
        await s.claims.stop()
        await s.relay.stop()
        await s.shards.stop()  # deletes its shard keys and revokes the lease (region key too)
        self._absent_since.pop(region, None)
