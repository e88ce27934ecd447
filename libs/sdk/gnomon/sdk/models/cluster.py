"""Cluster resources: live dispatchers and shard ownership (``ClusterService``)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

__all__ = ["DispatcherInfo", "Shard"]


@dataclass(frozen=True, slots=True)
class DispatcherInfo:
    """A live dispatcher, as listed by ``ClusterService.ListDispatchers``.

    Attributes:
        dispatcher_id: instance id.
        region: region served.
        address: ``host:port`` of its WorkerService.
    """

    dispatcher_id: str
    region: str
    address: str


@dataclass(frozen=True, slots=True)
class Shard:
    """One shard of a region's due-time index and who owns it (``ClusterService.ListShards``).

    Attributes:
        region: the region.
        shard: shard number, 0-based.
        owner: dispatcher id of the owner ("" when unowned).
        fencing_token: the owner's fencing token (etcd revision of its ownership key; 0 when unowned).
        recorded_token: the token recorded in the database (lags ``fencing_token`` briefly after a
            hand-over).
        owned: someone owns it now.
        acquire_time: UTC-aware instant the owner acquired it, or ``None``.
    """

    region: str
    shard: int
    owner: str
    fencing_token: int
    recorded_token: int
    owned: bool
    acquire_time: datetime | None
