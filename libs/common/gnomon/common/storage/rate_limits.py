"""Named queries of per-queue dispatch rate limits (``queue_limits``, a token bucket per
(region, namespace, queue)); the semantics are in docs/operations.md#backpressure.

The bucket holds at most ``burst`` tokens and gains ``rate`` tokens per second (database clock).
A claim takes tokens under the row lock (:func:`take`) before claiming and gives back what it did
not use (:func:`give_back`) in the same transaction, so every dispatcher of the region draws from
the one bucket and the queue is never dispatched faster than ``burst + rate * t`` over any span t.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Delete, Double, Select, Update, cast, delete, func, select, update
from sqlalchemy.dialects.postgresql import Insert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.storage.schema import queue_limits as ql
from gnomon.common.storage.statements import builder


@dataclass(frozen=True)
class Limit:
    """A queue's limit: ``rate`` dispatches per second, ``burst`` at once, ``tokens`` available now."""

    rate: float
    burst: int
    tokens: float


def _key(region: str, namespace: str, queue: str) -> tuple[ColumnElement[bool], ...]:
    return (ql.c.region == region, ql.c.namespace == namespace, ql.c.queue == queue)


_Q = dict(region="r", namespace="ns", queue="q")


@builder(**_Q)
def delete_limit_stmt(region: str, namespace: str, queue: str) -> Delete:
    """Removes the ``queue_limits`` row of ``(region, namespace, queue)``."""
    return delete(ql).where(*_key(region, namespace, queue))


@builder(**_Q, rate=1.0, burst=1)
def upsert_limit_stmt(region: str, namespace: str, queue: str, rate: float, burst: int) -> Insert:
    """Sets the limit of ``(region, namespace, queue)`` to ``rate`` tokens per second and ``burst``
    tokens: a new bucket starts full (``tokens = burst``); an existing one keeps its tokens, capped
    at the new ``burst``. ``refilled_at``/``updated_at``: ``now()``."""
    now = func.now()
    stmt = pg_insert(ql).values(
        region=region,
        namespace=namespace,
        queue=queue,
        rate=rate,
        burst=burst,
        tokens=float(burst),
        refilled_at=now,
        updated_at=now,
    )
    return stmt.on_conflict_do_update(
        index_elements=["region", "namespace", "queue"],
        set_=dict(rate=rate, burst=burst, tokens=func.least(float(burst), ql.c.tokens), updated_at=now),
    )


@builder(**_Q, lock=True)
def bucket_stmt(region: str, namespace: str, queue: str, lock: bool) -> Select[Any]:
    """``(rate, burst, tokens, refilled_at, now())`` of the bucket of ``(region, namespace,
    queue)``; ``lock``: its row locked ``FOR UPDATE`` until the transaction ends."""
    q = select(ql.c.rate, ql.c.burst, ql.c.tokens, ql.c.refilled_at, func.now()).where(
        *_key(region, namespace, queue)
    )
    return q.with_for_update() if lock else q


@builder(region="r")
def limited_stmt(region: str) -> Select[tuple[str, str]]:
    """The ``(namespace, queue)`` pairs of ``region`` with a limit, at most 10,000."""
    return select(ql.c.namespace, ql.c.queue).where(ql.c.region == region).limit(10_000)


@builder(**_Q, tokens=1.0, refilled_at=datetime(2026, 1, 1))
def spend_stmt(region: str, namespace: str, queue: str, tokens: float, refilled_at: datetime) -> Update:
    """Stores the bucket of ``(region, namespace, queue)`` after a take: ``tokens`` left (float)
    as of ``refilled_at``."""
    return update(ql).where(*_key(region, namespace, queue)).values(tokens=tokens, refilled_at=refilled_at)


@builder(**_Q, n=1)
def give_back_stmt(region: str, namespace: str, queue: str, n: int) -> Update:
    """Adds ``n`` tokens back to the bucket of ``(region, namespace, queue)``, capped at ``burst``."""
    return (
        update(ql)
        .where(*_key(region, namespace, queue))
        .values(tokens=func.least(cast(ql.c.burst, Double), ql.c.tokens + n))
    )


async def set_limit(
    conn: AsyncConnection, *, region: str, namespace: str, queue: str, rate: float, burst: int
) -> Limit | None:
    """Sets (``rate`` > 0) or removes (``rate`` == 0) the queue's limit; a new bucket starts full.
    Returns the limit in force afterwards (None when removed)."""
    if rate <= 0:
        await conn.execute(delete_limit_stmt(region, namespace, queue))
        return None
    await conn.execute(upsert_limit_stmt(region, namespace, queue, rate, burst))
    return await get_limit(conn, region=region, namespace=namespace, queue=queue)


async def get_limit(conn: AsyncConnection, *, region: str, namespace: str, queue: str) -> Limit | None:
    """The queue's limit with the tokens available now (refill applied, nothing taken), or None."""
    row = (await conn.execute(bucket_stmt(region, namespace, queue, lock=False))).first()
    if row is None:
        return None
    rate, burst, tokens, at, now = row
    return Limit(rate, burst, _refill(rate, burst, tokens, at, now))


def _refill(rate: float, burst: int, tokens: float, at: datetime, now: datetime) -> float:
    return min(float(burst), tokens + rate * max(0.0, (now - at).total_seconds()))


async def limited(conn: AsyncConnection, *, region: str) -> set[tuple[str, str]]:
    """The (namespace, queue) pairs of ``region`` that have a limit (at most 10,000 read)."""
    rows = await conn.execute(limited_stmt(region))
    return {(r[0], r[1]) for r in rows}


async def take(
    conn: AsyncConnection, *, region: str, namespace: str, queue: str, want: int
) -> tuple[int, float]:
    """Takes up to ``want`` whole tokens (row locked until the transaction ends). Returns
    ``(granted, wait_s)``: ``wait_s`` is how long until the next token when none was left (else 0).
    A queue without a limit grants ``want``."""
    row = (await conn.execute(bucket_stmt(region, namespace, queue, lock=True))).first()
    if row is None:
        return want, 0.0
    rate, burst, tokens, at, now = row
    tokens = _refill(rate, burst, tokens, at, now)
    granted = max(0, min(want, int(tokens)))
    # refilled_at never goes back: a transaction that started before the last refill (now() is the
    # transaction's start) must not count the same span of time twice
    await conn.execute(spend_stmt(region, namespace, queue, tokens - granted, max(at, now)))
    wait = 0.0 if granted else (1.0 - (tokens - int(tokens))) / rate
    return granted, wait


async def give_back(conn: AsyncConnection, *, region: str, namespace: str, queue: str, n: int) -> None:
    """Returns ``n`` unused tokens taken by :func:`take` in this transaction (capped at ``burst``)."""
    if n > 0:
        await conn.execute(give_back_stmt(region, namespace, queue, n))
