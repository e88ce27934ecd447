"""Process plumbing shared by every service: log format and the stop signal (the lifecycle that uses
them: :mod:`gnomon.common.rpc.lifecycle`)."""

from __future__ import annotations

import asyncio
import logging
import signal


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
