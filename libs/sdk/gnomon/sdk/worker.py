"""The worker: runs a handler function for every attempt the dispatchers assign to it.

Usage::

    from gnomon.sdk import Worker

    async def handle(ctx):           # or a plain ``def`` (runs in a thread pool)
        order = ctx.json()
        ...

    Worker(["emails"], handle, concurrency=32).run()   # blocks; SIGTERM/SIGINT drain

How it works (the lease protocol: docs/protocol.md): the worker asks the API for the live dispatchers
(``ClusterService.ListDispatchers``, every ``discovery_interval`` seconds) and keeps one
``WorkerService.Lease`` stream to each (:mod:`gnomon.sdk.session`). Assignments from all streams
go into one local FIFO; at most ``concurrency`` handlers run at once. Starting a handler sends an
accept (without waiting for its ack); while it runs, each stream heartbeats all of its running
attempts in one message; when it ends, a result is reported. All outgoing items are coalesced per
stream (:mod:`gnomon.sdk.outgoing`). A dispatcher stream that is down hands its running attempts and
unacknowledged results to a connected one (:mod:`gnomon.sdk.routing`).
"""

from __future__ import annotations

import asyncio
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

from . import convert
from .attempts import QUEUED, Attempt, WorkerIdentity
from .connection import resolve
from .context import JobContext
from .discovery import discover
from .errors import GnomonError
from .failures import FailureClass
from .routing import reroute
from .runner import Runner, Signals
from .session import DispatcherSession

__all__ = ["Worker", "Handler", "EventCallback"]

log = logging.getLogger("gnomon.sdk.worker")

Handler = Callable[[JobContext], Any] | Callable[[JobContext], Awaitable[Any]]
EventCallback = Callable[[str, JobContext], Any]

#: Max gRPC message size the worker accepts from a dispatcher (bytes). Assignments carry payloads
#: of up to 256 KiB each, so batches can exceed gRPC's 4 MiB default.
MAX_RECEIVE_MESSAGE_BYTES = 64 * 1024 * 1024

