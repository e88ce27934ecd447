"""Batched writes of the data plane: many accepts, heartbeats, results and outbox marks per transaction.

PERFORMANCE.md: a transaction per accept/heartbeat/result caps the system near 1.5 k jobs/s, so
stream handlers enqueue operations here and one flusher commits whatever is pending in a single
transaction (up to ``write_batch`` operations), then resolves each operation's future.
"""
from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncEngine

from gnomon.common.retry import backoff_s
from gnomon.common.storage import dispatch as store
from gnomon.common.storage.engine import run_transaction

log = logging.getLogger(__name__)


@dataclass
class Op:
    """One pending write: ``kind`` in accept|heartbeat|result|published|unpublish."""

    kind: str
    item: object
    worker_id: str = ""
    future: asyncio.Future | None = None


def retry_delay_s(result: store.Result, attempt: int) -> float:
    """Seconds before the retry after a failed ``attempt``: THROTTLED honours ``retry_after``,
    others capped exponential backoff with jitter (1 s initial, 5 min cap)."""
    if result.failure_class == "THROTTLED" and result.retry_after_s > 0:
        return result.retry_after_s
    return backoff_s(attempt, initial_s=1.0, maximum_s=300.0)


class WriteBatcher:
    """Queues operations; a single background flusher commits them in batches."""

    def __init__(self, engine: AsyncEngine, max_batch: int = 500):
        self.engine, self.max_batch = engine, max_batch
        self.pending: list[Op] = []
        self.wakeup = asyncio.Event()
        self.task: asyncio.Task | None = None

    def start(self) -> None:
        """Starts the flusher task."""
        self.task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        """Flushes what is pending and stops."""
        if self.task:
            await self.flush_now()
            self.task.cancel()

    def submit(self, kind: str, item, worker_id: str = "", want_result: bool = True) -> asyncio.Future | None:
        """Queues one operation; returns a future resolved with its outcome after commit."""
        fut = asyncio.get_running_loop().create_future() if want_result else None
        self.pending.append(Op(kind, item, worker_id, fut))
        self.wakeup.set()
        return fut

    async def flush_now(self) -> None:
        """Commits everything pending (used on drain)."""
        while self.pending:
            await self._flush()

    async def _run(self) -> None:
        while True:
            await self.wakeup.wait()
            self.wakeup.clear()
            while self.pending:
                try:
                    await self._flush()
                except Exception:  # noqa: BLE001 - keep flushing; failed ops got their exception
                    log.warning("batched write failed", exc_info=True)
                    await asyncio.sleep(0.2)

    async def _flush(self) -> None:
        batch, self.pending = self.pending[:self.max_batch], self.pending[self.max_batch:]
        by_kind: dict[str, list[Op]] = defaultdict(list)
        for op in batch:
            by_kind[op.kind].append(op)

        async def tx(conn):
            out = {}
            await store.mark_published(conn, [op.item for op in by_kind.get("published", [])])
            await store.unpublish(conn, [op.item for op in by_kind.get("unpublish", [])])
            accepted: dict = {}
            by_worker: dict[str, list] = defaultdict(list)
            for op in by_kind.get("accept", []):
                by_worker[op.worker_id].append(op.item)
            for worker, keys in by_worker.items():
                accepted.update(await store.accept(conn, keys, worker))
            out["accept"] = accepted
            out["heartbeat"] = await store.heartbeat(conn, [op.item for op in by_kind.get("heartbeat", [])])
            out["result"] = await store.complete(conn, [op.item for op in by_kind.get("result", [])],
                                                 retry_delay_s=retry_delay_s)
            return out

        try:
            out = await run_transaction(self.engine, tx)
        except Exception as exc:  # noqa: BLE001
            for op in batch:
                if op.future and not op.future.done():
                    op.future.set_exception(exc)
            raise
        for op in batch:
            if not op.future or op.future.done():
                continue
            if op.kind == "accept":
                op.future.set_result(out["accept"].get((op.item.job_id, op.item.attempt)))
            elif op.kind == "heartbeat":
                op.future.set_result(out["heartbeat"].get((op.item.job_id, op.item.attempt)))
            elif op.kind == "result":
                op.future.set_result(out["result"].get((op.item.key.job_id, op.item.key.attempt), "STALE_ATTEMPT"))
            else:
                op.future.set_result(True)
