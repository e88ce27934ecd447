"""The planner service: lifecycle (start, serve, drain, stop). ``gnomon planner`` runs :func:`main`.

Competing planners need no leader: each planning step claims due schedules with
``FOR UPDATE SKIP LOCKED`` (services/planner/planning.py). A planner registers its address in etcd
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

from gnomon._proto.gnomon.internal.v1 import hint_pb2, hint_pb2_grpc
from gnomon.common.config import (
    ClusterSettings,
    DatabaseSettings,
    EtcdSettings,
    PlannerSettings,
    ServerSettings,
)
from gnomon.common.coordination.etcd import EtcdClient, EtcdError, LeaseKeeper
from gnomon.common.coordination.hints import DispatcherHints
from gnomon.common.coordination.registry import planners_prefix
from gnomon.common.metrics import serve_metrics
from gnomon.common.rpc.health import watch_database
from gnomon.common.rpc.runner import configure_logging, wait_for_signal
from gnomon.common.rpc.server import GrpcServer
from gnomon.common.storage.engine import make_engine
from gnomon.common.time import tzdata_version
from gnomon.planner.planning import Planner
from gnomon.planner.servicer import PlannerHintServicer

log = logging.getLogger("gnomon.planner")


async def _register(
    etcd: EtcdClient, etcd_s: EtcdSettings, region: str, planner_id: str, address: str, stop: asyncio.Event
) -> None:
    """Keeps ``{prefix}/{region}/planners/{id}`` registered under a lease (re-registers after loss)."""
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


async def serve() -> None:
    """Runs the planner until SIGTERM/SIGINT."""
    db, cluster, srv, etcd_s, settings = (
        DatabaseSettings(),
        ClusterSettings(),
        ServerSettings(),
        EtcdSettings(),
        PlannerSettings(),
    )
    # A planner stopped inside a transaction (SIGSTOP, a long GC pause) must not hold its schedules'
    # row locks forever: the database ends such a session and the stopped planner's commit fails.
    engine = make_engine(
        db,
        pool_size=3,
        session_options={"idle_in_transaction_session_timeout": settings.idle_in_transaction_timeout_ms},
    )
    etcd = EtcdClient(etcd_s.endpoint_list)
    hints = DispatcherHints(etcd, etcd_s.prefix, cluster.region)
    planner = Planner(engine, settings, region=cluster.region, shards=cluster.shards, hint=hints.wake)
    server = GrpcServer(
        srv.listen,
        [
            (
                hint_pb2_grpc.add_HintServiceServicer_to_server,
                PlannerHintServicer(planner.wake),
                hint_pb2.DESCRIPTOR.services_by_name["HintService"].full_name,
            )
        ],
    )
    await server.start()
    serve_metrics(srv.metrics_listen)
    planner_id = settings.id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    address = srv.advertise or server.address
    stop = asyncio.Event()
    health = asyncio.create_task(watch_database(engine, server, stop))
    loop = asyncio.create_task(planner.run(stop))
    registration = asyncio.create_task(_register(etcd, etcd_s, cluster.region, planner_id, address, stop))
    print(
        f"gnomon planner {planner_id} listening on {server.address} (region {cluster.region}, "
        f"tzdata {tzdata_version()})",
        flush=True,
    )
    await wait_for_signal()
    stop.set()
    planner.wake.set()
    await asyncio.gather(health, loop, registration, return_exceptions=True)
    await server.stop(1.0)
    await etcd.close()
    await engine.dispose()


def main() -> None:
    """Entry point of ``gnomon planner``."""
    configure_logging("planner")
    asyncio.run(serve())
