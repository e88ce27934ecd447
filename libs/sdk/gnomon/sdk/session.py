"""One worker's connection to one dispatcher: the ``WorkerService.Lease`` stream, kept alive
across reconnects (the lease protocol: docs/concepts.md).

A :class:`DispatcherSession` outlives individual streams. It holds the attempts received from
its dispatcher (queued or running), the results/releases/accepts not yet acknowledged (re-sent on
the next stream to the same dispatcher), and the credit accounting of the stream:

* a new stream says ``hello`` with ``credits = max(1, concurrency - held)`` (``held`` = attempts
  of this dispatcher still queued or running here); the ``owed`` surplus (at most one credit
  when ``held >= concurrency``) is withheld from the next returns, so at most ``concurrency``
  credits are ever outstanding per stream;
* each assignment consumes one credit; each attempt that leaves the worker (finished, dropped or
  released) gives one back through a batched ``credits`` message -- except while draining,
  when no credit is returned so that the dispatcher stops assigning.

A single sender task per stream writes whatever the :class:`~gnomon.sdk.outgoing.OutgoingBuffer`
coalesced; a reader loop handles welcome, assignments and acks.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from typing import TYPE_CHECKING

import grpc

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon._proto.gnomon.v1 import worker_service_pb2_grpc as wgrpc

from . import convert
from .context import JobContext
from .errors import GnomonError
from .lease import LocalLease, initial_lease_seconds
from .outgoing import OutgoingBuffer, RefKey, ref_key

if TYPE_CHECKING:  # pragma: no cover
    from .worker import Worker

__all__ = ["Attempt", "DispatcherSession"]

log = logging.getLogger("gnomon.sdk.worker")

#: Heartbeat interval used until (or if) the welcome names one, in seconds.
DEFAULT_HEARTBEAT_INTERVAL = 5.0
#: Reconnect backoff bounds (seconds); doubled per failed try, with +-20 % jitter.
BACKOFF_MIN = 0.1
BACKOFF_MAX = 5.0
#: Seconds to wait for the dispatcher's welcome (a hung dispatcher accepts TCP but never answers).
WELCOME_TIMEOUT = 10.0
#: A dispatcher that disappeared from discovery is still reconnected to for this long (seconds)
#: while it holds work of ours (running attempts, unacknowledged results).
UNLISTED_GRACE = 30.0
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

#: Ack ``reason`` values that are final refusals (worker_service.proto). Any other reason on an
#: ``ok = false`` ack (e.g. ``DATABASE_UNAVAILABLE``) is taken as transient: the item is re-sent.
FINAL_REFUSALS = frozenset({"STALE_ATTEMPT", "STALE_FENCING_TOKEN", "LEASE_EXPIRED", "NOT_FOUND"})
#: An accept refused for a transient reason is re-sent at most this many times.
MAX_ACCEPT_RETRIES = 5


def is_final_refusal(reason: str) -> bool:
    """True if an ``ok = false`` ack with this ``reason`` means "never" (an empty reason counts as
    final); False for transient reasons the worker retries."""
    return not reason or reason in FINAL_REFUSALS


def resend_delay(tries: int) -> float:
    """Seconds before re-sending an item refused for a transient reason the ``tries``-th time
    (1-based): 0.25 s doubling, capped at 5 s."""
    return min(5.0, 0.25 * (2 ** max(0, tries - 1)))


_ACK_ACCEPT = wpb.ACK_KIND_ACCEPT
_ACK_HEARTBEAT = wpb.ACK_KIND_HEARTBEAT
_ACK_RESULT = wpb.ACK_KIND_RESULT
_ACK_RELEASE = wpb.ACK_KIND_RELEASE
_ACK_CHECKPOINT = wpb.ACK_KIND_CHECKPOINT

QUEUED, RUNNING, DONE, RELEASED, DROPPED = "queued", "running", "done", "released", "dropped"


class Attempt:
    """Worker-side state of one assignment.

    ``state``: ``queued`` (received, waiting for a slot) -> ``running`` (accept sent; the handler
    starts when the accept is acknowledged, ``launched``) -> ``done``; or ``released`` (returned unstarted) / ``dropped`` (its dispatcher session
    ended before it started). ``dropped_reason`` is set when a running attempt must not report a
    result (accept or heartbeat refused, lease lost, session gone).
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
        self.accept_sent = 0.0
        self.task: asyncio.Task | None = None
        self.launched = False  # the handler was started (only after an ok accept ack)
        # Progress checkpoints (ctx.checkpoint): sequence number of the one sent and not yet
        # acknowledged (at most one in flight: the dispatcher batches writes, so two could be
        # applied out of order), and of the last one acknowledged.
        self.cp_inflight: int | None = None
        self.cp_acked = 0

    def drop(self, reason: str, cancel_reason: str) -> None:
        """Marks a running attempt as no longer ours: no result will be reported, and the
        handler's context is cancelled."""
        if self.dropped_reason is None:
            self.dropped_reason = reason
        self.ctx._cancel(cancel_reason)


