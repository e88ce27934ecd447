"""Flow control of one worker stream (docs/security.md, docs/protocol.md section 12): what one stream
may cost the dispatcher, in memory and in database work, whatever it sends or fails to read.

* :class:`ResponseQueue`: the stream's outgoing queue, counting the bytes it holds, so the relay stops
  assigning to a stream whose worker does not read (``GNOMON_STREAM_MAX_QUEUED_RESPONSE_BYTES``).
* :class:`OwnershipGate`: attempt references a stream was never given are checked against the
  attempt's owner through a bounded, rate-limited read before anything is written; the write batcher
  only ever sees references of attempts the stream holds or its worker identity owns.
* The in-flight write budget (``GNOMON_STREAM_MAX_INFLIGHT_WRITES``) is counted on the session
  (:class:`gnomon.dispatcher.sessions.WorkerSession`) and enforced by the servicer's reader.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon._proto.gnomon.v1 import worker_service_pb2 as wpb
from gnomon.common import metrics
from gnomon.common.domain.attempts import AttemptId, Claimed
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.quotas import TokenBucket
from gnomon.common.storage import leases as lease_store
from gnomon.common.storage.engine import run_transaction

log = logging.getLogger(__name__)

#: Bytes counted for one assignment besides its payload and checkpoint (names, times, token), bytes.
ASSIGNMENT_OVERHEAD_BYTES = 256
#: Bytes counted for one ack (an attempt reference, kind, reason, a timestamp), bytes.
ACK_BYTES = 128
#: Largest ``assignments`` message the relay builds, bytes: more assignments go in further messages
#: (one assignment alone may be larger). Keeps every message far below the 16 MiB gRPC limit.
MAX_ASSIGNMENTS_MESSAGE_BYTES = 1024 * 1024
#: Payloads larger than this are not kept in memory once their assignment is built, bytes.
KEEP_PAYLOAD_BYTES = 4096


def assignment_bytes(c: Claimed) -> int:
    """What the assignment of ``c`` counts against its stream's byte cap: its payload, its checkpoint
    and :data:`ASSIGNMENT_OVERHEAD_BYTES`, bytes."""
    return len(c.payload) + len(c.checkpoint or b"") + ASSIGNMENT_OVERHEAD_BYTES


def response_bytes(msg: Any) -> int:
    """The bytes a ``LeaseResponse`` (or the ``None`` that ends a stream) counts in its queue when the
    sender did not say: acks :data:`ACK_BYTES` each, anything else its serialized size."""
    if msg is None:
        return 0
    if msg.WhichOneof("kind") == "acks":
        return ACK_BYTES * (1 + len(msg.acks.acks))
    return int(msg.ByteSize())


class ResponseQueue(asyncio.Queue):
    """A stream's outgoing ``LeaseResponse`` queue (unbounded in count) that knows how many bytes it
    holds: :attr:`bytes`, the sum of what each queued message counts (``nbytes`` given to
    :meth:`put_nowait`, else :func:`response_bytes`). :attr:`last_bytes` is what the message last
    taken counted."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0
        self.last_bytes = 0
        self._sizes: deque[int] = deque()

    def put_nowait(self, item: Any, nbytes: int | None = None) -> None:
        """Queues ``item``, counting ``nbytes`` (default :func:`response_bytes`) bytes for it."""
        n = response_bytes(item) if nbytes is None else nbytes
        self._sizes.append(n)
        self.bytes += n
        super().put_nowait(item)

    def _get(self) -> Any:
        item = super()._get()
        self.last_bytes = self._sizes.popleft()
        self.bytes -= self.last_bytes
        return item


