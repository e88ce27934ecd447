"""The reaper service: lifecycle. ``gnomon reaper`` runs :func:`main`.

Sweeps (services/reaper/sweeps.py): RUNNING attempts whose lease expired (database clock plus
``GNOMON_REAPER_SKEW_MARGIN_S``) -> LOST and the job retried (idempotent), DEAD or CANCELLED;
SCHEDULED jobs past their deadline -> EXPIRED; terminal jobs past ``GNOMON_REAPER_RETENTION_S`` deleted.
"""

from __future__ import annotations

import asyncio

from gnomon.common.config import ClusterSettings, DatabaseSettings, ReaperSettings, ServerSettings
from gnomon.common.metrics import serve_metrics
from gnomon.common.rpc.health import watch_database
from gnomon.common.rpc.runner import configure_logging, wait_for_signal
from gnomon.common.rpc.server import GrpcServer
from gnomon.common.storage.engine import make_engine
from gnomon.reaper.sweeps import Sweeper


async def serve() -> None:
    """Runs the reaper until SIGTERM/SIGINT."""
    db, cluster, srv, settings = DatabaseSettings(), ClusterSettings(), ServerSettings(), ReaperSettings()
    engine = make_engine(db, pool_size=2)
    server = GrpcServer(srv.listen, [])
    await server.start()
    serve_metrics(srv.metrics_listen)
    stop = asyncio.Event()
    health = asyncio.create_task(watch_database(engine, server, stop))
    sweeper = asyncio.create_task(Sweeper(engine, settings, region=cluster.region).run(stop))
    print(f"gnomon reaper listening on {server.address} (region {cluster.region})", flush=True)
    await wait_for_signal()
    stop.set()
    await asyncio.gather(health, sweeper, return_exceptions=True)
    await server.stop(1.0)
    await engine.dispose()


def main() -> None:
    """Entry point of ``gnomon reaper``."""
    configure_logging("reaper")
    asyncio.run(serve())
