"""The planner service: lifecycle (:class:`gnomon.common.rpc.lifecycle.Service`: start, drain, stop).
``gnomon planner`` runs :func:`main`.

Competing planners need no leader: each planning step claims due schedules with
``FOR UPDATE SKIP LOCKED`` (:mod:`gnomon.planner.planning`). A planner registers its address in etcd
(``{prefix}/{region}/planners/{id}``, under a session lease) only so the API can send it hints; it
keeps planning when etcd is down (planning is fenced by row locks and deterministic ids, not by etcd).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import uuid

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon._proto.gnomon.internal.v1 import hint_pb2, hint_pb2_grpc
from gnomon.common import tracing
from gnomon.common.config import (
    ClusterSettings,
    DatabaseSettings,
    EtcdSettings,
    PlannerSettings,
    ServerSettings,
)
from gnomon.common.coordination.etcd import EtcdClient
from gnomon.common.coordination.etcd_types import EtcdError
from gnomon.common.coordination.hints import DispatcherHints
from gnomon.common.coordination.lease_keeper import LeaseKeeper
from gnomon.common.coordination.registry import planners_prefix
from gnomon.common.event_loop import run
from gnomon.common.metrics import serve_metrics
from gnomon.common.rpc.health import HealthWatch
from gnomon.common.rpc.lifecycle import run_service
from gnomon.common.rpc.runner import configure_logging
from gnomon.common.rpc.server import GrpcServer, secure_server
from gnomon.common.storage.engine import make_engine
from gnomon.common.time import tzdata_version
from gnomon.planner.planning import Planner
from gnomon.planner.servicer import PlannerHintServicer

log = logging.getLogger("gnomon.planner")


async def register(
    etcd: EtcdClient, etcd_s: EtcdSettings, region: str, planner_id: str, address: str, stop: asyncio.Event
) -> None:
    """Keeps ``{prefix}/{region}/planners/{id}`` registered under a lease until ``stop`` is set
    (re-registers after a loss; the lease is revoked on the way out)."""
    key = planners_prefix(etcd_s.prefix, region) + planner_id.encode()
    value = json.dumps({"id": planner_id, "region": region, "address": address}).encode()
    while not stop.is_set():
        keeper = LeaseKeeper(etcd, ttl_s=etcd_s.lease_ttl_s)
        try:
            await keeper.start()
            await etcd.put(key, value, keeper.lease_id)
            stopper = asyncio.create_task(stop.wait())
            lost = asyncio.create_task(keeper.lost.wait())
            await asyncio.wait({stopper, lost}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            lost.cancel()
        except (EtcdError, OSError) as e:
            log.info("planner registration failed (hints only; planning goes on): %s", e)
        finally:
            await keeper.stop(revoke=stop.is_set())
        if not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), 1.0)
            except TimeoutError:
                pass


class PlannerService:
    """The planner process: the planning loop (``planner``), its hint endpoint (``server``) and its
    etcd registration as ``planner_id`` (``etcd_s``: prefix and lease TTL)."""

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        etcd: EtcdClient,
        etcd_s: EtcdSettings,
        server: GrpcServer,
        planner: Planner,
        planner_id: str,
        advertise: str = "",
        metrics_listen: str = "",
    ):
        self.engine, self.etcd, self.etcd_s, self.server = engine, etcd, etcd_s, server
        self.planner, self.planner_id = planner, planner_id
        self.advertise, self.metrics_listen = advertise, metrics_listen
        self.health = HealthWatch(engine, server)
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        """Serves hints, starts planning and registers in etcd."""
        await self.server.start()
        serve_metrics(self.metrics_listen)
        self.health.start()
        address = self.advertise or self.server.address
        region = self.planner.region
        self._tasks = [
            asyncio.create_task(self.planner.run(self._stop)),
            asyncio.create_task(
                register(self.etcd, self.etcd_s, region, self.planner_id, address, self._stop)
            ),
        ]
        print(
            f"gnomon planner {self.planner_id} listening on {self.server.address} (region {region}, "
            f"tzdata {tzdata_version()})",
            flush=True,
        )

    async def drain(self, grace_s: float) -> None:
        """Stops planning after the step in progress (which commits or rolls back), withdraws the
        registration, and lets running hint calls finish within ``grace_s`` seconds."""
        self._stop.set()
        self.planner.wake.set()
        await self.health.stop()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self.server.stop(grace_s)

    async def stop(self) -> None:
        """Closes etcd and the database pool."""
        await self.etcd.close()
        await self.engine.dispose()


def build(
    *,
    db: DatabaseSettings,
    cluster: ClusterSettings,
    srv: ServerSettings,
    etcd_s: EtcdSettings,
    settings: PlannerSettings,
    planner_id: str,
) -> PlannerService:
    """Constructs a planner from its settings (nothing starts yet)."""
    # A planner stopped inside a transaction (SIGSTOP, a long GC pause) must not hold its schedules'
    # row locks forever: the database ends such a session and the stopped planner's commit fails.
    engine = make_engine(
        db,
        pool_size=3,
        session_options={"idle_in_transaction_session_timeout": settings.idle_in_transaction_timeout_ms},
    )
    etcd = EtcdClient.from_settings(etcd_s)
    hints = DispatcherHints(etcd, etcd_s.prefix, cluster.region)
    planner = Planner(engine, settings, region=cluster.region, shards=cluster.shards, hint=hints.wake)
    server = secure_server(
        srv.listen,
        [
            (
                hint_pb2_grpc.add_HintServiceServicer_to_server,
                PlannerHintServicer(planner.wake),
                hint_pb2.DESCRIPTOR.services_by_name["HintService"].full_name,
            )
        ],
        engine,
        role="planner",
    )
    return PlannerService(
        engine=engine,
        etcd=etcd,
        etcd_s=etcd_s,
        server=server,
        planner=planner,
        planner_id=planner_id,
        advertise=srv.advertise,
        metrics_listen=srv.metrics_listen,
    )


async def serve(ready: asyncio.Event | None = None, stop: asyncio.Event | None = None) -> None:
    """Runs the planner until SIGTERM/SIGINT (or ``stop``); ``ready`` is set once it serves."""
    srv, settings = ServerSettings(), PlannerSettings()
    planner_id = settings.id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    service = build(
        db=DatabaseSettings(),
        cluster=ClusterSettings(),
        srv=srv,
        etcd_s=EtcdSettings(),
        settings=settings,
        planner_id=planner_id,
    )
    await run_service(service, grace_s=srv.drain_timeout_s, ready=ready, stop=stop)


def main() -> None:
    """Entry point of ``gnomon planner``."""
    configure_logging("planner")
    tracing.setup("planner")  # GNOMON_TRACES_EXPORTER; off by default (docs/tracing.md)
    run(serve())  # GNOMON_EVENT_LOOP: uvloop unless set to asyncio