def assignment_messages(batch: list[wpb.Assignment], sizes: list[int]) -> list[tuple[wpb.LeaseResponse, int]]:
    """``batch`` (with each assignment's counted ``sizes``) cut into ``assignments`` messages of at
    most :data:`MAX_ASSIGNMENTS_MESSAGE_BYTES` (an assignment larger than that goes alone); returns
    ``(message, counted bytes)`` pairs in order."""
    out: list[tuple[wpb.LeaseResponse, int]] = []
    start, total = 0, 0
    for i, n in enumerate(sizes):
        if i > start and total + n > MAX_ASSIGNMENTS_MESSAGE_BYTES:
            out.append((wpb.LeaseResponse(assignments=wpb.Assignments(assignments=batch[start:i])), total))
            start, total = i, 0
        total += n
    if start < len(batch):
        out.append((wpb.LeaseResponse(assignments=wpb.Assignments(assignments=batch[start:])), total))
    return out


#: The fewest references one ownership check charges to its principal's rate (one query each).
MIN_CHECK_COST = 10


class OwnershipGate:
    """Checks, before any write, that attempts a stream was not given are its worker identity's
    (docs/protocol.md section 7: after a reconnect, or when another dispatcher delivered them, a
    worker's heartbeats, checkpoints, results and re-sent accepts arrive on a stream that does not hold
    them). The check is one read by primary key (:func:`gnomon.common.storage.leases.owned_attempts`),
    bounded three ways: at most ``rate_per_s`` references per second per principal (a bucket of
    ``burst``; past it the check waits, so the principal's streams are read more slowly), at most
    ``concurrency`` checks at once in this process, and one check at a time per stream (the servicer
    reads the stream's next message only after it). ``owner`` None (in-process callers) is unchecked."""

    def __init__(
        self,
        engine: AsyncEngine | None,
        *,
        rate_per_s: float,
        burst: int,
        concurrency: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.engine, self.rate_per_s, self.burst, self.clock = engine, rate_per_s, burst, clock
        self._sem = asyncio.Semaphore(concurrency)
        self._buckets: dict[str, TokenBucket] = {}
        #: references checked, and found not the caller's (for tests and figures)
        self.checked = 0
        self.refused = 0

    def _bucket(self, owner: str) -> TokenBucket:
        b = self._buckets.get(owner)
        if b is None:
            if len(self._buckets) >= 4096:  # forget principals whose bucket refilled (idle)
                now = self.clock()
                for name, old in list(self._buckets.items()):
                    if old.tokens + (now - old.at) * old.rate >= old.burst:
                        del self._buckets[name]
            b = self._buckets[owner] = TokenBucket(self.rate_per_s, self.burst, self.clock)
        return b

    async def owned(self, owner: str | None, worker_id: str, keys: Sequence[AttemptId]) -> set[AttemptId]:
        """The keys (``(job_id, attempt)``, at most ``burst`` of them) of attempts that worker
        ``worker_id`` of principal ``owner`` accepted; waits for the principal's rate and a free check.
        Raises what the database read raises (the caller answers those items DATABASE_UNAVAILABLE)."""
        if owner is None or not keys:
            return set(keys)
        # a check costs at least MIN_CHECK_COST references of the principal's rate: a flood of
        # one-reference messages gets at most rate / MIN_CHECK_COST queries a second, not rate
        n = min(max(len(keys), MIN_CHECK_COST), self.burst)
        bucket = self._bucket(owner)
        while (wait := bucket.take(n)) > 0:  # noqa: ASYNC110 (tokens refill with time, no event)
            await asyncio.sleep(min(wait, 1.0))
        assert self.engine is not None, "an ownership check needs the database"
        engine = self.engine
        async with self._sem:
            mine = await run_transaction(
                engine, lambda c: lease_store.owned_attempts(c, keys, owner, worker_id)
            )
        self.checked += len(keys)
        self.refused += len(keys) - len(mine)
        return mine


#: Ack kind -> the ``kind`` label of the stream metrics.
KIND_NAMES = {
    wpb.ACK_KIND_ACCEPT: "accept",
    wpb.ACK_KIND_HEARTBEAT: "heartbeat",
    wpb.ACK_KIND_CHECKPOINT: "checkpoint",
    wpb.ACK_KIND_RESULT: "result",
}


class StreamEdge:
    """Where a stream's attempt references are sorted before any write (docs/protocol.md section 7):
    those of attempts delivered to the stream or adopted by it go on to the write batcher; those of
    another namespace than the stream's are refused at once (a worker identity's attempts are all of
    its stream's namespace); the others are checked by the :class:`OwnershipGate` in the background
    (``session.checking`` counts the checks; the servicer reads the stream's next message only after
    them): the worker identity's are adopted by the stream and handled again (``redo``), the rest are
    refused ``STALE_ATTEMPT`` with no write. Refusals are counted in ``gnomon_stream_refused_refs``."""

    def __init__(self, gate: OwnershipGate) -> None:
        self.gate = gate
        # the event loop holds tasks only weakly: running checks are kept here until they end
        self._tasks: set[asyncio.Task[None]] = set()

    def split(
        self,
        s: Any,
        kind: wpb.AckKind,
        items: list[Any],
        keys: list[Any],
        refs: list[wpb.AttemptRef],
        redo: Callable[[list[Any]], None],
    ) -> tuple[list[Any], list[Any]]:
        """Of ``items`` (with their parsed ``keys`` and ``refs``, aligned) sent on session ``s`` in a
        message answered by acks of ``kind``, returns ``(items, keys)`` of the attempts ``s`` knows;
        refuses or starts checking the others (class docstring)."""
        held, adopted = s.held, s.adopted
        if all((k.job_id, k.attempt) in held or (k.job_id, k.attempt) in adopted for k in keys):
            return items, keys
        prefix = f"namespaces/{s.namespace}/jobs/"
        mine_i, mine_k, check_i, check_k, check_r, refused = [], [], [], [], [], []
        for item, k, ref in zip(items, keys, refs, strict=True):
            if (k.job_id, k.attempt) in held or (k.job_id, k.attempt) in adopted:
                mine_i.append(item)
                mine_k.append(k)
            elif ref.job.startswith(prefix):
                check_i.append(item)
                check_k.append(k)
                check_r.append(ref)
            else:
                refused.append(ref)
        self._refuse(s, kind, refused)
        if check_i:
            s.checking += 1
            task = asyncio.create_task(self._check(s, kind, check_i, check_k, check_r, redo))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        return mine_i, mine_k

    @staticmethod
    def _refuse(
        s: Any, kind: wpb.AckKind, refs: list[wpb.AttemptRef], reason: str = ErrorReason.STALE_ATTEMPT
    ) -> None:
        if not refs:
            return
        if reason == ErrorReason.STALE_ATTEMPT:
            metrics.STREAM_REFUSED_REFS.add(len(refs), {"namespace": s.namespace, "kind": KIND_NAMES[kind]})
        if not s.closed:
            acks = [wpb.Ack(attempt=r, kind=kind, ok=False, reason=reason) for r in refs]
            s.out.put_nowait(wpb.LeaseResponse(acks=wpb.Acks(acks=acks)))

    async def _check(
        self,
        s: Any,
        kind: wpb.AckKind,
        items: list[Any],
        keys: list[Any],
        refs: list[wpb.AttemptRef],
        redo: Callable[[list[Any]], None],
    ) -> None:
        try:
            try:
                ids = [AttemptId(k.job_id, k.attempt) for k in keys]
                mine = await self.gate.owned(s.owner, s.worker_id, ids)
            except Exception:
                log.warning("ownership check failed; %d references answered DATABASE_UNAVAILABLE", len(refs))
                self._refuse(s, kind, refs, ErrorReason.DATABASE_UNAVAILABLE)
                return
            ok, refused = [], []
            for item, key, ref in zip(items, ids, refs, strict=True):
                if key in mine:
                    s.adopt(key)
                    ok.append(item)
                else:
                    refused.append(ref)
            self._refuse(s, kind, refused)
            if ok and not s.closed:
                redo(ok)
        finally:
            s.checking -= 1
            s.flow.set()
