"""The worker: runs a handler function for every attempt the dispatchers assign to it.

Usage::

    from gnomon.sdk import Worker

    async def handle(ctx):           # or a plain ``def`` (runs in a thread pool)
        order = ctx.json()
        ...

    Worker(["emails"], handle, concurrency=32).run()   # blocks; SIGTERM/SIGINT drain

How it works (the lease protocol: docs/concepts.md): the worker asks the API for the live dispatchers
(``ClusterService.ListDispatchers``, every ``discovery_interval`` seconds) and keeps one
``WorkerService.Lease`` stream to each (:mod:`gnomon.sdk.session`). Assignments from all streams
go into one local FIFO; at most ``concurrency`` handlers run at once. Starting a handler sends an
accept (without waiting for its ack); while it runs, each stream heartbeats all of its running
attempts in one message; when it ends, a result is reported. All outgoing items are coalesced per
stream (:mod:`gnomon.sdk.outgoing`).
"""

from __future__ import annotations

import asyncio
import collections
import inspect
import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import grpc

from gnomon._proto.gnomon.v1 import cluster_service_pb2, cluster_service_pb2_grpc
from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb

from . import convert
from .context import JobContext
from .errors import Cancelled, GnomonError
from .failures import FailureClass, classify_exception
from .session import QUEUED, RUNNING, Attempt, DispatcherSession
from .threads import HandlerThreads

__all__ = ["Worker", "Handler", "EventCallback"]

log = logging.getLogger("gnomon.sdk.worker")

Handler = Callable[[JobContext], Any] | Callable[[JobContext], Awaitable[Any]]
EventCallback = Callable[[str, JobContext], Any]

#: Max gRPC message size the worker accepts from a dispatcher (bytes). Assignments carry payloads
#: of up to 256 KiB each, so batches can exceed gRPC's 4 MiB default.
MAX_RECEIVE_MESSAGE_BYTES = 64 * 1024 * 1024

_TICK = 0.1  # timer granularity: heartbeats, silent-stream detection (seconds)
_LEASE_CHECK = 0.25  # how often local leases are checked (seconds)
_SHUTDOWN_GRACE = 2.0  # after drain_timeout: time given to cancelled handlers to return (seconds)

_OUTCOME_OK = wpb.OUTCOME_SUCCEEDED
_OUTCOME_FAILED = wpb.OUTCOME_FAILED


def _default_worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"


def _is_async_callable(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "__call__", None))  # noqa: B004


