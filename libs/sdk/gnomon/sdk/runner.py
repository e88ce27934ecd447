"""Running handlers: :class:`Runner` keeps the worker's local FIFO of assignments from all
dispatchers, starts at most ``concurrency`` at once (sending the accept first; the handler runs once the
accept is acknowledged), runs async handlers on the loop and plain ones on :class:`~gnomon.sdk.threads.
HandlerThreads`, and turns each outcome into the result its session reports."""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, cast

from gnomon._proto.gnomon.v1 import failure_class_pb2 as fpb
from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb

from . import convert
from .attempts import DONE, QUEUED, RUNNING, Attempt
from .context import JobContext
from .errors import Cancelled
from .failures import FailureClass, classify_exception
from .threads import HandlerThreads
from .tracing import traced_handler

__all__ = ["Runner", "Signals"]

log = logging.getLogger("gnomon.sdk.worker")

#: After ``drain_timeout``: seconds given to cancelled handlers to return.
SHUTDOWN_GRACE = 2.0

_OUTCOME_OK = wpb.OUTCOME_SUCCEEDED
_OUTCOME_FAILED = wpb.OUTCOME_FAILED


class Signals:
    """The events of one run of a worker, created on its loop by ``Worker.run_async``."""

    __slots__ = ("stop", "force", "idle", "ack", "connected", "starter_wake")

    def __init__(self) -> None:
        self.stop = asyncio.Event()  # stop() was called: drain
        self.force = asyncio.Event()  # stop() again: skip the waiting
        self.idle = asyncio.Event()  # no handler running
        self.idle.set()
        self.ack = asyncio.Event()  # a result or release was acknowledged
        self.connected = asyncio.Event()  # a dispatcher stream was welcomed
        self.starter_wake = asyncio.Event()  # a slot freed or an attempt arrived


