"""Worker-side state of one assignment (:class:`Attempt`) and what a dispatcher session needs from its
worker (:class:`SessionHost`): the small, explicit interface between :mod:`gnomon.sdk.session` and
:mod:`gnomon.sdk.worker`."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Protocol

import grpc

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb

from .context import JobContext
from .errors import GnomonError
from .lease import LocalLease
from .outgoing import RefKey
from .protocol import is_final_refusal

if TYPE_CHECKING:  # pragma: no cover
    from .session import DispatcherSession

__all__ = [
    "Attempt",
    "AttemptPhase",
    "SessionHost",
    "WorkerIdentity",
    "QUEUED",
    "RUNNING",
    "DONE",
    "RELEASED",
    "DROPPED",
]


class AttemptPhase(StrEnum):
    """Where an assignment is on the worker (:attr:`Attempt.state`; worker-side only, never sent:
    the server's attempt states are ``gnomon.v1.AttemptState``)."""

    #: received, waiting for a handler slot
    QUEUED = "queued"
    #: accept sent; the handler starts once the accept is acknowledged
    RUNNING = "running"
    #: the handler ended (or the attempt took a slot and never ran)
    DONE = "done"
    #: returned to the dispatcher unstarted
    RELEASED = "released"
    #: its dispatcher session ended before it started
    DROPPED = "dropped"


QUEUED, RUNNING, DONE, RELEASED, DROPPED = (
    AttemptPhase.QUEUED,
    AttemptPhase.RUNNING,
    AttemptPhase.DONE,
    AttemptPhase.RELEASED,
    AttemptPhase.DROPPED,
)

log = logging.getLogger("gnomon.sdk.worker")


class Attempt:
    """Worker-side state of one assignment.

    ``state``: ``queued`` (received, waiting for a slot) -> ``running`` (accept sent; the handler
    starts when the accept is acknowledged, ``launched``) -> ``done``; or ``released`` (returned
    unstarted) / ``dropped`` (its dispatcher session ended before it started). ``dropped_reason`` is
    set when a running attempt must not report a result (accept or heartbeat refused, lease lost,
    session gone). ``session`` is the session that carries the attempt now: the one that delivered
    it, or another after its stream went down (:mod:`gnomon.sdk.routing`).
    """

    __slots__ = (
        "key",
        "ref",
        "ctx",
        "session",
        "state",
        "lease",
        "dropped_reason",
        "accept_sent",
        "task",
        "launched",
        "cp_inflight",
        "cp_acked",
        "borrowed",
    )

    def __init__(
        self, key: RefKey, ref: wpb.AttemptRef, ctx: JobContext, session: DispatcherSession, lease: LocalLease
    ) -> None:
        self.key = key
        self.ref = ref
        self.ctx = ctx
        self.session = session
        self.state = QUEUED
        self.lease = lease
        self.dropped_reason: str | None = None
        self.accept_sent = 0.0  # monotonic seconds
        self.task: asyncio.Task[None] | None = None
        self.launched = False  # the handler was started (only after an ok accept ack)
        # Progress checkpoints (ctx.checkpoint): sequence number of the one sent and not yet
        # acknowledged (at most one in flight: the dispatcher batches writes, so two could be
        # applied out of order), and of the last one acknowledged.
        self.cp_inflight: int | None = None
        self.cp_acked = 0
        # Moved to another session than the one that delivered it (gnomon.sdk.routing): its credit
        # is not that session's to return.
        self.borrowed = False

    def hand_back(self, reason: str) -> None:
        """The accept of this attempt was settled as refused with ``reason``, its slot already freed.
        A transient reason (e.g. ``DATABASE_UNAVAILABLE``: the SDK gave up after
        ``MAX_ACCEPT_RETRIES`` re-sends) means the dispatcher may still hold it as delivered, so it
        is **released** -- the dispatcher forgets it and its relay re-delivers it to any worker --
        never dropped silently. The release is pending until acknowledged (re-sent on the next
        stream); ``STALE_ATTEMPT`` (already forgotten, e.g. past the accept timeout) settles it. A
        final reason (e.g. ``STALE_ATTEMPT``) means the attempt is not ours: nothing to do."""
        s = self.session
        if is_final_refusal(reason) or s.ended:
            return
        log.warning(
            "gave up on the accept of %s attempt %d (%s); releasing it",
            self.ctx.job,
            self.ctx.attempt,
            reason,
        )
        self.state = RELEASED
        s.protocol.release(self.key, self.ref)
        s.buffer.add_release(self.ref)
        s.host.emit("released", self.ctx)

    def drop(self, reason: str, cancel_reason: str) -> None:
        """Marks a running attempt as no longer ours: no result will be reported, and the
        handler's context is cancelled with ``cancel_reason`` (one of ``CANCEL_REASONS``)."""
        if self.dropped_reason is None:
            self.dropped_reason = reason
        self.ctx._cancel(cancel_reason)


@dataclass(frozen=True, slots=True)
class WorkerIdentity:
    """Who says hello on every stream: ``worker_id``, ``namespace`` (``namespaces/{ns}``), the
    ``queues`` served, ``concurrency`` (handler slots) and the call ``metadata``."""

    worker_id: str
    namespace: str
    queues: tuple[str, ...]
    concurrency: int
    metadata: tuple[tuple[str, str], ...] = ()


class SessionHost(Protocol):
    """What a :class:`~gnomon.sdk.session.DispatcherSession` needs from its worker, and nothing more.
    Every method is called on the worker's event loop and must not block."""

    @property
    def draining(self) -> bool:
        """True once the worker stopped taking work (assignments are released, no credits return)."""
        ...

    def open_channel(self, address: str) -> grpc.aio.Channel:
        """A channel to the dispatcher at ``host:port`` (the worker's credentials and limits)."""
        ...

    def deliver(self, att: Attempt) -> None:
        """A new assignment: queue it for a free handler slot."""
        ...

    def launch(self, att: Attempt) -> None:
        """The accept of ``att`` was acknowledged: run its handler."""
        ...

    def abandon(self, att: Attempt) -> None:
        """``att`` took a slot but its handler will never run (accept refused, lease lost, session
        gone): free the slot; nothing is reported."""
        ...

    def emit(self, kind: str, ctx: JobContext) -> None:
        """Reports an event (``"released"``, ``"dropped"`` ...) to the worker's ``on_event``."""
        ...

    def connected(self, session: DispatcherSession) -> None:
        """A stream of ``session`` was welcomed."""
        ...

    def acked(self) -> None:
        """A pending result or release was settled (wakes a draining worker waiting for acks)."""
        ...

    def session_ended(self, session: DispatcherSession) -> None:
        """``session`` is over for good (closed, or its dispatcher gone)."""
        ...

    def fatal(self, error: GnomonError) -> None:
        """A dispatcher rejected the worker for good (e.g. ``PERMISSION_DENIED``): stop it."""
        ...
