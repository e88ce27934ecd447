"""A portal into a private event loop: how the synchronous :class:`~gnomon.sdk.Client` runs the one
asynchronous implementation (:class:`~gnomon.sdk.AsyncClient`), as APScheduler 4's sync scheduler
wraps its async one.

A :class:`Portal` owns an event loop running in a daemon thread. :meth:`Portal.call` submits a
coroutine to it and blocks the caller until it finishes, returning its value or raising its exception
(the same exception object, so ``GnomonError``, ``ValueError`` ... reach the caller unchanged).
:meth:`Portal.iterate` turns an async iterator into a lazy sync iterator (one ``__anext__`` per item).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator
from typing import Any, TypeVar

__all__ = ["Portal"]

T = TypeVar("T")

#: Seconds :meth:`Portal.stop` waits for the loop thread to finish its last coroutine and exit.
STOP_TIMEOUT = 5.0


class Portal:
    """An event loop in a daemon thread, started at construction.

    Args:
        name: the thread's name (shows in thread dumps).

    Not meant to be shared between unrelated owners: :meth:`stop` ends it for everyone. Safe to use
    from any thread except the portal's own (a call from the loop thread would wait on itself:
    ``RuntimeError``).
    """

    def __init__(self, name: str = "gnomon-portal") -> None:
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._stopped = False
        self._lock = threading.Lock()
        self._thread.start()
        self._ready.wait()

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.call_soon(self._ready.set)
        try:
            self._loop.run_forever()
        finally:
            try:
                self._loop.run_until_complete(self._loop.shutdown_asyncgens())
            finally:
                self._loop.close()

    @property
    def running(self) -> bool:
        """True until :meth:`stop` was called."""
        return not self._stopped

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        """Runs ``coro`` on the portal's loop and returns its result (blocking).

        If the caller is interrupted (``KeyboardInterrupt``) the coroutine is cancelled.

        Raises:
            whatever ``coro`` raises.
            RuntimeError: the portal is stopped, or the call comes from the portal's own thread.
        """
        if self._stopped:
            coro.close()
            raise RuntimeError("the client is closed")
        if threading.current_thread() is self._thread:
            coro.close()
            raise RuntimeError("a sync client method was called on its own portal thread")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()
            raise

    def iterate(self, items: AsyncIterator[T]) -> Iterator[T]:
        """A sync iterator over ``items`` (an async iterator living on the portal's loop): each
        ``next()`` runs one ``__anext__`` through :meth:`call`, so pages are still fetched lazily.

        Raises (while iterating): whatever the async iterator raises.
        """

        async def step() -> tuple[bool, T | None]:
            try:
                return True, await items.__anext__()
            except StopAsyncIteration:
                return False, None

        while True:
            more, item = self.call(step())
            if not more:
                return
            yield item  # type: ignore[misc]  # more=True means item is a T

    def stop(self, last: Callable[[], Awaitable[object]] | None = None) -> None:
        """Runs ``last()`` (e.g. closing a channel) on the loop, then stops the loop and joins the
        thread (at most :data:`STOP_TIMEOUT` s). Idempotent; errors of ``last`` are ignored. From the
        portal's own thread it only schedules the stop."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True

        async def finish() -> None:
            try:
                if last is not None:
                    await last()
            except Exception:
                pass
            finally:
                asyncio.get_running_loop().call_soon(self._loop.stop)

        if self._loop.is_closed():
            return
        future = asyncio.run_coroutine_threadsafe(finish(), self._loop)
        if threading.current_thread() is self._thread:
            return
        try:
            future.result(STOP_TIMEOUT)
        except Exception:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(STOP_TIMEOUT)
