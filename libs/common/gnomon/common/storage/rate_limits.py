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

from sqlalchemy import Double, cast, delete, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.storage.schema import queue_limits as ql


@dataclass(frozen=True)
class Limit:
    """A queue's limit: ``rate`` dispatches per second, ``burst`` at once, ``tokens`` available now."""

    rate: float
    burst: int
    tokens: float


def _key(region: str, namespace: str, queue: str):
    return (ql.c.region == region, ql.c.namespace == namespace, ql.c.queue == queue)


async def set_limit(
    conn: AsyncConnection, *, region: str, namespace: str, queue: str, rate: float, burst: int
) -> Limit | None:
    """Sets (``rate`` > 0) or removes (``rate`` == 0) the queue's limit; a new bucket starts full.
    Returns the limit in force afterwards (None when removed)."""
    if rate <= 0:
        await conn.execute(delete(ql).where(*_key(region, namespace, queue)))
        return None
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
    stmt = stmt.on_conflict_do_update(
        index_elements=["region", "namespace", "queue"],
        set_=dict(rate=rate, burst=burst, tokens=func.least(float(burst), ql.c.tokens), updated_at=now),
    )
    await conn.execute(stmt)
    return await get_limit(conn, region=region, namespace=namespace, queue=queue)


async def get_limit(conn: AsyncConnection, *, region: str, namespace: str, queue: str) -> Limit | None:
    """The queue's limit with the tokens available now (refill applied, nothing taken), or None."""
    row = (
        await conn.execute(
            select(ql.c.rate, ql.c.burst, ql.c.tokens, ql.c.refilled_at, func.now()).where(
                *_key(region, namespace, queue)
            )
        )
    ).first()
    if row is None:
        return None
    rate, burst, tokens, at, now = row
    return Limit(rate, burst, _refill(rate, burst, tokens, at, now))


def _refill(rate: float, burst: int, tokens: float, at: datetime, now: datetime) -> float:
    return min(float(burst), tokens + rate * max(0.0, (now - at).total_seconds()))


async def limited(conn: AsyncConnection, *, region: str) -> set[tuple[str, str]]:
    """The (namespace, queue) pairs of ``region`` that have a limit (at most 10,000 read)."""
    rows = await conn.execute(select(ql.c.namespace, ql.c.queue).where(ql.c.region == region).limit(10_000))
    return {(r[0], r[1]) for r in rows}


async def take(
    conn: AsyncConnection, *, region: str, namespace: str, queue: str, want: int
) -> tuple[int, float]:
    """Takes up to ``want`` whole tokens (row locked until the transaction ends). Returns
    ``(granted, wait_s)``: ``wait_s`` is how long until the next token when none was left (else 0).
    A queue without a limit grants ``want``."""
    row = (
        await conn.execute(
            select(ql.c.rate, ql.c.burst, ql.c.tokens, ql.c.refilled_at, func.now())
            .where(*_key(region, namespace, queue))
            .with_for_update()
        )
    ).first()
    if row is None:
        return want, 0.0
    rate, burst, tokens, at, now = row
    tokens = _refill(rate, burst, tokens, at, now)
    granted = max(0, min(want, int(tokens)))
    # refilled_at never goes back: a transaction that started before the last refill (now() is the
    # transaction's start) must not count the same span of time twice
    await conn.execute(
        update(ql)
        .where(*_key(region, namespace, queue))
        .values(tokens=tokens - granted, refilled_at=max(at, now))
    )
    wait = 0.0 if granted else (1.0 - (tokens - int(tokens))) / rate
    return granted, wait


async def give_back(conn: AsyncConnection, *, region: str, namespace: str, queue: str, n: int) -> None:
    """Returns ``n`` unused tokens taken by :func:`take` in this transaction (capped at ``burst``)."""
    if n > 0:
        await conn.execute(
            update(ql)
            .where(*_key(region, namespace, queue))
            .values(tokens=func.least(cast(ql.c.burst, Double), ql.c.tokens + n))
        )
