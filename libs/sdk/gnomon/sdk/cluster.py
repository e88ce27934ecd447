"""The cluster (``gnomon.v1.ClusterService``): live dispatchers and shard ownership."""

from __future__ import annotations

from gnomon._proto.gnomon.v1 import cluster_service_pb2

from . import convert
from .base import ClientBase
from .models import DispatcherInfo, Shard

__all__ = ["ClusterClient"]


class ClusterClient(ClientBase):
    """The cluster methods of :class:`~gnomon.sdk.AsyncClient` (``ClusterService``)."""

    async def list_dispatchers(self, region: str = "") -> list[DispatcherInfo]:
        """Lists live dispatchers of ``region`` ("" = the API's own region).

        Raises:
            GnomonError: when the RPC fails (``INVALID_ARGUMENT`` for a malformed region).
        """
        req = cluster_service_pb2.ListDispatchersRequest(region=region)
        resp = await self._call(self._cluster.ListDispatchers, req)
        return [convert.dispatcher_from_proto(d) for d in resp.dispatchers]

    async def list_shards(self, region: str = "") -> list[Shard]:
        """Every shard of ``region`` ("" = the API's own region), ordered by number, with its owner,
        the owner's fencing token and the token recorded in the database (:class:`~gnomon.sdk.Shard`).

        Raises:
            GnomonError: when the RPC fails (``INVALID_ARGUMENT`` for a malformed region).
        """
        req = cluster_service_pb2.ListShardsRequest(region=region)
        resp = await self._call(self._cluster.ListShards, req)
        return [convert.shard_from_proto(s) for s in resp.shards]
