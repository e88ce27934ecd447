"""Health that follows the database: SERVING while ``SELECT 1`` succeeds, NOT_SERVING otherwise."""

from __future__ import annotations

import asyncio
import logging

from sqlalchemy import text
from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common.rpc.server import GrpcServer

log = logging.getLogger(__name__)


async def _ping(engine: AsyncEngine) -> None:
    async with engine.connect() as c:
        await c.execute(text("SELECT 1"))


async def watch_database(
    engine: AsyncEngine,
    server: GrpcServer,
    stop: asyncio.Event,
    period_s: float = 1.0,
    timeout_s: float = 2.0,
) -> None:
    """Until ``stop`` is set, checks the database every ``period_s`` seconds and sets the server's
    overall and per-service health accordingly (logging each change). One check (connect plus
    ``SELECT 1``) is bounded by ``timeout_s``, so an unreachable database (refused, or a partition
    that drops packets) turns health NOT_SERVING within about ``period_s + timeout_s`` seconds; the
    first successful check after it comes back turns it SERVING again (the pool discards the
    connections the outage broke)."""
    serving = None
    while not stop.is_set():
        try:
            await asyncio.wait_for(_ping(engine), timeout_s)
            ok = True
        except Exception:
            ok = False
        if ok != serving:
            serving = ok
            await server.set_serving(ok)
            log.info("health %s", "SERVING" if ok else "NOT_SERVING (database unreachable)")
        try:
            await asyncio.wait_for(stop.wait(), period_s)
        except TimeoutError:
            pass


class HealthWatch:
    """:func:`watch_database` as a background task of a service: :meth:`start` in the service's start,
    :meth:`stop` first thing in its drain (health goes NOT_SERVING with the server's stop)."""

    def __init__(
        self, engine: AsyncEngine, server: GrpcServer, *, period_s: float = 1.0, timeout_s: float = 2.0
    ):
        self.engine, self.server, self.period_s, self.timeout_s = engine, server, period_s, timeout_s
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Starts checking the database every ``period_s`` seconds (each check bounded by ``timeout_s``)."""
        self._task = asyncio.create_task(
            watch_database(
                self.engine, self.server, self._stop, period_s=self.period_s, timeout_s=self.timeout_s
            )
        )

    async def stop(self) -> None:
        """Stops checking and waits for the task to end (idempotent)."""
        self._stop.set()
        if self._task is not None:
            await asyncio.gather(self._task, return_exceptions=True)
