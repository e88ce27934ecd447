"""Health that follows the database: SERVING while ``SELECT 1`` succeeds, NOT_SERVING otherwise."""
from __future__ import annotations

import asyncio
import logging

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common.rpc.server import GrpcServer

log = logging.getLogger(__name__)


async def watch_database(engine: AsyncEngine, server: GrpcServer, stop: asyncio.Event, period_s: float = 1.0) -> None:
    """Until ``stop`` is set, checks the database every ``period_s`` seconds (2 s timeout) and sets
    the server's overall and per-service health accordingly (logging each change)."""
    serving = None
    while not stop.is_set():
        try:
            async with engine.connect() as c:
                await asyncio.wait_for(c.execute(text("SELECT 1")), 2.0)
            ok = True
        except Exception:  # noqa: BLE001 - any failure means not serving
            ok = False
        if ok != serving:
            serving = ok
            await server.set_serving(ok)
            log.info("health %s", "SERVING" if ok else "NOT_SERVING (database unreachable)")
        try:
            await asyncio.wait_for(stop.wait(), period_s)
        except asyncio.TimeoutError:
            pass
