"""Dispatcher discovery: the worker asks the API for the live dispatchers of its region
(``ClusterService.ListDispatchers``) every few seconds."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import grpc

from gnomon._proto.gnomon.v1 import cluster_service_pb2, cluster_service_pb2_grpc

from .errors import GnomonError

__all__ = ["discover"]

log = logging.getLogger("gnomon.sdk.worker")


async def discover(
    channel: grpc.aio.Channel,
    api: str,
    *,
    region: str,
    interval: float,
    metadata: tuple[tuple[str, str], ...],
    found: Callable[[set[str]], None],
    fatal: Callable[[GnomonError], None],
) -> None:
    """Forever (until cancelled): lists the dispatchers of ``region`` through ``channel`` (to the API
    at ``api``) every ``interval`` seconds and calls ``found(addresses)`` with their ``host:port``
    set. A failed call is logged (a warning the first time) and retried; ``PERMISSION_DENIED`` or
    ``UNAUTHENTICATED`` calls ``fatal(error)`` and returns. Closes ``channel`` on the way out."""
    factory: Any = cluster_service_pb2_grpc.ClusterServiceStub
    stub = factory(channel)
    req = cluster_service_pb2.ListDispatchersRequest(region=region)
    failing = False
    try:
        while True:
            try:
                resp = await stub.ListDispatchers(
                    req, timeout=max(1.0, interval * 2), metadata=metadata or None
                )
            except grpc.aio.AioRpcError as exc:
                if exc.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
                    fatal(GnomonError.from_rpc_error(exc))
                    return
                (log.debug if failing else log.warning)(
                    "dispatcher discovery via %s failed: %s %s", api, exc.code().name, exc.details()
                )
                failing = True
            else:
                if failing:
                    log.info("dispatcher discovery via %s recovered", api)
                failing = False
                addrs = {d.address for d in resp.dispatchers if d.address}
                if not addrs:
                    log.debug("no dispatcher registered yet")
                found(addrs)
            await asyncio.sleep(interval)
    finally:
        await channel.close()
