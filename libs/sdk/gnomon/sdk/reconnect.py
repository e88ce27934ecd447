"""The reconnect loop of a long-lived stream: :class:`Reconnecting` runs ``_connect_once`` again and
again with capped, jittered backoff until it is closed, a fatal error ends it, or the subclass says
there is no point any more."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import grpc

from .errors import GnomonError

__all__ = ["Reconnecting", "FatalStreamError", "FATAL_CODES", "BACKOFF_MIN", "BACKOFF_MAX"]

log = logging.getLogger("gnomon.sdk.worker")

#: Reconnect backoff bounds (seconds); doubled per failed try, with +-20 % jitter.
BACKOFF_MIN = 0.1
BACKOFF_MAX = 5.0
#: gRPC codes that mean "this configuration will never work" when they end a stream before the
#: welcome: the worker stops with a GnomonError instead of retrying forever.
FATAL_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.UNAUTHENTICATED,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)


class FatalStreamError(Exception):
    """Raised by ``_connect_once`` when retrying cannot help (see :data:`FATAL_CODES`)."""

    def __init__(self, error: GnomonError) -> None:
        super().__init__(str(error))
        self.error = error


class Reconnecting:
    """Base of a connection that outlives its streams (e.g. :class:`~gnomon.sdk.session.DispatcherSession`).

    Subclasses set :attr:`address` and :attr:`channel` and implement :meth:`_connect_once` (one
    stream, setting :attr:`_welcomed` once the peer answered and :attr:`call` while it is open),
    :meth:`_should_reconnect`, :meth:`_teardown` and :meth:`_on_fatal`.
    """

    address: str
    channel: grpc.aio.Channel
    call: Any
    task: asyncio.Task[None] | None
    closing: bool
    _welcomed: bool

    async def _connect_once(self) -> None:
        raise NotImplementedError

    def _should_reconnect(self) -> bool:
        raise NotImplementedError

    def _teardown(self) -> None:
        raise NotImplementedError

    def _on_fatal(self, error: GnomonError) -> None:
        raise NotImplementedError

    def start(self) -> None:
        """Starts the connect/reconnect loop as a task on the running loop."""
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"gnomon-session-{self.address}")

    async def close(self, timeout: float = 1.0) -> None:
        """Half-closes the stream, waits up to ``timeout`` seconds for it to end, then cancels
        it and closes the channel. Pending unacknowledged items are abandoned."""
        self.closing = True
        call = self.call
        if call is not None:
            try:
                await asyncio.wait_for(call.done_writing(), timeout)
            except Exception:
                pass
        if self.task is not None and not self.task.done():
            try:
                await asyncio.wait_for(asyncio.shield(self.task), timeout)
            except Exception:
                pass
            if not self.task.done():
                self.task.cancel()
                try:
                    await self.task
                except BaseException:
                    pass
        await self.channel.close()

    async def _run(self) -> None:
        """Connects again and again (capped, jittered backoff; reset by each welcome) until
        :attr:`closing`, a fatal error, or :meth:`_should_reconnect` says no; then :meth:`_teardown`."""
        backoff = BACKOFF_MIN
        failures = 0  # consecutive tries without a welcome; only the first (and every 12th) warns
        try:
            while not self.closing:
                self._welcomed = False
                problem = None
                try:
                    await self._connect_once()
                except asyncio.CancelledError:
                    raise
                except FatalStreamError as exc:
                    self._on_fatal(exc.error)
                    return
                except grpc.aio.AioRpcError as exc:
                    problem = f"stream ended: {exc.code().name} {exc.details()}"
                except ConnectionError as exc:
                    problem = str(exc)
                except Exception as exc:
                    log.debug("dispatcher %s: stream failed", self.address, exc_info=True)
                    problem = f"stream failed: {exc!r}"
                if self._welcomed:
                    backoff, failures = BACKOFF_MIN, 0
                if problem and not self.closing:
                    level = logging.WARNING if failures % 12 == 0 else logging.DEBUG
                    log.log(
                        level,
                        "dispatcher %s: %s%s",
                        self.address,
                        problem,
                        f" ({failures + 1} tries)" if failures else "",
                    )
                    if not self._welcomed:
                        failures += 1
                if self.closing or not self._should_reconnect():
                    return
                await asyncio.sleep(backoff * random.uniform(0.8, 1.2))
                backoff = min(backoff * 2, BACKOFF_MAX)
        finally:
            self._teardown()
