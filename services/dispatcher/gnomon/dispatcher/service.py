"""The dispatcher service: lifecycle (:class:`gnomon.common.rpc.lifecycle.Service`: start, drain,
stop). ``gnomon dispatcher`` runs :func:`main`.

:func:`build` reads the settings and constructs every part in dependency order, passing each its
dependencies; :class:`DispatcherService` only starts and stops them. Nothing is wired after
construction.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon._proto.gnomon.internal.v1 import hint_pb2, hint_pb2_grpc
from gnomon._proto.gnomon.v1 import worker_service_pb2, worker_service_pb2_grpc
from gnomon.common import metrics, tracing
from gnomon.common.auth.settings import AuthSettings
from gnomon.common.config import (
    BreakerSettings,
    ClusterSettings,
    DatabaseSettings,
    DispatcherSettings,
    EtcdSettings,
    RetryBudgetSettings,
    ServerSettings,
)
from gnomon.common.coordination.etcd import EtcdClient
from gnomon.common.event_loop import run
from gnomon.common.metrics import serve_metrics
from gnomon.common.quotas import NamespaceCache
from gnomon.common.rpc.health import HealthWatch
from gnomon.common.rpc.lifecycle import run_service
from gnomon.common.rpc.runner import configure_logging
from gnomon.common.rpc.server import GrpcServer, secure_server
from gnomon.common.storage import namespaces as namespaces_store
from gnomon.common.storage.engine import make_engine
from gnomon.common.stream_quota_settings import StreamQuotaSettings
from gnomon.common.stream_settings import StreamSettings
from gnomon.dispatcher.cancels import CancelPusher
from gnomon.dispatcher.failover import Standby
from gnomon.dispatcher.hints import HintServicer
from gnomon.dispatcher.region import DispatcherContext, RegionStack
from gnomon.dispatcher.servicer import WorkerServicer
from gnomon.dispatcher.sessions import SessionRegistry
from gnomon.dispatcher.writes import WriteBatcher

log = logging.getLogger("gnomon.dispatcher")


class DispatcherService:
    """One dispatcher process: the worker lease streams (``server``, ``worker_servicer``, batched
    ``writes``), the home region's claim path (``home``), cancel pushes, backlog gauges and, when it
    stands by for other regions, ``standby``. ``metrics_listen``: Prometheus ``host:port`` ("" = off)."""

    def __init__(
        self,
        *,
        ctx: DispatcherContext,
        server: GrpcServer,
        worker_servicer: WorkerServicer,
        writes: WriteBatcher,
        home: RegionStack,
        cancels: CancelPusher,
        backlog: metrics.BacklogSampler,
        standby: Standby | None,
        metrics_listen: str = "",
    ):
        self.ctx, self.server, self.worker_servicer, self.writes = ctx, server, worker_servicer, writes
        self.home, self.cancels, self.backlog, self.standby = home, cancels, backlog, standby
        self.metrics_listen = metrics_listen
        self.health = HealthWatch(ctx.engine, server)

    @property
    def id(self) -> str:
        """This dispatcher's id (in attempts' ``dispatcher_id`` and its etcd registration)."""
        return self.ctx.dispatcher_id

    @property
    def engine(self) -> AsyncEngine:
        """The database engine every part shares."""
        return self.ctx.engine

    async def start(self) -> None:
        """Serves the lease stream, takes the home region's shards, starts claiming (and standing by)."""
        await self.server.start()
        serve_metrics(self.metrics_listen)
        self.writes.start()
        await self.home.start()
        self.cancels.start()
        self.backlog.start()
        if self.standby:
            self.standby.start()
        # health follows the database (NOT_SERVING while it is unreachable; worker streams stay open)
        self.health.start()
        print(
            f"gnomon dispatcher {self.id} listening on {self.server.address} "
            f"(region {self.ctx.home_region}, {len(self.home.shards.owned)}/{self.ctx.shards} shards)",
            flush=True,
        )

    async def drain(self, grace_s: float) -> None:
        """Stops claiming (home and standby regions), ends the worker streams, lets running calls end
        within ``grace_s`` seconds and flushes buffered writes. Shards stay owned until :meth:`stop`."""
        await self.health.stop()
        if self.standby:
            await self.standby.drain()
        await self.home.stop_claiming()
        await self.cancels.stop()
        await self.backlog.stop()
        self.worker_servicer.close_all()
        await self.server.stop(grace_s)
        await self.writes.stop()

    async def stop(self) -> None:
        """Gives back standby regions and the home shards (leases revoked), closes etcd and the pool."""
        await self.health.stop()
        if self.standby:
            await self.standby.stop()
        await self.home.release()
        await self.ctx.etcd.close()
        await self.engine.dispose()


