"""The API service: lifecycle (:class:`gnomon.common.rpc.lifecycle.Service`: start, drain, stop).
``gnomon api`` runs :func:`main`.

:func:`build` reads the settings and constructs the servicers with their dependencies; the API holds
no background work besides health, so draining is the gRPC server's grace period.
"""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon._proto.gnomon.v1 import (
    access_service_pb2,
    access_service_pb2_grpc,
    cluster_service_pb2,
    cluster_service_pb2_grpc,
    dead_letter_service_pb2,
    dead_letter_service_pb2_grpc,
    job_service_pb2,
    job_service_pb2_grpc,
    namespace_service_pb2,
    namespace_service_pb2_grpc,
    queue_service_pb2,
    queue_service_pb2_grpc,
    schedule_service_pb2,
    schedule_service_pb2_grpc,
)
from gnomon.api.access import AccessEngine
from gnomon.api.access_servicer import AccessServicer
from gnomon.api.cluster import ClusterEngine
from gnomon.api.dead_letter_servicer import DeadLetterServicer
from gnomon.api.dead_letters import DeadLetterEngine
from gnomon.api.jobs import JobEngine
from gnomon.api.list_gate import ListGate
from gnomon.api.namespace_servicer import NamespaceServicer
from gnomon.api.namespaces import NamespaceEngine
from gnomon.api.queue_servicer import QueueServicer
from gnomon.api.queues import QueueEngine
from gnomon.api.quotas import QuotaGuard
from gnomon.api.schedule_servicer import ScheduleServicer
from gnomon.api.servicer import ClusterServicer, JobServicer
from gnomon.common import tracing
from gnomon.common.config import (
    ClusterSettings,
    DatabaseSettings,
    DispatcherSettings,
    EtcdSettings,
    PlannerSettings,
    ServerSettings,
)
from gnomon.common.coordination.etcd import EtcdClient
from gnomon.common.coordination.hints import DispatcherHints, PlannerHints
from gnomon.common.event_loop import run
from gnomon.common.metrics import serve_metrics
from gnomon.common.quota_cache_settings import QuotaCacheSettings
from gnomon.common.rpc.health import HealthWatch
from gnomon.common.rpc.lifecycle import run_service
from gnomon.common.rpc.runner import configure_logging
from gnomon.common.rpc.server import GrpcServer, secure_server
from gnomon.common.scheduling.engine import ScheduleEngine
from gnomon.common.storage.engine import make_engine

log = logging.getLogger("gnomon.api")


class ApiService:
    """The API process: ``server`` (every public service but the worker stream) over ``engine`` and
    ``etcd`` for ``region``; ``metrics_listen`` is the Prometheus ``host:port`` ("" = off)."""

    def __init__(
        self,
        *,
        engine: AsyncEngine,
        etcd: EtcdClient,
        server: GrpcServer,
        region: str,
        metrics_listen: str = "",
    ):
        self.engine, self.etcd, self.server, self.region = engine, etcd, server, region
        self.metrics_listen = metrics_listen
        self.health = HealthWatch(engine, server)

    async def start(self) -> None:
        """Serves; health follows the database."""
        await self.server.start()
        serve_metrics(self.metrics_listen)
        self.health.start()
        print(f"gnomon api listening on {self.server.address} (region {self.region})", flush=True)

    async def drain(self, grace_s: float) -> None:
        """Refuses new calls and lets running ones finish within ``grace_s`` seconds."""
        await self.health.stop()
        await self.server.stop(grace_s)

    async def stop(self) -> None:
        """Closes etcd and the database pool."""
        await self.health.stop()
        await self.etcd.close()
        await self.engine.dispose()


