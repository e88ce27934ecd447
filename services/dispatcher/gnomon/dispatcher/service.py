"""The dispatcher service: lifecycle (start, serve, drain, stop). ``gnomon dispatcher`` runs :func:`main`."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid

from gnomon._proto.gnomon.internal.v1 import hint_pb2, hint_pb2_grpc
from gnomon._proto.gnomon.v1 import worker_service_pb2, worker_service_pb2_grpc
from gnomon.common import metrics
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
from gnomon.common.metrics import serve_metrics
from gnomon.common.rpc.health import watch_database
from gnomon.common.rpc.runner import configure_logging, wait_for_signal
from gnomon.common.rpc.server import GrpcServer
from gnomon.common.storage.engine import make_engine
from gnomon.dispatcher.breaker import Breakers
from gnomon.dispatcher.budget import RetryBudget
from gnomon.dispatcher.cancels import CancelPusher
from gnomon.dispatcher.claims import ClaimLoop
from gnomon.dispatcher.failover import Standby
from gnomon.dispatcher.relay import Relay
from gnomon.dispatcher.servicer import HintServicer, WorkerServicer
from gnomon.dispatcher.sessions import SessionRegistry
from gnomon.dispatcher.shards import ShardOwnership
from gnomon.dispatcher.writes import WriteBatcher

log = logging.getLogger("gnomon.dispatcher")


class Dispatcher:
    """All parts of one dispatcher process, wired together."""

    def __init__(self) -> None:
        self.db, self.cluster, self.srv = DatabaseSettings(), ClusterSettings(), ServerSettings()
        self.etcd_s, self.settings = EtcdSettings(), DispatcherSettings()
        self.id = self.settings.id or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        # A dispatcher stopped inside a transaction (SIGSTOP, a long pause) must not hold shard or region
        # row locks past its lease: the database ends such a session, so a hand-over never waits on it.
        self.engine = make_engine(
            self.db,
            session_options={
                "idle_in_transaction_session_timeout": self.settings.idle_in_transaction_timeout_ms
            },
        )
        self.etcd = EtcdClient(self.etcd_s.endpoint_list)
        self.registry = SessionRegistry()
        self.writes = WriteBatcher(self.engine, self.settings.write_batch)
        self.wake = asyncio.Event()
        self.worker_servicer = WorkerServicer(
            self.registry,
            self.writes,
            dispatcher_id=self.id,
            region=self.cluster.region,
            heartbeat_interval_s=self.settings.heartbeat_interval_s,
            on_credits=self.wake.set,
        )
        self.server = GrpcServer(
            self.srv.listen,
            [
                (
                    worker_service_pb2_grpc.add_WorkerServiceServicer_to_server,
                    self.worker_servicer,
                    worker_service_pb2.DESCRIPTOR.services_by_name["WorkerService"].full_name,
                ),
                (
                    hint_pb2_grpc.add_HintServiceServicer_to_server,
                    HintServicer(self.wake),
                    hint_pb2.DESCRIPTOR.services_by_name["HintService"].full_name,
                ),
            ],
        )
        self.address = self.srv.advertise or self.server.address
        self.shards = ShardOwnership(
            self.etcd,
            self.engine,
            prefix=self.etcd_s.prefix,
            region=self.cluster.region,
            shards=self.cluster.shards,
            dispatcher_id=self.id,
            address=self.address,
            ttl_s=self.etcd_s.lease_ttl_s,
            scan_s=self.settings.shard_scan_s,
        )
        self.relay = Relay(
            self.engine,
            self.registry,
            self.shards,
            region=self.cluster.region,
            interval_s=self.settings.relay_interval_s,
            batch=self.settings.claim_batch,
        )
        self.claims = ClaimLoop(
            self.engine,
            self.shards,
            self.registry,
            self.relay,
            self.settings,
            region=self.cluster.region,
            dispatcher_id=self.id,
        )
        self.claims.wake = self.wake
        # per-queue brakes against retry storms (budget.py, breaker.py)
        self.budget = RetryBudget(RetryBudgetSettings(), region=self.cluster.region)
        self.breakers = Breakers(
            self.engine,
            BreakerSettings(),
            region=self.cluster.region,
            targets=lambda: {(s.namespace, q) for s in self.registry.sessions.values() for q in s.queues},
            on_change=lambda: self.wake.set(),
        )
        self.claims.budget, self.claims.breakers = self.budget, self.breakers
        # queue depth / oldest due age gauges of the queues our workers serve; in-flight attempts
        self.backlog = metrics.BacklogSampler(
            self.engine,
            region=self.cluster.region,
            targets=lambda: {(s.namespace, q) for s in self.registry.sessions.values() for q in s.queues},
        )
        metrics.CONNECTED_WORKERS.set(0)
        metrics.set_in_flight_source(lambda: sum(len(s.held) for s in self.registry.sessions.values()))
        self.cancels = CancelPusher(
            self.engine, self.registry, interval_s=self.settings.cancel_push_interval_s
        )
        standby = [
            r.strip()
            for r in self.settings.standby_for.split(",")
            if r.strip() and r.strip() != self.cluster.region
        ]
        self.standby = (
            Standby(
                self,
                standby,
                failover_after_s=self.settings.failover_after_s,
                scan_s=self.settings.shard_scan_s,
            )
            if standby
            else None
        )

    async def start(self) -> None:
        """Serves the lease stream, takes shards, starts claiming."""
        await self.server.start()
        serve_metrics(self.srv.metrics_listen)
        self.writes.start()
        await self.shards.start()
        self.relay.start()
        self.claims.start()
        self.breakers.start()
        self.cancels.start()
        self.backlog.start()
        self.shards.changed = self.wake
        if self.standby:
            self.standby.start()
        # health follows the database (NOT_SERVING while it is unreachable; worker streams stay open)
        self._health_stop = asyncio.Event()
        self._health = asyncio.create_task(watch_database(self.engine, self.server, self._health_stop))
        print(
            f"gnomon dispatcher {self.id} listening on {self.server.address} "
            f"(region {self.cluster.region}, {len(self.shards.owned)}/{self.cluster.shards} shards)",
            flush=True,
        )

    async def stop(self) -> None:
        """Drain: stop claiming, end streams, flush writes, release shards and the lease."""
        self._health_stop.set()
        if self.standby:
            await self.standby.stop()
        await self.claims.stop()
        await self.breakers.stop()
        await self.relay.stop()
        await self.cancels.stop()
        await self.backlog.stop()
        self.worker_servicer.close_all()
        await self.server.stop(self.srv.drain_timeout_s)
        await self.writes.stop()
        await self.shards.stop()
        await self.etcd.close()
        await self.engine.dispose()


async def serve() -> None:
    """Runs a dispatcher until SIGTERM/SIGINT."""
    d = Dispatcher()
    await d.start()
    await wait_for_signal()
    await d.stop()


def main() -> None:
    """Entry point of ``gnomon dispatcher``."""
    configure_logging("dispatcher")
    asyncio.run(serve())
