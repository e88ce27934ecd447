"""One worker's connection to one dispatcher: the ``WorkerService.Lease`` stream, kept alive
across reconnects (the lease protocol: docs/protocol.md).

A :class:`DispatcherSession` outlives individual streams. It holds the attempts received from its
dispatcher or moved to it from a session whose stream is down (:mod:`gnomon.sdk.routing`); credits
and items awaiting an ack are the bookkeeping of a pure :class:`~gnomon.sdk.protocol.LeaseProtocol`.
It talks to its worker only through :class:`~gnomon.sdk.attempts.SessionHost`. One sender task per
stream writes what :class:`~gnomon.sdk.outgoing.OutgoingBuffer` coalesced; a reader loop handles
welcome, assignments and acks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import grpc

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon._proto.gnomon.v1 import worker_service_pb2_grpc as wgrpc

from . import convert
from .attempts import DROPPED, QUEUED, RELEASED, RUNNING, Attempt, SessionHost, WorkerIdentity
from .context import JobContext
from .errors import GnomonError
from .lease import LocalLease, initial_lease_seconds
from .outgoing import OutgoingBuffer, RefKey, ref_key
from .protocol import Ack, AckReason, LeaseProtocol
from .reconnect import FATAL_CODES, FatalStreamError, Reconnecting

__all__ = ["DispatcherSession"]

log = logging.getLogger("gnomon.sdk.worker")

#: Heartbeat interval used until (or if) the welcome names one, in seconds.
DEFAULT_HEARTBEAT_INTERVAL = 5.0
#: Seconds to wait for the dispatcher's welcome (a hung dispatcher accepts TCP but never answers).
WELCOME_TIMEOUT = 10.0
#: A dispatcher that disappeared from discovery is still reconnected to for this long (seconds)
#: while it holds work of ours (running attempts, unacknowledged results).
UNLISTED_GRACE = 30.0


def _stub(channel: grpc.aio.Channel) -> Any:
    factory: Any = wgrpc.WorkerServiceStub
    return factory(channel)


class DispatcherSession(Reconnecting):
    """The worker's relationship with one dispatcher address (see module docstring).

    Args:
        host: the worker, as :class:`~gnomon.sdk.attempts.SessionHost` (draining flag, channels,
            the local run queue, event callbacks).
        identity: who says hello (worker id, namespace, queues, concurrency, metadata).
        address: ``host:port`` of the dispatcher's WorkerService.
        static: True when the address was configured explicitly (always reconnected).
    """

    def __init__(
        self, host: SessionHost, identity: WorkerIdentity, address: str, *, static: bool = False
    ) -> None:
        self.host = host
        self.identity = identity
        self.address = address
        self.static = static
        self.channel = host.open_channel(address)
        self.stub: Any = _stub(self.channel)
        self.wake = asyncio.Event()
        self.buffer = OutgoingBuffer(self.wake.set)
        self.attempts: dict[RefKey, Attempt] = {}
        self.protocol: LeaseProtocol[RefKey, wpb.AttemptRef, wpb.AttemptResult] = LeaseProtocol(
            identity.concurrency
        )
        self.listed = True
        self.unlisted_since: float | None = None
        self.closing = False
        self.ended = False
        self.connected = False
        self.dispatcher_id = ""
        self.region = ""
        self.heartbeat_interval = DEFAULT_HEARTBEAT_INTERVAL
        self.call: Any = None  # the live grpc.aio stream-stream call, or None
        self.task: asyncio.Task[None] | None = None
        self._welcomed = False
        self._last_hb = 0.0
        self._hb_unanswered_since: float | None = None
        self._min_lease = float("inf")

    # -- lifecycle ----------------------------------------------------------------------------

    def set_listed(self, listed: bool) -> None:
        """Discovery says whether the dispatcher is still registered."""
        if listed:
            self.listed, self.unlisted_since = True, None
        elif self.listed:
            self.listed, self.unlisted_since = False, time.monotonic()

    def has_unacked(self) -> bool:
        """True while results or releases await their ack."""
        return self.protocol.has_unacked()

    def _on_fatal(self, error: GnomonError) -> None:
        self.host.fatal(error)

    def _should_reconnect(self) -> bool:
        if self.static or self.listed:
            return not (self.host.draining and not self.attempts and not self.has_unacked())
        has_work = bool(self.attempts or self.has_unacked())
        return has_work and (time.monotonic() - (self.unlisted_since or 0.0)) < UNLISTED_GRACE

    def _teardown(self) -> None:
        """The session is over: nothing held here can be reported any more."""
        self.ended = True
        self.connected = False
        self.call = None
        for att in list(self.attempts.values()):
            if att.state == QUEUED:
                att.state = DROPPED
            elif att.state == RUNNING:
                att.drop("session ended", "lease_lost")
                self._abandon(att)
        if self.protocol.results and not self.closing:
            log.warning(
                "dispatcher %s gone with %d unacknowledged result(s); the scheduler will "
                "retry those attempts",
                self.address,
                len(self.protocol.results),
            )
        self.host.session_ended(self)

    def _abandon(self, att: Attempt) -> None:
        """``att`` holds a slot but its handler never started: free the slot (nothing reported)."""
        if not att.launched:
            att.launched = True
            self.host.abandon(att)

    # -- one stream ---------------------------------------------------------------------------

    async def _connect_once(self) -> None:
        me = self.identity
        call = self.stub.Lease(metadata=me.metadata or None)
        self.call = call
        granted = self.protocol.hello(held=len(self.attempts))
        hello = wpb.WorkerHello(
            worker_id=me.worker_id, namespace=me.namespace, queues=me.queues, credits=granted
        )
        try:
            await asyncio.wait_for(call.write(wpb.LeaseRequest(hello=hello)), WELCOME_TIMEOUT)
            first = await asyncio.wait_for(call.read(), WELCOME_TIMEOUT)
        except TimeoutError:
            call.cancel()
            raise ConnectionError(f"no welcome within {WELCOME_TIMEOUT:g}s") from None
        except grpc.aio.AioRpcError as exc:
            if exc.code() in FATAL_CODES:
                raise FatalStreamError(GnomonError.from_rpc_error(exc)) from None
            raise
        if first is grpc.aio.EOF:
            raise ConnectionError("stream closed before welcome")
        if first.WhichOneof("kind") != "welcome":
            call.cancel()
            raise ConnectionError(f"expected welcome, got {first.WhichOneof('kind')}")
        self._on_welcome(first.welcome)
        self._welcomed = True
        self.connected = True
        now = time.monotonic()
        self._last_hb = now
        self._hb_unanswered_since = None
        # Whatever the previous stream did not get acknowledged goes out again.
        self.buffer.clear()
        again = self.protocol.resend_all()
        for ref in again.accepts:
            self.buffer.add_accept(ref)
        for res in again.results:
            self.buffer.add_result(res)
        for ref in again.releases:
            self.buffer.add_release(ref)
        log.info(
            "dispatcher %s (%s): connected, %d credit(s), heartbeat every %.3gs",
            self.address,
            self.dispatcher_id or "?",
            granted,
            self.heartbeat_interval,
        )
        self.host.connected(self)
        sender = asyncio.get_running_loop().create_task(self._sender(call))
        try:
            while True:
                msg = await call.read()
                if msg is grpc.aio.EOF:
                    log.info("dispatcher %s: stream closed by server", self.address)
                    return
                self._hb_unanswered_since = None
                self._handle(msg)
        finally:
            self.connected = False
            self.call = None
            sender.cancel()
            self._hb_unanswered_since = None
            for att in list(self.attempts.values()):
                att.lease.forget_inflight()
                att.cp_inflight = None  # no ack will come on this stream: re-sent on the next
                if att.state == QUEUED:
                    # Unstarted attempts belong to the stream that delivered them: the dispatcher
                    # returns them to its outbox when the stream ends and re-delivers them.
                    att.state = DROPPED
                    del self.attempts[att.key]
                    self.host.emit("dropped", att.ctx)

    async def _sender(self, call: Any) -> None:
        wake, buffer = self.wake, self.buffer
        try:
            while True:
                await wake.wait()
                wake.clear()
                for msg in buffer.take():
                    await call.write(msg)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # the stream broke; the reader sees it too
            log.debug("dispatcher %s: write failed: %r", self.address, exc)
            call.cancel()

    def _on_welcome(self, w: wpb.DispatcherWelcome) -> None:
        self.dispatcher_id = w.dispatcher_id
        self.region = w.region
        if w.HasField("heartbeat_interval"):
            hb = convert.duration_seconds(w.heartbeat_interval)
            if hb > 0:
                self.heartbeat_interval = hb

    def _handle(self, msg: wpb.LeaseResponse) -> None:
        kind = msg.WhichOneof("kind")
        if kind == "assignments":
            for a in msg.assignments.assignments:
                self._on_assignment(a)
        elif kind == "acks":
            for ack in msg.acks.acks:
                self._on_ack(ack)
        elif kind == "welcome":
            self._on_welcome(msg.welcome)

    # -- incoming -----------------------------------------------------------------------------

    def _on_assignment(self, a: wpb.Assignment) -> None:
        ref = wpb.AttemptRef()
        ref.CopyFrom(a.attempt)
        key = ref_key(ref)
        sent = self.protocol.redelivered(key)
        if key in self.attempts or sent is not None:
            # Re-delivery of an attempt we hold or already finished: it consumed a credit.
            self.credit_back()
            if sent is not None:
                self.buffer.add_result(sent)
            return
        ctx = JobContext.from_assignment(a)
        lease_d = convert.duration_seconds(a.lease_duration) if a.HasField("lease_duration") else None
        lease = LocalLease(initial_lease_seconds(lease_d, ctx.lease_expire_time))
        att = Attempt(key, ref, ctx, self, lease)
        if self.host.draining:
            att.state = RELEASED
            self.protocol.release(key, ref)
            self.buffer.add_release(ref)
            self.host.emit("released", ctx)
            return
        self.attempts[key] = att
        self.host.deliver(att)

    def _on_ack(self, ack: wpb.Ack) -> None:
        key, kind = ref_key(ack.attempt), ack.kind
        if kind == wpb.ACK_KIND_HEARTBEAT:
            att = self.attempts.get(key)
            if att is None or att.state != RUNNING:
                return
            if ack.ok and ack.cancel_requested and not ack.HasField("lease_expire_time"):
                # An unprompted cancellation push (worker_service.proto): it answers no heartbeat
                # and renews nothing, so it must not consume an in-flight heartbeat record.
                self._after_renewal(att, ack)
                return
            if self.protocol.heartbeat_ack(att.lease, ack.ok, ack.reason):
                self._after_renewal(att, ack)
            # else: not renewed this time (e.g. DATABASE_UNAVAILABLE); the local lease decides.
        elif kind == wpb.ACK_KIND_RESULT:
            outcome, delay = self.protocol.result_ack(key, ack.ok, ack.reason)
            if outcome is Ack.RETRY:
                self._retry_later("result", key, ack.reason, delay)
            if outcome is not Ack.SETTLED:
                return
            if not ack.ok:
                log.warning(
                    "dispatcher %s refused result of %s attempt %d: %s",
                    self.address,
                    ack.attempt.job,
                    ack.attempt.attempt,
                    ack.reason or "?",
                )
            self.host.acked()
        elif kind == wpb.ACK_KIND_ACCEPT:
            self._on_accept_ack(key, ack)
        elif kind == wpb.ACK_KIND_CHECKPOINT:
            self._on_checkpoint_ack(key, ack)
        elif kind == wpb.ACK_KIND_RELEASE:
            outcome, delay = self.protocol.release_ack(key, ack.ok, ack.reason)
            if outcome is Ack.RETRY:
                self._retry_later("release", key, ack.reason, delay)
            elif outcome is Ack.SETTLED:
                self.host.acked()

    def _on_accept_ack(self, key: RefKey, ack: wpb.Ack) -> None:
        att = self.attempts.get(key)
        running = att is not None and att.state == RUNNING
        outcome, delay = self.protocol.accept_ack(key, ack.ok, ack.reason, still_ours=running)
        if outcome is Ack.RETRY:
            self._retry_later("accept", key, ack.reason, delay)
        if outcome is not Ack.SETTLED or att is None or att.state != RUNNING:
            return
        if ack.ok and ack.HasField("lease_expire_time"):
            att.lease.renew_from(att.accept_sent)
        # Accepts are idempotent on the dispatcher (same worker, same token), so a refusal,
        # even of a re-sent accept, means the attempt is not ours: drop it unstarted.
        self._after_renewal(att, ack)
        if ack.ok:
            if not att.launched:
                self.host.launch(att)
        else:
            self._abandon(att)
            att.hand_back(ack.reason)  # given up after transient refusals: released, not dropped

    def _on_checkpoint_ack(self, key: RefKey, ack: wpb.Ack) -> None:
        att = self.attempts.get(key)
        if att is None or att.cp_inflight is None:
            return
        seq, att.cp_inflight = att.cp_inflight, None
        if self.protocol.checkpoint_ack(ack.ok, ack.reason):
            att.cp_acked = max(att.cp_acked, seq)
            att.ctx._checkpoint_saved = att.cp_acked if ack.ok else att.ctx._checkpoint_saved
            if not ack.ok:
                log.warning(
                    "dispatcher %s refused a checkpoint of %s attempt %d: %s",
                    self.address,
                    att.ctx.job,
                    att.ctx.attempt,
                    ack.reason or "?",
                )
        # else (e.g. DATABASE_UNAVAILABLE): the latest checkpoint goes out with the next heartbeat

    def _retry_later(self, kind: str, key: RefKey, reason: str, delay: float) -> None:
        log.info(
            "dispatcher %s: %s of %s attempt %d not applied (%s); re-sending in %.2gs",
            self.address,
            kind,
            key[0],
            key[1],
            reason,
            delay,
        )
        asyncio.get_running_loop().call_later(delay, self._resend, kind, key)

    def _resend(self, kind: str, key: RefKey) -> None:
        if self.ended or not self.connected:
            return  # the next stream re-sends everything still pending
        item = self.protocol.pending(kind, key)
        if isinstance(item, wpb.AttemptResult):
            self.buffer.add_result(item)
        elif item is not None and kind == "accept":
            self.buffer.add_accept(item)
        elif item is not None:
            self.buffer.add_release(item)

    def _after_renewal(self, att: Attempt, ack: wpb.Ack) -> None:
        if ack.ok:
            if ack.HasField("lease_expire_time"):
                att.ctx._set_lease_expire_time(convert.from_timestamp(ack.lease_expire_time))
            if ack.cancel_requested:
                if att.ctx._cancel("cancel_requested"):
                    log.info("cancellation requested for %s attempt %d", att.ctx.job, att.ctx.attempt)
        elif att.dropped_reason is None:
            reason = ack.reason or "REFUSED"
            att.drop(reason, "lease_lost" if reason == AckReason.LEASE_EXPIRED else "refused")
            log.warning(
                "dispatcher %s refused %s attempt %d (%s); dropping it",
                self.address,
                att.ctx.job,
                att.ctx.attempt,
                reason,
            )

    # -- outgoing (called by the worker) ------------------------------------------------------

    def accept(self, att: Attempt) -> None:
        """The handler of ``att`` is starting: queue its accept."""
        att.state = RUNNING
        att.accept_sent = time.monotonic()
        self.protocol.accept(att.key, att.ref)
        self.buffer.add_accept(att.ref)
        if att.lease.lease_seconds < self._min_lease:
            self._min_lease = att.lease.lease_seconds

    def finished(self, att: Attempt, result: wpb.AttemptResult | None) -> None:
        """The handler of ``att`` returned: forget it, give its credit back and queue ``result``
        (``None``: nothing to report, the attempt was dropped)."""
        self.attempts.pop(att.key, None)
        self.protocol.finish(att.key, result)
        if result is None:
            self.buffer.discard(att.key)
        else:
            self.buffer.add_result(result)
        if not att.borrowed:  # a moved attempt's credit is its first stream's (gnomon.sdk.routing)
            self.credit_back()

    def release(self, att: Attempt) -> None:
        """Returns an unstarted attempt to the dispatcher (it is re-delivered)."""
        att.state = RELEASED
        self.attempts.pop(att.key, None)
        self.protocol.release(att.key, att.ref)
        self.buffer.add_release(att.ref)
        self.credit_back()

    def credit_back(self) -> None:
        """One attempt of this stream left the worker: return its credit (batched), unless it
        pays off the hello surplus or the worker is draining."""
        self.buffer.add_credits(self.protocol.credit_back(self.host.draining))

    # -- timers (called by the worker's ticker) -----------------------------------------------

    def tick(self, now: float, check_leases: bool) -> None:
        """Sends the periodic heartbeat when due, detects a silent stream, and (when
        ``check_leases``) drops attempts whose local lease ran out."""
        if check_leases:
            self._check_leases(now)
        if not self.connected:
            return
        interval = min(self.heartbeat_interval, self._min_lease / 3.0)
        if self._hb_unanswered_since is not None and now - self._hb_unanswered_since > max(
            3 * interval, 10.0
        ):
            log.warning(
                "dispatcher %s: no answer for %.1fs; reconnecting",
                self.address,
                now - self._hb_unanswered_since,
            )
            self._hb_unanswered_since = None
            if self.call is not None:
                self.call.cancel()
            return
        if now - self._last_hb < interval or self.buffer.heartbeat_pending:
            return
        self._last_hb = now
        refs = []
        checkpoints = []
        min_lease = float("inf")
        for att in self.attempts.values():
            if att.state == RUNNING and att.dropped_reason is None:
                refs.append(att.ref)
                att.lease.heartbeat_sent(now)
                if att.lease.lease_seconds < min_lease:
                    min_lease = att.lease.lease_seconds
                cp = att.ctx._checkpoint
                if cp is not None and att.cp_inflight is None and cp[0] > att.cp_acked and att.launched:
                    att.cp_inflight = cp[0]
                    checkpoints.append(wpb.Checkpoint(attempt=att.ref, data=cp[1]))
        self._min_lease = min_lease
        if refs:
            self.buffer.set_heartbeats(refs, checkpoints)
            if self._hb_unanswered_since is None:
                self._hb_unanswered_since = now

    def _check_leases(self, now: float) -> None:
        for att in list(self.attempts.values()):
            bound = att.ctx.start_to_close
            if (
                bound is not None
                and att.launched
                and att.state == RUNNING
                and not att.ctx.cancelled
                and now - att.accept_sent > bound.total_seconds()
            ):
                # the server times the attempt out anyway; tell the handler to stop now
                att.ctx._cancel("start_to_close")
                log.warning(
                    "%s attempt %d passed its start_to_close (%s); cancelling it",
                    att.ctx.job,
                    att.ctx.attempt,
                    bound,
                )
            if att.lease.lost(now):
                if att.state == RUNNING and att.dropped_reason is None:
                    att.drop("lease lost", "lease_lost")
                    log.warning(
                        "lease of %s attempt %d could not be renewed in time; "
                        "cancelling it (the scheduler will retry)",
                        att.ctx.job,
                        att.ctx.attempt,
                    )
                    self._abandon(att)  # accept never acknowledged: free the slot
                elif att.state == QUEUED:
                    self.release(att)
                    self.host.emit("released", att.ctx)