def build(
    *,
    db: DatabaseSettings,
    cluster: ClusterSettings,
    srv: ServerSettings,
    etcd_s: EtcdSettings,
    settings: DispatcherSettings,
    budget: RetryBudgetSettings,
    breaker: BreakerSettings,
    dispatcher_id: str,
    stream: StreamSettings | None = None,
) -> DispatcherService:
    """Constructs a dispatcher from its settings (``stream``: the per-stream budgets, default
    :class:`StreamSettings` from the environment); nothing starts yet."""
    # A dispatcher stopped inside a transaction (SIGSTOP, a long pause) must not hold shard or region
    # row locks past its lease: the database ends such a session, so a hand-over never waits on it.
    engine = make_engine(
        db, session_options={"idle_in_transaction_session_timeout": settings.idle_in_transaction_timeout_ms}
    )
    etcd = EtcdClient.from_settings(etcd_s)
    stream = stream or StreamSettings()
    registry = SessionRegistry(max_queued_bytes=stream.max_queued_response_bytes)
    writes = WriteBatcher(engine, settings.write_batch)
    wake = asyncio.Event()  # new credits, hints, gained shards, a breaker letting claims resume
    worker_servicer = WorkerServicer(
        registry,
        writes,
        dispatcher_id=dispatcher_id,
        region=cluster.region,
        heartbeat_interval_s=settings.heartbeat_interval_s,
        on_credits=wake.set,
        hello_timeout_s=settings.hello_timeout_s,
        max_streams=settings.max_streams,
        stream_defaults=StreamQuotaSettings(),
        recheck_s=max(1.0, AuthSettings().cache_s),
        quotas=NamespaceCache(namespaces_store.quotas_loader(engine)),
        stream=stream,
    )
    server = secure_server(
        srv.listen,
        [
            (
                worker_service_pb2_grpc.add_WorkerServiceServicer_to_server,
                worker_servicer,
                worker_service_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name,
            ),
            (
                hint_pb2_grpc.add_HintServiceServicer_to_server,
                HintServicer(wake),
                hint_pb2.DESCRIPTOR.services_by_name["HintService"].full_name,
            ),
        ],
        engine,
        role="dispatcher",
    )
    ctx = DispatcherContext(
        engine=engine,
        etcd=etcd,
        registry=registry,
        settings=settings,
        budget_settings=budget,
        breaker_settings=breaker,
        prefix=etcd_s.prefix,
        home_region=cluster.region,
        shards=cluster.shards,
        dispatcher_id=dispatcher_id,
        address=srv.advertise or server.address,
        lease_ttl_s=etcd_s.lease_ttl_s,
    )
    # queue depth / oldest due age gauges of the queues our workers serve; in-flight attempts
    backlog = metrics.BacklogSampler(engine, region=cluster.region, targets=registry.targets)
    metrics.CONNECTED_WORKERS.set(0)
    metrics.set_in_flight_source(lambda: sum(len(s.held) for s in registry.sessions.values()))
    standby_for = [
        r.strip() for r in settings.standby_for.split(",") if r.strip() and r.strip() != cluster.region
    ]
    return DispatcherService(
        ctx=ctx,
        server=server,
        worker_servicer=worker_servicer,
        writes=writes,
        home=RegionStack(ctx, cluster.region, wake=wake),
        cancels=CancelPusher(engine, registry, interval_s=settings.cancel_push_interval_s),
        backlog=backlog,
        standby=(
            Standby(
                ctx, standby_for, failover_after_s=settings.failover_after_s, scan_s=settings.shard_scan_s
            )
            if standby_for
            else None
        ),
        metrics_listen=srv.metrics_listen,
    )


async def serve(ready: asyncio.Event | None = None, stop: asyncio.Event | None = None) -> None:
    """Runs a dispatcher until SIGTERM/SIGINT (or ``stop``); ``ready`` is set once it serves."""
    srv, settings = ServerSettings(), DispatcherSettings()
    dispatcher_id = settings.id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    service = build(
        db=DatabaseSettings(),
        cluster=ClusterSettings(),
        srv=srv,
        etcd_s=EtcdSettings(),
        settings=settings,
        budget=RetryBudgetSettings(),
        breaker=BreakerSettings(),
        dispatcher_id=dispatcher_id,
        stream=StreamSettings(),
    )
    await run_service(service, grace_s=srv.drain_timeout_s, ready=ready, stop=stop)


def main() -> None:
    """Entry point of ``gnomon dispatcher``."""
    configure_logging("dispatcher")
    tracing.setup("dispatcher")  # GNOMON_TRACES_EXPORTER; off by default (docs/tracing.md)
    run(serve())  # GNOMON_EVENT_LOOP: uvloop unless set to asyncio
