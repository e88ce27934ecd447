"""Named queries of per-queue dispatch rate limits (``queue_limits``, a token bucket per
(region, namespace, queue)); the semantics are in docs/operations.md#backpressure.

The bucket holds at most ``burst`` tokens and gains ``rate`` tokens per second (database clock).
A claim takes tokens under the row lock (:func:`take`) before claiming and gives back what it did
not use (:func:`give_back`) in the same transaction, so every dispatcher of the region draws from
the one bucket and the queue is never dispatched faster than ``burst + rate * t`` over any span t.

Every read of the claim path is by the queues being claimed (:data:`LIMITED`, :data:`BUCKETS`:
primary-key lookups of a claim round's targets, one statement for all of them), never a scan of the
table: however many limits other namespaces set, each queue's own limit is found. Limits per
namespace are bounded by a quota (:func:`set_limit`, ``max_per_namespace``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import (
    ColumnElement,
    DateTime,
    Delete,
    Double,
    Integer,
    Select,
    String,
    and_,
    bindparam,
    cast,
    delete,
    func,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import Insert
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.errors import QuotaExceeded
from gnomon.common.quotas import Quota
from gnomon.common.storage.batches import row_params, unnest_rows
from gnomon.common.storage.schema import queue_limits as ql
from gnomon.common.storage.statements import builder, named


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


_T = unnest_rows("t", namespace=String, queue=String)
_T_KEY = (
    ql.c.region == bindparam("p_region", type_=String),
    ql.c.namespace == _T.c.namespace,
    ql.c.queue == _T.c.queue,
)

LIMITED = named(
    __name__,
    "LIMITED",
    """Which of the targets ``(t_namespace, t_queue)`` (two text arrays) have a limit in region
    ``p_region``: their ``(namespace, queue)``. Primary-key lookups, one per target, never a scan of
    the table, so no number of other queues' limits can hide one.""",
    select(ql.c.namespace, ql.c.queue).select_from(_T.join(ql, and_(*_T_KEY))),
)

BUCKETS = named(
    __name__,
    "BUCKETS",
    """``(namespace, queue, rate, burst, tokens, refilled_at, now())`` of the buckets of the targets
    ``(t_namespace, t_queue)`` (two text arrays) in region ``p_region`` that have one, locked ``FOR
    UPDATE`` (in key order) until the transaction ends.""",
    select(ql.c.namespace, ql.c.queue, ql.c.rate, ql.c.burst, ql.c.tokens, ql.c.refilled_at, func.now())
    .select_from(_T.join(ql, and_(*_T_KEY)))
    .order_by(ql.c.namespace, ql.c.queue)
    .with_for_update(of=ql),
)

_S = unnest_rows("s", namespace=String, queue=String, tokens=Double, refilled_at=DateTime(timezone=True))
SPEND = named(
    __name__,
    "SPEND",
    """Stores buckets of region ``p_region`` after a take: per row ``(s_namespace, s_queue, s_tokens,
    s_refilled_at)`` (four arrays), the tokens left (float) as of ``refilled_at``.""",
    update(ql)
    .where(
        ql.c.region == bindparam("p_region", type_=String),
        ql.c.namespace == _S.c.namespace,
        ql.c.queue == _S.c.queue,
    )
    .values(tokens=_S.c.tokens, refilled_at=_S.c.refilled_at),
)

_G = unnest_rows("g", namespace=String, queue=String, n=Integer)
GIVE_BACK = named(
    __name__,
    "GIVE_BACK",
    """Adds tokens back to buckets of region ``p_region``: per row ``(g_namespace, g_queue, g_n)``
    (three arrays), ``n`` tokens, each bucket capped at its ``burst``.""",
    update(ql)
    .where(
        ql.c.region == bindparam("p_region", type_=String),
        ql.c.namespace == _G.c.namespace,
        ql.c.queue == _G.c.queue,
    )
    .values(tokens=func.least(cast(ql.c.burst, Double), ql.c.tokens + _G.c.n)),
)


@builder(region="r", namespace="ns", cap=10)
def count_stmt(region: str, namespace: str, cap: int) -> Select[tuple[int]]:
    """How many queues of ``namespace`` have a limit in ``region``, counted up to ``cap``."""
    some = select(ql.c.queue).where(ql.c.region == region, ql.c.namespace == namespace).limit(cap).subquery()
    return select(func.count()).select_from(some)


