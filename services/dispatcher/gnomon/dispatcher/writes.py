"""Batched writes of the data plane: many accepts, heartbeats, checkpoints and results per transaction
(an accept takes its attempt out of the outbox: the attempt row leaves QUEUED).

docs/performance.md: a transaction per accept/heartbeat/result caps the system near 1.5 k jobs/s, so
stream handlers enqueue operations here and one flusher commits whatever is pending in a single
transaction (up to ``write_batch`` operations), then resolves each operation's future.

One bad operation does not fail its neighbours: a batch the database refuses for an item's content
is split in halves and retried until the bad items stand alone (:meth:`WriteBatcher._commit_isolated`,
:func:`gnomon.common.storage.isolation.commit_isolated`);
their futures fail with :class:`InvalidItem`, the rest commit.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict, deque
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common import metrics
from gnomon.common.domain.reasons import ErrorReason
from gnomon.common.errors import GnomonError
from gnomon.common.storage import checkpoints as checkpoint_store
from gnomon.common.storage import leases as lease_store
from gnomon.common.storage import results as result_store
from gnomon.common.storage.engine import run_transaction
from gnomon.common.storage.isolation import commit_isolated
from gnomon.dispatcher.hello import clip

log = logging.getLogger(__name__)


class InvalidItem(GnomonError):
    """One operation of a batch the database refused for its content (INVALID_ARGUMENT, reason
    ``INVALID_ITEM``); nothing of it was written, the other operations of its batch committed."""

    reason: str = ErrorReason.INVALID_ITEM


_UNSET = object()


def _fail(ops: list[Op], exc: BaseException) -> None:
    """Fails every operation of ``ops`` with the transient ``exc`` of their batch."""
    for op in ops:
        op.fail(exc)


class Group:
    """The outcomes of operations submitted together (one stream message): one future for all, set
    once every member is resolved, with a list aligned with the submitted items whose entries are
    outcomes or exceptions (:class:`InvalidItem`, or the transient error of a failed batch). One
    future per message instead of one per item: the dispatcher's CPU per job is the drain's limit."""

    __slots__ = ("future", "left", "results")

    def __init__(self, n: int) -> None:
        self.future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self.results: list[Any] = [_UNSET] * n
        self.left = n

    def set(self, index: int, value: Any) -> None:
        """Records member ``index``'s outcome (or exception); the first one recorded counts."""
        if self.future.done() or self.results[index] is not _UNSET:
            return
        self.results[index] = value
        self.left -= 1
        if self.left == 0:
            self.future.set_result(self.results)


@dataclass(slots=True)
class Op:
    """One pending write: ``kind`` in accept|heartbeat|checkpoint|result. ``owner``: the principal of
    the stream (accept records it, heartbeat checks it; checkpoints and results carry it in their
    item); ``fresh``: an accept of an attempt delivered to this stream (else only a re-accept);
    ``held``: a heartbeat of an attempt delivered to this stream (may extend a QUEUED lease).
    Its outcome goes to ``future`` (:meth:`WriteBatcher.submit`) or to member ``index`` of ``group``
    (:meth:`WriteBatcher.submit_group`)."""

    kind: str
    item: Any  # AttemptKey (accept, heartbeat), CheckpointWrite (checkpoint) or Result (result)
    worker_id: str = ""
    future: asyncio.Future | None = None
    owner: str | None = None
    fresh: bool = True
    held: bool = True
    group: Group | None = None
    index: int = 0

    def resolve(self, value: Any) -> None:
        """Hands the outcome to whoever waits for it (nothing when nobody does)."""
        if self.group is not None:
            self.group.set(self.index, value)
        elif self.future is not None and not self.future.done():
            self.future.set_result(value)

    def fail(self, exc: BaseException) -> None:
        """Hands ``exc`` to whoever waits for this operation's outcome."""
        if self.group is not None:
            self.group.set(self.index, exc)
        elif self.future is not None and not self.future.done():
            self.future.set_exception(exc)