def build(
    *,
    db: DatabaseSettings,
    cluster: ClusterSettings,
    srv: ServerSettings,
    etcd_s: EtcdSettings,
    dispatcher: DispatcherSettings,
    planner: PlannerSettings,
) -> ApiService:
    """Constructs the API from its settings (nothing starts yet)."""
    engine = make_engine(db)
    etcd = EtcdClient.from_settings(etcd_s)
    hints = DispatcherHints(etcd, etcd_s.prefix, cluster.region)
    planner_hints = PlannerHints(etcd, etcd_s.prefix, cluster.region)
    cache = QuotaCacheSettings()
    quotas = QuotaGuard(engine, settings_ttl_s=cache.settings_ttl_s, pending_ttl_s=cache.pending_ttl_s)
    lists = ListGate(srv.list_concurrency_per_principal, srv.list_wait_s)
    services = [
        (
            job_service_pb2_grpc.add_JobServiceServicer_to_server,
            JobServicer(
                JobEngine(engine, wake_dispatchers=hints.wake, prefetch_s=dispatcher.prefetch_s),
                region=cluster.region,
                shards=cluster.shards,
                reply_budget_bytes=srv.reply_budget_bytes,
                list_gate=lists,
            ),
            job_service_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
        ),
        (
            dead_letter_service_pb2_grpc.add_DeadLetterServiceServicer_to_server,
            DeadLetterServicer(
                DeadLetterEngine(engine, shards=cluster.shards, wake_dispatchers=hints.wake),
                reply_budget_bytes=srv.reply_budget_bytes,
                list_gate=lists,
            ),
            dead_letter_service_pb2.DESCRIPTOR.services_by_name["DeadLetterService"].full_name,
        ),
        (
            queue_service_pb2_grpc.add_QueueServiceServicer_to_server,
            QueueServicer(
                QueueEngine(engine, region=cluster.region, max_queue_limits=cluster.max_queue_limits)
            ),
            queue_service_pb2.DESCRIPTOR.services_by_name["QueueService"].full_name,
        ),
        (
            schedule_service_pb2_grpc.add_ScheduleServiceServicer_to_server,
            ScheduleServicer(
                ScheduleEngine(
                    engine,
                    shards=cluster.shards,
                    catchup_rate=planner.catchup_rate,
                    catchup_burst=planner.catchup_burst,
                    lookahead_s=planner.lookahead_s,
                    max_step=planner.max_step_occurrences,
                    wake_planner=planner_hints.wake,
                    wake_dispatchers=hints.wake,
                ),
                region=cluster.region,
                reply_budget_bytes=srv.reply_budget_bytes,
                quotas=quotas,
            ),
            schedule_service_pb2.DESCRIPTOR.services_by_name["ScheduleService"].full_name,
        ),
        (
            cluster_service_pb2_grpc.add_ClusterServiceServicer_to_server,
            ClusterServicer(
                ClusterEngine(etcd, etcd_s.prefix, engine=engine, shards=cluster.shards),
                region=cluster.region,
            ),
            cluster_service_pb2.DESCRIPTOR.services_by_name["ClusterService"].full_name,
        ),
        (
            namespace_service_pb2_grpc.add_NamespaceServiceServicer_to_server,
            NamespaceServicer(NamespaceEngine(engine, quotas=quotas)),
            namespace_service_pb2.DESCRIPTOR.services_by_name["NamespaceService"].full_name,
        ),
        (
            access_service_pb2_grpc.add_AccessServiceServicer_to_server,
            AccessServicer(AccessEngine(engine)),
            access_service_pb2.DESCRIPTOR.services_by_name["AccessService"].full_name,
        ),
    ]
    return ApiService(
        engine=engine,
        etcd=etcd,
        # the one place job admission is enforced: the interceptor binds it to each admitting call
        server=secure_server(srv.listen, services, engine, role="api", admitter=quotas.admitter),
        region=cluster.region,
        metrics_listen=srv.metrics_listen,
    )


async def serve(ready: asyncio.Event | None = None, stop: asyncio.Event | None = None) -> None:
    """Runs the API until SIGTERM/SIGINT (or ``stop``); ``ready`` is set once it serves."""
    srv = ServerSettings()
    service = build(
        db=DatabaseSettings(),
        cluster=ClusterSettings(),
        srv=srv,
        etcd_s=EtcdSettings(),
        dispatcher=DispatcherSettings(),
        planner=PlannerSettings(),
    )
    await run_service(service, grace_s=srv.drain_timeout_s, ready=ready, stop=stop)


def main() -> None:
    """Entry point of ``gnomon api``."""
    configure_logging("api")
    tracing.setup("api")  # GNOMON_TRACES_EXPORTER; off by default (docs/tracing.md)
    run(serve())  # GNOMON_EVENT_LOOP: uvloop unless set to asyncio
