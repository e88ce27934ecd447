"""Claims counted per queue and second (``queue_claims``, migration 0020): the retry budget's window
counts, without an index on ``attempts.claimed_at``.

Such an index costs two entries per attempt (the claim's insert and the result's update re-insert
the unchanged key); a counter row costs one upsert per queue per claim transaction (a HOT update
once the second's row exists). Each claim adds its attempts, first attempts (attempt 1) and retries
(attempt 2 and up) apart, to the row of (region, namespace, queue, this second, its dispatcher)
in the claim's own statement (``claims.CLAIM``), so the counts are exactly the committed claims.
A window of ``w`` seconds reads the rows of the seconds from ``date_trunc('second', now() - w)``
on: up to one second more than the window (the budget's window was already approximate: the old
count read at most 10,000 attempts and extrapolated). Instants are the database's ``now()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import Delete, Integer, Interval, String, and_, bindparam, delete, func, select, tuple_
from sqlalchemy.ext.asyncio import AsyncConnection

from gnomon.common.storage.batches import row_params, unnest_rows
from gnomon.common.storage.schema import queue_claims
from gnomon.common.storage.statements import builder, named

#: Seconds of counts kept: the longest retry-budget window ``GNOMON_RETRY_BUDGET_WINDOW_S`` allows
#: (3600) plus a minute.
KEPT_S = 3660.0

#: The primary key of ``queue_claims``.
KEY = ("region", "namespace", "queue", "bucket_start", "dispatcher_id")
_REGION = bindparam("p_region", type_=String)
_WINDOW = bindparam("p_window", type_=Interval)


@dataclass(frozen=True)
class WindowCounts:
    """Attempts of one queue claimed in the budget window: ``first_attempts`` (attempt 1) and
    ``retries`` (attempt >= 2). ``estimated`` is always False now (the counts are exact to the
    second); kept for the readers of the former sampled count."""

    first_attempts: int
    retries: int
    estimated: bool = False


def _in_window(start: Any) -> Any:
    return queue_claims.c.bucket_start >= func.date_trunc("second", start)


_B = unnest_rows("b", ord=Integer, namespace=String, queue=String)
BUDGET_COUNTS_MANY = named(
    __name__,
    "BUDGET_COUNTS_MANY",
    """Per target row ``(b_ord, b_namespace, b_queue)`` (three arrays) of region ``p_region``:
    ``(b_ord, first attempts, retries)`` claimed in the seconds from ``date_trunc('second', now() -
    p_window)`` on (``queue_claims``, every dispatcher's rows; a target with none: no row).""",
    select(_B.c.ord, func.sum(queue_claims.c.first_attempts), func.sum(queue_claims.c.retries))
    .select_from(
        _B.join(
            queue_claims,
            and_(
                queue_claims.c.region == _REGION,
                queue_claims.c.namespace == _B.c.namespace,
                queue_claims.c.queue == _B.c.queue,
                _in_window(func.now() - _WINDOW),
            ),
        )
    )
    .group_by(_B.c.ord),
)


async def budget_counts_many(
    conn: AsyncConnection, *, region: str, targets: list[tuple[str, str]], window_s: float
) -> dict[tuple[str, str], WindowCounts]:
    """First attempts and retries of each (namespace, queue) of ``targets`` claimed within the last
    ``window_s`` seconds (database clock, to the second), in one statement whatever their number."""
    if not targets:
        return {}
    params = {
        "p_region": region,
        "p_window": timedelta(seconds=window_s),
        **row_params(
            "b",
            ord=list(range(len(targets))),
            namespace=[n for n, _ in targets],
            queue=[q for _, q in targets],
        ),
    }
    out = {t: WindowCounts(0, 0) for t in targets}
    for i, firsts, retries in await conn.execute(BUDGET_COUNTS_MANY, params):
        out[targets[i]] = WindowCounts(int(firsts or 0), int(retries or 0))
    return out


async def budget_counts(
    conn: AsyncConnection, *, region: str, namespace: str, queue: str, window_s: float
) -> WindowCounts:
    """:func:`budget_counts_many` of one queue."""
    got = await budget_counts_many(conn, region=region, targets=[(namespace, queue)], window_s=window_s)
    return got[(namespace, queue)]


@builder(region="r", kept_s=KEPT_S, limit=10)
def old_counts_stmt(region: str, kept_s: float, limit: int) -> Any:
    """Keys of up to ``limit`` ``queue_claims`` rows of ``region`` older than ``kept_s`` seconds
    (database clock), oldest first (``ix_queue_claims_bucket``)."""
    return (
        select(*(queue_claims.c[k] for k in KEY))
        .where(
            queue_claims.c.region == region,
            queue_claims.c.bucket_start < func.now() - timedelta(seconds=kept_s),
        )
        .order_by(queue_claims.c.bucket_start)
        .limit(limit)
    )


@builder(keys=[("r", "ns", "q", datetime(2026, 1, 1, tzinfo=UTC), "d")])
def delete_counts_stmt(keys: list[tuple[Any, ...]]) -> Delete:
    """Deletes the ``queue_claims`` rows ``keys`` (full primary keys)."""
    return delete(queue_claims).where(tuple_(*(queue_claims.c[k] for k in KEY)).in_(keys))


async def prune_counts(conn: AsyncConnection, *, region: str, limit: int, kept_s: float = KEPT_S) -> int:
    """Deletes up to ``limit`` counter rows of ``region`` older than ``kept_s`` seconds; returns how
    many."""
    keys = [tuple(r) for r in (await conn.execute(old_counts_stmt(region, kept_s, limit))).all()]
    if not keys:
        return 0
    await conn.execute(delete_counts_stmt(keys))
    return len(keys)
