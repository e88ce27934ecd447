"""The lifecycle every Gnomon service has: ``start``, ``drain``, ``stop`` (one signature, one rule).

Each service's ``service.py`` defines a class that satisfies :class:`Service` and builds all its parts
in its constructor (dependencies passed in, nothing wired afterwards); :func:`run_service` is the only
code that drives it, for ``gnomon api|planner|dispatcher|reaper`` and for in-process tests alike.

**The drain rule** (the same for every service):

1. :meth:`Service.start` starts serving: the gRPC server accepts calls, background loops run, health
   follows the database. It returns once the service is ready (a test may connect at once).
2. On SIGTERM/SIGINT (or the ``stop`` event), :meth:`Service.drain` is called with
   ``grace_s = GNOMON_DRAIN_TIMEOUT_S``: the service stops taking *new* work at once (health
   NOT_SERVING, no new calls, loops stop claiming/planning/sweeping), then lets work already started
   finish for at most ``grace_s`` seconds (running RPCs complete; buffered writes are flushed).
   Nothing is released yet that running work still needs (shard ownership, etcd leases).
3. :meth:`Service.stop` then releases what the service holds (shards and leases, etcd client, the
   database pool). After ``stop`` the process may exit; ``stop`` never waits for new work.

A crash instead of a drain loses nothing either (leases expire, claims are fenced, every write is
transactional); draining only makes a planned stop quick and quiet.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Protocol

from gnomon.common.event_loop import running_loop_name
from gnomon.common.rpc.runner import wait_for_signal

log = logging.getLogger(__name__)


class Service(Protocol):
    """One Gnomon service process (see the module docstring for the drain rule)."""

    async def start(self) -> None:
        """Starts serving; returns when ready."""

    async def drain(self, grace_s: float) -> None:
        """Stops taking new work and lets running work finish within ``grace_s`` seconds."""

    async def stop(self) -> None:
        """Releases everything the service holds (after :meth:`drain`)."""


async def run_service(
    service: Service,
    *,
    grace_s: float,
    ready: asyncio.Event | None = None,
    stop: asyncio.Event | None = None,
) -> None:
    """Starts ``service`` (then logs ``started (event loop: uvloop)``, or ``asyncio``), sets
    ``ready``, waits for SIGTERM/SIGINT or ``stop`` (whichever first),
    then drains it for at most ``grace_s`` seconds and stops it. ``stop`` is set on the way out, so a
    caller waiting on it learns that the service is going down."""
    stop = stop or asyncio.Event()
    await service.start()
    log.info("started (event loop: %s)", running_loop_name())
    try:
        if ready is not None:
            ready.set()
        signal = asyncio.create_task(wait_for_signal())
        stopper = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({signal, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            signal.cancel()
            stopper.cancel()
        stop.set()
        await service.drain(grace_s)
    finally:
        await service.stop()
