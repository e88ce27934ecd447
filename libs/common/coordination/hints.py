"""Wake-up hints to dispatchers (a job is due) and planners (a schedule changed) -- DESIGN.md
section 1: hints cost latency if lost, never correctness. At most one hint per target is in flight;
hints during it coalesce into one follow-up hint, so a burst of 20,000 creates sends a handful of
RPCs, not 20,000. Targets are read from the etcd registry (:mod:`gnomon.common.coordination.registry`)."""
from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime

import grpc

from gnomon._proto.gnomon.internal.v1 import hint_pb2, hint_pb2_grpc
from gnomon.common.coordination.etcd import EtcdClient
from gnomon.common.coordination.registry import list_dispatchers, list_planners
from gnomon.common.timeconv import to_timestamp

log = logging.getLogger(__name__)


class DispatcherHints:
    """Sends ``WakeDispatcher`` to every live dispatcher of the region; addresses come from etcd
    (refreshed at most every ``refresh_s`` seconds)."""

    def __init__(self, etcd: EtcdClient, prefix: str, region: str, refresh_s: float = 2.0):
        self.etcd, self.prefix, self.region, self.refresh_s = etcd, prefix, region, refresh_s
        self._addresses: list[str] = []
        self._fetched = 0.0
        self._channels: dict[str, hint_pb2_grpc.HintServiceStub] = {}
        self._busy: set[str] = set()
        self._dirty: dict[str, datetime] = {}
        self._tasks: set[asyncio.Task] = set()

    async def addresses(self) -> list[str]:
        """Dispatcher addresses (cached); empty if etcd cannot be read."""
        if time.monotonic() - self._fetched > self.refresh_s:
            self._fetched = time.monotonic()
            try:
                self._addresses = [d.address for d in await list_dispatchers(self.etcd, self.prefix, self.region)]
            except Exception:  # noqa: BLE001 - a hint is best effort
                log.debug("dispatcher list unavailable", exc_info=True)
        return self._addresses

    def wake(self, due: datetime) -> None:
        """Schedules a hint that a job is due at ``due`` (UTC); returns at once."""
        t = asyncio.get_running_loop().create_task(self._wake(due))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _wake(self, due: datetime) -> None:
        for addr in await self.addresses():
            if addr in self._busy:
                prev = self._dirty.get(addr)
                self._dirty[addr] = due if prev is None or due < prev else prev
                continue
            self._busy.add(addr)
            try:
                while True:
                    stub = self._channels.get(addr)
                    if stub is None:
                        stub = self._channels[addr] = hint_pb2_grpc.HintServiceStub(grpc.aio.insecure_channel(addr))
                    try:
                        await stub.WakeDispatcher(hint_pb2.WakeDispatcherRequest(due_time=to_timestamp(due)),
                                                  timeout=1.0)
                    except grpc.aio.AioRpcError:
                        log.debug("hint to %s lost", addr)
                    nxt = self._dirty.pop(addr, None)
                    if nxt is None:
                        break
                    due = nxt
            finally:
                self._busy.discard(addr)


class PlannerHints:
    """Sends ``WakePlanner`` to every live planner of the region (addresses from etcd, cached for
    ``refresh_s`` seconds). Coalesces like :class:`DispatcherHints`: one RPC in flight per planner."""

    def __init__(self, etcd: EtcdClient, prefix: str, region: str, refresh_s: float = 2.0):
        self.etcd, self.prefix, self.region, self.refresh_s = etcd, prefix, region, refresh_s
        self._addresses: list[str] = []
        self._fetched = 0.0
        self._stubs: dict[str, hint_pb2_grpc.HintServiceStub] = {}
        self._busy: set[str] = set()
        self._again: set[str] = set()
        self._tasks: set[asyncio.Task] = set()

    async def addresses(self) -> list[str]:
        """Planner addresses (cached); empty if etcd cannot be read."""
        if time.monotonic() - self._fetched > self.refresh_s:
            self._fetched = time.monotonic()
            try:
                self._addresses = [p.address for p in await list_planners(self.etcd, self.prefix, self.region)]
            except Exception:  # noqa: BLE001 - a hint is best effort
                log.debug("planner list unavailable", exc_info=True)
        return self._addresses

    def wake(self, schedule: str = "") -> None:
        """Schedules a hint that ``schedule`` (a resource name) changed; returns at once."""
        t = asyncio.get_running_loop().create_task(self._wake(schedule))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _wake(self, schedule: str) -> None:
        for addr in await self.addresses():
            if addr in self._busy:
                self._again.add(addr)
                continue
            self._busy.add(addr)
            try:
                while True:
                    stub = self._stubs.get(addr)
                    if stub is None:
                        stub = self._stubs[addr] = hint_pb2_grpc.HintServiceStub(grpc.aio.insecure_channel(addr))
                    try:
                        await stub.WakePlanner(hint_pb2.WakePlannerRequest(schedule=schedule), timeout=1.0)
                    except grpc.aio.AioRpcError:
                        log.debug("hint to planner %s lost", addr)
                    if addr not in self._again:
                        break
                    self._again.discard(addr)
            finally:
                self._busy.discard(addr)
