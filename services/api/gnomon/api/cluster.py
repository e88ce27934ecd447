"""The cluster engine of the API: dispatcher discovery and shard ownership, read from the etcd
registry and joined with the fencing tokens recorded in the database. Knows nothing of gRPC
(:class:`gnomon.api.servicer.ClusterServicer` validates, converts and calls it).

Errors: :class:`gnomon.common.errors.GnomonError` with reason COORDINATION_UNAVAILABLE (UNAVAILABLE)
when etcd cannot be read; database errors as :func:`gnomon.common.storage.engine.run_transaction`
raises them.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common.coordination.etcd import EtcdClient
from gnomon.common.coordination.etcd_types import EtcdError
from gnomon.common.coordination.registry import DispatcherInfo, list_dispatchers, shards_prefix
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.errors import GnomonError
from gnomon.common.storage import shards as shards_store
from gnomon.common.storage.engine import run_transaction


@dataclass(frozen=True)
class ShardView:
    """One shard of a region as the registry and the database see it. ``owner``: the dispatcher id
    holding its etcd key ("" when none does); ``fencing_token``: that key's create revision (0 when
    unowned); ``owned``: whether that key exists now; ``recorded_token``: the token last recorded
    in the database (0: never); ``acquired_at``: when that token was recorded (UTC-aware, None:
    never)."""

    region: str
    shard: int
    owner: str
    fencing_token: int
    owned: bool
    recorded_token: int
    acquired_at: datetime | None


class ClusterEngine:
    """Reads the registry under etcd key ``prefix`` through ``etcd`` and the recorded fencing tokens
    through ``engine``; ``shards`` is the region's shard count (every shard in ``0..shards-1`` is
    listed, owned or not)."""

    def __init__(self, etcd: EtcdClient, prefix: str, *, engine: AsyncEngine, shards: int):
        self.etcd, self.prefix, self.engine, self.shards = etcd, prefix, engine, shards

    async def dispatchers(self, region: str) -> list[DispatcherInfo]:
        """The live dispatchers of ``region``, sorted by id. Raises :class:`GnomonError`
        (COORDINATION_UNAVAILABLE) when etcd cannot be read."""
        try:
            return await list_dispatchers(self.etcd, self.prefix, region)
        except EtcdError as e:
            raise GnomonError("etcd unavailable", reason=ErrorReason.COORDINATION_UNAVAILABLE) from e

    async def shard_views(self, region: str) -> list[ShardView]:
        """Every shard of ``region`` in shard order: ``0..shards-1`` plus any other shard that has an
        etcd key or a recorded token. Raises :class:`GnomonError` (COORDINATION_UNAVAILABLE) when
        etcd cannot be read."""
        try:
            keys = {}
            for kv in await self.etcd.get_prefix(shards_prefix(self.prefix, region)):
                try:
                    keys[int(kv.key.rsplit(b"/", 1)[1])] = kv
                except ValueError:
                    continue
        except EtcdError as e:
            raise GnomonError("etcd unavailable", reason=ErrorReason.COORDINATION_UNAVAILABLE) from e
        recorded = await run_transaction(self.engine, lambda c: shards_store.list_shard_owners(c, region))
        out = []
        for s in sorted(set(range(self.shards)) | set(keys) | set(recorded)):
            key, rec = keys.get(s), recorded.get(s)
            out.append(
                ShardView(
                    region=region,
                    shard=s,
                    owner=key.value.decode(errors="replace") if key else "",
                    fencing_token=key.create_revision if key else 0,
                    owned=key is not None,
                    recorded_token=rec["token"] if rec else 0,
                    acquired_at=rec["acquired_at"] if rec else None,
                )
            )
        return out
