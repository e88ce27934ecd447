"""The object a job handler receives: :class:`JobContext`."""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timedelta
from typing import Any

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb

from . import convert
from .errors import Cancelled

__all__ = ["JobContext", "CANCEL_REASONS", "MAX_CHECKPOINT_BYTES"]

#: Largest progress checkpoint (:meth:`JobContext.checkpoint`), in bytes: 64 KiB.
MAX_CHECKPOINT_BYTES = 64 * 1024

#: Values of :attr:`JobContext.cancel_reason`.
CANCEL_REASONS = ("cancel_requested", "refused", "lease_lost", "shutdown", "start_to_close")

# Guards the lazy creation of ``cancel_event`` against a concurrent ``_cancel`` (a
# ``threading.Event`` costs ~20 us to build, too much to pay for every attempt up front).
_EVENT_LOCK = threading.Lock()


class JobContext:
    """What a handler knows about the attempt it runs, and its cancellation signal.

    Attributes (read-only by convention):
        job: full job name ``namespaces/{ns}/jobs/{id}``.
        job_id: the ``{id}`` part.
        namespace: the ``{ns}`` part.
        queue: queue the job was dispatched on.
        payload: payload bytes (see :meth:`json`).
        attempt: 1-based attempt number.
        version: job version the attempt was claimed at.
        fencing_token: fencing token of the dispatching shard owner (int).
        idempotency_key: stable across attempts of the job; use it to deduplicate side effects.
        schedule_time: UTC-aware instant the job became eligible (``None`` if not sent).
        deadline: UTC-aware deadline or ``None``.
        max_attempts: the job's attempt limit (0 if not sent).
        lease_duration: ``timedelta`` each heartbeat extends the lease by (``None`` if not sent).
        last_checkpoint: the progress checkpoint an earlier attempt of this job saved with
            :meth:`checkpoint` (``bytes``), or ``None`` if none did: resume from it.
        schedule: for an occurrence of a schedule, its name (``namespaces/{ns}/schedules/{id}``); ``""``
            for a one-time job.
        nominal_time: for an occurrence, its nominal fire time (UTC-aware), else ``None``.
        coalesced_count: for a COALESCE catch-up run, how many missed nominal times it stands for
            (itself included), else 0; ``coalesced_first_time`` / ``coalesced_last_time`` their range.
        trace_context: the W3C trace context of the attempt's delivery (``{"traceparent": ...,
            "tracestate": ...}``), empty when the job is not traced; a traced handler already runs in
            a ``gnomon.handler`` span continuing it (docs/tracing.md).
        cancel_event: a ``threading.Event`` set when the attempt should stop; safe to wait on from
            a handler thread (``ctx.cancel_event.wait(5)``). Created on first access.

    Cancellation is cooperative: the worker never kills a running handler; it sets the flag and
    the handler checks :attr:`cancelled` / calls :meth:`raise_if_cancelled` at safe points.
    """

    __slots__ = (
        "job",
        "job_id",
        "namespace",
        "queue",
        "payload",
        "attempt",
        "version",
        "fencing_token",
        "idempotency_key",
        "schedule_time",
        "deadline",
        "max_attempts",
        "lease_duration",
        "_cancel_event",
        "_cancelled",
        "_lease_expire_time",
        "_cancel_reason",
        "_async_event",
        "_loop",
        "_error",
        "last_checkpoint",
        "_checkpoint",
        "_checkpoint_saved",
        "start_to_close",
        "schedule",
        "nominal_time",
        "coalesced_count",
        "coalesced_first_time",
        "coalesced_last_time",
        "trace_context",
    )

    def __init__(
        self,
        *,
        job: str,
        queue: str = "",
        payload: bytes = b"",
        attempt: int = 1,
        version: int = 0,
        fencing_token: int = 0,
        idempotency_key: str = "",
        schedule_time: datetime | None = None,
        deadline: datetime | None = None,
        lease_expire_time: datetime | None = None,
        max_attempts: int = 0,
        lease_duration: timedelta | None = None,
        last_checkpoint: bytes | None = None,
    ) -> None:
        self.job = job
        parts = job.split("/")
        self.job_id = parts[-1]
        self.namespace = parts[1] if len(parts) == 4 and parts[0] == "namespaces" else ""
        self.queue = queue
        self.payload = payload
        self.attempt = attempt
        self.version = version
        self.fencing_token = fencing_token
        self.idempotency_key = idempotency_key
        self.schedule_time = schedule_time
        self.deadline = deadline
        self.max_attempts = max_attempts
        self.lease_duration = lease_duration
        self._cancel_event: threading.Event | None = None
        self._cancelled = False
        self._lease_expire_time = lease_expire_time
        self._cancel_reason: str | None = None
        self._async_event: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._error: str | None = None
        self.start_to_close: timedelta | None = None
        self.schedule = ""
        self.nominal_time: datetime | None = None
        self.coalesced_count = 0
        self.coalesced_first_time: datetime | None = None
        self.coalesced_last_time: datetime | None = None
        self.trace_context: dict[str, str] = {}
        self.last_checkpoint = last_checkpoint
        # (sequence number, data) of the latest checkpoint asked for; read by the worker's loop
        self._checkpoint: tuple[int, bytes] | None = None
        # sequence number of the latest checkpoint the dispatcher acknowledged as saved
        self._checkpoint_saved = 0

    @classmethod
    def from_assignment(cls, a: wpb.Assignment) -> JobContext:
        """Builds the context of one ``gnomon.v1.Assignment``."""
        ref = a.attempt
        return (
            cls(
                job=ref.job,
                queue=a.queue,
                payload=bytes(a.payload),
                attempt=ref.attempt,
                version=ref.version,
                fencing_token=ref.fencing_token,
                idempotency_key=a.idempotency_key,
                schedule_time=convert.field_time(a, "schedule_time"),
                deadline=convert.field_time(a, "deadline"),
                lease_expire_time=convert.field_time(a, "lease_expire_time"),
                max_attempts=a.max_attempts,
                lease_duration=convert.field_duration(a, "lease_duration"),
                last_checkpoint=bytes(a.checkpoint) or None,
            )
            ._with_start_to_close(convert.field_duration(a, "start_to_close"))
            ._with_occurrence(a)
        )

    def _with_occurrence(self, a: wpb.Assignment) -> JobContext:
        """Sets the occurrence fields (:attr:`schedule`, :attr:`nominal_time`, :attr:`coalesced_count`,
        :attr:`coalesced_first_time`, :attr:`coalesced_last_time`) and :attr:`trace_context` from an
        assignment."""
        self.schedule, self.coalesced_count = a.schedule, a.coalesced_count
        self.nominal_time = convert.field_time(a, "nominal_time")
        self.coalesced_first_time = convert.field_time(a, "coalesced_first_time")
        self.coalesced_last_time = convert.field_time(a, "coalesced_last_time")
        if a.trace_context:  # the delivery's W3C context (docs/tracing.md); empty when not traced
            self.trace_context = dict(a.trace_context)
        return self

    def _with_start_to_close(self, bound: timedelta | None) -> JobContext:
        """Sets :attr:`start_to_close` (``timedelta`` or ``None``): the longest this attempt may run
        once started; past it the worker cancels it with reason ``"start_to_close"``."""
        self.start_to_close = bound
        return self

    # -- payload ------------------------------------------------------------------------------

    def json(self) -> Any:
        """The payload decoded as UTF-8 JSON.

        Raises:
            ValueError: the payload is not UTF-8 JSON.
        """
        return convert.decode_json_payload(self.payload)

    # -- progress checkpoints -----------------------------------------------------------------

    def checkpoint(self, data: bytes | bytearray | memoryview) -> None:
        """Saves a progress checkpoint: if this attempt is lost or fails, the next attempt of the
        job gets ``data`` as :attr:`last_checkpoint` and can resume from there instead of from
        the start (docs/api.md#progress-checkpoints).

        The checkpoint travels with the next heartbeat and is saved only while this attempt still
        holds its lease. Only the latest one counts: calling this faster than heartbeats are sent
        just replaces the pending data, so checkpoint as often as is convenient. Saving is
        asynchronous: one made less than a heartbeat interval before the handler returns or
        raises may not reach the scheduler, so make resuming from an older checkpoint correct (it
        is, if the work between checkpoints is idempotent). ``b""`` clears the saved checkpoint.

        Also a cooperative cancellation point: raises :class:`~gnomon.sdk.Cancelled` (and saves
        nothing) if :attr:`cancelled` is set. Safe to call from handler threads.

        Raises:
            TypeError: ``data`` is not bytes-like.
            ValueError: ``data`` is longer than :data:`MAX_CHECKPOINT_BYTES` (64 KiB); it is
                refused whole, never truncated.
            Cancelled: the attempt was cancelled (reason in :attr:`cancel_reason`).
        """
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"checkpoint data must be bytes, not {type(data).__name__}")
        data = bytes(data)
        if len(data) > MAX_CHECKPOINT_BYTES:
            raise ValueError(f"checkpoint of {len(data)} bytes exceeds the {MAX_CHECKPOINT_BYTES}-byte limit")
        self.raise_if_cancelled()
        prev = self._checkpoint
        self._checkpoint = ((prev[0] if prev else 0) + 1, data)  # one atomic store: the loop reads it

    @property
    def checkpoint_saved(self) -> bool:
        """True once the latest :meth:`checkpoint` was acknowledged as saved by the dispatcher
        (an ack of kind CHECKPOINT with ``ok``); False before the first checkpoint, while the latest
        is still on its way, or when it was refused (e.g. the lease was lost)."""
        cp = self._checkpoint
        return cp is not None and self._checkpoint_saved >= cp[0]

    async def wait_checkpoint_saved(self, timeout: float | None = None) -> bool:
        """Waits (in an ``async`` handler) until :attr:`checkpoint_saved`; returns it. Checkpoints
        travel with heartbeats, so this takes up to one heartbeat interval plus a round trip.
        ``timeout``: seconds, ``None`` = until saved or cancelled. Returns False on timeout.

        Raises:
            Cancelled: the attempt was cancelled or its lease lost while waiting.
        """
        loop = asyncio.get_running_loop()
        end = None if timeout is None else loop.time() + timeout
        while not self.checkpoint_saved:
            self.raise_if_cancelled()
            if end is not None and loop.time() >= end:
                return False
            await asyncio.sleep(0.02)
        return True

    # -- lease --------------------------------------------------------------------------------

    @property
    def lease_expire_time(self) -> datetime | None:
        """UTC-aware end of the current lease as last reported by the dispatcher (database
        clock); renewed by heartbeats. ``None`` if never sent."""
        return self._lease_expire_time

    # -- cancellation -------------------------------------------------------------------------

    @property
    def cancelled(self) -> bool:
        """True once the attempt should stop (cancel requested, refused, lease lost, shutdown)."""
        return self._cancelled

    @property
    def cancel_event(self) -> threading.Event:
        """A ``threading.Event`` set together with :attr:`cancelled` (wait on it from threads)."""
        ev = self._cancel_event
        if ev is None:
            with _EVENT_LOCK:
                ev = self._cancel_event
                if ev is None:
                    ev = threading.Event()
                    if self._cancelled:
                        ev.set()
                    self._cancel_event = ev
        return ev

    @property
    def cancel_reason(self) -> str | None:
        """Why :attr:`cancelled` is set: one of :data:`CANCEL_REASONS`, or ``None``."""
        return self._cancel_reason

    def raise_if_cancelled(self) -> None:
        """Raises :class:`~gnomon.sdk.Cancelled` (with ``reason``) if :attr:`cancelled`."""
        if self._cancelled:
            raise Cancelled(self._cancel_reason)

    async def wait_cancelled(self, timeout: float | None = None) -> bool:
        """For async handlers: waits until cancelled or ``timeout`` seconds pass; returns
        :attr:`cancelled`. Must be awaited on the worker's event loop."""
        if self._cancelled:
            return True
        if self._async_event is None:
            self._async_event = asyncio.Event()
            self._loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(self._async_event.wait(), timeout)
        except TimeoutError:
            pass
        return self._cancelled

    @property
    def error(self) -> str | None:
        """After a failed attempt: the error text reported (``"ExcType: message"``); else ``None``.
        Useful in ``on_event`` callbacks."""
        return self._error

    # -- worker side (not for handlers) -------------------------------------------------------

    def _cancel(self, reason: str) -> bool:
        """Sets the cancellation flag (first reason wins). Returns True if it was not set yet.
        Called on the worker's event loop."""
        with _EVENT_LOCK:
            if self._cancelled:
                return False
            self._cancel_reason = reason
            self._cancelled = True
            ev = self._cancel_event
        if ev is not None:
            ev.set()
        if self._async_event is not None:
            loop = self._loop
            try:
                running = asyncio.get_running_loop()
            except RuntimeError:
                running = None
            if loop is None or loop is running:
                self._async_event.set()
            else:
                loop.call_soon_threadsafe(self._async_event.set)
        return True

    def _set_lease_expire_time(self, when: datetime | None) -> None:
        if when is not None:
            self._lease_expire_time = when

    def __repr__(self) -> str:
        return (
            f"JobContext(job={self.job!r}, queue={self.queue!r}, attempt={self.attempt}, "
            f"version={self.version}, fencing_token={self.fencing_token}, "
            f"cancelled={self.cancelled})"
        )
