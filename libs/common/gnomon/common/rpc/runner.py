"""Process lifecycle shared by every service: run until SIGTERM/SIGINT, then drain and stop."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Awaitable, Callable


def configure_logging(service: str, level: str = "INFO") -> None:
    """One-line log format with the service name; level ``GNOMON_LOG_LEVEL`` if set, else ``level``."""
    from gnomon.common.config import LogSettings

    logging.basicConfig(
        level=LogSettings().level or level,
        format=f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s",
    )


async def wait_for_signal() -> None:
    """Returns when the process gets SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def run(main: Callable[[], Awaitable[None]]) -> None:
    """Runs the async ``main`` to completion on a fresh event loop."""
    asyncio.run(main())