class WriteBatcher:
    """Queues operations; ``flushers`` background tasks commit them in batches, each taking what is
    pending when it becomes free (so a slow commit does not stall the next batch).

    Fairness: operations wait in one queue per principal (``pending``: principal -> operations, in
    order); a batch takes an equal share of ``max_batch`` from every principal with operations
    pending (what one leaves unused goes to the others), starting from a rotating principal. So one
    principal's backlog delays another's operations by at most the batches already being committed:
    they go into the next batch. Each stream's backlog is bounded by its in-flight write budget
    (``GNOMON_STREAM_MAX_INFLIGHT_WRITES``), so ``pending`` is bounded too.

    Ordering: operations on one attempt never race, because the protocol orders them (a worker
    sends a result only after its accept was acknowledged, i.e. committed). Two flushes touching the
    same rows in different orders may deadlock; :func:`run_transaction` retries 40P01.
    """

    def __init__(self, engine: AsyncEngine, max_batch: int = 500, flushers: int = 2):
        self.engine, self.max_batch, self.flushers = engine, max_batch, flushers
        self.pending: dict[str | None, deque[Op]] = {}
        self.wakeup = asyncio.Event()
        self.tasks: list[asyncio.Task] = []

    def start(self) -> None:
        """Starts the flusher tasks."""
        self.tasks = [asyncio.create_task(self._run()) for _ in range(self.flushers)]

    async def stop(self) -> None:
        """Flushes what is pending and stops."""
        if self.tasks:
            await self.flush_now()
            for t in self.tasks:
                t.cancel()

    def submit(
        self,
        kind: str,
        item,
        worker_id: str = "",
        want_result: bool = True,
        *,
        owner: str | None = None,
        fresh: bool = True,
        held: bool = True,
    ) -> asyncio.Future | None:
        """Queues one operation (fields: see :class:`Op`); returns a future resolved with its outcome
        after commit (None when ``want_result`` is false). Outcomes: accept, the lease end or None
        (refused); heartbeat, ``(lease end, cancel_requested)``, ``"LEASE_EXPIRED"`` (the recorded
        lease had ended: nothing renewed) or None (stale); result, "" (applied) or the refusal reason
        (:func:`gnomon.common.storage.results.complete`); checkpoint, whether it was saved."""
        fut = asyncio.get_running_loop().create_future() if want_result else None
        self._queue(owner).append(Op(kind, item, worker_id, fut, owner, fresh, held))
        self.wakeup.set()
        return fut

    def _queue(self, principal: str | None) -> deque[Op]:
        q = self.pending.get(principal)
        if q is None:
            q = self.pending[principal] = deque()
        return q

    def submit_group(
        self,
        kind: str,
        items: list[Any],
        worker_id: str = "",
        *,
        owner: str | None = None,
        fresh: list[bool] | None = None,
        held: list[bool] | None = None,
        principal: str | None = None,
    ) -> asyncio.Future[list[Any]]:
        """Queues one operation per item of ``items`` (non-empty; ``fresh``/``held`` per item, default
        True) in the queue of ``principal`` (default ``owner``: whose stream sent them) and returns
        one future resolved, once all are committed or refused, with the list of their outcomes in
        order (as :meth:`submit` describes) or exceptions (:class:`InvalidItem` for an item refused
        for its content, the transient error of a failed batch otherwise)."""
        group = Group(len(items))
        q = self._queue(owner if principal is None else principal)
        for i, item in enumerate(items):
            q.append(
                Op(
                    kind,
                    item,
                    worker_id,
                    None,
                    owner,
                    True if fresh is None else fresh[i],
                    True if held is None else held[i],
                    group,
                    i,
                )
            )
        self.wakeup.set()
        return group.future

    async def flush_now(self) -> None:
        """Commits everything pending (used on drain)."""
        while self.pending:
            await self._flush()

    async def _run(self) -> None:
        while True:
            while not self.pending:
                self.wakeup.clear()
                await self.wakeup.wait()
            while self.pending:
                try:
                    await self._flush()
                except Exception:
                    log.warning("batched write failed", exc_info=True)
                    await asyncio.sleep(0.2)

    def _take(self) -> list[Op]:
        """The next batch: a fair share of ``max_batch`` from each principal's queue (class
        docstring); the principal served first moves to the back."""
        batch: list[Op] = []
        pending = self.pending
        while pending and len(batch) < self.max_batch:
            share = max(1, (self.max_batch - len(batch)) // len(pending))
            for principal in list(pending):
                q = pending[principal]
                for _ in range(min(share, len(q), self.max_batch - len(batch))):
                    batch.append(q.popleft())
                if not q:
                    del pending[principal]
                if len(batch) >= self.max_batch:
                    break
        if len(pending) > 1:  # rotate: the next batch starts with another principal
            first = next(iter(pending))
            pending[first] = pending.pop(first)
        return batch

    async def _flush(self) -> None:
        await self._commit_isolated(self._take())

    async def _commit_isolated(self, batch: list[Op]) -> None:
        """Commits ``batch`` in one transaction; when the database refuses it because of what one item
        holds (:func:`gnomon.common.storage.isolation.item_fault`, e.g. a NUL in an error text),
        retries the two halves apart (bisection, :func:`~gnomon.common.storage.isolation.commit_isolated`),
        down to the single bad items, whose futures get :class:`InvalidItem`; the others commit. A
        transient failure (connection lost, serialization retries exhausted) fails every future of
        the part being committed with it and propagates, as before."""
        await commit_isolated(
            batch, self._commit, committed=self._resolve, refused=self._refused, failed=_fail
        )

    @staticmethod
    def _refused(op: Op, exc: BaseException) -> None:
        log.warning(
            "batched %s write refused for its content: worker_id=%s error=%s",
            op.kind,
            clip(op.worker_id),
            clip(type(exc).__name__),
        )
        op.fail(InvalidItem(f"the database refused this {op.kind}"))

    async def _commit(self, batch: list[Op]) -> dict[str, Any]:
        by_kind: dict[str, list[Op]] = defaultdict(list)
        for op in batch:
            by_kind[op.kind].append(op)

        async def tx(conn):
            out: dict[str, Any] = {}
            accepted: dict = {}
            by_worker: dict[tuple[str, str | None, bool], list] = defaultdict(list)
            for op in by_kind.get("accept", []):
                by_worker[(op.worker_id, op.owner, op.fresh)].append(op.item)
            for (worker, owner, fresh), keys in by_worker.items():
                accepted.update(await lease_store.accept(conn, keys, worker, owner, fresh=fresh))
            out["accept"] = accepted
            beats = by_kind.get("heartbeat", [])
            renewed: dict[Any, Any] = await lease_store.heartbeat(
                conn,
                [op.item for op in beats],
                [(op.owner, op.worker_id) for op in beats],
                [op.held for op in beats],
            )
            late = [op for op in beats if (op.item.job_id, op.item.attempt) not in renewed]
            if late:  # refused: tell an ended lease (LEASE_EXPIRED) from a stale attempt
                ended = await lease_store.expired_heartbeats(
                    conn,
                    [op.item for op in late],
                    [(op.owner, op.worker_id) for op in late],
                    [op.held for op in late],
                )
                renewed.update(dict.fromkeys(ended, ErrorReason.LEASE_EXPIRED))
            out["heartbeat"] = renewed
            # after the heartbeats, before the results: a checkpoint sent before a result is saved first
            out["checkpoint"] = await checkpoint_store.save_checkpoints(
                conn, [op.item for op in by_kind.get("checkpoint", [])]
            )
            # retry or DEAD, and the retry delay, follow each job's retry policy (see result_store.complete)
            dead: list[tuple[str, str, str]] = []  # fresh on every try of the transaction
            out["result"] = await result_store.complete(
                conn, [op.item for op in by_kind.get("result", [])], dead=dead
            )
            out["dead"] = dead
            return out

        t0 = time.perf_counter()
        out = await run_transaction(self.engine, tx)
        metrics.count_dead_letters(out["dead"])  # committed: count the jobs it made DEAD
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "flushed %s in %.1f ms",
                {k: len(v) for k, v in by_kind.items()},
                (time.perf_counter() - t0) * 1000,
            )
        return out

    @staticmethod
    def _resolve(batch: list[Op], out: dict[str, Any]) -> None:
        accepted, renewed, results, saved = out["accept"], out["heartbeat"], out["result"], out["checkpoint"]
        for op in batch:
            if op.future is None and op.group is None:
                continue
            item = op.item
            if op.kind == "accept":
                op.resolve(accepted.get((item.job_id, item.attempt)))
            elif op.kind == "heartbeat":
                op.resolve(renewed.get((item.job_id, item.attempt)))
            elif op.kind == "result":
                op.resolve(results.get((item.key.job_id, item.key.attempt), ErrorReason.STALE_ATTEMPT))
            elif op.kind == "checkpoint":
                op.resolve((item.job_id, item.attempt, item.token) in saved)
