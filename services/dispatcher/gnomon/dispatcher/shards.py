"""Shard ownership through etcd leases, with fencing tokens recorded in the database.

Each dispatcher holds one etcd session lease (:class:`LeaseKeeper`), registers itself under it and
acquires shard keys with ``create_if_absent`` (attached to the lease). The key's ``create_revision``
is the fencing token (docs/adr/0002-etcd-client.md: etcd revisions are cluster-wide and strictly
increasing, so a later owner always has a larger token). The token is recorded in ``shard_owners`` before the
shard is used; every claim re-checks it in its own transaction.

A dispatcher stops claiming as soon as its lease is no longer locally trusted
(``LeaseKeeper.valid()`` is false: the local deadline, TTL minus a safety margin, passed without a
renewal), before etcd itself expires the lease. Balance: each live dispatcher aims at ceil(S/N)
shards and releases extras, so N dispatchers own about S/N each.

Region level (docs/regions.md): before using any shard the dispatcher also needs
the home region's ownership key ``{prefix}/regions/{region}/owner`` to be held by its own home
region; its create revision is the region token, recorded in ``region_owners`` and checked by every
claim. The home region's dispatchers take the key whenever it is free; a standby (``standby=True``,
serving another region during a failover) takes it only while no dispatcher of that region is
registered, and gives it back (with the shards) when one is (:mod:`gnomon.dispatcher.failover`).
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
from collections.abc import Awaitable, Callable

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from gnomon.common import metrics
from gnomon.common.coordination.etcd import EtcdClient
from gnomon.common.coordination.etcd_types import EtcdError
from gnomon.common.coordination.lease_keeper import LeaseKeeper
from gnomon.common.coordination.registry import (
    DispatcherInfo,
    encode_registration,
    home_alive,
    list_dispatchers,
    region_key,
    shard_key,
    shards_prefix,
)
from gnomon.common.errors import GnomonError
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.fencing import record_ownership
from gnomon.common.storage.regions import record_region_ownership

log = logging.getLogger(__name__)


class ShardOwnership:
    """Acquires, keeps and releases shards; :meth:`tokens` is what claims may use right now."""

    def __init__(
        self,
        etcd: EtcdClient,
        engine: AsyncEngine,
        *,
        prefix: str,
        region: str,
        shards: int,
        dispatcher_id: str,
        address: str,
        ttl_s: int,
        scan_s: float = 1.0,
        home_region: str | None = None,
        standby: bool = False,
        changed: asyncio.Event | None = None,
    ):
        """``ttl_s``: the etcd session lease TTL, seconds; ``scan_s``: acquisition loop period, seconds.
        ``changed`` (default: a new event) is set whenever shards are gained (a claim loop's wake)."""
        self.etcd, self.engine = etcd, engine
        self.prefix, self.region, self.shards = prefix, region, shards
        self.home_region, self.standby = home_region or region, standby
        self.region_token: int | None = None  # region-level fencing token while our home region holds it
        self._region_recorded = 0
        self.dispatcher_id, self.address, self.ttl_s, self.scan_s = dispatcher_id, address, ttl_s, scan_s
        self.keeper: LeaseKeeper | None = None
        self.owned: dict[int, int] = {}  # shard -> fencing token
        self.changed = changed if changed is not None else asyncio.Event()  # set when shards are gained
        self.fenced_writes = 0  # claims/republishes rejected by the fence
        self._task: asyncio.Task | None = None
        self._stop = asyncio.Event()

    def tokens(self) -> dict[int, int]:
        """shard -> token for the shards this process may claim from now; empty when the lease is
        not trusted any more (the holder stops acting before the lease can expire) or when the
        region token is not ours (:attr:`region_token` None)."""
        if self.region_token is None:
            return {}
        if self.keeper is None or not self.keeper.valid():
            if self.owned:
                log.warning("etcd lease not trusted any more: dropping %d shards", len(self.owned))
                self.owned.clear()
            return {}
        return dict(self.owned)

    def trusted(self) -> bool:
        """True while claims may commit: the session lease is locally trusted and the region token
        is ours. Checked again at the end of every claim transaction, just before its commit, so a
        claim that began under a trusted lease never commits after the lease stopped being trusted."""
        return self.region_token is not None and self.keeper is not None and self.keeper.valid()

    def region_stale(self) -> None:
        """The region token was refused by the region fence (a fail-over or fail-back happened):
        stop claiming until the next scan reads the region key again."""
        self.region_token = None
        self.fenced_writes += 1
        metrics.FENCED_WRITES.add(1)

    def drop(self, shards: list[int]) -> None:
        """Forgets shards found stale by the fence (a newer owner took them)."""
        for s in shards:
            self.owned.pop(s, None)
        self.fenced_writes += 1
        metrics.FENCED_WRITES.add(1)

    async def start(self) -> None:
        """Opens the session and starts the acquisition loop (first scan done before returning)."""
        await self._new_session()
        await self._scan()
        self._task = asyncio.create_task(self._loop())

    async def _new_session(self) -> None:
        if self.keeper is not None:
            await self.keeper.stop(revoke=False)
        self.owned.clear()
        self.keeper = LeaseKeeper(self.etcd, self.ttl_s)
        await self.keeper.start()
        await self.etcd.put(
            f"{self.prefix}/{self.region}/dispatchers/{self.dispatcher_id}".encode(),
            encode_registration(
                DispatcherInfo(self.dispatcher_id, self.region, self.address, self.home_region)
            ),
            self.keeper.lease_id,
        )
        log.info("dispatcher %s registered with lease %x", self.dispatcher_id, self.keeper.lease_id)

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), self.scan_s)
                break
            except TimeoutError:
                pass
            try:
                if self.keeper is None or self.keeper.lost.is_set() or not self.keeper.valid():
                    self.owned.clear()
                    await self._new_session()
                await self._scan()
            except (EtcdError, GnomonError, OSError) as e:
                log.warning("shard scan failed: %s", e)

    def _record(self, shard: int, token: int) -> Callable[[AsyncConnection], Awaitable[None]]:
        """A transaction recording ``token`` as the fencing token of ``shard``."""
        return lambda c: record_ownership(c, self.region, shard, token, self.dispatcher_id)

    def _keeper(self) -> LeaseKeeper:
        """The session lease keeper (there is one from :meth:`start` on)."""
        if self.keeper is None:
            raise RuntimeError("shard ownership used before start()")
        return self.keeper

    async def _region(self) -> None:
        keeper = self._keeper()
        """Reads (and if free, takes) the home region's ownership key; sets :attr:`region_token`."""
        key = region_key(self.prefix, self.region)
        kv = await self.etcd.get(key)
        if kv is None:
            if self.standby and await home_alive(self.etcd, self.prefix, self.region):
                self.region_token = None  # the home region is back: never take its key
                return
            value = json.dumps({"region": self.home_region, "id": self.dispatcher_id}).encode()
            _, kv = await self.etcd.create_if_absent(key, value, keeper.lease_id)
        try:
            holder = json.loads(kv.value).get("region")
        except ValueError:
            holder = None
        if holder != self.home_region:
            self.region_token = None
            return
        if kv.lease == keeper.lease_id and self._region_recorded != kv.create_revision:
            try:
                await run_transaction(
                    self.engine,
                    lambda c: record_region_ownership(
                        c,
                        region=self.region,
                        owner_region=self.home_region,
                        owner=self.dispatcher_id,
                        token=kv.create_revision,
                    ),
                )
            except GnomonError as e:
                log.warning("could not record region %s token %d: %s", self.region, kv.create_revision, e)
                self.region_token = None
                return
            self._region_recorded = kv.create_revision
            log.info(
                "region %s is served by %s (region token %d)",
                self.region,
                self.home_region,
                kv.create_revision,
            )
        self.region_token = kv.create_revision

    async def _scan(self) -> None:
        keeper = self._keeper()
        await self._region()
        if self.region_token is None:
            return  # another region serves it: take no shard
        live = await list_dispatchers(self.etcd, self.prefix, self.region)
        target = math.ceil(self.shards / max(1, len(live)))
        keys = {
            int(kv.key.rsplit(b"/", 1)[1]): kv
            for kv in await self.etcd.get_prefix(shards_prefix(self.prefix, self.region))
        }
        lease = keeper.lease_id
        # Shards we think we own but whose key is gone or someone else's: stop using them.
        for s in list(self.owned):
            kv = keys.get(s)
            if kv is None or kv.lease != lease or kv.create_revision != self.owned[s]:
                self.owned.pop(s, None)
        # Keys still ours that were dropped locally (a refused claim): use them again; their tokens
        # were recorded when they were taken, and the fence re-checks them on every claim.
        for s, kv in keys.items():
            if kv.lease == lease and s not in self.owned and len(self.owned) < target:
                self.owned[s] = kv.create_revision
        # Too many: release the extras (stop claiming first, then delete the key).
        while len(self.owned) > target:
            s = max(self.owned)
            tok = self.owned.pop(s)
            await self.etcd.delete_if_create_revision(shard_key(self.prefix, self.region, s), tok)
        free = [s for s in range(self.shards) if s not in keys]
        random.shuffle(free)
        gained = False
        for s in free:
            if len(self.owned) >= target or not keeper.valid():
                break
            ok, kv = await self.etcd.create_if_absent(
                shard_key(self.prefix, self.region, s), self.dispatcher_id.encode(), lease
            )
            if not ok:
                continue
            try:
                await run_transaction(self.engine, self._record(s, kv.create_revision))
            except GnomonError as e:
                log.warning("could not record shard %d token %d: %s", s, kv.create_revision, e)
                await self.etcd.delete_if_create_revision(kv.key, kv.create_revision)
                continue
            self.owned[s] = kv.create_revision
            gained = True
        metrics.OWNED_SHARDS.set(len(self.owned))
        if gained:
            log.info("owning %d shards", len(self.owned))
            self.changed.set()

    async def stop(self) -> None:
        """Releases every shard and the session lease (an immediate hand-over)."""
        self._stop.set()
        if self._task:
            self._task.cancel()
        owned, self.owned = self.owned, {}
        for s, tok in owned.items():
            try:
                await self.etcd.delete_if_create_revision(shard_key(self.prefix, self.region, s), tok)
            except EtcdError:
                pass
        if self.keeper:
            try:
                await self.keeper.stop(revoke=True)
            except EtcdError:
                pass
