"""The thread pool that runs plain (``def``) handlers, with completions handed back to the
event loop in batches.

``loop.run_in_executor`` costs two futures and one cross-thread wake-up of the loop per call; at
thousands of attempts per second that (and the GIL traffic it causes) dominates. Here a handler
thread appends its outcome to a shared list and wakes the loop only if no flush is pending yet, so
a burst of completions costs one wake-up.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["HandlerThreads"]

_STOP = object()


class HandlerThreads:
    """Runs ``handler(item.ctx)`` for submitted items on up to ``size`` daemon threads.

    Args:
        size: maximum number of threads (started lazily, as work arrives).
        handler: the user's sync handler, called with ``item.ctx``.
        on_done: called on ``loop`` with a list of ``(item, exception_or_None, return_value)``
            tuples, in completion order.
        loop: the event loop that receives completions.
        name: thread name prefix.

    Threads are daemons: a handler still running when the worker exits does not keep the process
    alive (its lease expires and the scheduler retries the attempt).
    """

    def __init__(
        self,
        size: int,
        handler: Callable[[Any], Any],
        on_done: Callable[[list[tuple[Any, BaseException | None, Any]]], None],
        loop: asyncio.AbstractEventLoop,
        name: str = "gnomon-handler",
    ) -> None:
        self._size = size
        self._handler = handler
        self._on_done = on_done
        self._loop = loop
        self._name = name
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._done: list[tuple[Any, BaseException | None, Any]] = []
        self._flush_scheduled = False
        self._threads: list[threading.Thread] = []
        self._idle = 0
        self._closed = False

    def submit(self, item: Any) -> None:
        """Queues one item (must have a ``ctx`` attribute). Call from the loop thread."""
        if self._closed:
            raise RuntimeError("handler threads are shut down")
        with self._lock:
            spawn = self._idle == 0 and len(self._threads) < self._size
            if not spawn:
                self._idle -= 1
        if spawn:
            t = threading.Thread(target=self._run, name=f"{self._name}-{len(self._threads)}", daemon=True)
            self._threads.append(t)
            t.start()
        self._queue.put(item)

    def shutdown(self) -> None:
        """Stops idle threads; busy ones exit after their current handler returns (their
        completion is then dropped if the loop is closed)."""
        self._closed = True
        for _ in self._threads:
            self._queue.put(_STOP)

    def _run(self) -> None:
        handler, q = self._handler, self._queue
        while True:
            item = q.get()
            if item is _STOP:
                return
            exc = ret = None
            try:
                ret = handler(item.ctx)
            except BaseException as e:
                exc = e
            with self._lock:
                self._done.append((item, exc, ret))
                self._idle += 1
                schedule = not self._flush_scheduled
                self._flush_scheduled = True
            if schedule:
                try:
                    self._loop.call_soon_threadsafe(self._flush)
                except RuntimeError:  # loop closed: the worker is gone
                    return

    def _flush(self) -> None:
        with self._lock:
            done, self._done = self._done, []
            self._flush_scheduled = False
        if done:
            self._on_done(done)