async def set_limit(
    conn: AsyncConnection,
    *,
    region: str,
    namespace: str,
    queue: str,
    rate: float,
    burst: int,
    max_per_namespace: int = 0,
) -> Limit | None:
    """Sets (``rate`` > 0) or removes (``rate`` == 0) the queue's limit; a new bucket starts full.
    Returns the limit in force afterwards (None when removed).

    ``max_per_namespace`` (0: no bound) bounds the queues of ``namespace`` with a limit in
    ``region``: a new limit past it raises :class:`QuotaExceeded` (quota ``max_queue_limits``,
    nothing written); changing or removing an existing one is always allowed. Concurrent creates
    in one namespace may overshoot it by their number (counted, not locked)."""
    if rate <= 0:
        await conn.execute(delete_limit_stmt(region, namespace, queue))
        return None
    if max_per_namespace > 0:
        exists = (await conn.execute(bucket_stmt(region, namespace, queue, lock=False))).first() is not None
        if not exists:
            have = (await conn.execute(count_stmt(region, namespace, max_per_namespace))).scalar_one()
            if have >= max_per_namespace:
                raise QuotaExceeded(
                    f"namespace {namespace!r} already has {have} queues with a dispatch rate limit "
                    f"(limit {max_per_namespace}); change or remove one of them instead",
                    quota=Quota.MAX_QUEUE_LIMITS,
                    limit=max_per_namespace,
                    namespace=namespace,
                    retry_after_s=0.0,
                )
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


Target = tuple[str, str]


def _targets(targets: Sequence[Target]) -> dict[str, list[str]]:
    return row_params("t", namespace=[n for n, _ in targets], queue=[q for _, q in targets])


async def limited(conn: AsyncConnection, *, region: str, targets: Sequence[Target]) -> set[Target]:
    """Which of ``targets`` (namespace, queue) have a limit in ``region``: one statement of
    primary-key lookups (:data:`LIMITED`), whatever the size of the table."""
    if not targets:
        return set()
    rows = await conn.execute(LIMITED, {"p_region": region, **_targets(targets)})
    return {(r[0], r[1]) for r in rows}


async def take(
    conn: AsyncConnection, *, region: str, namespace: str, queue: str, want: int
) -> tuple[int, float]:
    """Takes up to ``want`` whole tokens (row locked until the transaction ends). Returns
    ``(granted, wait_s)``: ``wait_s`` is how long until the next token when none was left (else 0).
    A queue without a limit grants ``want``."""
    return (await take_many(conn, region=region, wants={(namespace, queue): want}))[(namespace, queue)]


async def take_many(
    conn: AsyncConnection, *, region: str, wants: dict[Target, int]
) -> dict[Target, tuple[int, float]]:
    """:func:`take` for many queues in two statements (lock and read the buckets, store what is left):
    target -> ``(granted, wait_s)``; a target without a limit is granted what it wants."""
    if not wants:
        return {}
    keys = list(wants)
    out = {t: (n, 0.0) for t, n in wants.items()}
    spent: list[tuple[str, str, float, datetime]] = []
    for ns, q, rate, burst, tokens, at, now in await conn.execute(
        BUCKETS, {"p_region": region, **_targets(keys)}
    ):
        want = wants[(ns, q)]
        tokens = _refill(rate, burst, tokens, at, now)
        granted = max(0, min(want, int(tokens)))
        # refilled_at never goes back: a transaction that started before the last refill (now() is
        # the transaction's start) must not count the same span of time twice
        spent.append((ns, q, tokens - granted, max(at, now)))
        out[(ns, q)] = (granted, 0.0 if granted else (1.0 - (tokens - int(tokens))) / rate)
    if spent:
        await conn.execute(
            SPEND,
            {
                "p_region": region,
                **row_params(
                    "s",
                    namespace=[r[0] for r in spent],
                    queue=[r[1] for r in spent],
                    tokens=[r[2] for r in spent],
                    refilled_at=[r[3] for r in spent],
                ),
            },
        )
    return out


async def give_back(conn: AsyncConnection, *, region: str, namespace: str, queue: str, n: int) -> None:
    """Returns ``n`` unused tokens taken by :func:`take` in this transaction (capped at ``burst``)."""
    await give_back_many(conn, region=region, backs={(namespace, queue): n})


async def give_back_many(conn: AsyncConnection, *, region: str, backs: dict[Target, int]) -> None:
    """:func:`give_back` for many queues in one statement: target -> unused tokens (> 0 only)."""
    backs = {t: n for t, n in backs.items() if n > 0}
    if backs:
        await conn.execute(
            GIVE_BACK,
            {
                "p_region": region,
                **row_params(
                    "g",
                    namespace=[n for n, _ in backs],
                    queue=[q for _, q in backs],
                    n=list(backs.values()),
                ),
            },
        )
