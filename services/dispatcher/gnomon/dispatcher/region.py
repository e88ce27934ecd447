"""The claim path of one region, built in one place: shard ownership, outbox relay, claim loop and the
two per-queue brakes (retry budget, circuit breakers).

A dispatcher builds one :class:`RegionStack` for its home region and, while it stands by for a failed
region (:mod:`gnomon.dispatcher.failover`), one more per region it serves. Both go through the same
constructor, so a standby's claims obey the failed region's breakers and retry budget exactly as the
home region's dispatchers would (the budget and breakers are keyed by region: ``queue_state`` and the
``attempts`` window counts of *that* region).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common.config import BreakerSettings, DispatcherSettings, RetryBudgetSettings
from gnomon.common.coordination.etcd import EtcdClient
from gnomon.dispatcher.breaker import Breakers
from gnomon.dispatcher.budget import RetryBudget
from gnomon.dispatcher.claims import ClaimLoop
from gnomon.dispatcher.relay import Relay
from gnomon.dispatcher.sessions import SessionRegistry
from gnomon.dispatcher.shards import ShardOwnership


@dataclass(frozen=True)
class DispatcherContext:
    """What every region stack of one dispatcher process shares: the database engine, the etcd
    client, the connected worker sessions, the settings, and who this dispatcher is (``dispatcher_id``,
    the ``address`` workers reach it on, its ``home_region`` and the region's ``shards`` count, the
    etcd key ``prefix`` and session lease TTL ``lease_ttl_s`` in seconds)."""

    engine: AsyncEngine
    etcd: EtcdClient
    registry: SessionRegistry
    settings: DispatcherSettings
    budget_settings: RetryBudgetSettings
    breaker_settings: BreakerSettings
    prefix: str
    home_region: str
    shards: int
    dispatcher_id: str
    address: str
    lease_ttl_s: int


class RegionStack:
    """Shards, relay, claims, retry budget and breakers of ``region`` for one dispatcher.

    ``wake`` (default: a new event) wakes the claim loop early; it is also set when shards are gained
    and when a breaker lets claims resume. ``region != ctx.home_region`` makes it a standby stack (it
    takes the region key only while no dispatcher of that region is registered)."""

    def __init__(self, ctx: DispatcherContext, region: str, *, wake: asyncio.Event | None = None):
        s = ctx.settings
        self.region = region
        self.wake = wake if wake is not None else asyncio.Event()
        self.shards = ShardOwnership(
            ctx.etcd,
            ctx.engine,
            prefix=ctx.prefix,
            region=region,
            shards=ctx.shards,
            dispatcher_id=ctx.dispatcher_id,
            address=ctx.address,
            ttl_s=ctx.lease_ttl_s,
            scan_s=s.shard_scan_s,
            home_region=ctx.home_region,
            standby=region != ctx.home_region,
            changed=self.wake,
        )
        self.relay = Relay(
            ctx.engine,
            ctx.registry,
            self.shards,
            region=region,
            interval_s=s.relay_interval_s,
            batch=s.claim_batch,
            accept_timeout_s=s.accept_timeout_s,
        )
        self.budget = RetryBudget(ctx.budget_settings, region=region)
        self.breakers = Breakers(
            ctx.engine,
            ctx.breaker_settings,
            region=region,
            targets=ctx.registry.targets,
            on_change=self.wake.set,
        )
        self.claims = ClaimLoop(
            ctx.engine,
            self.shards,
            ctx.registry,
            self.relay,
            s,
            region=region,
            dispatcher_id=ctx.dispatcher_id,
            budget=self.budget,
            breakers=self.breakers,
            wake=self.wake,
        )

    async def start(self) -> None:
        """Takes shards (first scan done before returning), then starts relaying, claiming and
        evaluating breakers."""
        await self.shards.start()
        self.relay.start()
        self.claims.start()
        self.breakers.start()

    async def stop_claiming(self) -> None:
        """Stops claiming, evaluating and relaying; shards stay owned (in-flight results still land)."""
        await self.claims.stop()
        await self.breakers.stop()
        await self.relay.stop()

    async def release(self) -> None:
        """Gives the shards back: deletes their keys and revokes the lease (a standby's region key
        goes with it)."""
        await self.shards.stop()

    async def stop(self) -> None:
        """:meth:`stop_claiming`, then :meth:`release`."""
        await self.stop_claiming()
        await self.release()
