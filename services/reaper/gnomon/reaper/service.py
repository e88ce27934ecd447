"""The reaper service: lifecycle (:class:`gnomon.common.rpc.lifecycle.Service`: start, drain, stop).
``gnomon reaper`` runs :func:`main`.

Sweeps (:mod:`gnomon.reaper.sweeps`): RUNNING attempts whose lease expired (database clock plus
``GNOMON_REAPER_SKEW_MARGIN_S``) -> LOST and the job retried (idempotent), DEAD or CANCELLED;
SCHEDULED jobs past their deadline -> EXPIRED; terminal jobs past ``GNOMON_REAPER_RETENTION_S`` deleted.
The gRPC server serves health and reflection only.
"""

from __future__ import annotations

import asyncio

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common import tracing
from gnomon.common.config import ClusterSettings, DatabaseSettings, ReaperSettings, ServerSettings
from gnomon.common.event_loop import run
from gnomon.common.metrics import serve_metrics
from gnomon.common.rpc.health import HealthWatch
from gnomon.common.rpc.lifecycle import run_service
from gnomon.common.rpc.runner import configure_logging
from gnomon.common.rpc.server import GrpcServer, secure_server
from gnomon.common.storage.engine import make_engine
from gnomon.reaper.sweeps import Sweeper


class ReaperService:
    """The reaper process: the sweep loop (``sweeper``) and a health-only ``server``."""

    def __init__(
        self, *, engine: AsyncEngine, server: GrpcServer, sweeper: Sweeper, metrics_listen: str = ""
    ):
        self.engine, self.server, self.sweeper, self.metrics_listen = engine, server, sweeper, metrics_listen
        self.health = HealthWatch(engine, server)
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Serves health and starts sweeping."""
        await self.server.start()
        serve_metrics(self.metrics_listen)
        self.health.start()
        self._task = asyncio.create_task(self.sweeper.run(self._stop))
        print(f"gnomon reaper listening on {self.server.address} (region {self.sweeper.region})", flush=True)

    async def drain(self, grace_s: float) -> None:
        """Stops sweeping after the sweep in progress (each is its own transaction) and stops the
        server within ``grace_s`` seconds."""
        self._stop.set()
        await self.health.stop()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
        await self.server.stop(grace_s)

    async def stop(self) -> None:
        """Closes the database pool."""
        await self.engine.dispose()


def build(
    *, db: DatabaseSettings, cluster: ClusterSettings, srv: ServerSettings, settings: ReaperSettings
) -> ReaperService:
    """Constructs a reaper from its settings (nothing starts yet)."""
    engine = make_engine(db, pool_size=2)
    return ReaperService(
        engine=engine,
        server=secure_server(srv.listen, [], engine, role="reaper"),
        sweeper=Sweeper(engine, settings, region=cluster.region),
        metrics_listen=srv.metrics_listen,
    )


async def serve(ready: asyncio.Event | None = None, stop: asyncio.Event | None = None) -> None:
    """Runs the reaper until SIGTERM/SIGINT (or ``stop``); ``ready`` is set once it serves."""
    srv = ServerSettings()
    service = build(db=DatabaseSettings(), cluster=ClusterSettings(), srv=srv, settings=ReaperSettings())
    await run_service(service, grace_s=srv.drain_timeout_s, ready=ready, stop=stop)


def main() -> None:
    """Entry point of ``gnomon reaper``."""
    configure_logging("reaper")
    tracing.setup("reaper")  # GNOMON_TRACES_EXPORTER; off by default (docs/tracing.md)
    run(serve())  # GNOMON_EVENT_LOOP: uvloop unless set to asyncio
