"""Acks of the worker lease stream: sent once the write batcher resolved a message's writes
(:class:`AckTasks`), or at once for what needs no write (malformed references, releases)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.common import metrics
from gnomon.common.domain.attempts import AttemptKey
from gnomon.common.domain.reasons import ErrorReason
from gnomon.dispatcher.flow import KIND_NAMES
from gnomon.dispatcher.hello import attempt_key
from gnomon.dispatcher.sessions import WorkerSession
from gnomon.dispatcher.writes import InvalidItem


def held_keys(refs: list[wpb.AttemptRef], keys: list[AttemptKey]) -> dict[int, AttemptKey]:
    """``id(ref)`` -> the key :func:`~gnomon.dispatcher.hello.attempt_key` already gave it, for the
    parallel lists ``refs`` and ``keys`` of one message: an ack is built from the key the edge
    computed, not by parsing the reference again (hot path). ``refs`` must stay alive while the map
    is used (they are the ack's items, held by :meth:`AckTasks.later`)."""
    return {id(r): k for r, k in zip(refs, keys, strict=True)}


def malformed(ref: wpb.AttemptRef, kind: wpb.AckKind) -> wpb.Ack:
    """The ack refusing one item whose attempt reference does not parse (the others go on)."""
    return wpb.Ack(attempt=ref, kind=kind, ok=False, reason=ErrorReason.INVALID_FIELD)


def send(s: WorkerSession, acks: list[wpb.Ack]) -> None:
    """Queues ``acks`` (if any) for stream ``s`` unless it ended."""
    if acks and not s.closed:
        s.out.put_nowait(wpb.LeaseResponse(acks=wpb.Acks(acks=acks)))


class AckTasks:
    """The tasks waiting for batched writes to send their acks. The event loop holds tasks only
    weakly: pending ones are kept here until they finish, or one could be garbage-collected before
    its acks are sent."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()

    def later(
        self,
        s: WorkerSession,
        refs: list,
        outcomes: asyncio.Future[list[Any]] | None,
        kind,
        build,
        after: Callable[[], None] | None = None,
    ) -> None:
        """Once the write batcher has resolved ``outcomes`` (one entry per ref of ``refs``, see
        :meth:`WriteBatcher.submit_group`), sends one Acks message: ``build(ref, outcome)`` per item,
        INVALID_ITEM for an item refused for its content, DATABASE_UNAVAILABLE for one whose batch
        failed; then ``after()`` (if given: per-message accounting such as one metric record for the
        batch), once the items are built and before the acks are sent. The items count against the stream's in-flight write budget (``s.inflight``) until
        ``outcomes`` resolves, and in ``gnomon_stream_write_items``."""
        if outcomes is None:
            return
        n = len(refs)
        s.inflight += n
        metrics.STREAM_WRITE_ITEMS.add(n, {"namespace": s.namespace, "kind": KIND_NAMES[kind]})

        async def wait() -> None:
            acks = []
            try:
                got = await outcomes
            finally:
                s.inflight -= n
                s.flow.set()
            for ref, res in zip(refs, got, strict=True):
                if isinstance(res, BaseException):
                    reason = (
                        ErrorReason.INVALID_ITEM
                        if isinstance(res, InvalidItem)
                        else ErrorReason.DATABASE_UNAVAILABLE
                    )
                    acks.append(wpb.Ack(attempt=ref, kind=kind, ok=False, reason=reason))
                else:
                    acks.append(build(ref, res))
            if after is not None:
                after()
            if acks and not s.closed:
                s.out.put_nowait(wpb.LeaseResponse(acks=wpb.Acks(acks=acks)))

        task = asyncio.create_task(wait())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)


def releases(s: WorkerSession, refs) -> None:
    """Unstarted attempts handed back: forget them here; their attempts are still QUEUED, so
    the relay's recovery scan re-delivers them (to any worker). Only attempts delivered to this
    stream and not accepted can be released; any other is refused (STALE_ATTEMPT) and unchanged."""
    acks = []
    for ref in refs:
        k = attempt_key(ref)
        if k is None:
            acks.append(malformed(ref, wpb.ACK_KIND_RELEASE))
            continue
        mine = (k.job_id, k.attempt) in s.held and (k.job_id, k.attempt) not in s.accepted
        if mine:
            s.held.pop((k.job_id, k.attempt), None)
        acks.append(
            wpb.Ack(
                attempt=ref,
                kind=wpb.ACK_KIND_RELEASE,
                ok=mine,
                reason="" if mine else ErrorReason.STALE_ATTEMPT,
            )
        )
    if acks:
        s.out.put_nowait(wpb.LeaseResponse(acks=wpb.Acks(acks=acks)))