class _FatalStreamError(Exception):
    def __init__(self, error: GnomonError) -> None:
        super().__init__(str(error))
        self.error = error


class DispatcherSession:
    """The worker's relationship with one dispatcher address (see module docstring).

    Args:
        owner: the :class:`~gnomon.sdk.Worker` (supplies identity, concurrency, draining flag,
            the local run queue and event callbacks).
        address: ``host:port`` of the dispatcher's WorkerService.
        static: True when the address was configured explicitly (always reconnected).
    """

    def __init__(self, owner: Worker, address: str, *, static: bool = False) -> None:
        self.owner = owner
        self.address = address
        self.static = static
        self.channel = owner._make_channel(address)
        self.stub = wgrpc.WorkerServiceStub(self.channel)
        self.wake = asyncio.Event()
        self.buffer = OutgoingBuffer(self.wake.set)
        self.attempts: dict[RefKey, Attempt] = {}
        self.pending_accepts: dict[RefKey, wpb.AttemptRef] = {}
        self.pending_results: dict[RefKey, wpb.AttemptResult] = {}
        self.pending_releases: dict[RefKey, wpb.AttemptRef] = {}
        self.listed = True
        self.unlisted_since: float | None = None
        self.closing = False
        self.ended = False
        self.connected = False
        self.dispatcher_id = ""
        self.region = ""
        self.heartbeat_interval = DEFAULT_HEARTBEAT_INTERVAL
        self.owed = 0
        self.call = None
        self.task: asyncio.Task | None = None
        self._welcomed = False
        self._last_hb = 0.0
        self._hb_unanswered_since: float | None = None
        self._min_lease = float("inf")
        self._resent_accepts: set[RefKey] = set()
        self._retries: dict[tuple[str, RefKey], int] = {}

    # -- lifecycle ----------------------------------------------------------------------------

    def start(self) -> None:
        """Starts the connect/reconnect loop as a task on the running loop."""
        self.task = asyncio.get_running_loop().create_task(self._run(), name=f"gnomon-session-{self.address}")

    def set_listed(self, listed: bool) -> None:
        """Discovery says whether the dispatcher is still registered."""
        if listed:
            self.listed, self.unlisted_since = True, None
        elif self.listed:
            self.listed, self.unlisted_since = False, time.monotonic()

    def has_unacked(self) -> bool:
        """True while results or releases await their ack."""
        return bool(self.pending_results or self.pending_releases)

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
                except _FatalStreamError as exc:
                    self.owner._fatal(exc.error)
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

    def _should_reconnect(self) -> bool:
        if self.static or self.listed:
            return not (self.owner.draining and not self.attempts and not self.has_unacked())
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
                if not att.launched:  # never started: just free its slot
                    att.launched = True
                    self.owner._finish(att, None)
        if self.pending_results and not self.closing:
            log.warning(
                "dispatcher %s gone with %d unacknowledged result(s); the scheduler will "
                "retry those attempts",
                self.address,
                len(self.pending_results),
            )
        self.owner._session_ended(self)

    # -- one stream ---------------------------------------------------------------------------

    async def _connect_once(self) -> None:
        owner = self.owner
        call = self.stub.Lease(metadata=owner._metadata or None)
        self.call = call
        held = len(self.attempts)
        granted = max(1, min(10000, owner.concurrency - held))
        self.owed = max(0, held + granted - owner.concurrency)
        hello = wpb.WorkerHello(
            worker_id=owner.worker_id, namespace=owner._namespace_parent, queues=owner.queues, credits=granted
        )
        try:
            await asyncio.wait_for(call.write(wpb.LeaseRequest(hello=hello)), WELCOME_TIMEOUT)
            first = await asyncio.wait_for(call.read(), WELCOME_TIMEOUT)
        except TimeoutError:
            call.cancel()
            raise ConnectionError(f"no welcome within {WELCOME_TIMEOUT:g}s") from None
        except grpc.aio.AioRpcError as exc:
            if exc.code() in FATAL_CODES:
                raise _FatalStreamError(GnomonError.from_rpc_error(exc)) from None
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
        # A re-sent accept may be refused only because the first one did land (accepts are not
        # idempotent on every server), so its refusal is not taken as final: see _on_ack.
        self._resent_accepts = set(self.pending_accepts)
        for ref in self.pending_accepts.values():
            self.buffer.add_accept(ref)
        for res in self.pending_results.values():
            self.buffer.add_result(res)
        for ref in self.pending_releases.values():
            self.buffer.add_release(ref)
        log.info(
            "dispatcher %s (%s): connected, %d credit(s), heartbeat every %.3gs",
            self.address,
            self.dispatcher_id or "?",
            granted,
            self.heartbeat_interval,
        )
        owner._emit_connected(self)
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
                    self.owner._emit("dropped", att.ctx)

    async def _sender(self, call) -> None:
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
        if key in self.attempts or key in self.pending_results:
            # Re-delivery of an attempt we hold or already finished: it consumed a credit.
            self.credit_back()
            if key in self.pending_results:
                self.buffer.add_result(self.pending_results[key])
            return
        ctx = JobContext.from_assignment(a)
        lease_d = convert.duration_seconds(a.lease_duration) if a.HasField("lease_duration") else None
        lease = LocalLease(initial_lease_seconds(lease_d, ctx.lease_expire_time))
        att = Attempt(key, ref, ctx, self, lease)
        if self.owner.draining:
            att.state = RELEASED
            self.pending_releases[key] = ref
            self.buffer.add_release(ref)
            self.owner._emit("released", ctx)
            return
        self.attempts[key] = att
        self.owner._enqueue(att)

    def _on_ack(self, ack: wpb.Ack) -> None:
        key = ref_key(ack.attempt)
        kind = ack.kind
        if kind == _ACK_HEARTBEAT:
            att = self.attempts.get(key)
            if att is None or att.state != RUNNING:
                return
            if ack.ok and ack.cancel_requested and not ack.HasField("lease_expire_time"):
                # An unprompted cancellation push (worker_service.proto): it answers no heartbeat
                # and renews nothing, so it must not consume an in-flight heartbeat record.
                self._after_renewal(att, ack)
                return
            att.lease.heartbeat_acked(ack.ok)
            if ack.ok or is_final_refusal(ack.reason):
                self._after_renewal(att, ack)
            # else: not renewed this time (e.g. DATABASE_UNAVAILABLE); the local lease decides.
        elif kind == _ACK_RESULT:
            if key not in self.pending_results:
                return
            if not ack.ok and not is_final_refusal(ack.reason):
                self._retry_later("result", key, ack.reason)
                return
            self.pending_results.pop(key, None)
            self.pending_accepts.pop(key, None)
            self._retries.pop(("result", key), None)
            if not ack.ok:
                log.warning(
                    "dispatcher %s refused result of %s attempt %d: %s",
                    self.address,
                    ack.attempt.job,
                    ack.attempt.attempt,
                    ack.reason or "?",
                )
            self.owner._acked()
        elif kind == _ACK_ACCEPT:
            if key not in self.pending_accepts:
                return
            att = self.attempts.get(key)
            if not ack.ok and not is_final_refusal(ack.reason):
                tries = self._retries.get(("accept", key), 0) + 1
                still_ours = (att is not None and att.state == RUNNING) or key in self.pending_results
                if tries <= MAX_ACCEPT_RETRIES and still_ours:
                    self._retry_later("accept", key, ack.reason)
                    return
            self.pending_accepts.pop(key, None)
            self._resent_accepts.discard(key)
            self._retries.pop(("accept", key), None)
            if att is None or att.state != RUNNING:
                return
            if ack.ok and ack.HasField("lease_expire_time"):
                att.lease.renew_from(att.accept_sent)
            # Accepts are idempotent on the dispatcher (same worker, same token), so a refusal,
            # even of a re-sent accept, means the attempt is not ours: drop it unstarted.
            self._after_renewal(att, ack)
            if not att.launched:
                if ack.ok:
                    self.owner._launch(att)
                else:
                    att.launched = True
                    self.owner._finish(att, None)
        elif kind == _ACK_CHECKPOINT:
            att = self.attempts.get(key)
            if att is None or att.cp_inflight is None:
                return
            seq, att.cp_inflight = att.cp_inflight, None
            if ack.ok or ack.reason == "CHECKPOINT_TOO_LARGE" or is_final_refusal(ack.reason):
                att.cp_acked = max(att.cp_acked, seq)
                if not ack.ok:
                    log.warning(
                        "dispatcher %s refused a checkpoint of %s attempt %d: %s",
                        self.address,
                        att.ctx.job,
                        att.ctx.attempt,
                        ack.reason or "?",
                    )
            # else (e.g. DATABASE_UNAVAILABLE): the latest checkpoint goes out with the next heartbeat
        elif kind == _ACK_RELEASE:
            if key not in self.pending_releases:
                return
            if not ack.ok and not is_final_refusal(ack.reason):
                self._retry_later("release", key, ack.reason)
                return
            self.pending_releases.pop(key, None)
            self._retries.pop(("release", key), None)
            self.owner._acked()

    def _retry_later(self, kind: str, key: RefKey, reason: str) -> None:
        tries = self._retries.get((kind, key), 0) + 1
        self._retries[(kind, key)] = tries
        delay = resend_delay(tries)
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
        if kind == "result" and key in self.pending_results:
            self.buffer.add_result(self.pending_results[key])
        elif kind == "accept" and key in self.pending_accepts:
            self.buffer.add_accept(self.pending_accepts[key])
        elif kind == "release" and key in self.pending_releases:
            self.buffer.add_release(self.pending_releases[key])

    def _after_renewal(self, att: Attempt, ack: wpb.Ack) -> None:
        if ack.ok:
            if ack.HasField("lease_expire_time"):
                att.ctx._set_lease_expire_time(convert.from_timestamp(ack.lease_expire_time))
            if ack.cancel_requested:
                if att.ctx._cancel("cancel_requested"):
                    log.info("cancellation requested for %s attempt %d", att.ctx.job, att.ctx.attempt)
        elif att.dropped_reason is None:
            reason = ack.reason or "REFUSED"
            att.drop(reason, "lease_lost" if reason == "LEASE_EXPIRED" else "refused")
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
        self.pending_accepts[att.key] = att.ref
        self.buffer.add_accept(att.ref)
        if att.lease.lease_seconds < self._min_lease:
            self._min_lease = att.lease.lease_seconds

    def finished(self, att: Attempt, result: wpb.AttemptResult | None) -> None:
        """The handler of ``att`` returned: forget it, give its credit back and queue ``result``
        (``None``: nothing to report, the attempt was dropped)."""
        self.attempts.pop(att.key, None)
        if result is None:
            self.pending_accepts.pop(att.key, None)
            self.buffer.discard(att.key)
        else:
            self.pending_results[att.key] = result
            self.buffer.add_result(result)
        self.credit_back()

    def release(self, att: Attempt) -> None:
        """Returns an unstarted attempt to the dispatcher (it is re-delivered)."""
        att.state = RELEASED
        self.attempts.pop(att.key, None)
        self.pending_releases[att.key] = att.ref
        self.buffer.add_release(att.ref)
        self.credit_back()

    def credit_back(self) -> None:
        """One attempt of this stream left the worker: return its credit (batched), unless it
        pays off the hello surplus or the worker is draining."""
        if self.owner.draining:
            return
        if self.owed > 0:
            self.owed -= 1
            return
        self.buffer.add_credits(1)

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
                    if not att.launched:  # accept never acknowledged: free the slot
                        att.launched = True
                        self.owner._finish(att, None)
                elif att.state == QUEUED:
                    self.release(att)
                    self.owner._emit("released", att.ctx)