class Worker:
    """Runs ``handler(ctx)`` for each attempt of jobs on ``queues``.

    Args:
        queues: queue names served (a single ``str`` is accepted as one queue).
        handler: ``async def handler(ctx)`` (runs on the worker's event loop; must not block) or
            ``def handler(ctx)`` (runs in a thread pool of ``concurrency`` threads). ``ctx`` is a
            :class:`~gnomon.sdk.JobContext`. Returning = success (the value is ignored); raising =
            failure, classified by ``exception_classes`` (see below).
        api: ``host:port`` of the API, used for dispatcher discovery.
        namespace: tenant namespace id (``"default"``) or ``"namespaces/<id>"``.
        concurrency: max handlers running at once in this worker (1-10000). Each dispatcher
            stream is also granted this many credits, so up to
            ``concurrency x dispatchers`` assignments may be held (the surplus waits, unstarted, in
            a local FIFO).
        worker_id: unique id of this worker process; default ``"<host>:<pid>:<random>"``.
        dispatchers: explicit dispatcher addresses (``host:port``); disables discovery.
        exception_classes: ``{ExceptionType: FailureClass}`` checked in insertion order (first
            ``isinstance`` match; list subclasses first) before the defaults
            ``PermanentError -> PERMANENT``, ``ThrottledError -> THROTTLED`` (with its
            ``retry_after``), ``AmbiguousError -> AMBIGUOUS``; anything else is ``TRANSIENT``.
            Values may also be names (``"permanent"``).
        drain_timeout: seconds a graceful stop waits for running handlers (default 30).
        ack_timeout: seconds a graceful stop then waits for result/release acks (default 5).
        on_event: optional ``callback(kind, ctx)`` called on the event loop for ``"assigned"``,
            ``"started"``, ``"finished"`` (succeeded), ``"failed"`` (``ctx.error`` holds the
            reported text), ``"released"`` (returned unstarted) and ``"dropped"`` (ended without
            a report: refused, lease lost or cancelled at shutdown). Must not block; exceptions
            it raises are logged and ignored.
        region: region passed to ``ListDispatchers`` ("" = the API's region).
        discovery_interval: seconds between discovery refreshes (default 2).
        credentials: ``grpc.ChannelCredentials`` for TLS to the API and dispatchers; ``None`` ->
            plaintext.
        metadata: extra call metadata (e.g. auth) for discovery and lease streams.

    Raises:
        ValueError, TypeError: invalid arguments (no queue, concurrency out of range,
            handler not callable, unknown failure class).

    Lifecycle: :meth:`run` (blocking, installs SIGTERM/SIGINT handlers) or ``await``
    :meth:`run_async`; :meth:`stop` (any thread) starts the graceful drain -- a second
    :meth:`stop` (or signal) skips the waiting.
    """

    def __init__(
        self,
        queues: list[str] | str,
        handler: Handler,
        *,
        api: str = "127.0.0.1:7070",
        namespace: str = "default",
        concurrency: int = 16,
        worker_id: str | None = None,
        dispatchers: list[str] | None = None,
        exception_classes: Mapping[type[BaseException], FailureClass | str] | None = None,
        drain_timeout: float = 30.0,
        ack_timeout: float = 5.0,
        on_event: EventCallback | None = None,
        region: str = "",
        discovery_interval: float = 2.0,
        credentials: grpc.ChannelCredentials | None = None,
        metadata: list[tuple[str, str]] | None = None,
    ) -> None:
        if isinstance(queues, str):
            queues = [queues]
        queues = list(queues)
        if not queues or not all(isinstance(q, str) and q for q in queues):
            raise ValueError("queues must be a non-empty list of non-empty queue names")
        if not callable(handler):
            raise TypeError("handler must be callable")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= 10000:
            raise ValueError("concurrency must be an int between 1 and 10000")
        if dispatchers is not None and not dispatchers:
            raise ValueError("dispatchers, when given, must list at least one host:port")
        self.queues = queues
        self.handler = handler
        self.api = api
        self.namespace = namespace.removeprefix("namespaces/")
        self.concurrency = concurrency
        self.worker_id = worker_id or _default_worker_id()
        self.static_dispatchers = list(dispatchers) if dispatchers is not None else None
        self.exception_classes = {t: FailureClass.coerce(v) for t, v in (exception_classes or {}).items()}
        for t in self.exception_classes:
            if not (isinstance(t, type) and issubclass(t, BaseException)):
                raise TypeError(f"exception_classes keys must be exception types, got {t!r}")
        self.drain_timeout = float(drain_timeout)
        self.ack_timeout = float(ack_timeout)
        self.on_event = on_event
        self.region = region
        self.discovery_interval = float(discovery_interval)
        self._credentials = credentials
        self._metadata = tuple(metadata or ())
        self._namespace_parent = convert.namespace_parent(self.namespace)
        self._is_async = _is_async_callable(handler)

        self.draining = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop_requested = False
        self._stop_event: asyncio.Event | None = None
        self._force_event: asyncio.Event | None = None
        self._idle_event: asyncio.Event | None = None
        self._ack_event: asyncio.Event | None = None
        self._connected_event: asyncio.Event | None = None
        self._starter_wake: asyncio.Event | None = None
        self._queue: collections.deque[Attempt] = collections.deque()
        self._active: set[Attempt] = set()
        self._sessions: dict[str, DispatcherSession] = {}
        self._threads: HandlerThreads | None = None
        self._background: set[asyncio.Task] = set()
        self._fatal_error: GnomonError | None = None
        self._running_flag = False
        self._lock = threading.Lock()

    # -- public -------------------------------------------------------------------------------

    def run(self) -> None:
        """Runs the worker until stopped (blocking): ``asyncio.run(self.run_async())`` with
        SIGTERM and SIGINT triggering :meth:`stop` (when called from the main thread).

        Raises:
            GnomonError: a dispatcher rejected the worker for good (e.g. ``INVALID_ARGUMENT``
                for a bad queue name, ``PERMISSION_DENIED``).
        """

        async def main() -> None:
            loop = asyncio.get_running_loop()
            installed = []
            for sig in (signal.SIGTERM, signal.SIGINT):
                try:
                    loop.add_signal_handler(sig, self._on_signal, sig)
                    installed.append(sig)
                except (NotImplementedError, RuntimeError, ValueError):
                    pass
            try:
                await self.run_async()
            finally:
                for sig in installed:
                    loop.remove_signal_handler(sig)

        asyncio.run(main())

    async def run_async(self) -> None:
        """Runs the worker on the current event loop until :meth:`stop`, then drains:

        1. stop taking work (no more credits; assignments still arriving are released);
        2. release every received-but-unstarted assignment;
        3. wait up to ``drain_timeout`` s for running handlers, reporting their results as usual;
        4. past it, set ``ctx.cancelled`` (reason ``"shutdown"``) and give handlers
           ``2 s`` more; async handlers still running are then cancelled, and their attempts are
           left to lease expiry (no result);
        5. wait up to ``ack_timeout`` s for result/release acks, then close the streams.

        Cancelling the task running this coroutine skips the waiting in steps 3-5.

        Raises:
            GnomonError: fatal rejection by a dispatcher (see :meth:`run`).
            RuntimeError: the worker is already running.
        """
        with self._lock:
            if self._running_flag:
                raise RuntimeError("worker is already running")
            self._running_flag = True
        loop = asyncio.get_running_loop()
        self._loop = loop
        self._stop_event = asyncio.Event()
        self._force_event = asyncio.Event()
        self._idle_event = asyncio.Event()
        self._idle_event.set()
        self._ack_event = asyncio.Event()
        self._connected_event = asyncio.Event()
        self._starter_wake = asyncio.Event()
        self.draining = False
        self._fatal_error = None
        if self._stop_requested:
            self._stop_event.set()
        if not self._is_async:
            self._threads = HandlerThreads(self.concurrency, self.handler, self._threads_done, loop)
        tasks = [
            loop.create_task(self._starter(), name="gnomon-starter"),
            loop.create_task(self._ticker(), name="gnomon-ticker"),
        ]
        discovery = None
        if self.static_dispatchers is not None:
            for addr in self.static_dispatchers:
                self._open_session(addr, static=True)
        else:
            discovery = loop.create_task(self._discovery(), name="gnomon-discovery")
        log.info(
            "worker %s serving %s in %s (concurrency %d)",
            self.worker_id,
            ",".join(self.queues),
            self._namespace_parent,
            self.concurrency,
        )
        try:
            await self._stop_event.wait()
            await self._shutdown(tasks, discovery, fast=False)
        except asyncio.CancelledError:
            await self._shutdown(tasks, discovery, fast=True)
            raise
        finally:
            self._stop_requested = False
            with self._lock:
                self._running_flag = False
        if self._fatal_error is not None:
            raise self._fatal_error

    def stop(self) -> None:
        """Starts a graceful drain (see :meth:`run_async`); safe from any thread or from a
        handler. A second call skips the remaining waits. Before the worker runs, makes the next
        :meth:`run` return right away."""
        self._stop_requested = True
        loop = self._loop
        if loop is None or loop.is_closed() or self._stop_event is None:
            return
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            self._request_stop()
        else:
            try:
                loop.call_soon_threadsafe(self._request_stop)
            except RuntimeError:  # loop closed meanwhile
                pass

    async def wait_connected(self, timeout: float | None = None) -> bool:
        """Waits until at least one dispatcher stream was welcomed (``True``), or ``timeout``
        seconds passed (``False``). Call from the worker's loop while :meth:`run_async` runs."""
        while self._connected_event is None:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        try:
            await asyncio.wait_for(self._connected_event.wait(), timeout)
            return True
        except TimeoutError:
            return False

    @property
    def running(self) -> int:
        """Number of handlers running now."""
        return len(self._active)

    @property
    def queued(self) -> int:
        """Number of received assignments waiting for a free slot."""
        return sum(1 for a in self._queue if a.state == QUEUED)

    @property
    def connected_dispatchers(self) -> list[str]:
        """Addresses of dispatchers with a live (welcomed) stream."""
        return [s.address for s in self._sessions.values() if s.connected]

    # -- stop / shutdown ----------------------------------------------------------------------

    def _on_signal(self, sig: int) -> None:
        log.info("received %s: draining (again to skip waiting)", signal.Signals(sig).name)
        self._request_stop()

    def _request_stop(self) -> None:
        if self._stop_event is None:
            return
        if self._stop_event.is_set():
            self._force_event.set()
        else:
            self._stop_event.set()

    def _fatal(self, error: GnomonError) -> None:
        log.error("dispatcher rejected the worker: %s", error)
        if self._fatal_error is None:
            self._fatal_error = error
        if self._stop_event is not None:
            self._stop_event.set()

    async def _wait_any(self, event: asyncio.Event, timeout: float) -> None:
        """Waits for ``event`` or the force event, at most ``timeout`` seconds."""
        if timeout <= 0 or event.is_set() or self._force_event.is_set():
            return
        waiters = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(self._force_event.wait())]
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()

    async def _shutdown(self, tasks: list[asyncio.Task], discovery: asyncio.Task | None, fast: bool) -> None:
        self.draining = True
        starter, ticker = tasks
        for t in (starter, discovery):
            if t is not None:
                t.cancel()
        # Return every unstarted attempt.
        while self._queue:
            att = self._queue.popleft()
            if att.state == QUEUED and not att.session.ended:
                att.session.release(att)
                self._emit("released", att.ctx)
        if not fast:
            if self._active:
                log.info(
                    "draining: waiting up to %.3gs for %d running handler(s)",
                    self.drain_timeout,
                    len(self._active),
                )
                await self._wait_any(self._idle_event, self.drain_timeout)
            if self._active:
                for att in list(self._active):
                    att.ctx._cancel("shutdown")
                await self._wait_any(self._idle_event, _SHUTDOWN_GRACE)
        if self._active:
            log.warning("abandoning %d running handler(s); their leases will expire", len(self._active))
            for att in list(self._active):
                att.drop("shutdown", "shutdown")
                if att.task is not None:
                    att.task.cancel()
            pending = [a.task for a in self._active if a.task is not None]
            if pending:
                await asyncio.wait(pending, timeout=1.0)
        if not fast:
            deadline = time.monotonic() + self.ack_timeout
            while any(s.has_unacked() and not s.ended for s in self._sessions.values()):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or self._force_event.is_set():
                    break
                self._ack_event.clear()
                await self._wait_any(self._ack_event, remaining)
        ticker.cancel()
        await asyncio.gather(
            *(t for t in (starter, ticker, discovery) if t is not None), return_exceptions=True
        )
        await asyncio.gather(
            *(s.close(timeout=0.2 if fast else 1.0) for s in list(self._sessions.values())),
            return_exceptions=True,
        )
        self._sessions.clear()
        if self._threads is not None:
            self._threads.shutdown()
            self._threads = None
        log.info("worker %s stopped", self.worker_id)

    # -- sessions / discovery -----------------------------------------------------------------

    def _make_channel(self, address: str) -> grpc.aio.Channel:
        opts = [("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES)]
        if self._credentials is None:
            return grpc.aio.insecure_channel(address, options=opts)
        return grpc.aio.secure_channel(address, self._credentials, options=opts)

    def _open_session(self, address: str, *, static: bool) -> None:
        session = DispatcherSession(self, address, static=static)
        self._sessions[address] = session
        session.start()

    def _session_ended(self, session: DispatcherSession) -> None:
        if self._sessions.get(session.address) is session:
            del self._sessions[session.address]
        self._ack_event.set()
        if session.closing:
            return
        log.info("dispatcher %s: session ended", session.address)
        # Its queued attempts are now DROPPED and skipped by the starter; wake it to move on.
        self._starter_wake.set()
        if not self.draining and self._loop is not None:
            task = self._loop.create_task(session.channel.close())
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def _sync_sessions(self, addresses: set[str]) -> None:
        for addr, session in list(self._sessions.items()):
            session.set_listed(addr in addresses)
        if self.draining:
            return
        for addr in addresses:
            if addr not in self._sessions:
                log.info("discovered dispatcher %s", addr)
                self._open_session(addr, static=False)

    async def _discovery(self) -> None:
        channel = self._make_channel(self.api)
        stub = cluster_service_pb2_grpc.ClusterServiceStub(channel)
        req = cluster_service_pb2.ListDispatchersRequest(region=self.region)
        failing = False
        try:
            while True:
                try:
                    resp = await stub.ListDispatchers(
                        req, timeout=max(1.0, self.discovery_interval * 2), metadata=self._metadata or None
                    )
                except grpc.aio.AioRpcError as exc:
                    if exc.code() in (grpc.StatusCode.PERMISSION_DENIED, grpc.StatusCode.UNAUTHENTICATED):
                        self._fatal(GnomonError.from_rpc_error(exc))
                        return
                    (log.debug if failing else log.warning)(
                        "dispatcher discovery via %s failed: %s %s", self.api, exc.code().name, exc.details()
                    )
                    failing = True
                else:
                    if failing:
                        log.info("dispatcher discovery via %s recovered", self.api)
                    failing = False
                    addrs = {d.address for d in resp.dispatchers if d.address}
                    if not addrs and not self._sessions:
                        log.debug("no dispatcher registered yet")
                    self._sync_sessions(addrs)
                await asyncio.sleep(self.discovery_interval)
        finally:
            await channel.close()

    def _emit_connected(self, session: DispatcherSession) -> None:
        if self._connected_event is not None:
            self._connected_event.set()

    def _acked(self) -> None:
        self._ack_event.set()

    # -- running attempts ---------------------------------------------------------------------

    def _enqueue(self, att: Attempt) -> None:
        self._queue.append(att)
        self._emit("assigned", att.ctx)
        self._starter_wake.set()

    async def _starter(self) -> None:
        queue, wake, limit = self._queue, self._starter_wake, self.concurrency
        while True:
            while len(self._active) >= limit or not queue:
                wake.clear()
                await wake.wait()
            att = queue.popleft()
            if att.state != QUEUED or att.session.ended:
                continue
            if att.lease.lost():
                # Waited here past its lease: it is not ours any more; hand it back.
                att.session.release(att)
                self._emit("released", att.ctx)
                continue
            self._start(att)

    def _start(self, att: Attempt) -> None:
        """Takes a slot and sends the accept. The handler runs only once the dispatcher acknowledges
        the accept (:meth:`_launch`): a refused accept (job cancelled, re-dispatched, duplicate
        delivery) means the handler never starts, so a stale message never executes."""
        self._active.add(att)
        self._idle_event.clear()
        att.session.accept(att)

    def _launch(self, att: Attempt) -> None:
        """The accept of ``att`` was acknowledged: run its handler."""
        if att.launched or att.state != RUNNING:
            return
        att.launched = True
        if att.dropped_reason is not None:
            self._finish(att, None)
            return
        self._emit("started", att.ctx)
        if not self._is_async:
            self._threads.submit(att)
            return
        try:
            coro = self.handler(att.ctx)
        except BaseException as exc:
            self._finish(att, exc)
            return
        att.task = self._loop.create_task(self._execute(att, coro))

    async def _execute(self, att: Attempt, awaitable) -> None:
        exc: BaseException | None = None
        try:
            await awaitable
        except asyncio.CancelledError:
            att.drop("shutdown", "shutdown")
        except BaseException as e:
            exc = e
        self._finish(att, exc)

    def _threads_done(self, items: list[tuple[Attempt, BaseException | None, Any]]) -> None:
        for att, exc, ret in items:
            if exc is None and inspect.isawaitable(ret):  # a sync callable that returned a coroutine
                att.task = self._loop.create_task(self._execute(att, ret))
            else:
                self._finish(att, exc)

    def _finish(self, att: Attempt, exc: BaseException | None) -> None:
        self._active.discard(att)
        if not self._active:
            self._idle_event.set()
        self._starter_wake.set()
        att.state = "done"
        session = att.session
        ctx = att.ctx
        if isinstance(exc, Cancelled) and ctx.cancel_reason in ("refused", "lease_lost"):
            att.drop(ctx.cancel_reason, ctx.cancel_reason)
        if att.dropped_reason is not None or session.ended:
            if not session.ended:
                session.finished(att, None)
            self._emit("dropped", ctx)
            return
        if exc is None:
            result = wpb.AttemptResult(attempt=att.ref, outcome=_OUTCOME_OK)
            session.finished(att, result)
            self._emit("finished", ctx)
            return
        failure = classify_exception(exc, self.exception_classes)
        ctx._error = failure.error
        result = wpb.AttemptResult(
            attempt=att.ref,
            outcome=_OUTCOME_FAILED,
            failure_class=int(failure.failure_class),
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
        self._emit("failed", ctx)

    def _emit(self, kind: str, ctx: JobContext) -> None:
        cb = self.on_event
        if cb is None:
            return
        try:
            cb(kind, ctx)
        except Exception:
            log.exception("on_event callback failed for %r", kind)

    # -- timers -------------------------------------------------------------------------------

    async def _ticker(self) -> None:
        last_lease_check = 0.0
        while True:
            await asyncio.sleep(_TICK)
            now = time.monotonic()
            check = now - last_lease_check >= _LEASE_CHECK
            if check:
                last_lease_check = now
            for session in list(self._sessions.values()):
                session.tick(now, check)
