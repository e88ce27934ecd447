"""The event loop of a service process or of ``gnomon worker``: uvloop by default, the standard
library's loop with ``GNOMON_EVENT_LOOP=asyncio``.

uvloop (libuv under the asyncio API) cut a drain's CPU per job by ~20-30 % in the dispatcher and the
workers on the benchmark machine (bench/README.md, "uvloop"); grpc.aio and psycopg's async
connections run on any asyncio loop. The SDK does not depend on it: ``Worker.run(loop_factory=...)``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any, Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

log = logging.getLogger(__name__)


class EventLoopSettings(BaseSettings):
    """The asyncio event loop implementation (``GNOMON_EVENT_LOOP``)."""

    model_config = SettingsConfigDict(env_prefix="GNOMON_", extra="forbid")

    event_loop: Literal["uvloop", "asyncio"] = Field(
        default="uvloop",
        description="Event loop of the services and of gnomon worker: uvloop (libuv) or asyncio "
        "(the standard library's).",
    )


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event-loop factory ``GNOMON_EVENT_LOOP`` names: ``uvloop.new_event_loop`` for ``uvloop``
    (the default), ``None`` (the standard library's loop) for ``asyncio``. Raises pydantic's
    ``ValidationError`` for another value (``gnomon`` refuses it at start, with one line)."""
    if EventLoopSettings().event_loop == "asyncio":
        return None
    import uvloop

    return uvloop.new_event_loop


def announce(factory: Callable[[], asyncio.AbstractEventLoop] | None) -> None:
    """Logs at INFO which loop ``factory`` (from :func:`loop_factory`) makes: ``event loop: uvloop``
    or ``event loop: asyncio``."""
    log.info("event loop: %s", "asyncio" if factory is None else "uvloop")


def run(main: Coroutine[Any, Any, None]) -> None:
    """Runs ``main`` to completion on a new loop from :func:`loop_factory` (``asyncio.run``'s
    semantics: remaining tasks cancelled, async generators and the default executor shut down); logs
    ``event loop: uvloop`` (or ``asyncio``) at INFO first."""
    factory = loop_factory()
    announce(factory)
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)
