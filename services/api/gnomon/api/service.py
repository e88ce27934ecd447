"""The API service: lifecycle (start, serve, drain, stop). ``gnomon api`` runs :func:`main`."""

from __future__ import annotations

import asyncio
import logging

from gnomon._proto.gnomon.v1 import (
    cluster_service_pb2,
    cluster_service_pb2_grpc,
    dead_letter_service_pb2,
    dead_letter_service_pb2_grpc,
    job_service_pb2,
    job_service_pb2_grpc,
    queue_service_pb2,
    queue_service_pb2_grpc,
    schedule_service_pb2,
    schedule_service_pb2_grpc,
)
from gnomon.api.dead_letters import DeadLetterServicer
from gnomon.api.queues import QueueServicer
from gnomon.api.schedules import ScheduleServicer
from gnomon.api.servicer import ClusterServicer, JobServicer
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
from gnomon.common.metrics import serve_metrics
from gnomon.common.rpc.health import watch_database
from gnomon.common.rpc.runner import configure_logging, wait_for_signal
from gnomon.common.rpc.server import GrpcServer
from gnomon.common.storage.engine import make_engine

log = logging.getLogger("gnomon.api")


async def serve(ready: asyncio.Event | None = None, stop: asyncio.Event | None = None) -> None:
    """Runs the API until ``stop`` is set (or SIGTERM/SIGINT when ``stop`` is None)."""
    db, cluster, srv, etcd_s = DatabaseSettings(), ClusterSettings(), ServerSettings(), EtcdSettings()
    disp = DispatcherSettings()
    engine = make_engine(db)
    etcd = EtcdClient(etcd_s.endpoint_list)
    hints = DispatcherHints(etcd, etcd_s.prefix, cluster.region)
    planner_hints = PlannerHints(etcd, etcd_s.prefix, cluster.region)
    planner_s = PlannerSettings()
    server = GrpcServer(
        srv.listen,
        [
            (
                job_service_pb2_grpc.add_JobServiceServicer_to_server,
                JobServicer(
                    engine,
                    region=cluster.region,
                    shards=cluster.shards,
                    hints=hints,
                    prefetch_s=disp.prefetch_s,
                ),
                job_service_pb2.DESCRIPTOR.services_by_name["JobService"].full_name,
            ),
            (
                dead_letter_service_pb2_grpc.add_DeadLetterServiceServicer_to_server,
                DeadLetterServicer(engine, shards=cluster.shards, hints=hints),
                dead_letter_service_pb2.DESCRIPTOR.services_by_name["DeadLetterService"].full_name,
            ),
            (
                queue_service_pb2_grpc.add_QueueServiceServicer_to_server,
                QueueServicer(engine, region=cluster.region),
                queue_service_pb2.DESCRIPTOR.services_by_name["QueueService"].full_name,
            ),
            (
                schedule_service_pb2_grpc.add_ScheduleServiceServicer_to_server,
                ScheduleServicer(
                    engine,
                    region=cluster.region,
                    shards=cluster.shards,
                    planner_hints=planner_hints,
                    dispatcher_hints=hints,
                    catchup_rate=planner_s.catchup_rate,
                    catchup_burst=planner_s.catchup_burst,
                ),
                schedule_service_pb2.DESCRIPTOR.services_by_name["ScheduleService"].full_name,
            ),
            (
                cluster_service_pb2_grpc.add_ClusterServiceServicer_to_server,
                ClusterServicer(etcd, etcd_s.prefix, cluster.region, engine=engine, shards=cluster.shards),
                cluster_service_pb2.DESCRIPTOR.services_by_name["ClusterService"].full_name,
            ),
        ],
    )
    await server.start()
    serve_metrics(srv.metrics_listen)
    print(f"gnomon api listening on {server.address} (region {cluster.region})", flush=True)
    stop = stop or asyncio.Event()
    health = asyncio.create_task(watch_database(engine, server, stop))
    if ready:
        ready.set()
    waiter = asyncio.create_task(wait_for_signal())
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    stop.set()
    await server.stop(srv.drain_timeout_s)
    health.cancel()
    waiter.cancel()
    await etcd.close()
    await engine.dispose()


def main() -> None:
    """Entry point of ``gnomon api``."""
    configure_logging("api")
    asyncio.run(serve())
