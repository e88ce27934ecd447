"""Wake-up hints to dispatchers (a job is due) and planners (a schedule changed) -- see
docs/concepts.md: hints cost latency if lost, never correctness. At most one hint per target is in flight;
hints during it coalesce into one follow-up hint (keeping the one that matters most, e.g. the
earliest due time), so a burst of 20,000 creates sends a handful of RPCs, not 20,000. Targets are
read from the etcd registry (:mod:`gnomon.common.coordination.registry`). Hints travel over TLS with
the service token as call metadata (:func:`gnomon.common.tls.service_call_parts`), plaintext only with
``GNOMON_INSECURE=true``."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import datetime
from typing import Any

import grpc

from gnomon._proto.gnomon.internal.v1 import hint_pb2, hint_pb2_grpc
from gnomon.common.coordination.etcd import EtcdClient
from gnomon.common.coordination.registry import list_dispatchers, list_planners
from gnomon.common.timeconv import to_timestamp
from gnomon.common.tls import service_call_parts

log = logging.getLogger(__name__)


class _Hints:
    """Coalescing sender of one hint RPC to every registered target of a region. Subclasses give
    the target list (:meth:`_targets`), the RPC (:meth:`_send`) and how two pending hints merge
    (:meth:`_merge`). Addresses are refreshed from etcd at most every ``refresh_s`` seconds.
    ``credentials``: of the hint channels, used as they are (default: TLS and the service token as
    per-call metadata from the settings, :func:`service_call_parts`, read at the first hint; None
    there means plaintext)."""

    role = "target"

    def __init__(
        self,
        etcd: EtcdClient,
        prefix: str,
        region: str,
        refresh_s: float = 2.0,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:
        self.etcd, self.prefix, self.region, self.refresh_s = etcd, prefix, region, refresh_s
        self._credentials = credentials
        self._credentials_read = credentials is not None
        self._refused = False
        self._metadata: tuple[tuple[str, str], ...] = ()
        self._addresses: list[str] = []
        self._fetched = 0.0
        self._stubs: dict[str, hint_pb2_grpc.HintServiceStub] = {}
        self._busy: set[str] = set()
        self._pending: dict[str, Any] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def _targets(self) -> list[str]:
        raise NotImplementedError

    async def _send(self, stub: hint_pb2_grpc.HintServiceStub, hint: Any) -> None:
        raise NotImplementedError

    def _merge(self, pending: Any, new: Any) -> Any:
        return new

    async def addresses(self) -> list[str]:
        """Target addresses (cached); empty if etcd cannot be read."""
        if time.monotonic() - self._fetched > self.refresh_s:
            self._fetched = time.monotonic()
            try:
                self._addresses = await self._targets()
            except Exception:
                log.debug("%s list unavailable", self.role, exc_info=True)
        return self._addresses

    def _channel(self, addr: str) -> grpc.aio.Channel:
        if not self._credentials_read:
            self._credentials_read = True
            self._credentials, self._metadata = service_call_parts()
        if self._credentials is None:
            return grpc.aio.insecure_channel(addr)
        return grpc.aio.secure_channel(addr, self._credentials)

    def _schedule(self, hint: Any) -> None:
        t = asyncio.get_running_loop().create_task(self._wake(hint))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _wake(self, hint: Any) -> None:
        for addr in await self.addresses():
            if addr in self._busy:
                self._pending[addr] = (
                    self._merge(self._pending[addr], hint) if addr in self._pending else hint
                )
                continue
            self._busy.add(addr)
            try:
                current = hint
                while True:
                    stub = self._stubs.get(addr)
                    if stub is None:
                        channel = self._channel(addr)
                        # the generated stub is untyped (gnomon._proto is excluded from type checking)
                        stub = self._stubs[addr] = hint_pb2_grpc.HintServiceStub(channel)  # type: ignore[no-untyped-call]
                    try:
                        await self._send(stub, current)
                    except grpc.aio.AioRpcError as exc:
                        refused = exc.code() in (
                            grpc.StatusCode.UNAUTHENTICATED,
                            grpc.StatusCode.PERMISSION_DENIED,
                        )
                        if refused and not self._refused:  # misconfiguration: say so once
                            self._refused = True
                            log.warning("hints to %s %s refused: %s", self.role, addr, exc.details())
                        log.debug("hint to %s %s lost", self.role, addr)
                    if addr not in self._pending:
                        break
                    current = self._pending.pop(addr)
            finally:
                self._busy.discard(addr)


class DispatcherHints(_Hints):
    """Sends ``WakeDispatcher`` to every live dispatcher of the region."""

    role = "dispatcher"

    async def _targets(self) -> list[str]:
        return [d.address for d in await list_dispatchers(self.etcd, self.prefix, self.region)]

    async def _send(self, stub: hint_pb2_grpc.HintServiceStub, due: datetime) -> None:
        await stub.WakeDispatcher(
            hint_pb2.WakeDispatcherRequest(due_time=to_timestamp(due)), timeout=1.0, metadata=self._metadata
        )

    def _merge(self, pending: datetime, new: datetime) -> datetime:
        return min(pending, new)

    def wake(self, due: datetime) -> None:
        """Schedules a hint that a job is due at ``due`` (UTC); returns at once."""
        self._schedule(due)


class PlannerHints(_Hints):
    """Sends ``WakePlanner`` to every live planner of the region."""

    role = "planner"

    async def _targets(self) -> list[str]:
        return [p.address for p in await list_planners(self.etcd, self.prefix, self.region)]

    async def _send(self, stub: hint_pb2_grpc.HintServiceStub, schedule: str) -> None:
        await stub.WakePlanner(
            hint_pb2.WakePlannerRequest(schedule=schedule), timeout=1.0, metadata=self._metadata
        )

    def wake(self, schedule: str = "") -> None:
        """Schedules a hint that ``schedule`` (a resource name) changed; returns at once."""
        self._schedule(schedule)