_TICK = 0.1  # timer granularity: heartbeats, silent-stream detection (seconds)
_LEASE_CHECK = 0.25  # how often local leases are checked (seconds)


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
        api: ``host:port`` of the API (dispatcher discovery); namespace: tenant namespace id. None:
            as for :class:`~gnomon.sdk.AsyncClient` (environment, then profile).
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
        credentials: ``grpc.ChannelCredentials`` for the API and dispatchers, used as they are;
            ``None`` -> TLS and API key as :func:`gnomon.sdk.connection.resolve` finds them
            (plaintext only when ``insecure``).
        metadata: extra call metadata (discovery, lease streams); api_key, insecure, profile: see Client.

    Raises:
        ValueError, TypeError: invalid arguments (no queue, concurrency out of range,
            handler not callable, unknown failure class) or an unusable profile/config file.

    Lifecycle: :meth:`run` (blocking, installs SIGTERM/SIGINT handlers) or ``await``
    :meth:`run_async`; :meth:`stop` (any thread) starts the graceful drain -- a second
    :meth:`stop` (or signal) skips the waiting.
    """

    def __init__(
        self,
        queues: list[str] | str,
        handler: Handler,
        *,
        api: str | None = None,
        namespace: str | None = None,
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
        api_key: str | None = None,
        insecure: bool | None = None,
        profile: str | None = None,
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
        self.connection = resolve(api, namespace, api_key=api_key, insecure=insecure, profile=profile)
        self.api, self.namespace = self.connection.address, self.connection.namespace
        self.concurrency = concurrency
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self.static_dispatchers = list(dispatchers) if dispatchers is not None else None
        self.exception_classes = {t: FailureClass.coerce(v) for t, v in (exception_classes or {}).items()}
        for t in self.exception_classes:
            if not (isinstance(t, type) and issubclass(t, BaseException)):
                raise TypeError(f"exception_classes keys must be exception types, got {t!r}")
        self.drain_timeout, self.ack_timeout = float(drain_timeout), float(ack_timeout)
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
        self._signals: Signals | None = None
        self._runner = Runner(
            handler,
            is_async=self._is_async,
            concurrency=concurrency,
            exception_classes=self.exception_classes,
            on_event=on_event,
        )
        self._sessions: dict[str, DispatcherSession] = {}
        self._background: set[asyncio.Task[None]] = set()
        self._fatal_error: GnomonError | None = None
        self._running_flag = False
        self._lock = threading.Lock()
        self._identity = WorkerIdentity(
            worker_id=self.worker_id,
            namespace=self._namespace_parent,
            queues=tuple(self.queues),
            concurrency=self.concurrency,
            metadata=self._metadata,
        )
        self._port = _SessionPort(self)

    @property
    def _sig(self) -> Signals:
        """The events of the current run (only while :meth:`run_async` runs)."""
        if self._signals is None:
            raise RuntimeError("the worker is not running")
        return self._signals

    # -- public -------------------------------------------------------------------------------

    def run(self, loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None) -> None:
        """Runs :meth:`run_async` until stopped (blocking) on a new loop from ``loop_factory`` (e.g.
        ``uvloop.new_event_loop``; ``None``: as ``asyncio.run``), SIGTERM/SIGINT calling :meth:`stop`.

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

        with asyncio.Runner(loop_factory=loop_factory) as runner:
            runner.run(main())

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
        self._signals = sig = Signals()
        self.draining = False
        self._fatal_error = None
        if self._stop_requested:
            sig.stop.set()
        self._runner.begin(sig, loop)
        tasks = [
            loop.create_task(self._runner.starter(), name="gnomon-starter"),
            loop.create_task(self._ticker(), name="gnomon-ticker"),
        ]
        discovery = None
        if self.static_dispatchers is not None:
            for addr in self.static_dispatchers:
                self._open_session(addr, static=True)
        else:
            discovery = loop.create_task(self._discovery(), name="gnomon-discovery")
        log.info(
            "worker %s serving %s in %s (concurrency %d, event loop: %s)",
            *(self.worker_id, ",".join(self.queues), self._namespace_parent, self.concurrency),
            "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio",
        )
        try:
            await sig.stop.wait()
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
        if loop is None or loop.is_closed() or self._signals is None:
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
        while self._signals is None:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
        try:
            await asyncio.wait_for(self._signals.connected.wait(), timeout)
            return True
        except TimeoutError:
            return False

    @property
    def running(self) -> int:
        """Number of handlers running now."""
        return len(self._runner.active)

    @property
    def queued(self) -> int:
        """Number of received assignments waiting for a free slot."""
        return sum(1 for a in self._runner.queue if a.state == QUEUED)

    @property
    def connected_dispatchers(self) -> list[str]:
        """Addresses of dispatchers with a live (welcomed) stream."""
        return [s.address for s in self._sessions.values() if s.connected]

    # -- stop / shutdown ----------------------------------------------------------------------

    def _on_signal(self, sig: int) -> None:
        log.info("received %s: draining (again to skip waiting)", signal.Signals(sig).name)
        self._request_stop()

    def _request_stop(self) -> None:
        sig = self._signals
        if sig is None:
            return
        if sig.stop.is_set():
            sig.force.set()
        else:
            sig.stop.set()

    def _fatal(self, error: GnomonError) -> None:
        log.error("dispatcher rejected the worker: %s", error)
        if self._fatal_error is None:
            self._fatal_error = error
        if self._signals is not None:
            self._signals.stop.set()

    async def _wait_any(self, event: asyncio.Event, timeout: float) -> None:
        """Waits for ``event`` or the force event, at most ``timeout`` seconds."""
        force = self._sig.force
        if timeout <= 0 or event.is_set() or force.is_set():
            return
        waiters = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(force.wait())]
        try:
            await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waiters:
                w.cancel()

    async def _shutdown(
        self, tasks: list[asyncio.Task[None]], discovery: asyncio.Task[None] | None, fast: bool
    ) -> None:
        self.draining = True
        sig = self._sig
        starter, ticker = tasks
        for t in (starter, discovery):
            if t is not None:
                t.cancel()
        await self._runner.drain(None if fast else self.drain_timeout, self._wait_any)
        if not fast:
            deadline = time.monotonic() + self.ack_timeout
            while any(s.has_unacked() and not s.ended for s in self._sessions.values()):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or sig.force.is_set():
                    break
                sig.ack.clear()
                await self._wait_any(sig.ack, remaining)
        ticker.cancel()
        await asyncio.gather(
            *(t for t in (starter, ticker, discovery) if t is not None), return_exceptions=True
        )
        await asyncio.gather(
            *(s.close(timeout=0.2 if fast else 1.0) for s in list(self._sessions.values())),
            return_exceptions=True,
        )
        self._sessions.clear()
        self._runner.end()
        log.info("worker %s stopped", self.worker_id)

    # -- sessions / discovery -----------------------------------------------------------------

    def _make_channel(self, address: str) -> grpc.aio.Channel:
        opts: list[tuple[str, Any]] = [("grpc.max_receive_message_length", MAX_RECEIVE_MESSAGE_BYTES)]
        if self._credentials is None:
            return self.connection.aio_channel(address, options=opts)
        return grpc.aio.secure_channel(
            address, self._credentials, options=[*self.connection.options(), *opts]
        )

    def _open_session(self, address: str, *, static: bool) -> None:
        session = DispatcherSession(self._port, self._identity, address, static=static)
        self._sessions[address] = session
        session.start()

    def _session_ended(self, session: DispatcherSession) -> None:
        if self._sessions.get(session.address) is session:
            del self._sessions[session.address]
        self._sig.ack.set()
        if session.closing:
            return
        log.info("dispatcher %s: session ended", session.address)
        # Its queued attempts are now DROPPED and skipped by the starter; wake it to move on.
        self._sig.starter_wake.set()
        if not self.draining:
            task = asyncio.get_running_loop().create_task(session.channel.close())
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
        await discover(
            self._make_channel(self.api),
            self.api,
            region=self.region,
            interval=self.discovery_interval,
            metadata=self._metadata,
            found=self._sync_sessions,
            fatal=self._fatal,
        )

    # -- timers -------------------------------------------------------------------------------

    async def _ticker(self) -> None:
        last_lease_check = 0.0
        while True:
            await asyncio.sleep(_TICK)
            now = time.monotonic()
            if check := now - last_lease_check >= _LEASE_CHECK:
                last_lease_check = now
            reroute(self._sessions.values())  # attempts of a dispatcher that is down: via another
            for session in list(self._sessions.values()):
                session.tick(now, check)


class _SessionPort:
    """The worker as its dispatcher sessions see it: the :class:`~gnomon.sdk.attempts.SessionHost`
    interface, nothing more."""

    __slots__ = ("_worker",)

    def __init__(self, worker: Worker) -> None:
        self._worker = worker

    @property
    def draining(self) -> bool:
        return self._worker.draining

    def open_channel(self, address: str) -> grpc.aio.Channel:
        return self._worker._make_channel(address)

    def deliver(self, att: Attempt) -> None:
        self._worker._runner.enqueue(att)

    def launch(self, att: Attempt) -> None:
        self._worker._runner.launch(att)

    def abandon(self, att: Attempt) -> None:
        self._worker._runner.finish(att, None)

    def emit(self, kind: str, ctx: JobContext) -> None:
        self._worker._runner.emit(kind, ctx)

    def connected(self, session: DispatcherSession) -> None:
        self._worker._sig.connected.set()

    def acked(self) -> None:
        self._worker._sig.ack.set()

    def session_ended(self, session: DispatcherSession) -> None:
        self._worker._session_ended(session)

    def fatal(self, error: GnomonError) -> None:
        self._worker._fatal(error)
