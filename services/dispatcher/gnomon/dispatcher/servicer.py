"""gRPC adapters of the dispatcher: the worker lease stream (and, from :mod:`.hints`, the wake-up hint)."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from typing import Any

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon._proto.gnomon.v1 import worker_service_pb2_grpc
from gnomon.common import metrics, tracing
from gnomon.common.domain.attempts import Result
from gnomon.common.domain.failures import FailureClass
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.errors import (
    GnomonError,
    InvalidArgument,
    PermissionDenied,
    Unauthenticated,
    Unavailable,
)
from gnomon.common.failure_wire import failure_class_from_wire
from gnomon.common.metric_batches import record_many
from gnomon.common.quotas import UNLIMITED, NamespaceCache
from gnomon.common.rpc.auth import current_caller, reauthenticate
from gnomon.common.storage.checkpoints import MAX_CHECKPOINT_BYTES, CheckpointWrite
from gnomon.common.stream_quota_settings import StreamQuotaSettings
from gnomon.common.stream_settings import StreamSettings
from gnomon.common.timeconv import duration_seconds, to_duration, to_timestamp
from gnomon.dispatcher import tracing as dispatch_tracing
from gnomon.dispatcher.acks import AckTasks, held_keys, malformed, releases, send
from gnomon.dispatcher.admission import admit, refuse_if_full
from gnomon.dispatcher.flow import OwnershipGate, StreamEdge
from gnomon.dispatcher.hello import (
    MAX_CREDITS,
    Hello,
    attempt_key,
    authorize_hello,
    clip,
    oversized,
    validate_hello,
)
from gnomon.dispatcher.hints import HintServicer
from gnomon.dispatcher.sessions import SessionRegistry, WorkerSession
from gnomon.dispatcher.writes import WriteBatcher

log = logging.getLogger(__name__)

__all__ = ["HintServicer", "WorkerServicer"]


class WorkerServicer(worker_service_pb2_grpc.WorkerServiceServicer):
    """``gnomon.v1.WorkerService.Lease``: one session per stream (see worker_service.proto)."""

    def __init__(
        self,
        registry: SessionRegistry,
        writes: WriteBatcher,
        *,
        dispatcher_id: str,
        region: str,
        heartbeat_interval_s: float,
        on_credits,
        hello_timeout_s: float = 10.0,
        quotas: NamespaceCache | None = None,
        max_streams: int = 10_000,
        stream_defaults: StreamQuotaSettings | None = None,
        recheck_s: float = 5.0,
        stream: StreamSettings | None = None,
    ):
        self.registry, self.writes = registry, writes
        self.dispatcher_id, self.region, self.heartbeat_interval_s = (
            dispatcher_id,
            region,
            heartbeat_interval_s,
        )
        self.on_credits = on_credits
        self.hello_timeout_s = hello_timeout_s
        #: namespace quotas checked at hello (gnomon.dispatcher.admission); None: only the defaults
        self.quotas = quotas
        #: the stream quotas of a namespace that sets none, and the fair-share point (GNOMON_STREAM_QUOTA_*)
        self.stream_defaults = stream_defaults or StreamQuotaSettings.model_construct()
        #: most streams this dispatcher holds (GNOMON_DISPATCHER_MAX_STREAMS)
        self.max_streams = max_streams
        #: how often an open stream's credential and grants are checked again, seconds
        self.recheck_s = recheck_s
        self.draining = False
        stream = stream or StreamSettings()
        #: most write items of one stream in flight (GNOMON_STREAM_MAX_INFLIGHT_WRITES)
        self.max_inflight = stream.max_inflight_writes
        #: unknown attempt references go through this bounded, rate-limited ownership check
        self.edge = StreamEdge(
            OwnershipGate(
                writes.engine if writes is not None else None,
                rate_per_s=stream.unknown_refs_per_s,
                burst=stream.unknown_refs_burst,
                concurrency=stream.ownership_checks,
            )
        )
        self.acks = AckTasks()
        self._ack_tasks = self.acks.tasks  # the pending ack tasks (one set, named for the tests)

    async def Lease(self, request_iterator, context):
        """One worker session: the first message opens it (worker id, namespace, queues, credits),
        then assignments flow out as credits allow and accepts, heartbeats, checkpoints, results and
        releases flow in, each acknowledged after its batched write commits. Ends when the worker
        closes the stream or the dispatcher drains; its unfinished attempts are re-delivered by the
        relay or reaped when their lease expires."""
        refuse_if_full(self.registry, self.max_streams)
        try:
            first = await asyncio.wait_for(request_iterator.__anext__(), self.hello_timeout_s)
        except StopAsyncIteration:
            return
        except TimeoutError:
            log.info("stream closed: no hello within %.1f s", self.hello_timeout_s)
            raise GnomonError(
                f"no hello within {self.hello_timeout_s:g} s", reason=ErrorReason.PROTOCOL_VIOLATION
            ) from None
        if first.WhichOneof("kind") != "hello":
            raise GnomonError("the first message must be hello", reason=ErrorReason.PROTOCOL_VIOLATION)
        try:
            h = validate_hello(first.hello)
        except InvalidArgument:
            log.info("hello refused: worker_id=%s", clip(first.hello.worker_id))
            raise
        principal = current_caller(context).principal
        try:
            h = authorize_hello(h, principal, namespace_given=bool(first.hello.namespace))
        except GnomonError:
            log.info("hello refused: principal %s may not lease as asked", clip(principal.name, 128))
            raise
        if self.draining:
            raise GnomonError("dispatcher is draining", reason=ErrorReason.SHUTTING_DOWN)
        quotas = UNLIMITED if self.quotas is None else await self.quotas.quotas(h.namespace)
        # no await between admit and registry.add: the check and the add are one step
        admit(self.registry, h, principal.name, quotas, self.stream_defaults, self.max_streams)
        session = self.registry.add(h.worker_id, h.namespace, h.queues, h.credits, owner=principal.name)
        metrics.CONNECTED_WORKERS.set(len(self.registry.sessions))
        log.info(
            "worker %s of %s connected: ns=%r queues=%r credits=%d",
            clip(session.worker_id, 128),
            clip(principal.name, 128),
            h.namespace,
            h.queues,
            h.credits,
        )
        self.on_credits()
        reader = asyncio.create_task(self._read(session, request_iterator))
        recheck = asyncio.create_task(self._recheck(session, context, h, bool(first.hello.namespace)))
        try:
            yield wpb.LeaseResponse(
                welcome=wpb.DispatcherWelcome(
                    dispatcher_id=self.dispatcher_id,
                    region=self.region,
                    heartbeat_interval=to_duration(timedelta(seconds=self.heartbeat_interval_s)),
                )
            )
            out, cap = session.out, self.registry.max_queued_bytes
            while True:
                msg = await out.get()
                if msg is None:
                    break
                session.flow.set()  # the reader may wait for the queue to shrink
                if out.bytes < cap <= out.bytes + out.last_bytes:
                    self.on_credits()  # back under its byte cap: it has capacity again
                yield msg
            if session.refused is not None:  # e.g. a later message that does not parse
                raise session.refused
        finally:
            reader.cancel()
            recheck.cancel()
            self.registry.remove(session)
            metrics.CONNECTED_WORKERS.set(len(self.registry.sessions))
            unaccepted = [k for k in session.held if k not in session.accepted]
            # their attempts are still QUEUED (the outbox): the relay's recovery scan re-delivers them
            log.info(
                "worker %s disconnected (%d unaccepted attempts go back to the outbox)",
                clip(session.worker_id, 128),
                len(unaccepted),
            )

    async def _recheck(self, s: WorkerSession, context: Any, hello: Hello, namespace_given: bool) -> None:
        """Every :attr:`recheck_s` seconds, authenticates the stream's credential again and
        re-authorizes its hello: a revoked key, a disabled principal or a removed worker grant ends
        the stream (UNAUTHENTICATED / PERMISSION_DENIED) within that time plus the credential cache
        (``GNOMON_AUTH_CACHE_S``). A database outage keeps the stream (nothing can be checked)."""
        while not s.closed:
            await asyncio.sleep(self.recheck_s)
            try:
                caller = await reauthenticate(context)
                now = authorize_hello(hello, caller.principal, namespace_given=namespace_given)
                if now.namespace != s.namespace:
                    raise PermissionDenied(
                        "the stream's worker grant changed namespace", metadata={"namespace": s.namespace}
                    )
            except (Unauthenticated, PermissionDenied) as e:
                log.info(
                    "worker %s of %s: credential or grant withdrawn; stream ended",
                    clip(s.worker_id, 128),
                    clip(s.owner or "", 128),
                )
                s.refused = e
                s.out.put_nowait(None)
                return
            except (Unavailable, KeyError):
                continue

    async def _read(self, s: WorkerSession, it) -> None:
        try:
            async for msg in it:
                if (too_many := oversized(msg)) is not None:
                    raise too_many
                kind = msg.WhichOneof("kind")
                if kind == "credits":
                    if msg.credits.credits > 0 and self.registry.add_credits(
                        s, msg.credits.credits, MAX_CREDITS
                    ):
                        self.on_credits()
                elif kind == "accepts":
                    self._accepts(s, msg.accepts.attempts)
                elif kind == "heartbeats":
                    self._heartbeats(s, msg.heartbeats.attempts)
                    if msg.heartbeats.checkpoints:
                        self._checkpoints(s, msg.heartbeats.checkpoints)
                elif kind == "results":
                    self._results(s, msg.results.results)
                elif kind == "releases":
                    self._releases(s, msg.releases.attempts)
                await self._flow(s)
        except asyncio.CancelledError:
            raise
        except GnomonError as e:  # the stream's own input was refused: end it with that status
            s.refused = e
        except Exception:
            log.debug("stream read ended", exc_info=True)
        finally:
            s.out.put_nowait(None)

    async def _flow(self, s: WorkerSession) -> None:
        """Waits until stream ``s`` may be read again (flow control: meanwhile the worker's sends
        block): its writes in flight under ``max_inflight``, no ownership check of its running, its
        queued responses under the registry's byte cap."""
        cap = self.registry.max_queued_bytes
        while not s.closed and (s.inflight >= self.max_inflight or s.checking or s.out.bytes >= cap):
            s.flow.clear()
            await s.flow.wait()

    def _ack_later(self, s: WorkerSession, refs: list, outcomes, kind, build, after=None) -> None:
        """See :meth:`gnomon.dispatcher.acks.AckTasks.later`."""
        self.acks.later(s, refs, outcomes, kind, build, after)

    def _accepts(self, s: WorkerSession, refs) -> None:
        t0 = time.time_ns() if tracing.ENABLED else 0
        good, keys, bad = [], [], []
        for ref in refs:
            k = attempt_key(ref)
            if k is None:
                bad.append(malformed(ref, wpb.ACK_KIND_ACCEPT))
                continue
            good.append(ref)
            keys.append(k)
        send(s, bad)
        good, keys = self.edge.split(
            s, wpb.ACK_KIND_ACCEPT, good, keys, good, lambda again: self._accepts(s, again)
        )
        # an attempt not delivered to this stream may only be re-accepted by its owner (reconnect)
        fresh = [(k.job_id, k.attempt) in s.held for k in keys]
        outcomes = (
            self.writes.submit_group("accept", keys, s.worker_id, owner=s.owner, fresh=fresh)
            if keys
            else None
        )

        lags: dict[str, list[float]] = {}  # queue -> outbox publication lags of this message, s
        key_of = held_keys(good, keys)

        def build(ref, lease_end):
            k = key_of[id(ref)]
            ok = lease_end is not None
            if tracing.ENABLED:
                dispatch_tracing.accepted(s.held.get((k.job_id, k.attempt)), s.worker_id, t0, ok)
            if ok:
                c = s.held.get((k.job_id, k.attempt))
                if c is not None and (k.job_id, k.attempt) not in s.accepted:
                    # accepted_at (it left the outbox then) is lease end - lease duration (same now())
                    lags.setdefault(c.queue, []).append(
                        max(0.0, (lease_end - c.dispatched_at).total_seconds() - c.lease_ms / 1000)
                    )
                s.accepted.add((k.job_id, k.attempt))
            else:
                s.forget((k.job_id, k.attempt))
            a = wpb.Ack(
                attempt=ref, kind=wpb.ACK_KIND_ACCEPT, ok=ok, reason="" if ok else ErrorReason.STALE_ATTEMPT
            )
            if ok:
                a.lease_expire_time.CopyFrom(to_timestamp(lease_end))
            return a

        def after() -> None:  # one record per queue and accept message, not per job (hot path)
            for queue, values in lags.items():
                record_many(metrics.OUTBOX_PUBLICATION_LAG, values, {"queue": queue})

        self._ack_later(s, good, outcomes, wpb.ACK_KIND_ACCEPT, build, after)

    def _heartbeats(self, s: WorkerSession, refs) -> None:
        good, keys, bad = [], [], []
        for ref in refs:
            k = attempt_key(ref)
            if k is None:
                bad.append(malformed(ref, wpb.ACK_KIND_HEARTBEAT))
            else:
                good.append(ref)
                keys.append(k)
        send(s, bad)
        good, keys = self.edge.split(
            s, wpb.ACK_KIND_HEARTBEAT, good, keys, good, lambda again: self._heartbeats(s, again)
        )
        outcomes = (
            self.writes.submit_group(
                "heartbeat",
                keys,
                s.worker_id,
                owner=s.owner,
                held=[(k.job_id, k.attempt) in s.held for k in keys],
            )
            if keys
            else None
        )

        def build(ref, renewed):
            # renewed: (lease end, cancel_requested), LEASE_EXPIRED (ended: nothing renewed) or None (stale)
            ok = isinstance(renewed, tuple)
            reason = "" if ok else (renewed or ErrorReason.STALE_ATTEMPT)
            a = wpb.Ack(attempt=ref, kind=wpb.ACK_KIND_HEARTBEAT, ok=ok, reason=reason)
            if ok:
                a.lease_expire_time.CopyFrom(to_timestamp(renewed[0]))
                a.cancel_requested = renewed[1]
            return a

        self._ack_later(s, good, outcomes, wpb.ACK_KIND_HEARTBEAT, build)

    def _checkpoints(self, s: WorkerSession, checkpoints) -> None:
        """Progress checkpoints (``Heartbeats.checkpoints``): one over 64 KiB is refused whole at
        once (``CHECKPOINT_TOO_LARGE``; never truncated, nothing written); the others are saved by
        the write batcher if their attempt is still the job's RUNNING attempt under that token
        (else ``STALE_ATTEMPT``). Each is answered by an ack of kind CHECKPOINT."""
        valid, keys, refused = [], [], []
        for cp in checkpoints:
            k = attempt_key(cp.attempt)
            if k is None:
                refused.append(malformed(cp.attempt, wpb.ACK_KIND_CHECKPOINT))
                continue
            if len(cp.data) > MAX_CHECKPOINT_BYTES:
                refused.append(
                    wpb.Ack(
                        attempt=cp.attempt,
                        kind=wpb.ACK_KIND_CHECKPOINT,
                        ok=False,
                        reason=ErrorReason.CHECKPOINT_TOO_LARGE,
                    )
                )
                continue
            valid.append(cp)
            keys.append(k)
        if refused:
            s.out.put_nowait(wpb.LeaseResponse(acks=wpb.Acks(acks=refused)))
        valid, keys = self.edge.split(
            s,
            wpb.ACK_KIND_CHECKPOINT,
            valid,
            keys,
            [cp.attempt for cp in valid],
            lambda again: self._checkpoints(s, again),
        )
        good, items = [], []
        for cp, k in zip(valid, keys, strict=True):
            item = CheckpointWrite(
                k.job_id,
                k.attempt,
                k.token,
                bytes(cp.data),
                owner=s.owner,
                worker_id=s.worker_id,
                version=k.version,
            )
            good.append(cp.attempt)
            items.append(item)
        if items:
            self._ack_later(
                s,
                good,
                self.writes.submit_group("checkpoint", items, principal=s.owner),
                wpb.ACK_KIND_CHECKPOINT,
                lambda ref, saved: wpb.Ack(
                    attempt=ref,
                    kind=wpb.ACK_KIND_CHECKPOINT,
                    ok=bool(saved),
                    reason="" if saved else ErrorReason.STALE_ATTEMPT,
                ),
            )

    def _results(self, s: WorkerSession, results) -> None:
        t0 = time.time_ns() if tracing.ENABLED else 0
        valid, keys, bad = [], [], []
        for r in results:
            k = attempt_key(r.attempt)
            if k is None or "\x00" in r.error:  # PostgreSQL text cannot hold NUL: refused here, alone
                bad.append(malformed(r.attempt, wpb.ACK_KIND_RESULT))
                continue
            valid.append(r)
            keys.append(k)
        send(s, bad)
        valid, keys = self.edge.split(
            s,
            wpb.ACK_KIND_RESULT,
            valid,
            keys,
            [r.attempt for r in valid],
            lambda again: self._results(s, again),
        )
        good, items, traced = [], [], {}
        for r, k in zip(valid, keys, strict=True):
            res = Result(
                key=k,
                succeeded=r.outcome == wpb.OUTCOME_SUCCEEDED,
                failure_class=failure_class_from_wire(r.failure_class),
                error=r.error,
                retry_after_s=max(0.0, duration_seconds(r.retry_after)),  # capped by the retry policy
                owner=s.owner,
                worker_id=s.worker_id,
            )
            good.append(r.attempt)
            items.append(res)
            if tracing.ENABLED:
                traced[(k.job_id, k.attempt)] = res

        throttled = {
            (k.job_id, k.attempt)
            for r, k in zip(valid, keys, strict=True)
            if failure_class_from_wire(r.failure_class) is FailureClass.THROTTLED
            and r.outcome != wpb.OUTCOME_SUCCEEDED
        }

        key_of = held_keys(good, keys)

        def build(ref, reason):
            k = key_of[id(ref)]
            c = s.held.get((k.job_id, k.attempt))
            s.forget((k.job_id, k.attempt))
            if tracing.ENABLED:
                dispatch_tracing.finished(c, traced.get((k.job_id, k.attempt)), s.worker_id, t0, reason)
            if not reason and (k.job_id, k.attempt) in throttled:
                metrics.THROTTLED_RESULTS.add(1, {"namespace": s.namespace, "queue": c.queue if c else ""})
            s.accepted.discard((k.job_id, k.attempt))
            return wpb.Ack(attempt=ref, kind=wpb.ACK_KIND_RESULT, ok=reason == "", reason=reason or "")

        self._ack_later(
            s,
            good,
            self.writes.submit_group("result", items, s.worker_id, principal=s.owner) if items else None,
            wpb.ACK_KIND_RESULT,
            build,
        )

    def _releases(self, s: WorkerSession, refs) -> None:
        """See :func:`gnomon.dispatcher.acks.releases`."""
        releases(s, refs)

    def close_all(self) -> None:
        """Ends every stream (drain)."""
        self.draining = True
        for s in list(self.registry.sessions.values()):
            s.out.put_nowait(None)
