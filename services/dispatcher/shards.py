"""Shard ownership through etcd leases, with fencing tokens recorded in the database.

Each dispatcher holds one etcd session lease (:class:`LeaseKeeper`), registers itself under it and
acquires shard keys with ``create_if_absent`` (attached to the lease). The key's ``create_revision``
is the fencing token (STACK.md section 3: etcd revisions are cluster-wide and strictly increasing, so
a later owner always has a larger token). The token is recorded in ``shard_owners`` before the
shard is used; every claim re-checks it in its own transaction.

A dispatcher stops claiming as soon as its lease is no longer locally trusted
(``LeaseKeeper.valid()`` is false: the local deadline, TTL minus a safety margin, passed without a
renewal), before etcd itself expires the lease. Balance: each live dispatcher aims at ceil(S/N)
shards and releases extras, so N dispatchers own about S/N each.
"""
from __future__ import annotations

import asyncio
import logging
import math
import random

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common.coordination.etcd import EtcdClient, EtcdError, LeaseKeeper
from gnomon.common.coordination.registry import (DispatcherInfo, encode_registration, list_dispatchers, shard_key,
                                                 shards_prefix)
from gnomon.common import metrics
from gnomon.common.errors import GnomonError
from gnomon.common.storage.dispatch import record_ownership
from gnomon.common.storage.engine import run_transaction

log = logging.getLogger(__name__)


class ShardOwnership:
    """Acquires, keeps and releases shards; :meth:`tokens` is what claims may use right now."""

    def __init__(self, etcd: EtcdClient, engine: AsyncEngine, *, prefix: str, region: str, shards: int,
                 dispatcher_id: str, address: str, ttl_s: int, scan_s: float = 1.0):
        self.etcd, self.engine = etcd, engine
        self.prefix, self.region, self.shards = prefix, region, shards
        self.dispatcher_id, self.address, self.ttl_s, self.scan_s = dispatcher_id, address, ttl_s, scan_s
        self.keeper: LeaseKeeper | None = None
        self.owned: dict[int, int] = {}          # shard -> fencing token
        self.changed = asyncio.Event()           # set when shards are gained
        self.fenced_writes = 0                   # claims/republishes rejected by the fence
        self._task: asyncio.Task | None = None
        self._stop = asyncio.Event()

    def tokens(self) -> dict[int, int]:
        """shard -> token for the shards this process may claim from now; empty when the lease is
        not trusted any more (the holder stops acting before the lease can expire)."""
        if self.keeper is None or not self.keeper.valid():
            if self.owned:
                log.warning("etcd lease not trusted any more: dropping %d shards", len(self.owned))
                self.owned.clear()
            return {}
        return dict(self.owned)

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
            encode_registration(DispatcherInfo(self.dispatcher_id, self.region, self.address)),
            self.keeper.lease_id)
        log.info("dispatcher %s registered with lease %x", self.dispatcher_id, self.keeper.lease_id)

    async def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                await asyncio.wait_for(self._stop.wait(), self.scan_s)
                break
            except asyncio.TimeoutError:
                pass
            try:
                if self.keeper is None or self.keeper.lost.is_set() or not self.keeper.valid():
                    self.owned.clear()
                    await self._new_session()
                await self._scan()
            except (EtcdError, GnomonError, OSError) as e:
                log.warning("shard scan failed: %s", e)

    async def _scan(self) -> None:
        live = await list_dispatchers(self.etcd, self.prefix, self.region)
        target = math.ceil(self.shards / max(1, len(live)))
        keys = {int(kv.key.rsplit(b"/", 1)[1]): kv
                for kv in await self.etcd.get_prefix(shards_prefix(self.prefix, self.region))}
        lease = self.keeper.lease_id
        # Shards we think we own but whose key is gone or someone else's: stop using them.
        for s in list(self.owned):
            kv = keys.get(s)
            if kv is None or kv.lease != lease or kv.create_revision != self.owned[s]:
                self.owned.pop(s, None)
        # Too many: release the extras (stop claiming first, then delete the key).
        while len(self.owned) > target:
            s = max(self.owned)
            tok = self.owned.pop(s)
            await self.etcd.delete_if_create_revision(shard_key(self.prefix, self.region, s), tok)
        free = [s for s in range(self.shards) if s not in keys]
        random.shuffle(free)
        gained = False
        for s in free:
            if len(self.owned) >= target or not self.keeper.valid():
                break
            ok, kv = await self.etcd.create_if_absent(shard_key(self.prefix, self.region, s),
                                                      self.dispatcher_id.encode(), lease)
            if not ok:
                continue
            try:
                await run_transaction(self.engine, lambda c, s=s, t=kv.create_revision: record_ownership(
                    c, self.region, s, t, self.dispatcher_id))
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