class Runner:
    """Handler slots of one worker (see module docstring).

    Args:
        handler: the user's handler (``async def`` or plain ``def``).
        is_async: run it on the loop (True) or in threads (False).
        concurrency: slots, 1-10000.
        exception_classes: ``{ExceptionType: FailureClass}`` checked before the defaults.
        on_event: ``callback(kind, ctx)`` or ``None``.

    :meth:`begin` binds it to a run (its :class:`Signals` and loop), :meth:`end` releases the threads.
    """

    def __init__(
        self,
        handler: Callable[[JobContext], Any],
        *,
        is_async: bool,
        concurrency: int,
        exception_classes: Mapping[type[BaseException], FailureClass],
        on_event: Callable[[str, JobContext], Any] | None,
    ) -> None:
        # an attempt with a trace context runs its handler in a "gnomon.handler" span (docs/tracing.md)
        self.handler = traced_handler(handler, is_async=is_async)
        self.is_async = is_async
        self.concurrency = concurrency
        self.exception_classes = exception_classes
        self.on_event = on_event
        self.queue: collections.deque[Attempt] = collections.deque()
        self.active: set[Attempt] = set()
        self.signals = Signals()
        self._threads: HandlerThreads | None = None

    def begin(self, signals: Signals, loop: asyncio.AbstractEventLoop) -> None:
        """Starts a run: its events, and the handler threads for a plain handler."""
        self.signals = signals
        if not self.is_async:
            self._threads = HandlerThreads(self.concurrency, self.handler, self._threads_done, loop)

    def end(self) -> None:
        """Ends a run: idle handler threads stop (busy ones after their handler returns)."""
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None

    def enqueue(self, att: Attempt) -> None:
        """A new assignment: queue it for a free slot (FIFO)."""
        self.queue.append(att)
        self.emit("assigned", att.ctx)
        self.signals.starter_wake.set()

    async def starter(self) -> None:
        """Forever: starts queued attempts while slots are free (run as a task; cancel to stop)."""
        queue, wake, limit = self.queue, self.signals.starter_wake, self.concurrency
        while True:
            while len(self.active) >= limit or not queue:
                wake.clear()
                await wake.wait()
            att = queue.popleft()
            if att.state != QUEUED or att.session.ended:
                continue
            if att.lease.lost():
                # Waited here past its lease: it is not ours any more; hand it back.
                att.session.release(att)
                self.emit("released", att.ctx)
                continue
            self._start(att)

    def _start(self, att: Attempt) -> None:
        """Takes a slot and sends the accept. The handler runs only once the dispatcher acknowledges
        the accept (:meth:`launch`): a refused accept (job cancelled, re-dispatched, duplicate
        delivery) means the handler never starts, so a stale message never executes."""
        self.active.add(att)
        self.signals.idle.clear()
        att.session.accept(att)

    def launch(self, att: Attempt) -> None:
        """The accept of ``att`` was acknowledged: run its handler."""
        if att.launched or att.state != RUNNING:
            return
        att.launched = True
        if att.dropped_reason is not None:
            self.finish(att, None)
            return
        self.emit("started", att.ctx)
        if self._threads is not None:
            self._threads.submit(att)
            return
        try:
            coro = self.handler(att.ctx)
        except BaseException as exc:
            self.finish(att, exc)
            return
        att.task = asyncio.get_running_loop().create_task(self._execute(att, coro))

    async def _execute(self, att: Attempt, awaitable: Awaitable[Any]) -> None:
        exc: BaseException | None = None
        try:
            await awaitable
        except asyncio.CancelledError:
            att.drop("shutdown", "shutdown")
        except BaseException as e:
            exc = e
        self.finish(att, exc)

    def _threads_done(self, items: list[tuple[Attempt, BaseException | None, Any]]) -> None:
        for att, exc, ret in items:
            if exc is None and inspect.isawaitable(ret):  # a sync callable that returned a coroutine
                att.task = asyncio.get_running_loop().create_task(self._execute(att, ret))
            else:
                self.finish(att, exc)

    def finish(self, att: Attempt, exc: BaseException | None) -> None:
        """The handler of ``att`` ended (``exc``: what it raised, ``None`` for success; also used for
        an attempt that took a slot but never ran): free the slot and hand the result, if any, to
        its session."""
        self.active.discard(att)
        if not self.active:
            self.signals.idle.set()
        self.signals.starter_wake.set()
        att.state = DONE
        session = att.session
        ctx = att.ctx
        if isinstance(exc, Cancelled) and ctx.cancel_reason in ("refused", "lease_lost"):
            att.drop(ctx.cancel_reason, ctx.cancel_reason)
        if att.dropped_reason is not None or session.ended:
            if not session.ended:
                session.finished(att, None)
            self.emit("dropped", ctx)
            return
        if exc is None:
            result = wpb.AttemptResult(attempt=att.ref, outcome=_OUTCOME_OK)
            session.finished(att, result)
            self.emit("finished", ctx)
            return
        failure = classify_exception(exc, self.exception_classes)
        ctx._error = failure.error
        result = wpb.AttemptResult(
            attempt=att.ref,
            outcome=_OUTCOME_FAILED,
            failure_class=cast("fpb.FailureClass", int(failure.failure_class)),
            error=failure.error,
        )
        if failure.retry_after is not None:
            result.retry_after.CopyFrom(convert.to_duration(failure.retry_after))
        log.info(
            "%s attempt %d failed (%s): %s", ctx.job, ctx.attempt, failure.failure_class.name, failure.error
        )
        if log.isEnabledFor(logging.DEBUG):
            log.debug("handler traceback", exc_info=exc)
        session.finished(att, result)
        self.emit("failed", ctx)

    def emit(self, kind: str, ctx: JobContext) -> None:
        """Calls ``on_event(kind, ctx)``; its exceptions are logged and ignored."""
        cb = self.on_event
        if cb is None:
            return
        try:
            cb(kind, ctx)
        except Exception:
            log.exception("on_event callback failed for %r", kind)

    async def drain(
        self, timeout: float | None, wait: Callable[[asyncio.Event, float], Awaitable[None]]
    ) -> None:
        """Empties the worker for a stop: releases every unstarted attempt; unless ``timeout`` is
        ``None`` (a fast stop), waits up to ``timeout`` seconds for running handlers, then cancels
        them (reason ``"shutdown"``) and waits :data:`SHUTDOWN_GRACE` more; handlers still running
        are then abandoned (no result; async ones cancelled). ``wait(event, seconds)`` waits for an
        event (the worker's, which a second stop cuts short)."""
        while self.queue:
            att = self.queue.popleft()
            if att.state == QUEUED and not att.session.ended:
                att.session.release(att)
                self.emit("released", att.ctx)
        if timeout is not None:
            if self.active:
                log.info("draining: waiting up to %.3gs for %d running handler(s)", timeout, len(self.active))
                await wait(self.signals.idle, timeout)
            if self.active:
                for att in list(self.active):
                    att.ctx._cancel("shutdown")
                await wait(self.signals.idle, SHUTDOWN_GRACE)
        if self.active:
            log.warning("abandoning %d running handler(s); their leases will expire", len(self.active))
            for att in list(self.active):
                att.drop("shutdown", "shutdown")
                if att.task is not None:
                    att.task.cancel()
            pending = [a.task for a in self.active if a.task is not None]
            if pending:
                await asyncio.wait(pending, timeout=1.0)
