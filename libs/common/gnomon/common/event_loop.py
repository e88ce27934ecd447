"""The event loop of a service process or of ``gnomon worker``: uvloop by default, the standard
library's loop with ``GNOMON_EVENT_LOOP=asyncio``.

uvloop (libuv under the asyncio API) cut a drain's CPU per job by 12-32 % in the dispatcher and the
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
    (the default; ``None`` with a warning when uvloop is not installed), ``None`` (the standard
    library's loop) for ``asyncio``. Raises pydantic's
    ``ValidationError`` for another value (``gnomon`` refuses it at start, with one line)."""
    if EventLoopSettings().event_loop == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:  # not installed (e.g. Windows, where it does not exist): the standard loop
        log.warning("GNOMON_EVENT_LOOP=uvloop but uvloop is not installed; using asyncio's loop")
        return None
    return uvloop.new_event_loop


def running_loop_name() -> str:
    """``uvloop`` or ``asyncio``: the implementation of the running event loop (for start-up logs).
    Raises ``RuntimeError`` outside a running loop."""
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"


def run(main: Coroutine[Any, Any, None]) -> None:
    """Runs ``main`` to completion on a new loop from :func:`loop_factory` (``asyncio.run``'s
    semantics: remaining tasks cancelled, async generators and the default executor shut down)."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(main)
