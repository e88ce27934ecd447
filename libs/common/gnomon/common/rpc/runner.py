"""Process lifecycle shared by every service: run until SIGTERM/SIGINT, then drain and stop."""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable, Coroutine
from typing import Any


def configure_logging(service: str, level: str = "INFO") -> None:
    """One-line log format with the service name; level from ``GNOMON_LOG_LEVEL``."""
    import os

    logging.basicConfig(
        level=os.environ.get("GNOMON_LOG_LEVEL", level),
        format=f"%(asctime)s {service} %(levelname)s %(name)s: %(message)s",
    )


async def wait_for_signal() -> None:
    """Returns when the process gets SIGTERM or SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


def run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Runs the async ``main`` to completion on a fresh event loop."""
    asyncio.run(main())
